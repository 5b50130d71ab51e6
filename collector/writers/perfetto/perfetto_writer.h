// The Perfetto export: one session as a protobuf trace (a `Trace` of `TracePacket`s, TrackEvent
// with interned strings) that ui.perfetto.dev and trace_processor open.
//
// What the trace holds, per thread of the model:
//   - a thread track with the thread's CUDA calls as slices (nested calls nest), annotated with the
//     stream, the correlation id and the return code (the last two only when not 0);
//   - a child track "off-CPU": each interval the thread spent off-CPU, split at its wakeup into the
//     wait ("S futex_wait_queue", with the state and the kernel and user stacks) and the time it
//     then waited for a CPU ("runnable (woken by X)", with the waker and the waker's kernel and
//     user stacks); user stacks are symbolized through the process's maps and ELF files;
//   - a child track "futex": one slice per futex(2) and futex_waitv(2) call;
//   - a child track "kernel": its system calls on GPU device files ("ioctl nvidiactl 0xc020462a",
//     "poll nvidia0") and memory maps ("munmap 77.0 MiB"), its slow page faults ("page fault in
//     libtorch_cuda.so") and kernel lock waits ("mmap_lock (held by X)", "mutex 0x... (held by
//     X)"), nested as they happened;
//   - "wake <thread>" instants on the waker's thread track, with a flow arrow to the runnable slice
//     of the thread it woke, when the waker is a thread of the model.
// Per process, with CUPTI capture:
//   - a track per GPU stream ("GPU 0 stream 13") with its kernels (demangled name; grid, block,
//     registers, shared memory, correlation and graph ids), copies ("Memcpy HtoD": bytes, memory
//     kinds, async) and memsets, each the end of a flow arrow from the API call that caused it
//     (same process and correlation id). A stream runs one thing at a time: an activity that
//     overlaps the next on its stream is cut where the next starts, with its recorded length and
//     the overlap annotated;
//   - a track "GPU synchronization": the host's waits for the GPU ("cudaStreamSynchronize wait").
// A global track "gprof-run" holds what did not make it into the trace: lost events (CUPTI's
// dropped records included), the readers' diagnostics, the injected library's messages.
//
// Timestamps are CLOCK_MONOTONIC nanoseconds, stated in the trace (with a clock snapshot to
// BOOTTIME). Each track has its own packet sequence, whose defaults name the track and a
// sequence-scoped incremental clock: an event's timestamp is the delta from the previous one on its
// track. Strings are interned per sequence. Packets are streamed to the file as they are made:
// memory does not grow with the session.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "inject/shared/status.h"

namespace gprof::collector {

struct PerfettoOptions {
  // With a diagnosis, a "diagnosis" track holds one slice per freeze, per GPU gap and per wait of
  // a lock cycle ("DEADLOCK") with its explanation, and flows lead from each frozen wait to the
  // thread that ended it, and from each wait of a cycle to the thread holding its lock.
  const Analysis* diagnosis = nullptr;
};

// The long-run guard: the Perfetto UI cannot open a trace near 2 GB (and is slow well before).
// When the session's off-CPU intervals and futex calls would make a trace past `max_bytes` (at
// about kTraceBytesPerRecord each), the shortest of them are left out of the trace's slices and
// only counted on its counter tracks: returns the length under which they are (a power of two of
// microseconds, at most the 1 ms no report explains less than), and fills *full_bytes with the
// estimate at full detail. 0: everything fits.
inline constexpr uint64_t kTraceBytesPerRecord = 64;  // measured: 60 for a futex ping-pong
inline constexpr uint64_t kTraceMaxBytes = uint64_t{800} << 20;
uint64_t TraceDetailFor(const Session& session, uint64_t max_bytes, uint64_t* full_bytes);
// The same for sessions written into one trace (merged_trace.h): one length for them all, so that
// the trace as a whole stays under `max_bytes` and the sessions' short waits are cut alike.
uint64_t TraceDetailFor(std::span<const Session* const> sessions, uint64_t max_bytes,
                        uint64_t* full_bytes);
// What the guard reads of a session, to decide for sessions that are not all held at once (the
// merge reads them one at a time): its records and its waits by length.
struct TraceDetailCounts {
  uint64_t records = 0;
  // Off-CPU intervals and futex calls by power of two of microseconds: [k] holds [2^(k-1), 2^k)
  // us (0: under 1 us), up to 1024 us.
  std::array<uint64_t, 11> shorter{};
};
TraceDetailCounts CountTraceDetail(const Session& session);
uint64_t TraceDetailFor(std::span<const TraceDetailCounts> sessions, uint64_t max_bytes,
                        uint64_t* full_bytes);

// Writes `session` to `path` (created or truncated). The session's record vectors must be sorted as
// model.h states (api_calls by enter_ns; off_cpu, futex_calls and gpu_activities by start_ns).
// Returns an error naming `path` when the file cannot be created or written.
Status WritePerfettoTrace(const Session& session, const std::string& path,
                          const PerfettoOptions& options = {});
// The same into the file `name` of the directory `dir_fd` (output_file.h), shown as `path`.
Status WritePerfettoTrace(const Session& session, int dir_fd, const std::string& name,
                          const std::string& path, const PerfettoOptions& options = {});

}  // namespace gprof::collector
