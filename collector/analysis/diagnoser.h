// The diagnosis's steps (diagnosis.h) as one class over the session, its files split by what they
// do: diagnosis.cc finds the long waits and runs the steps; chains.cc follows a wait to its root;
// causes.cc groups waits into causes, names their locks and ranks them; cpu_starvation.cc finds
// the threads short of a CPU; gpu_gaps.cc explains the GPUs' idle time. Internal to the diagnosis.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/analysis/critical_path.h"
#include "collector/analysis/diagnosis.h"
#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/wait_reader.h"
#include "collector/model/model.h"

namespace gprof::collector::diagnosis {

// causes.cc: a cause's lock named by its waiters' code, and by their Python frames.
void NameLocksByTheirUsers(const Session& session, Analysis& analysis);
void NamePythonLocks(const Session& session, Analysis& analysis);
// A cause of no object: the CPUs, the GPU side, a late thread.
Cause CauseOfKind(CauseKind kind, WaitClass wait_class, uint32_t thread_tid = 0);
void AddThread(std::vector<uint32_t>& tids, uint32_t tid);

class Diagnoser {
 public:
  Diagnoser(const Session& session, const WaitReader& reader, const GpuCorrelation& correlation,
            const GpuBusyTimeline& gpu_busy, Analysis& analysis);

  // The chain of what held `tid` up over [start_ns, end_ns), followed as a stall's is from the
  // thread that ended it.
  std::vector<ChainLink> ChainFrom(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  void Run();

 private:
  // Who held a wait up, and until when.
  struct Holder {
    uint32_t tid = 0;
    uint64_t until_ns = 0;  // the end of its part: the wake, its release, or the wait's end
    bool by_owner = false;  // named by the lock, not the wait's waker
    bool released = false;  // by_owner: it released the lock at until_ns, before the wait ended
    const MemoryMapCall* memory_call = nullptr;  // the memory map call the owner was in
  };
  ChainLink MakeLink(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // Fills the link's call_ns and other calls.
  void TimeInCalls(ChainLink& link) const;
  // The time the driver spent loading modules in `tid`'s calls during [start_ns, end_ns).
  uint64_t ModuleLoadDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // Fills stall.chain (and stall.deadlock_tid).
  void FollowChain(Stall& stall) const;
  // The thread that ended `wait` of `waiter` (its waker; for a kernel lock whose waker is not in
  // the tree, its owner; else the holder the lock named), or none.
  Holder HolderOf(uint32_t waiter, const Wait& wait) const;
  Holder LockOwner(uint32_t tid, const Wait& wait) const;
  // The thread of `waiter`'s process that held the GIL through `wait`, a wait for it that no
  // recorded wake ended; or none.
  Holder GilHolder(uint32_t waiter, const Wait& wait) const;
  // Whether the chain, back at `closing.tid`, is a cycle of waits asleep all at once, each on a
  // lock the next still held then.
  bool IsDeadlock(const Stall& stall, const Holder& closing) const;
  void FindStalls();
  void CountProfilerCost();
  void GroupCauses();
  // Per stall, the producer a costly handoff waited for (0: not a costly handoff).
  std::vector<uint32_t> HandoffProducers() const;
  void FindCpuStarvation();
  void FindGpuGaps();
  void ExplainGap(GpuGap& gap);
  // The cause of `key`, made from `first` when it is new.
  int CauseFor(const std::string& key, Cause first);
  void Rank();
  bool WaitedForGpu(const Stall& stall) const;
  // A wait inside a CUDA call ended by a thread of the process that made no CUDA call in the
  // whole session (the driver's or the runtime's own thread, completing GPU work on the
  // program's behalf) waited for the GPU side, busy or late: the GPU gap's host-late or driver
  // cause, never a handoff to a producer of the program's.
  bool EndedByTheDriver(const Stall& stall) const;
  bool InTree(uint32_t tid) const { return session_.threads.contains(tid); }
  bool Ours(uint32_t tid) const { return ours_.contains(tid); }

  const Session& session_;
  const WaitReader& reader_;
  const GpuCorrelation& correlation_;
  const GpuBusyTimeline& gpu_busy_;
  Analysis& analysis_;
  std::unordered_map<uint32_t, uint32_t> creator_of_;  // tid -> the thread that created it
  std::set<uint32_t> ours_;                            // gprof-run's own threads
  CriticalPath path_;                                  // the threads the program's end waited for
  std::map<std::string, int> cause_by_key_;
  std::map<int, uint64_t> largest_gap_ns_;  // per late-host cause: its largest gap so far
  // The session's module loads by the thread they happened on.
  std::unordered_map<uint32_t, std::vector<const ModuleLoad*>> module_loads_;
  std::vector<bool> loading_call_names_;  // by Session::api_names index: a call that loads modules
};

}  // namespace gprof::collector::diagnosis
