#include "collector/symbols/kernel_stack.h"

#include <algorithm>
#include <iterator>

namespace gprof::collector {
namespace {

// Frames that only say the thread switched out (the scheduler, and the BPF program and tracepoint
// plumbing that recorded the switch), not why it did.
bool IsSchedulingFrame(std::string_view function) {
  static constexpr std::string_view kPrefixes[] = {
      "__schedule",    "schedule",           "preempt_schedule", "io_schedule", "__cond_resched",
      "_cond_resched", "finish_task_switch", "__traceiter_",     "__bpf_trace", "bpf_"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view prefix) { return function.starts_with(prefix); });
}

}  // namespace

std::string_view FunctionOf(std::string_view frame) {
  return frame.substr(0, frame.find_first_of("+ "));
}

std::string BlockingFunction(const std::vector<std::string>& frames) {
  for (const std::string& frame : frames) {
    std::string_view function = FunctionOf(frame);
    if (!IsSchedulingFrame(function)) return std::string(function);
  }
  return {};
}

std::string LockTaker(const std::vector<std::string>& frames) {
  static constexpr std::string_view kLockCode[] = {"mutex", "rwsem", "rt_mutex",   "down_",
                                                   "lock_", "_lock", "contention", "bpf"};
  for (const std::string& frame : frames) {
    std::string_view function = FunctionOf(frame);
    if (IsSchedulingFrame(function)) continue;
    bool lock_code = false;
    for (std::string_view part : kLockCode)
      lock_code |= function.find(part) != std::string_view::npos;
    if (!lock_code) return std::string(function);
  }
  return {};
}

bool IsFileLockFunction(std::string_view function) {
  // flock: locks_lock_inode_wait (flock_lock_inode_wait before 4.4); fcntl and lockf:
  // do_lock_file_wait, fcntl_setlk; a lease being broken: __break_lease.
  for (std::string_view name : {"locks_lock_inode_wait", "flock_lock_inode_wait",
                                "do_lock_file_wait", "fcntl_setlk", "__break_lease"}) {
    if (function == name) return true;
  }
  return false;
}

}  // namespace gprof::collector
