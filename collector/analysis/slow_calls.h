// The slow CUDA calls, a view of the analysis's waits: where each call's time went (on CPU,
// waiting for a CPU, asleep on what) and what the GPU of its process did meanwhile. The freezes
// they were blocked in, with who held the object and what it did, are the analysis's one list
// (freezes.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/on_cpu_samples.h"
#include "collector/analysis/wait_reader.h"
#include "collector/analysis/waits.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;

// What the GPU of a call's process did during the call (or during a hold), when the process's GPU
// timeline was recorded.
struct GpuDuringCall {
  uint64_t window_ns = 0;  // the interval looked at
  uint64_t busy_ns = 0;    // the process's kernels, copies and memsets in it, overlaps counted once
  const GpuActivity* main_activity = nullptr;  // what the GPU ran longest meanwhile; null: idle
  uint64_t main_overlap_ns = 0;
  const ApiCall* main_launcher = nullptr;    // the call that launched it, when it was recorded
  std::vector<const GpuActivity*> own_work;  // kernels, copies, memsets the call itself caused
};

struct BlockedCall {
  const ApiCall* call = nullptr;
  uint64_t on_cpu_ns = 0;    // running: working or spinning inside the call
  uint64_t runnable_ns = 0;  // ready but waiting for a CPU (preempted, or woken and not yet run)
  uint64_t asleep_ns = 0;    // blocked: the sum of the waits' sleeping parts
  std::vector<Wait> waits;   // in time order
  std::optional<WaitObject> main_object;  // the object it slept on longest
  uint64_t main_object_ns = 0;
  // Into waits: the longest sleep on main_object, the one that decided the call (its waker, its
  // lock's owner are the ones to name); -1: none.
  int main_wait = -1;
  const Wait* MainWait() const { return main_wait >= 0 ? &waits[main_wait] : nullptr; }
  int freeze = -1;                   // index into Analysis::freezes, when it froze with others
  std::optional<GpuDuringCall> gpu;  // none: the process's GPU timeline was not recorded
  std::vector<uint32_t> nvtx_ranges;  // the NVTX ranges it was made in, outermost first
};

// What a lock holder did while others waited for it.
struct HolderActivity {
  uint32_t tid = 0;
  const ApiCall* call = nullptr;  // its CUDA call in progress when it released the others
  uint64_t hold_start_ns = 0;     // since when it held the object (or the freeze's start)
  uint64_t release_ns = 0;        // the release that ended its hold
  uint64_t on_cpu_ns = 0;         // while it held it
  uint64_t asleep_ns = 0;
  uint64_t runnable_ns = 0;
  OnCpuActivity ran;                   // what it ran on CPU meanwhile, from the samples
  std::optional<WaitObject> own_wait;  // what it slept on longest meanwhile, if it slept
  uint32_t own_waker_tid = 0;          // who ended that sleep
  std::string own_waker_comm;
  int blocked_call = -1;  // index into Analysis::blocked_calls when its call is slow too
  // The GPU during its call (during the hold when it was in none); none: not recorded.
  std::optional<GpuDuringCall> gpu;
};

struct FreezeMember {
  int blocked_call = -1;      // index into Analysis::blocked_calls
  uint32_t woken_by_tid = 0;  // who ended its wait on the lock
  bool passed_on = false;     // woken by another waiter of the same lock (a convoy), not the holder
};

// The longest sleep on `object` among `waits`, or nullptr.
const Wait* LongestWaitOn(const std::vector<Wait>& waits, const WaitObject& object);
// The object a thread slept on longest among `waits` (its sleeps on it added up), and how long.
std::pair<std::optional<WaitObject>, uint64_t> LongestWaitObject(const std::vector<Wait>& waits);
// What the GPU of `pid` did in [start, end); `call` (may be null) is whose own work to list. None
// when the process's GPU timeline was not recorded.
std::optional<GpuDuringCall> GpuDuring(const GpuCorrelation& correlation,
                                       const GpuBusyTimeline& gpu_busy, uint32_t pid,
                                       uint64_t start, uint64_t end, const ApiCall* call);

// The pipeline's slow-call step: fills analysis.blocked_calls, every CUDA call at least the
// threshold long.
void ExplainSlowCalls(const Session& session, const WaitReader& waits,
                      const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                      Analysis& analysis);

}  // namespace gprof::collector
