// The questions asked of the GPU timeline: which GPU work an API call caused and which call caused
// a piece of work (same process, same CUPTI correlation id), how busy a process's GPU was during an
// interval, and when each GPU of the session ran nothing. Each index is built once from a session
// sorted as model.h states, and points into it: the session must outlive it and stay unchanged.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

class GpuCorrelation {
 public:
  explicit GpuCorrelation(const Session& session);

  // The GPU activities `call` caused (synchronizations included), in start order; none for a call
  // seen by interposition, which has no correlation id.
  std::span<const GpuActivity* const> ActivitiesOf(const ApiCall& call) const;

  // The call that caused `activity`: of its process's calls with its correlation id (a runtime
  // call and the driver call inside it may share one), the outermost. nullptr when none was
  // recorded.
  const ApiCall* LauncherOf(const GpuActivity& activity) const;
  // The outermost call of process `pid` with `correlation_id`, or nullptr.
  const ApiCall* CallOf(uint32_t pid, uint64_t correlation_id) const;

 private:
  // As long as the session: held where its records are (record_storage.h).
  RecordVector<const ApiCall*> calls_;           // by (pid, correlation id), outermost first
  RecordVector<const GpuActivity*> activities_;  // by (pid, correlation id), then start
};

// How a process's GPU was used during an interval.
struct GpuUse {
  uint64_t busy_ns = 0;  // time in which at least one kernel, copy or memset of it ran
  const GpuActivity* longest = nullptr;  // the activity that overlapped the interval longest
  uint64_t longest_overlap_ns = 0;
};

class GpuBusyTimeline {
 public:
  explicit GpuBusyTimeline(const Session& session);

  // Whether the GPU work of `pid` was recorded at all (CUPTI capture): only then does no activity
  // mean an idle GPU.
  bool Recorded(uint32_t pid) const { return recorded_pids_.contains(pid); }

  // Its GPU work in [start_ns, end_ns): kernels, copies and memsets on any of its devices and
  // streams, overlapping ones counted once.
  GpuUse UseDuring(uint32_t pid, uint64_t start_ns, uint64_t end_ns) const;

 private:
  struct ProcessWork {
    RecordVector<const GpuActivity*> work;             // in start order
    RecordVector<uint64_t> max_end_ns;                 // the latest end among work[0..i]
    RecordVector<std::pair<uint64_t, uint64_t>> busy;  // union of the work: disjoint, in order
  };

  std::unordered_map<uint32_t, ProcessWork> processes_;
  std::unordered_set<uint32_t> recorded_pids_;
};

// One GPU of the session. Where CUPTI named the GPU behind a process's device ordinal (its UUID),
// it is one device for every process that used it; where it did not, each process's ordinal is a
// device of its own. So two processes that share an unnamed GPU each count its idle time, and two
// processes whose "device 0" are different GPUs (CUDA_VISIBLE_DEVICES set per process) are never
// taken for one.
struct GpuDevice {
  uint32_t ordinal = 0;        // CUDA's number for it in the first process whose work ran on it
  std::string uuid;            // "GPU-..." as CUPTI named it; empty: not named
  std::vector<uint32_t> pids;  // the processes whose work ran on it, in order of their first work
  uint64_t first_ns = 0;       // the start of its first kernel, copy or memset
  uint64_t last_ns = 0;        // the end of its last
  uint64_t busy_ns = 0;        // time in which it ran at least one, overlaps counted once
  // Time between its first work and its last in which it ran nothing.
  uint64_t idle_ns() const { return last_ns - first_ns - busy_ns; }
};

// An interval in which a device ran nothing, between two of its activities.
struct GpuIdleInterval {
  size_t device = 0;  // into GpuDeviceTimeline::devices
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  const GpuActivity* before = nullptr;  // the work whose end began it
  const GpuActivity* after = nullptr;   // the work whose start ended it
};

struct GpuDeviceTimeline {
  std::vector<GpuDevice> devices;     // by ordinal, then UUID, then first process
  std::vector<GpuIdleInterval> idle;  // in time order
};

// The session's GPUs, and their idle intervals of at least `min_idle_ns` (UINT64_MAX: none).
GpuDeviceTimeline FindGpuIdle(const Session& session, uint64_t min_idle_ns);

}  // namespace gprof::collector
