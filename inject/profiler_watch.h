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
  ProfilerWatch() = default;
  ~ProfilerWatch();
  ProfilerWatch(const ProfilerWatch&) = delete;
  ProfilerWatch& operator=(const ProfilerWatch&) = delete;

  // Starts watching the process kProfilerPidEnv names; without it (the library used without
  // gprof-run) there is nothing to watch and Gone() stays false.
  void Start();
  // True once the watched process has ended. `pid` gets its pid.
  bool Gone(int* pid) const;

 private:
  int pid_ = 0;
  unsigned long long start_ticks_ = 0;
  // Readable once the process has exited; -1 where pidfd_open is missing (then /proc is read on
  // every check).
  int pidfd_ = -1;
};

// The start time of `pid` in clock ticks since boot (/proc/<pid>/stat, field 22); 0 if it has none.
unsigned long long ProcessStartTicks(int pid);

}  // namespace gprof::inject
