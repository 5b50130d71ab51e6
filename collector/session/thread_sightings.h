// What the readers learn about threads from the records of every file, kept until all are read:
// each thread's process, its latest name, and the names the kernel gave it over time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

class ThreadSightings {
 public:
  // `tid` was called `name` at `time_ns`; the latest sighting names the thread.
  void SeeName(uint32_t tid, uint64_t time_ns, std::string_view name);
  // The kernel named `tid` `comm` at `time_ns` (its start, a rename, an exec): a sighting, and
  // what names the thread as a waker at the times it had that name.
  void SeeKernelName(uint32_t tid, uint64_t time_ns, std::string_view comm);
  // A record of `tid` in process `pid`: the first one says which process it belongs to...
  // (Nearly every record calls it, often for the thread of the record before: that one is known.)
  void SeeThread(uint32_t tid, uint32_t pid) {
    if (tid == last_seen_tid_ && has_seen_) return;
    pids_.try_emplace(tid, pid);
    last_seen_tid_ = tid;
    has_seen_ = true;
  }
  // ...unless the thread's start says so, which outranks every other record.
  void SeeStart(uint32_t tid, uint32_t pid) { pids_[tid] = pid; }

  // Gives every thread seen its process (threads of the model that have one keep it) and name,
  // and every thread's process a place in the model.
  void ApplyTo(Session* session) const;
  // Names the wakers that the kernel recorder left unnamed, those in the tree (gprof_offcpu's
  // waker_comm), by the name the kernel had given the waker by its wakeup.
  void NameWakersInTree(Session* session);

 private:
  struct NameSighting {
    uint64_t time_ns = 0;
    std::string name;
  };
  struct KernelName {
    uint64_t time_ns = 0;
    std::string comm;                  // printable
    uint32_t comm_index = UINT32_MAX;  // in Session::comms, once a waker took it
  };
  std::unordered_map<uint32_t, NameSighting> names_;
  std::unordered_map<uint32_t, std::vector<KernelName>> kernel_names_;
  std::unordered_map<uint32_t, uint32_t> pids_;
  uint32_t last_seen_tid_ = 0;  // in pids_ already, when has_seen_
  bool has_seen_ = false;
};

}  // namespace gprof::collector
