#include "collector/analysis/critical_path.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace gprof::collector {
namespace {

// Whether the waker woke it on its way out (a join: the kernel's futex wake of the thread's
// clear-tid word at exit; a child's end: the parent's wakeup in exit_notify), as the waker's kernel
// stack at the wakeup says.
// A thread that ended this soon after it woke the waiter may have ended the wait by ending.
constexpr uint64_t kExitAfterWakeNs = 10'000'000;

bool WokenByItsExit(const Session& session, const OffCpuInterval& interval) {
  for (const std::string& frame : session.KernelStack(interval.waker_kstack_id)) {
    if (frame.find("do_exit") != std::string::npos ||
        frame.find("exit_notify") != std::string::npos ||
        frame.find("mm_release") != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

CriticalPath FindCriticalPath(const Session& session, const WaitReader& waits,
                              const std::set<uint32_t>& ours) {
  CriticalPath path;
  if (session.off_cpu.empty()) return path;
  uint32_t tid = session.meta.root_pid;  // the command's main thread
  auto main = session.threads.find(tid);
  if (main == session.threads.end()) return path;
  uint64_t end = main->second.exit_ns;
  if (end == 0) end = session.meta.end_monotonic_ns;
  if (end == 0) {
    for (const OffCpuInterval& interval : session.off_cpu)
      if (interval.tid == tid) end = std::max(end, interval.end_ns);
  }
  if (end == 0) return path;
  path.end_tid = tid;
  path.end_ns = end;
  path.tids.insert(tid);
  std::unordered_map<uint32_t, uint32_t> creator_of;
  for (const TaskStart& start : session.task_starts) creator_of[start.tid] = start.parent_tid;

  // Each step moves back in time: bounded by the intervals, and the threads it moves to.
  uint64_t t = end;
  const size_t max_steps = session.off_cpu.size() + 2 * session.threads.size() + 1;
  for (size_t step = 0; step < max_steps && t > 0; ++step) {
    const OffCpuInterval* interval = waits.OffCpuBefore(tid, t);
    auto thread = session.threads.find(tid);
    const uint64_t born = thread != session.threads.end() ? thread->second.start_ns : 0;
    if (interval == nullptr || (born != 0 && interval->end_ns <= born)) {
      // Back to its creation: what the creator did until it made it.
      auto creator = creator_of.find(tid);
      if (born == 0 || born >= t || creator == creator_of.end() ||
          !session.threads.contains(creator->second) || ours.contains(creator->second))
        break;
      tid = creator->second;
      path.tids.insert(tid);
      t = born;
      continue;
    }
    const Wait& wait = waits.WaitOf(*interval);
    t = std::min(t, interval->start_ns);
    const bool ended_by_another = wait.state != OffCpuState::kRunnable && wait.wake_ns != 0 &&
                                  !wait.ended_by_exit && wait.waker_tid != 0 &&
                                  wait.waker_tid != tid && !ours.contains(wait.waker_tid);
    auto waker = session.threads.find(wait.waker_tid);
    if (!ended_by_another || waker == session.threads.end()) continue;
    const Thread& ender = waker->second;
    // Ended by the thread's end: a join, a wait for a child process (the kernel woke it on the
    // thread's way out).
    // A Python thread's join is released by the interpreter's cleanup of the ending thread,
    // in user space, with no Python frame left to read: a thread that released the wait with
    // Python frames (a last put before it ended) handed something over.
    const bool ended_by_its_exit =
        WokenByItsExit(session, *interval) ||
        (!session.python.empty() && wait.waker_python_stack == nullptr && ender.exit_ns != 0 &&
         ender.exit_ns >= wait.wake_ns && ender.exit_ns - wait.wake_ns <= kExitAfterWakeNs);
    const uint64_t life_end = ender.exit_ns != 0 ? ender.exit_ns : wait.wake_ns;
    const uint64_t life_start = ender.start_ns != 0 ? ender.start_ns : interval->start_ns;
    const uint64_t life = life_end > life_start ? life_end - life_start : 0;
    if (ended_by_its_exit && interval->start_ns <= life_start + life / 2) {
      // Waited for most of its life: the program waited for it; follow it back from its end.
      path.joins.insert(static_cast<size_t>(interval - session.off_cpu.data()));
      tid = wait.waker_tid;
      path.tids.insert(tid);
      t = wait.wake_ns;
    } else {
      path.waits.insert(static_cast<size_t>(interval - session.off_cpu.data()));
    }
  }
  return path;
}

}  // namespace gprof::collector
