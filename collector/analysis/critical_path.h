// The program's critical path, as the threads that matter: the thread the command's end waited
// for, and, back in time, the one it waited for before. It starts at the end of the command's
// main thread and walks back over that thread's time. A wait that ended when the thread it waited
// for exited (a join, a wait for a child process) moves the path into that thread, when the
// waiter had waited for most of that thread's life (a launcher waiting for its ranks, a main
// thread that only joins its worker); a join at the end of a thread's life (a pool shut down)
// does not. Before a thread existed the path is on its creator.
//
// Every other wait of a thread on the path that another thread of the tree ended (a condition
// signalled, a queue filled, a pipe or socket written, a lock released) held the program up, from
// its start until the thread ran again: the time a handoff costs, by which the diagnosis ranks it
// (IsCostlyHandoff). The waits of threads off the path (an idle pool thread waiting for work, a
// DataLoader worker waiting for indices, a feeder thread) held up nothing the program's end
// waited for: they are never handoff causes; they are links of the chains that explain the
// waits on the path.
#pragma once

#include <cstdint>
#include <set>
#include <unordered_set>

#include "collector/analysis/wait_reader.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct CriticalPath {
  uint32_t end_tid = 0;  // the thread the path starts from (the command's main thread); 0: none
  uint64_t end_ns = 0;
  std::set<uint32_t> tids;  // the threads on it
  // The waits of its threads that another thread of the tree ended, by index into
  // Session::off_cpu.
  std::unordered_set<size_t> waits;
  // The waits through which the path went into the thread they waited for (a join, a wait for a
  // child process): the time is that thread's, told by its own waits.
  std::unordered_set<size_t> joins;
  bool Holds(const Session& session, const OffCpuInterval& interval) const {
    return waits.contains(static_cast<size_t>(&interval - session.off_cpu.data()));
  }
};

// `ours`: gprof-run's own threads, never on the program's path.
CriticalPath FindCriticalPath(const Session& session, const WaitReader& waits,
                              const std::set<uint32_t>& ours);

}  // namespace gprof::collector
