// Notices that gprof-run, which started this process tree, is gone (killed, crashed): the kernel
// recording and the report went with it, so the injected library should stop recording rather
// than run on half-instrumented without anyone knowing. Checked by the writer thread on its
// periodic tick, never on a CUDA call's path.
//
// The session's control says it (session_control.h: the kernel marks gprof-run's robust mutex),
// in every PID namespace. Where the control cannot be attached (another IPC namespace), gprof-run
// is looked up by pid, but only from its own PID namespace and time namespace, where its pid and
// start time mean what they meant to it; elsewhere nothing can be said, and gprof-run counts as
// running (a wrong "gone" would stop a recording that was wanted).
#pragma once

#include <cstdint>

namespace gprof {
class SessionControl;
}

namespace gprof::inject {

// gprof-run's "<pid>:<start time in clock ticks since boot>:<PID namespace inode>", from
// /proc/<pid>/stat and /proc/self/ns/pid: the start time tells gprof-run from a later process that
// reused its pid, the namespace where its pid means it.
inline constexpr char kProfilerPidEnv[] = "GPROF_RUN_PID";

class ProfilerWatch {
 public:
  // Starts watching the process kProfilerPidEnv names, through `control` when it is attached;
  // without either (the library used without gprof-run) there is nothing to watch and Gone()
  // stays false.
  void Start(const SessionControl* control);
  // True once the watched process has ended. `pid` gets its pid (0 where unknown).
  bool Gone(int* pid) const;

 private:
  const SessionControl* control_ = nullptr;
  int pid_ = 0;  // 0: not looked up by pid
  unsigned long long start_ticks_ = 0;
};

// gprof-run's PID namespace as kProfilerPidEnv names it; 0 where it does not.
uint32_t ProfilerPidNamespace();

// The start time of `pid` in clock ticks since boot (/proc/<pid>/stat, field 22); 0 if it has none.
unsigned long long ProcessStartTicks(int pid);
// True while `pid` names the process that started at `start_ticks` and it has not ended (a zombie,
// killed but not yet reaped, has ended).
bool ProcessRunning(int pid, unsigned long long start_ticks);

}  // namespace gprof::inject
