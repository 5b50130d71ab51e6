#include "collector/writers/words/objects.h"

#include <algorithm>
#include <cstdio>

#include "collector/analysis/user_lock.h"
#include "collector/symbols/kernel_stack.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/names.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

std::string DescribeAddress(const Session& session, uint32_t pid, uint64_t address,
                            uint64_t time_ns) {
  return DataText(LocateUserAddress(session, pid, address, time_ns, AddressUse::kData));
}

std::string DescribeWaitObject(const Session& session, const WaitObject& object) {
  switch (object.kind) {
    case WaitKind::kFutex: {
      std::string text = "futex " + FormatHex(object.address);
      std::string where = DescribeAddress(session, object.pid, object.address, object.seen_ns);
      if (!where.empty()) text += " (" + where + ")";
      if (!object.kernel_function.empty()) text += " in " + object.kernel_function;
      return text;
    }
    case WaitKind::kKernelLock:
      if (object.lock_flags & GPROF_LOCK_MMAP_LOCK)
        return "the mmap_lock of pid " + std::to_string(object.pid);
      return std::string("kernel ") + LockKindName(object.lock_flags) + " " +
             FormatHex(object.address) +
             (object.taken_in.empty() ? "" : " (taken in " + object.taken_in + ")");
    case WaitKind::kDevice: {
      std::string text = DeviceCallName(object.device_call);
      if (!object.device.empty())
        text += (object.device_call == DeviceCall::kMmap ? " of " : " on ") + object.device;
      return text;
    }
    case WaitKind::kPageFault: {
      std::string text = "a page fault at " + FormatHex(object.address);
      std::string where = DescribeAddress(session, object.pid, object.address, object.seen_ns);
      return where.empty() ? text : text + " (" + where + ")";
    }
    case WaitKind::kKernelFunction:
      if (IsFileLockFunction(object.kernel_function))
        return "a file lock (flock, fcntl) in " + object.kernel_function;
      break;
  }
  return object.kernel_function.empty() ? "an unknown wait" : object.kernel_function;
}

std::string DescribeLockByItsUser(const Session& session, const Wait& wait, const ApiCall* call) {
  std::optional<UserNamedLock> lock = NameLockByItsUser(session, wait, call);
  return lock ? UserNamedLockWords(*lock) : std::string();
}

std::string WhereAsleep(const Session& session, const WaitObject& object) {
  bool inside = object.kind == WaitKind::kDevice || object.kind == WaitKind::kPageFault;
  return (inside ? "in " : "on ") + DescribeWaitObject(session, object);
}

std::string LockOwnerText(const Session& session, const Wait& wait) {
  if (wait.kernel_lock == nullptr) return {};
  const LockWait& lock = *wait.kernel_lock;
  // The thread the hint named was asleep where it held no kernel lock: no holder is named.
  if (lock.owner_tid != 0 && wait.owner_hint_stale) return "owner unknown (hint stale)";
  std::string owner = session.threads.contains(lock.owner_tid)
                          ? QuotedThread(session, lock.owner_tid)
                          : LockOwnerLabel(session, lock);
  if (owner.empty()) return {};
  std::string text = "held by " + owner;
  if (const MemoryMapCall* call = wait.owner_memory_call) {
    text += " in " + std::string(MemorySyscallName(call->syscall)) + " of " + MemoryMapSize(*call);
  } else if (wait.owner_call != nullptr) {
    text += " in " + session.ApiName(*wait.owner_call);
  }
  return text;
}

std::string UserNamedLockWords(const UserNamedLock& lock) {
  std::string memory;
  switch (lock.memory) {
    case UserNamedLock::Memory::kHeap:
      memory = "on the heap";
      break;
    case UserNamedLock::Memory::kMainStack:
      memory = "on the main thread's stack";
      break;
    case UserNamedLock::Memory::kAnonymous:
      memory = "in anonymous memory";
      break;
    case UserNamedLock::Memory::kMapping:
      memory = "in " + lock.mapping;
      break;
  }
  std::string text =
      "a lock inside " + lock.library + " (futex " + FormatHex(lock.address) + " " + memory + ")";
  if (!lock.waited_in.empty()) text += ", waited for in " + lock.waited_in;
  return text;
}

std::string ObjectWords(const Session& session, const WaitObject& object, const LockUsers* users) {
  switch (object.kind) {
    case WaitKind::kFutex: {
      UserLocation where =
          LocateUserAddress(session, object.pid, object.address, object.seen_ns, AddressUse::kData);
      if (!where.symbol.empty()) {
        std::string text = ShortCppName(where.symbol);
        if (where.symbol_offset != 0) text += "+" + FormatHex(where.symbol_offset);
        return text + " in " + where.module;
      }
      std::string text = "futex " + FormatHex(object.address);
      if (!where.section.empty())
        return text + " (" + where.section + "+" + FormatHex(where.section_offset) + ") in " +
               where.module;
      std::string memory = where.module == "[heap]"             ? "on the heap"
                           : where.module.starts_with("[stack") ? "on a stack"
                           : where.module == "anonymous memory" ? "in anonymous memory"
                                                                : "";
      if (!memory.empty() && users != nullptr) {
        auto user = users->find({object.pid, object.address});
        if (user != users->end() && !user->second.python.empty()) return user->second.python;
        if (user != users->end() && !user->second.library.empty())
          return "a lock inside " + user->second.library + " (" + text + " " + memory + ")";
      }
      if (!memory.empty()) return text + " " + memory;
      if (!where.module.empty()) return text + " in " + where.module;
      return text;
    }
    case WaitKind::kKernelFunction: {
      std::string words = ReasonInWords(object.kernel_function);
      if (!words.empty()) return words;
      break;
    }
    default:
      break;
  }
  WaitObject plain = object;
  plain.kernel_function.clear();  // said by the kind, kept in report.json
  return DescribeWaitObject(session, object.kind == WaitKind::kKernelFunction ? object : plain);
}

}  // namespace gprof::collector
