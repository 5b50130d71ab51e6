// What the writer thread sees of the recorder: the rings of all threads that ever recorded, and the
// signals between the CUDA call path and the writer. Internal to the injected library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inject/shared/session_control.h"
#include "inject/thread_ring.h"

namespace gprof::inject {

inline constexpr uint32_t kMaxRings = 4096;  // threads recording at once

// Rings are only ever appended to the registry (a ring freed by an exited thread is reused by the
// next new thread), so RingAt(i) for i < RingCount() is always a valid ring.
uint32_t RingCount();
ThreadRing* RingAt(uint32_t index);
// A retired ring the writer has drained completely goes back to the free list.
void ReleaseRing(ThreadRing* ring);
// Calls lost because their thread could not get a ring (too many threads at once).
uint64_t TakeUnregisteredDrops();
// From now on every recorded call of this process is counted in `counters` (the writer's slot of
// the session's control: kCallStripes of them), the calls counted before included; called again
// each pass. nullptr: the slot is given up (another process may take it), nothing counts there.
void CountCallsIn(SessionControlState::CallCounter* counters);
// The slot of the session's control that the process's first call took for it (registered
// with start time 0), now the writer's to finish and unregister: false when none was taken (no
// control, or it could not be attached). Once.
bool TakeEarlySlot(int* slot);

bool WriterStopRequested();

// gprof-run's own threads noted so far (NoteProfilerThread): how many, and each one, false while
// its thread is still storing it.
uint32_t ProfilerThreadCount();
bool ProfilerThreadAt(uint32_t index, uint32_t* tid, uint32_t* role);

struct PostedMessage {
  uint32_t level;  // format::MessageLevel
  char text[472];
};
// Moves the posted messages into `out`; returns how many.
size_t TakePostedMessages(PostedMessage* out, size_t capacity);
// Recording ends in this process (no session file, the disk is full, gprof-run is gone): CUDA
// calls are only forwarded from now on.
void StopRecording();
// Runs the hook set with SetBeforeShutdown (recorder.h), if any: CUPTI's forced flush.
void RunBeforeShutdown();
// Sleeps until a ring reaches its wake-up mark, a stop is requested, or `timeout_ms` passes.
void WaitForWork(int timeout_ms);

}  // namespace gprof::inject
