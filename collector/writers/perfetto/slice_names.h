// What the time-ordered merge (timeline_writer.cc) calls its slices and their annotation strings:
// the off-CPU track's waits and wakes, futex calls, the kernel track's calls, faults and lock
// waits, GPU work. Each makes a text once and keeps its iid (interners.h) where its events repeat.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "collector/model/model.h"
#include "collector/model/value_format.h"
#include "collector/symbols/kernel_stack.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/perfetto/interners.h"

namespace gprof::collector::perfetto {

inline const char* StateLetter(OffCpuState state) {
  switch (state) {
    case OffCpuState::kRunnable:
      return "R";
    case OffCpuState::kSleeping:
      return "S";
    case OffCpuState::kDiskSleep:
      return "D";
    case OffCpuState::kOther:
      return "?";
  }
  return "?";
}

// The wait's name when the stack names no function.
inline const char* StateWord(OffCpuState state) {
  return state == OffCpuState::kRunnable ? "preempted" : StateName(state);
}

inline std::string StateText(const OffCpuInterval& interval) {
  return std::string(StateLetter(interval.state())) + " (" + StateWord(interval.state()) +
         ", prev_state " + FormatHex(interval.raw_state) + ")";
}

// Names and annotation strings of the off-CPU track and the wake instants, computed once per kernel
// stack, state or thread rather than per event.
class SchedulerNames {
 public:
  SchedulerNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner) {}

  // "S futex_wait_queue", "D folio_wait_bit_common", "R preempted".
  uint64_t WaitName(const OffCpuInterval& interval) {
    OffCpuState state = interval.state();
    uint64_t& iid = Stack(interval.kstack_id).wait_name_iids[static_cast<size_t>(state)];
    if (iid == 0)
      iid = interner_.Intern(InternTable::kEventNames, WaitNameText(interval.kstack_id, state));
    return iid;
  }

  uint64_t State(const OffCpuInterval& interval) {
    auto [entry, inserted] = state_iids_.try_emplace(interval.raw_state, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kAnnotationStrings, StateText(interval));
    return entry->second;
  }

  // "runnable (woken by pt_data_pin (101))"
  uint64_t RunnableName(const OffCpuInterval& interval) {
    return Waker(interval).runnable_name_iid;
  }

  // "pt_data_pin (101)"
  uint64_t WakerLabel(const OffCpuInterval& interval) { return Waker(interval).label_iid; }

  // "wake python (100)", on the waker's track.
  uint64_t WakeName(uint32_t woken_tid) {
    auto [entry, inserted] = wake_names_.try_emplace(woken_tid, 0);
    if (inserted) {
      entry->second =
          interner_.Intern(InternTable::kEventNames, "wake " + session_.ThreadLabel(woken_tid));
    }
    return entry->second;
  }

 private:
  struct StackNames {
    std::string blocking_function;
    std::array<uint64_t, 4> wait_name_iids{};  // by OffCpuState
  };

  struct WakerNames {
    uint32_t comm = 0;  // the kernel's name of the waker these were made for (Session::comms)
    uint64_t label_iid = 0;
    uint64_t runnable_name_iid = 0;
  };

  // By waker tid; remade when the kernel names that tid differently (a tid reused outside the
  // tree).
  const WakerNames& Waker(const OffCpuInterval& interval) {
    auto [entry, inserted] = wakers_.try_emplace(interval.waker_tid);
    WakerNames& names = entry->second;
    if (inserted || names.comm != interval.waker_comm) {
      std::string label = WakerText(interval);
      names.comm = interval.waker_comm;
      names.label_iid = interner_.Intern(InternTable::kAnnotationStrings, label);
      names.runnable_name_iid =
          interner_.Intern(InternTable::kEventNames, "runnable (woken by " + label + ")");
    }
    return names;
  }

  StackNames& Stack(int32_t stack_id) {
    // Asked three times an off-CPU interval: ids of the kernel's stack map (its slots, from 0)
    // are looked up in a table, others in the map that holds them all.
    bool small = stack_id >= 0 && stack_id < kStackTableSize;
    if (small && static_cast<size_t>(stack_id) < stack_table_.size() &&
        stack_table_[static_cast<size_t>(stack_id)] != nullptr) {
      return *stack_table_[static_cast<size_t>(stack_id)];
    }
    auto [entry, inserted] = stacks_.try_emplace(stack_id);
    if (small) {
      if (static_cast<size_t>(stack_id) >= stack_table_.size())
        stack_table_.resize(static_cast<size_t>(stack_id) + 1, nullptr);
      stack_table_[static_cast<size_t>(stack_id)] = &entry->second;
    }
    if (inserted) {
      entry->second.blocking_function = BlockingFunction(session_.KernelStack(stack_id));
    }
    return entry->second;
  }

