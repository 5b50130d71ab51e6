// Names of what the kernel recorder saw (kernel locks, device calls, memory map calls, page
// faults), shared by the trace and the report so that both call a thing the same way.
#pragma once

#include <cstdint>
#include <string>

#include "collector/model/model.h"

namespace gprof::collector {

// From gprof_lock_flags: "mutex", "rwsem", "rt_mutex", "percpu rwsem", "spinlock", "lock".
const char* LockKindName(uint32_t lock_flags);

// "mmap_lock" (the waiting process's), or "mutex 0xffff888104a0c1e8".
std::string LockText(const LockWait& lock);

// The lock's owner: "trainer (13)" for a thread of the model, else as the kernel named it
// ("kswapd0 (57)"); empty when the kernel recorded none.
std::string LockOwnerLabel(const Session& session, const LockWait& lock);

// "ioctl", "poll", "epoll_wait", "mmap".
const char* DeviceCallName(DeviceCall call);

// "mmap", "mprotect", "munmap", "mremap", "madvise".
const char* MemorySyscallName(MemorySyscall syscall);

// What a memory map call covered: "77.0 MiB"; for mremap, "1.0 MiB to 2.0 MiB".
std::string MemoryMapSize(const MemoryMapCall& call);

// "write, user" from FAULT_FLAG_*; empty when none of those it names is set.
std::string PageFaultFlagsText(uint32_t flags);

// "SIGTERM", "SIGRTMIN+3"; "signal 70" for a number no signal has.
std::string SignalName(int32_t signal);

// "SIGTERM from timeout (4242)", as the kernel named the sender; "SIGALRM from an interrupt".
std::string SignalText(const Session& session, const SignalSent& signal);

// Whom it was for, from gprof_signal_flags: "thread", "process", or "process group (one kill for
// many processes)".
const char* SignalAddressee(uint32_t flags);

// What the kernel did with it, from gprof_signal_result: "ignored", "merged into the same signal
// still pending"...; empty for one made pending.
const char* SignalOutcome(uint32_t result);

}  // namespace gprof::collector
