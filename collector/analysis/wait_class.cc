#include "collector/analysis/wait_class.h"

#include <linux/futex.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "collector/analysis/thread_index.h"
#include "collector/symbols/kernel_stack.h"
#include "collector/symbols/user_symbols.h"

namespace gprof::collector {
namespace {

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Kernel functions a thread sleeps in when it waits for I/O or for input.
bool IsIoFunction(std::string_view function) {
  static constexpr std::array<std::string_view, 14> kParts = {"io_schedule",
                                                              "folio_wait",
                                                              "wait_on_page",
                                                              "blk",
                                                              "pipe_read",
                                                              "pipe_write",
                                                              "poll",
                                                              "select",
                                                              "epoll",
                                                              "sk_wait",
                                                              "unix_stream",
                                                              "tcp_",
                                                              "wait_for_completion",
                                                              "n_tty_read"};
  for (std::string_view part : kParts) {
    if (Contains(function, part)) return true;
  }
  return false;
}

bool IsSleepFunction(std::string_view function) {
  return Contains(function, "nanosleep") || Contains(function, "schedule_timeout") ||
         Contains(function, "do_sys_pause") || Contains(function, "sigsuspend");
}

}  // namespace

const char* WaitClassName(WaitClass wait_class) {
  switch (wait_class) {
    case WaitClass::kUserLock:
      return "user lock";
    case WaitClass::kCondition:
      return "condition variable";
    case WaitClass::kPythonGil:
      return "Python GIL";
    case WaitClass::kKernelLock:
      return "kernel lock";
    case WaitClass::kGpuDriver:
      return "GPU driver";
    case WaitClass::kPageFault:
      return "page fault";
    case WaitClass::kIo:
      return "I/O";
    case WaitClass::kSleep:
      return "sleep";
    case WaitClass::kCpu:
      return "waiting for a CPU";
    case WaitClass::kOther:
      break;
  }
  return "other";
}

bool IsContention(WaitClass wait_class) {
  switch (wait_class) {
    case WaitClass::kUserLock:
    case WaitClass::kPythonGil:
    case WaitClass::kKernelLock:
    case WaitClass::kGpuDriver:
    case WaitClass::kCpu:
      return true;
    default:
      return false;
  }
}

bool WaitClassifier::LockByStacks(const Wait& wait) const {
  constexpr size_t kFramesLooked = 4;  // a lock's unlock is right above the futex call
  auto any_frame = [&](uint32_t pid, int32_t stack_id, uint64_t time_ns, auto&& matches) {
    std::vector<std::string> frames = UserStackFrames(session_, pid, stack_id, time_ns);
    for (size_t i = 0; i < std::min(kFramesLooked, frames.size()); ++i) {
      if (matches(frames[i])) return true;
    }
    return false;
  };
  if (wait.waker_tid != 0) {
    std::vector<std::string> frames = WakerStackFrames(
        session_, wait.waker_native_stack, wait.waker_pid, wait.waker_user_stack_id, wait.wake_ns);
    for (size_t i = 0; i < std::min(kFramesLooked, frames.size()); ++i) {
      if (Contains(frames[i], "unlock") && !Contains(frames[i], "cond")) return true;
    }
  }
  return any_frame(wait.pid, wait.user_stack_id, wait.start_ns, [](std::string_view f) {
    return (Contains(f, "mutex_lock") || Contains(f, "rwlock_rdlock") ||
            Contains(f, "rwlock_wrlock") || Contains(f, "lll_lock") ||
            Contains(f, "mutex_timedlock")) &&
           !Contains(f, "cond");
  });
}

bool WaitClassifier::InPythonRuntime(const Wait& wait) const {
  UserLocation where = LocateUserAddress(session_, wait.object.pid, wait.object.address,
                                         wait.object.seen_ns, AddressUse::kData);
  // The GIL lives in _PyRuntime (3.7-3.13: _PyRuntime.ceval.gil, later per interpreter but still
  // inside it for the main one); its condition variable and mutex are the futex words.
  return where.symbol == "_PyRuntime" || Contains(where.symbol, "_gil");
}

// A semaphore is an event (a queue's "items ready") or a lock (CPython's threading.Lock up to
// 3.12 is a sem_t; so is a C program's binary semaphore). Its waits and posts tell which: a lock's
// waiter, once woken, holds it and posts it to the next waiter when it releases it, so in a convoy
// the thread that posts a waiter had itself waited on the word meanwhile; a queue's consumer
// never posts its own queue. A wait a lock's first holder ended is told by what the waiter does
// next on the word: post it to a waiter (a release), not wait on it again (a consumer).
bool WaitClassifier::SemaphoreUsedAsLock(uint32_t tid, const Wait& wait) const {
  if (wait.waker_tid == 0 || wait.wake_ns == 0) return false;
  auto stack = session_.user_stacks.find(wait.waker_user_stack_id);
  if (wait.waker_user_stack_id < 0 || stack == session_.user_stacks.end() ||
      stack->second.ips.empty())
    return false;
  UserLocation posted = LocateUserAddress(session_, wait.waker_pid, stack->second.ips.front(),
                                          wait.wake_ns, AddressUse::kInstruction);
  if (!Contains(posted.symbol, "sem_post")) return false;
  const std::string shared =
      session_.SharedWordKey(wait.object.pid, wait.object.address, wait.object.seen_ns);
  auto on_word = [&](const FutexCall& call) {
    if (call.pid == wait.object.pid) return call.uaddr == wait.object.address;
    return !shared.empty() && session_.SharedWordKey(call.pid, call.uaddr, call.start_ns) == shared;
  };
  for (const FutexCall* call : index_.futex.During(wait.waker_tid, wait.start_ns, wait.wake_ns)) {
    if (on_word(*call) && call->is_wait() && call->end_ns <= wait.wake_ns) return true;
  }
  // The waiter's next call on the word, among its next few futex calls (the GIL's come between).
  constexpr size_t kCallsLooked = 64;
  size_t looked = 0;
  for (const FutexCall* call : index_.futex.During(tid, wait.end_ns, UINT64_MAX)) {
    if (++looked > kCallsLooked) break;
    if (call->start_ns < wait.end_ns || !on_word(*call)) continue;
    return call->is_wake() && call->ret > 0;
  }
  return false;
}

uint32_t RecordedLockHolder(const Session& session, uint32_t tid, const FutexCall& futex) {
  if (futex.owner_tid == 0 || futex.owner_tid == tid) return 0;
  auto owner = session.threads.find(futex.owner_tid);
  return owner != session.threads.end() && owner->second.pid == futex.pid ? futex.owner_tid : 0;
}

WaitClass WaitClassifier::Classify(uint32_t tid, const Wait& wait) const {
  if (wait.state == OffCpuState::kRunnable) return WaitClass::kCpu;
  switch (wait.object.kind) {
    case WaitKind::kKernelLock:
      return WaitClass::kKernelLock;
    case WaitKind::kPageFault:
      return WaitClass::kPageFault;
    case WaitKind::kDevice:
      // Device files are the ones --device-prefix named (the GPU driver's by default); an
      // epoll wait names none.
      return wait.object.device.empty() ? WaitClass::kIo : WaitClass::kGpuDriver;
    case WaitKind::kFutex: {
      if (InPythonRuntime(wait)) return WaitClass::kPythonGil;
      const FutexCall* futex = index_.futex.At(tid, wait.start_ns);
      if (futex == nullptr) return WaitClass::kCondition;  // futex_waitv: events
      switch (futex->command()) {
        case FUTEX_LOCK_PI:
        case FUTEX_LOCK_PI2:
        case FUTEX_WAIT_REQUEUE_PI:
          return WaitClass::kUserLock;
        default:
          // glibc's and most runtimes' mutexes sleep on a word that says "locked, with waiters":
          // 2. Other locks (a pthread rwlock, as the CUDA driver's) sleep on other values: the
          // user stacks tell, the waker's in an unlock or the sleeper's in a lock.
          if (futex->command() == FUTEX_WAIT && futex->val == 2) return WaitClass::kUserLock;
          // A timed mutex waits on 2 with a bitset, a rwlock on 3; a condition variable's word
          // may hold either value: only a lock names its holder where the recorder read one.
          if ((futex->val == 2 || futex->val == 3) &&
              RecordedLockHolder(session_, tid, *futex) != 0)
            return WaitClass::kUserLock;
          return LockByStacks(wait) || SemaphoreUsedAsLock(tid, wait) ? WaitClass::kUserLock
                                                                      : WaitClass::kCondition;
      }
    }
    case WaitKind::kKernelFunction:
      break;
  }
  const std::string& function = wait.object.kernel_function;
  if (wait.state == OffCpuState::kDiskSleep && Contains(function, "rwsem"))
    return WaitClass::kKernelLock;
  if (Contains(function, "mutex_lock") || Contains(function, "rwsem") ||
      Contains(function, "rt_mutex") || IsFileLockFunction(function))
    return WaitClass::kKernelLock;
  if (IsIoFunction(function)) return WaitClass::kIo;
  if (IsSleepFunction(function)) return WaitClass::kSleep;
  if (wait.state == OffCpuState::kDiskSleep) return WaitClass::kIo;
  return WaitClass::kOther;
}

}  // namespace gprof::collector
