// Notices that gprof-run, which started this process tree, is gone (killed, crashed): the kernel
// recording and the report went with it, so the injected library should stop recording rather
// than run on half-instrumented without anyone knowing. Checked by the writer thread on its
// periodic tick, never on a CUDA call's path.
#pragma once

namespace gprof::inject {

// gprof-run's "<pid>:<start time in clock ticks since boot>", from /proc/<pid>/stat: the start
// time tells gprof-run from a later process that reused its pid.
inline constexpr char kProfilerPidEnv[] = "GPROF_RUN_PID";

class ProfilerWatch {
 public:
  // Starts watching the process kProfilerPidEnv names; without it (the library used without
  // gprof-run) there is nothing to watch and Gone() stays false.
  void Start();
  // True once the watched process has ended. `pid` gets its pid. Reads /proc/<pid>/stat: no
  // descriptor is kept (a pidfd would be one more that the program can close or reuse).
  bool Gone(int* pid) const;

 private:
  int pid_ = 0;
  unsigned long long start_ticks_ = 0;
};

// The start time of `pid` in clock ticks since boot (/proc/<pid>/stat, field 22); 0 if it has none.
unsigned long long ProcessStartTicks(int pid);
// True while `pid` names the process that started at `start_ticks` and it has not ended (a zombie,
// killed but not yet reaped, has ended).
bool ProcessRunning(int pid, unsigned long long start_ticks);

}  // namespace gprof::inject