  std::string WaitNameText(int32_t stack_id, OffCpuState state) {
    std::string name = StateLetter(state);
    const std::string& function = Stack(stack_id).blocking_function;
    name += ' ';
    name += (state == OffCpuState::kRunnable || function.empty()) ? StateWord(state) : function;
    return name;
  }

  // The waker as a thread of the model, or as the kernel named it when it is outside the tree.
  std::string WakerText(const OffCpuInterval& interval) const {
    if (interval.waker_tid == 0) return "interrupt/idle";
    if (session_.threads.count(interval.waker_tid) != 0)
      return session_.ThreadLabel(interval.waker_tid);
    std::string tid = std::to_string(interval.waker_tid);
    const std::string& comm = session_.WakerComm(interval);
    return comm.empty() ? tid : comm + " (" + tid + ")";
  }

  const Session& session_;
  StringInterner& interner_;
  static constexpr int32_t kStackTableSize = 1 << 20;
  std::unordered_map<int32_t, StackNames> stacks_;     // its nodes do not move
  std::vector<StackNames*> stack_table_;               // by id below kStackTableSize; null: not yet
  std::unordered_map<uint32_t, uint64_t> state_iids_;  // by raw prev_state
  std::unordered_map<uint32_t, WakerNames> wakers_;
  std::unordered_map<uint32_t, uint64_t> wake_names_;  // by woken tid
};

inline const char* FutexCommandName(uint32_t command) {
  static constexpr const char* kNames[] = {
      "FUTEX_WAIT",           "FUTEX_WAKE",        "FUTEX_FD",          "FUTEX_REQUEUE",
      "FUTEX_CMP_REQUEUE",    "FUTEX_WAKE_OP",     "FUTEX_LOCK_PI",     "FUTEX_UNLOCK_PI",
      "FUTEX_TRYLOCK_PI",     "FUTEX_WAIT_BITSET", "FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI",
      "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2"};
  return command < std::size(kNames) ? kNames[command] : nullptr;
}

inline std::string FutexCommandText(const FutexCall& call) {
  const char* name = FutexCommandName(call.command());
  return name != nullptr ? name : "FUTEX_" + std::to_string(call.command());
}

// "FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG"
inline std::string FutexOpText(const FutexCall& call) {
  constexpr uint32_t kPrivateFlag = 128, kClockRealtime = 256;
  std::string text = FutexCommandText(call);
  if (call.op & kPrivateFlag) text += "|FUTEX_PRIVATE_FLAG";
  if (call.op & kClockRealtime) text += "|FUTEX_CLOCK_REALTIME";
  return text;
}

// Names of futex slices, made once per operation and address: a lock's waits and wakes repeat them.
class FutexNames {
 public:
  explicit FutexNames(StringInterner& interner) : interner_(interner) {}

  // "FUTEX_WAIT_BITSET 0x7f1234"
  uint64_t SliceName(const FutexCall& call) {
    // A table of the names asked for before first: a lock's calls come again and again.
    // (Waits and wakes on one word alternate: both have their place.)
    RecentName& recent = recent_names_[((call.uaddr >> 2) + call.command() * 97) % kRecentNames];
    if (recent.iid != 0 && recent.uaddr == call.uaddr && recent.command == call.command())
        [[likely]]
      return recent.iid;
    auto [entry, inserted] = slice_names_.try_emplace({call.command(), call.uaddr}, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kEventNames,
                                       FutexCommandText(call) + " " + FormatHex(call.uaddr));
    recent = {call.uaddr, call.command(), entry->second};
    return entry->second;
  }

  uint64_t OpText(const FutexCall& call) {
    auto [entry, inserted] = op_texts_.try_emplace(call.op, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kAnnotationStrings, FutexOpText(call));
    return entry->second;
  }

 private:
  using CommandAndAddress = std::pair<uint32_t, uint64_t>;
  struct CommandAndAddressHash {
    size_t operator()(const CommandAndAddress& key) const {
      return std::hash<uint64_t>{}(key.second * 31 + key.first);
    }
  };

  struct RecentName {
    uint64_t uaddr = 0;
    uint32_t command = 0;
    uint64_t iid = 0;  // 0: none yet
  };
  static constexpr size_t kRecentNames = 256;

