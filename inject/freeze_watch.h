// --trigger freeze:MS while the freeze happens (issue 39), seen from the writer thread at each of
// its passes (at least every 200 ms), never from the program's threads:
// - a CUDA call still running MS after it began fires it (the ring's call_entered_ns);
// - so do two or more threads of this process *frozen* at once. A thread is frozen when it was
//   doing CUDA work (calls with no pause of MS or longer between them, for at least MS) and then
//   stopped: no call since, off-CPU (sleeping or in uninterruptible wait, /proc's state) without
//   running once (its context switches unchanged) for MS or longer, from a pass of the writer
//   at most MS (and a pass) after its last call. Threads that wait on purpose are never frozen:
//   an idle pool or a queue's consumer that makes a few calls and then waits makes them in no
//   stretch of MS; a loop that calls CUDA with pauses of MS or longer is not doing CUDA work at
//   MS; gprof-run's own threads are skipped.
// Once the trigger fired here, the watch says when what froze runs again (the call returned, a
// blocked thread ran): gprof-run ends the recording a tail after that (cli/flight_recorder.h).
#pragma once

#include <cstdint>
#include <vector>

#include "inject/thread_ring.h"

namespace gprof::inject {

class FreezeWatch {
 public:
  // In the writer thread: one look at every ring's thread.
  void Check(uint64_t now_ns);

 private:
  struct Watched {
    uint64_t owner_serial = 0;
    uint32_t tid = 0;
    bool profiler = false;      // one of gprof-run's own threads: never frozen
    uint64_t left_seen_ns = 0;  // the ring's call_left_ns at the last look
    bool blocked = false;       // off-CPU at the last look, with `switches` unchanged since
    uint64_t blocked_since_ns = 0;
    uint64_t switches = 0;
  };
  // Whether the thread of `ring` has been frozen for `freeze_ns` at `now_ns` (reads /proc only
  // for a thread that did CUDA work and has made no call since the last look).
  bool Frozen(const ThreadRing& ring, Watched& thread, uint64_t freeze_ns, uint64_t now_ns);
  void WatchRelease(uint64_t now_ns);

  std::vector<Watched> threads_;  // by ring index
  // What this process fired, to tell when it is over: the call's ring and start, or the frozen
  // threads (their indexes in threads_).
  bool fired_here_ = false;
  bool released_ = false;
  uint32_t fired_ring_ = 0;
  uint64_t fired_entered_ns_ = 0;
  std::vector<uint32_t> fired_threads_;
};

}  // namespace gprof::inject
