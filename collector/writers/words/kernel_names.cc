#include "collector/writers/words/kernel_names.h"

#include <signal.h>
#include <string.h>

#include <utility>

#include "collector/model/value_format.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

const char* LockKindName(uint32_t lock_flags) {
  // A mutex that spins before it sleeps says both: what it is matters, not how it waited.
  if (lock_flags & GPROF_LOCK_MUTEX) return "mutex";
  if (lock_flags & GPROF_LOCK_RT) return "rt_mutex";
  if (lock_flags & GPROF_LOCK_PERCPU) return "percpu rwsem";
  if (lock_flags & (GPROF_LOCK_READ | GPROF_LOCK_WRITE)) return "rwsem";
  if (lock_flags & GPROF_LOCK_SPIN) return "spinlock";
  return "lock";
}

std::string LockText(const LockWait& lock) {
  if (lock.is_mmap_lock()) return "mmap_lock";
  return std::string(LockKindName(lock.flags)) + " " + FormatHex(lock.lock_address);
}

std::string LockOwnerLabel(const Session& session, const LockWait& lock) {
  if (lock.owner_tid == 0) return {};
  if (session.threads.contains(lock.owner_tid)) return session.ThreadLabel(lock.owner_tid);
  std::string tid = std::to_string(lock.owner_tid);
  return lock.owner_comm.empty() ? tid : lock.owner_comm + " (" + tid + ")";
}

const char* DeviceCallName(DeviceCall call) {
  switch (call) {
    case DeviceCall::kIoctl:
      return "ioctl";
    case DeviceCall::kPoll:
      return "poll";
    case DeviceCall::kEpoll:
      return "epoll_wait";
    case DeviceCall::kMmap:
      return "mmap";
    case DeviceCall::kUnknown:
      break;
  }
  return "system call";
}

const char* MemorySyscallName(MemorySyscall syscall) {
  switch (syscall) {
    case MemorySyscall::kMmap:
      return "mmap";
    case MemorySyscall::kMprotect:
      return "mprotect";
    case MemorySyscall::kMunmap:
      return "munmap";
    case MemorySyscall::kMremap:
      return "mremap";
    case MemorySyscall::kMadvise:
      return "madvise";
    case MemorySyscall::kUnknown:
      break;
  }
  return "memory map call";
}

std::string MemoryMapSize(const MemoryMapCall& call) {
  std::string size = FormatBytes(call.length);
  if (call.syscall == MemorySyscall::kMremap) size += " to " + FormatBytes(call.flags);
  return size;
}

std::string PageFaultFlagsText(uint32_t flags) {
  // enum fault_flag of include/linux/mm_types.h: the ones that say what the fault was.
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {0x1, "write"},   {0x20, "retried"},      {0x40, "user"},
      {0x80, "remote"}, {0x100, "instruction"}, {0x1000, "under the VMA lock"}};
  std::string text;
  for (const auto& [bit, name] : kNames) {
    if ((flags & bit) == 0) continue;
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

std::string SignalName(int32_t signal) {
  if (signal >= SIGRTMIN && signal <= SIGRTMAX) {
    return signal == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  }
  const char* name = signal > 0 ? sigabbrev_np(signal) : nullptr;
  return name != nullptr ? "SIG" + std::string(name) : "signal " + std::to_string(signal);
}

std::string SignalText(const Session& session, const SignalSent& signal) {
  if (signal.flags & GPROF_SIGNAL_FROM_INTERRUPT)
    return SignalName(signal.signal) + " from an interrupt";
  const std::string& comm = signal.sender_comm < session.comms.size()
                                ? session.comms[signal.sender_comm]
                                : session.comms[0];
  std::string pid = std::to_string(signal.sender_pid);
  return SignalName(signal.signal) + " from " + (comm.empty() ? pid : comm + " (" + pid + ")");
}

const char* SignalAddressee(uint32_t flags) {
  if (flags & GPROF_SIGNAL_TO_MANY) return "process group (one kill for many processes)";
  return (flags & GPROF_SIGNAL_TO_THREAD) ? "thread" : "process";
}

const char* SignalOutcome(uint32_t result) {
  switch (result) {
    case GPROF_SIGNAL_DELIVERED:
      return "";
    case GPROF_SIGNAL_IGNORED:
      return "ignored";
    case GPROF_SIGNAL_ALREADY_PENDING:
      return "merged into the same signal still pending";
    case GPROF_SIGNAL_OVERFLOW_FAIL:
      return "not queued: the queue of signals was full";
    case GPROF_SIGNAL_LOSE_INFO:
      return "queued without its details";
    default:
      return "";
  }
}

}  // namespace gprof::collector