  StringInterner& interner_;
  std::unordered_map<CommandAndAddress, uint64_t, CommandAndAddressHash> slice_names_;
  std::array<RecentName, kRecentNames> recent_names_{};  // by address and command
  std::unordered_map<uint32_t, uint64_t> op_texts_;      // by op, flags included
};

// Names of the kernel track's slices and of futex_waitv calls. They are made per event (these
// events are far fewer than scheduler events) and interned, so each text travels once.
class KernelNames {
 public:
  KernelNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner) {}

  // "mmap_lock (held by trainer (13))", "mutex 0xffff888104a0c1e8"
  uint64_t LockName(const LockWait& lock) {
    std::string name = LockText(lock);
    std::string owner = LockOwnerLabel(session_, lock);
    if (!owner.empty()) name += " (held by " + owner + ")";
    return Name(name);
  }

  // "ioctl nvidiactl 0xc020462a", "poll nvidia0", "epoll_wait", "mmap nvidia0"
  uint64_t DeviceName(const DeviceWait& wait) {
    std::string name = DeviceCallName(wait.call);
    if (!wait.device.empty()) name += " " + wait.device;
    if (wait.call == DeviceCall::kIoctl) name += " " + FormatHex(wait.request);
    return Name(name);
  }

  // "page fault in libtorch_cuda.so", "major page fault in anonymous memory"
  uint64_t PageFaultName(const PageFault& fault, const UserLocation& location) {
    std::string name = fault.is_major() ? "major page fault" : "page fault";
    if (!location.module.empty()) name += " in " + location.module;
    return Name(name);
  }

  // "munmap 77.0 MiB", "mremap 1.0 MiB to 2.0 MiB"
  uint64_t MemoryMapName(const MemoryMapCall& call) {
    return Name(std::string(MemorySyscallName(call.syscall)) + " " + MemoryMapSize(call));
  }

  // "futex_waitv 0x7f1234", "futex_waitv 0x7f1234 (+2)"
  uint64_t FutexWaitvName(const FutexWaitvCall& call) {
    std::string name = "futex_waitv";
    if (!call.addresses.empty()) name += " " + FormatHex(call.addresses.front());
    if (call.count > 1) name += " (+" + std::to_string(call.count - 1) + ")";
    return Name(name);
  }

  // "0x7f1234, 0x7f5678": the words a futex_waitv call recorded.
  uint64_t AddressList(const std::vector<uint64_t>& addresses) {
    std::string text;
    for (uint64_t address : addresses) text += (text.empty() ? "" : ", ") + FormatHex(address);
    return Text(text);
  }

  uint64_t Text(std::string_view text) {
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

 private:
  uint64_t Name(const std::string& name) {
    return interner_.Intern(InternTable::kEventNames, name);
  }

  const Session& session_;
  StringInterner& interner_;
};

// Names and annotation strings of GPU slices: kernel names made once per kernel, the rest interned
// from their few values.
class GpuNames {
 public:
  GpuNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner), kernel_name_iids_(session.kernel_names.size(), 0) {}

  // The kernel's demangled name, "Memcpy HtoD", "Memset", "cudaStreamSynchronize wait".
  uint64_t SliceName(const GpuActivity& activity) {
    const auto* kernel = std::get_if<GpuKernel>(&activity.detail);
    if (kernel == nullptr) {
      return interner_.Intern(InternTable::kEventNames, GpuActivityName(session_, activity));
    }
    if (kernel->name_index >= kernel_name_iids_.size()) {
      return interner_.Intern(InternTable::kEventNames,
                              "kernel#" + std::to_string(kernel->name_index));
    }
    uint64_t& iid = kernel_name_iids_[kernel->name_index];
    if (iid == 0) iid = interner_.Intern(InternTable::kEventNames, session_.KernelName(*kernel));
    return iid;
  }

  // "(128, 1, 1)"
  uint64_t Dimensions(const std::array<int32_t, 3>& dimensions) {
    char text[48];
    std::snprintf(text, sizeof(text), "(%d, %d, %d)", dimensions[0], dimensions[1], dimensions[2]);
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

  uint64_t Text(std::string_view text) {
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

 private:
  const Session& session_;
  StringInterner& interner_;
  std::vector<uint64_t> kernel_name_iids_;  // by Session::kernel_names index; 0: not yet
};

}  // namespace gprof::collector::perfetto
