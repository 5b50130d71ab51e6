// What a snapshot of running processes means (issue 38, `gprof-run dump`): the threads grouped by
// what they wait on, the chains from waiters to the holders of their locks and on to the threads
// that hold without waiting, and the cycles among them: deadlocks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "collector/live/proc_snapshot.h"

namespace gprof::collector::live {

// What a thread waits on: its system call and that call's object. A futex is a process's own
// (its address means nothing in another); other waits group across processes.
struct WaitKey {
  pid_t pid = 0;         // the futex's process; 0 for other waits
  int64_t syscall = -1;  // -1: not in a system call; -2: running
  uint64_t address = 0;  // the futex word's address
  std::string object;    // an fd's object
  char state = '?';      // for threads outside a system call
  auto operator<=>(const WaitKey&) const = default;
};

struct WaitGroup {
  WaitKey key;
  std::vector<const ThreadSnapshot*> threads;
  pid_t holder = 0;  // the one holder all of them name; 0 when none or several
  HolderSource holder_source = HolderSource::kNone;
};

// Threads that wait through `path`: path[0] holds what they wait for; each next one holds what
// the one before it waits for; the last waits for no known holder (the root).
struct WaitChain {
  std::vector<pid_t> waiters;
  std::vector<pid_t> path;
};

struct Deadlock {
  std::vector<pid_t> members;  // each waits for the next; the last for the first
};

// Several processes dumped together (the ranks of a job): a thread whose counterparts in the other
// processes (the same name, the same place among the threads of that name) are all somewhere else,
// where they agree among themselves. Threads are compared by their system call and their native
// and Python frames, named (addresses differ between processes; names and offsets do not).
struct OddThread {
  pid_t process = 0;  // the requested process it belongs to
  const ThreadSnapshot* thread = nullptr;
  const ThreadSnapshot* usual = nullptr;  // one of the others, where they all are
  size_t others = 0;                      // how many processes agree on that
};

struct DumpAnalysis {
  std::vector<WaitGroup> groups;  // largest first
  std::vector<WaitChain> chains;
  std::vector<Deadlock> deadlocks;
  std::vector<OddThread> odd_threads;  // with 3 or more processes requested
};

WaitKey WaitKeyOf(const ThreadSnapshot& thread);
DumpAnalysis AnalyzeDump(const Snapshot& snapshot);

}  // namespace gprof::collector::live
