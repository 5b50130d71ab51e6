#include "model.h"

#include <algorithm>
#include <cstdio>

namespace gprof::collector {

OffCpuState OffCpuInterval::state() const {
  // Only the low bits say why a task slept; TASK_IDLE and friends add flags above them.
  if (raw_state == 0) return OffCpuState::kRunnable;
  if (raw_state & 0x1) return OffCpuState::kSleeping;
  if (raw_state & 0x2) return OffCpuState::kDiskSleep;
  return OffCpuState::kOther;
}

const char* StateName(OffCpuState state) {
  switch (state) {
    case OffCpuState::kRunnable:
      return "runnable";
    case OffCpuState::kSleeping:
      return "sleeping";
    case OffCpuState::kDiskSleep:
      return "uninterruptible";
    case OffCpuState::kOther:
      return "other";
  }
  return "other";
}

bool FutexCall::is_wait() const {
  switch (command()) {
    case 0:   // FUTEX_WAIT
    case 9:   // FUTEX_WAIT_BITSET
    case 6:   // FUTEX_LOCK_PI
    case 13:  // FUTEX_LOCK_PI2
    case 11:  // FUTEX_WAIT_REQUEUE_PI
      return true;
    default:
      return false;
  }
}

bool FutexCall::is_wake() const {
  switch (command()) {
    case 1:   // FUTEX_WAKE
    case 10:  // FUTEX_WAKE_BITSET
    case 5:   // FUTEX_WAKE_OP
    case 7:   // FUTEX_UNLOCK_PI
    case 3:   // FUTEX_REQUEUE
    case 4:   // FUTEX_CMP_REQUEUE
    case 12:  // FUTEX_CMP_REQUEUE_PI
      return true;
    default:
      return false;
  }
}

std::string Session::ThreadLabel(uint32_t tid) const {
  auto it = threads.find(tid);
  if (it == threads.end() || it->second.name.empty()) return std::to_string(tid);
  return it->second.name + " (" + std::to_string(tid) + ")";
}

std::vector<std::string> Session::KernelStack(int32_t stack_id) const {
  std::vector<std::string> frames;
  auto it = kernel_stacks.find(stack_id);
  if (it == kernel_stacks.end()) return frames;
  for (uint64_t ip : it->second) {
    auto symbol = kernel_symbols.find(ip);
    if (symbol != kernel_symbols.end()) {
      frames.push_back(symbol->second);
    } else {
      char text[32];
      snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(ip));
      frames.emplace_back(text);
    }
  }
  return frames;
}

const NativeStack* Session::CallStackOf(const ApiCall& call) const {
  auto it = call_stacks.find({call.tid, call.enter_ns});
  return it == call_stacks.end() ? nullptr : &it->second;
}

const Mapping* Session::FindMapping(uint32_t pid, uint64_t address) const {
  auto process = processes.find(pid);
  if (process == processes.end()) return nullptr;
  const auto& maps = process->second.maps;
  auto it = std::upper_bound(maps.begin(), maps.end(), address,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == maps.begin()) return nullptr;
  --it;
  return address < it->end ? &*it : nullptr;
}

}  // namespace gprof::collector
