// Reads what a thread did from the kernel's record: each off-CPU interval as a Wait, how a thread
// spent an interval, and its CUDA, futex and memory map calls at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/analysis/tcp_streams.h"
#include "collector/analysis/thread_index.h"
#include "collector/analysis/waits.h"
#include "collector/model/model.h"

namespace gprof::collector {

// How a thread spent [start, end): asleep, runnable, on CPU; and the waits inside. Time before
// the thread was created or after it exited is none of them.
struct TimeSplit {
  uint64_t on_cpu_ns = 0;
  uint64_t runnable_ns = 0;
  uint64_t asleep_ns = 0;
  std::vector<Wait> waits;
};

// A thread's quick page faults over an interval, and the time they took.
struct FaultTime {
  uint64_t faults = 0;
  uint64_t ns = 0;
};

// How much of an interval a thread spent inside CUDA calls.
struct CallTime {
  uint64_t in_calls_ns = 0;  // inside any of its calls (nested ones counted once)
  // Of its calls other than the one asked about (and those nested in it): how many overlap the
  // interval, and the one that covers most of it.
  uint32_t other_calls = 0;
  const ApiCall* longest_other = nullptr;
  uint64_t longest_other_ns = 0;
};

// Reads what a thread did from the kernel's record: each off-CPU interval as a Wait (on what, woken
// by whom, the owner of the lock), and how it spent an interval. Each interval is read and
// classified once, whole, the first time any step asks for it (the diagnosis's stalls and chains,
// the slow calls, the freezes): every view of it sees one object, one class, one waker.
//
// A thread's wait for CPython's GIL is one wait, from the moment it asked to the moment it got
// it: the interpreter sleeps on the GIL's condition with a timeout of the switch interval (5 ms),
// then asks the holder to drop it and sleeps again, so the kernel records a run of sleeps on
// the GIL's words with a few microseconds of the interpreter's own loop between them (and a
// holder that was asked to drop it sleeps on the GIL's switch condition until the next one took
// it, then asks for it back). Such a run is one Wait: from its first sleep's start to its last
// sleep's wake and end, woken by the last sleep's waker (the holder that dropped it). A thread
// that got the GIL runs Python until it is asked to drop it (a switch interval) or blocks on
// something else (a wait of another kind in between): either ends the run.
class WaitReader {
 public:
  explicit WaitReader(const Session& session);
  ~WaitReader();
  WaitReader(const WaitReader&) = delete;
  WaitReader& operator=(const WaitReader&) = delete;

  // The wait `interval` is part of, whole: read and classified once. For a piece of a GIL run,
  // the run (its first piece's start, object and stacks; its last sleep's wake, end and waker).
  const Wait& WaitOf(const OffCpuInterval& interval) const;
  // Whether `interval` is the first (or only) piece of the wait WaitOf gives: a step that counts
  // waits counts only those.
  bool BeginsWait(const OffCpuInterval& interval) const;
  // The pieces of the wait `interval` is part of, as indices into Session::off_cpu: the first and
  // the last (the same for a wait of one interval).
  std::pair<size_t, size_t> PiecesOf(const OffCpuInterval& interval) const;
  // WaitOf(interval) clipped to [start, end): a wake after `end` is outside it (no waker then).
  Wait MakeWait(const OffCpuInterval& interval, uint64_t start, uint64_t end) const;
  TimeSplit Split(uint32_t tid, uint64_t start, uint64_t end) const;
  // The CUDA call of `tid` in progress at `time_ns` (the innermost), or nullptr.
  const ApiCall* CallAt(uint32_t tid, uint64_t time_ns) const;
  // The quick page faults of `tid` in [start_ns, end_ns): each run's, spread evenly over the run.
  FaultTime QuickFaultsDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // The time `tid` spent inside CUDA calls during [start_ns, end_ns); `except` is the call asked
  // about, kept out of CallTime's other calls. (A call in progress at start_ns whose nested call
  // ended before it is missed, as CallAt misses it: only activity records nest calls.)
  CallTime CallTimeDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                          const ApiCall* except) const;
  // The CUDA calls of `tid` that overlap [start_ns, end_ns): the one in progress at start_ns (the
  // innermost), then those that start in it.
  std::vector<const ApiCall*> CallsDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // The futex call of `tid` in progress at `time_ns`, or nullptr.
  const FutexCall* FutexAt(uint32_t tid, uint64_t time_ns) const;
  ThreadRecords<FutexCall> FutexDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // The memory map call (mmap, munmap, ...) of `tid` in progress at `time_ns`, or nullptr.
  const MemoryMapCall* MemoryCallAt(uint32_t tid, uint64_t time_ns) const;
  ThreadRecords<OffCpuInterval> OffCpuDuring(uint32_t tid, uint64_t start_ns,
                                             uint64_t end_ns) const;
  // The last off-CPU interval of `tid` that began before `time_ns`, or nullptr.
  const OffCpuInterval* OffCpuBefore(uint32_t tid, uint64_t time_ns) const;

 private:
  struct Index;
  struct Run {
    size_t first = 0, last = 0;  // into session.off_cpu
    Wait wait;                   // merged
  };
  WaitObject ObjectOf(const OffCpuInterval& interval, const Wait& wait) const;
  Wait ReadWait(const OffCpuInterval& interval) const;
  void FollowTheData(const OffCpuInterval& interval, Wait& wait) const;
  // FollowTheData by the bytes of a TCP receive: whether it found the send.
  bool FollowTheBytes(const OffCpuInterval& interval, Wait& wait) const;
  // Whether the lock's owner hint names a thread that could not hold it then (Wait's
  // owner_hint_stale).
  bool OwnerHintStale(const LockWait& lock) const;
  // The interval alone, read once.
  const Wait& PieceOf(size_t index) const;
  bool IsGilSleep(size_t index) const;
  // The run of GIL sleeps `index` belongs to, as its first piece (index itself when none).
  size_t RunFirst(size_t index) const;
  // Finds the run of the GIL sleep `index`, records its pieces.
  void FindRun(size_t index) const;
  const Session& session_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<TcpStreams> tcp_;  // the session's TCP sends by byte; null without any
  // The intervals read so far, by index into session.off_cpu (only those asked for: most of a
  // long session's are never part of a slow call, a stall or a chain).
  mutable std::unordered_map<size_t, Wait> read_;
  // The GIL runs of more than one piece found so far, by their first piece; and each piece asked
  // about so far, to its run's first piece (itself for a wait of one interval).
  mutable std::unordered_map<size_t, Run> runs_;
  mutable std::unordered_map<size_t, size_t> run_first_;
};

// The kernel function a thread slept in: the innermost frame of its switch-out stack that is not
// the scheduler itself ("futex_wait_queue", "do_nanosleep", ...); empty without a stack.
std::string BlockingKernelFunction(const Session& session, int32_t stack_id);

}  // namespace gprof::collector
