// What a thread waited on inside a slow call, as the kernel's record says: the object, what kind
// of wait it was, who woke it, and the records it was in meanwhile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "collector/model/model.h"

namespace gprof::collector {

// What a waiting thread was blocked on, as precisely as the kernel's record says.
enum class WaitKind : uint8_t {
  kKernelFunction,  // nothing more specific: the kernel function it slept in
  kFutex,           // a futex word of one process
  kKernelLock,      // a contended kernel lock (mutex, rwsem): a process's mmap_lock, or a lock
                    // all processes share
  kDevice,          // a system call on a GPU device file
  kPageFault,       // a slow page fault
};

struct WaitObject {
  WaitKind kind = WaitKind::kKernelFunction;
  uint32_t pid = 0;         // the process it belongs to; 0: a kernel lock that is not an mmap_lock
  uint64_t address = 0;     // futex: the word; kernel lock: the lock; page fault: the address
  uint32_t lock_flags = 0;  // kernel lock: gprof_lock_flags, as the waiter that saw it wanted it
  DeviceCall device_call = DeviceCall::kUnknown;  // device
  std::string device;                             // device: "nvidiactl"
  std::string kernel_function;  // where it slept: "futex_wait_queue", "do_nanosleep", ...
  std::string taken_in;         // kernel lock: the kernel function that took it ("fdget_pos")
  uint64_t seen_ns = 0;         // when: which of the process's maps names the address

  // Waits are on one object when their keys agree: the kernel function counts only when it is all
  // that is known; how a lock was wanted and when the object was seen do not count.
  auto Key() const {
    return std::make_tuple(
        kind, pid, address, device_call, std::string_view(device),
        kind == WaitKind::kKernelFunction ? std::string_view(kernel_function) : std::string_view());
  }
  bool operator==(const WaitObject& other) const { return Key() == other.Key(); }
  bool is_futex() const { return kind == WaitKind::kFutex; }
};

// How the diagnosis named a futex in memory no module names (the heap, a stack, anonymous
// memory), by process and word: the library whose code waited on it, as the diagnosis found it on
// the waiters' stacks ("libcuda.so.580.159.04"), or the Python lock its waiters' Python frames
// show ("logging.Handler.lock in logging/__init__.py:923"), which names it first. One name for
// the word, wherever a writer shows it.
struct LockName {
  std::string library;
  std::string python;
};
using LockUsers = std::map<std::pair<uint32_t, uint64_t>, LockName>;

// What kind of wait a sleep was, in the terms of the diagnosis (wait_class.h classifies).
enum class WaitClass : uint8_t {
  kUserLock,    // a futex used as a lock: a pthread mutex (FUTEX_WAIT on a contended word, PI)
  kCondition,   // a futex used as an event: condition variable, join, semaphore
  kPythonGil,   // a futex word inside CPython's runtime state (_PyRuntime): the GIL
  kKernelLock,  // a kernel mutex or rwsem (the mmap_lock)
  kGpuDriver,   // a system call on a GPU device file
  kPageFault,   // a slow page fault
  kIo,          // waiting for I/O or for input: disk, pipes, sockets, poll
  kSleep,       // asked to sleep: nanosleep, a timed wait that nobody ended
  kCpu,         // runnable: waiting for a CPU
  kOther,
};

// One off-CPU interval inside a slow call.
struct Wait {
  uint64_t start_ns = 0;  // clipped to the call
  uint64_t wake_ns = 0;   // 0: never woken inside the call (preempted, or woken after it);
                          // start_ns when woken before it (runnable in it throughout)
  uint64_t end_ns = 0;    // clipped to the call
  uint32_t pid = 0;       // the waiting thread's process
  OffCpuState state = OffCpuState::kSleeping;
  WaitObject object;
  WaitClass wait_class = WaitClass::kOther;
  uint32_t waker_pid = 0;
  uint32_t waker_tid = 0;  // 0: no waker (preempted) or an interrupt
  std::string waker_comm;  // the kernel's name for the waker, also when it is outside the tree
  const ApiCall* waker_call = nullptr;  // the waker's CUDA call in progress when it woke us
  // The waker found through the data, not the wakeup: an interrupt, a kernel thread or a task
  // outside the tree woke it (loopback TCP arrives in softirq), and its next read of a pipe or
  // socket got what waker_tid, a thread of the tree, last wrote to it before the wakeup, at
  // data_written_ns (the write call's start). 0: the wakeup named the waker.
  uint64_t data_written_ns = 0;
  // When that read was of a TCP socket and the send that queued the bytes it read first is one of
  // the session's: that send (its thread is waker_tid), matched by connection and byte position.
  const TcpTransfer* data_send = nullptr;
  // Woken only to die with its process (an exit_group, a fatal signal, an exec: the kernel recorder
  // found SIGKILL pending for it at the wakeup): ended by the process's exit, not by a release.
  // The waker fields stay empty, as for a wait nobody ended; the thread whose exit woke it is
  // exit_tid (0: an interrupt), exit_comm its kernel name.
  bool ended_by_exit = false;
  uint32_t exit_tid = 0;
  std::string exit_comm;
  int32_t kstack_id = -1;
  int32_t user_stack_id = -1;        // the thread's user stack at the switch-out
  int32_t waker_user_stack_id = -1;  // the waker's at the wakeup (process waker_pid)
  // What the kernel recorded the thread to be in when it slept (into the Session), innermost
  // first: the kernel lock it waited for, the slow page fault, the system call on a GPU device.
  const LockWait* kernel_lock = nullptr;
  const PageFault* page_fault = nullptr;
  const DeviceWait* device_wait = nullptr;
  // What the lock's owner was in when the wait for it began: a memory map call (a munmap holds
  // the mmap_lock throughout) and a CUDA call.
  const MemoryMapCall* owner_memory_call = nullptr;
  const ApiCall* owner_call = nullptr;
  // The kernel lock's owner hint is stale: the thread it names was asleep then where no kernel
  // lock is held (a futex wait, a sleep, a poll: kernel locks are never held across a return to
  // user space), or waiting for this very lock. It names no holder.
  bool owner_hint_stale = false;
  // The Python stacks the kernel recorder read (into the Session): the thread's as it slept, the
  // waker's at the wakeup; null where none was read.
  const PythonStack* python_stack = nullptr;
  const PythonStack* waker_python_stack = nullptr;
  // The waker's native stack at the wakeup, unwound from the copy the recorder took there (waits
  // of at least its threshold); null where none was taken.
  const NativeStack* waker_native_stack = nullptr;
  uint64_t asleep_ns() const { return (wake_ns != 0 ? wake_ns : end_ns) - start_ns; }
};

}  // namespace gprof::collector
