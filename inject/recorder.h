// Process-wide recording state of the injected library: which threads record into which ring, the
// writer thread that turns rings into the session file, and what happens at fork and exit.
//
// Everything here may run before this library's constructor (another library's constructor can
// make CUDA calls first), inside a forked child, and during exit: state is constant-initialised
// and set up lazily on the first recorded call. Nothing is created in a process (no thread, no
// file) until it records something.
#pragma once

#include <cerrno>
#include <cstdint>

#include "inject/capture_range.h"
#include "inject/runtime_api_table.h"
#include "inject/shared/clock.h"
#include "inject/shared/held_directory.h"
#include "inject/shared/recording_limits.h"
#include "inject/shared/session_control.h"
#include "inject/thread_ring.h"

namespace gprof::inject {

// Environment variable naming the session directory. Unset: the library only forwards calls.
inline constexpr char kSessionDirEnv[] = "GPROF_SESSION_DIR";
// Calls at least this long (ns) get their thread's native stack recorded. Unset: none do.
inline constexpr char kStackThresholdEnv[] = "GPROF_STACK_THRESHOLD_NS";

// Per-thread state on the CUDA call path; initial-exec TLS, so reading it is one instruction.
struct ThreadState {
  ThreadRing* ring;
  uint64_t generation;  // of the process that registered `ring`; differs after fork()
  uint32_t depth;       // CUDA calls in progress on this thread: only the outermost is recorded
  uint32_t registration_failed;
  // An interposed call is being recorded: it started before CUPTI did (the first call of a
  // process starts the driver, and with it CUPTI), so CUPTI's callbacks inside it stay silent.
  uint32_t interposition_recording;
};
extern __thread ThreadState t_thread_state __attribute__((tls_model("initial-exec")));

// True when this process records (session directory set, writer not failed).
bool RecordingActive();

// True once CUPTI records this process's API calls: the interposed functions then only forward,
// so that no call is recorded twice.
bool CuptiRecordsApiCalls();
void SetCuptiRecordsApiCalls(bool enabled);

// Stores one finished call of the calling thread (header and tid are filled in here). Never
// blocks, never allocates after the thread's first call; drops and counts when the ring is full.
// A call at least the slow-call threshold long also gets the thread's native stack. A call that
// did not start inside the recording window (--delay, --duration) is left out, silently.
void SubmitCall(format::ApiCallRecord record);

// The calling thread's outermost CUDA call begins (`enter_ns`, the time its record will have) and
// ends: what --trigger freeze:MS watches while the call runs (freeze_watch.h). Two stores when
// that trigger is set, one load otherwise.
void NoteCallEntered(uint32_t api_id, uint64_t enter_ns);
void NoteCallLeft(uint64_t exit_ns);

// Stores one NVTX event of the calling thread with `record.text_len` bytes of `text` (tid and
// header filled in here), like SubmitCall: never blocks; not counted as a CUDA call.
void SubmitNvtxEvent(format::NvtxEventRecord record, const char* text);

// Stores one NCCL profiler event of the calling thread (inject/nccl_profiler.cc) with the
// function's and datatype's names (tid and header filled in here), like SubmitNvtxEvent.
void SubmitNcclEvent(format::NcclEventRecord record, const char* func, const char* datatype);

// Starts the writer thread if it is not running yet (CUPTI delivers GPU records before any API
// call may have been recorded). False when recording is off or the thread cannot start.
bool EnsureWriterRunning();

// The session directory, when recording is active.
const char* SessionDirectory();
// Its identity from kSessionDirIdEnv (held_directory.h), or nullptr where none was given.
const FileIdentity* SessionDirectoryId();

// The recording window (recording_limits.h), valid once RecordingActive() returned true.
const RecordingWindow& Window();
// The --max-size budget's handle (recording_limits.h), or nullptr when the session has no cap.
const char* SizeBudgetHandle();
// The session's control's handle (session_control.h), or nullptr when the library runs without
// gprof-run; "" when one was named that cannot be used (then nothing is recorded).
const char* SessionControlHandle();

// Stops the writer after a final flush; called at exit and before _exit. Waits a bounded time.
// `before_flush`, when set, runs first (CUPTI hands over its last buffers there).
void ShutdownRecording();
void SetBeforeShutdown(void (*before_flush)());
// An exec that returned (it failed) leaves the program running: recording goes on, with a new
// writer and a new file, after the ShutdownRecording that preceded the exec.
void ResumeRecordingAfterFailedExec();

// Marks the calling thread as one of gprof-run's own in this process (the writer, a thread of
// CUPTI's), once: the session file says so, and the diagnosis never blames it. Lock-free.
void NoteProfilerThread(format::ProfilerThreadRole role);
// Whether the calling thread was marked so.
bool IsProfilerThread();
// True once the process's recording is being shut down (exit): threads that run the library's
// code from then on (the exit's own flush) are not told apart from the program's.
bool RecordingShuttingDown();

// Wakes the writer thread: there is something to write now.
void NotifyWriter();

// Something the report should say about this process ("CUPTI is taken by ..."), from any thread
// but the writer's. Copied; at most a few dozen are kept.
void PostMessage(format::MessageLevel level, const char* text);

// The stream a call works on, when it has one.
struct CallStream {
  uint64_t id = 0;
  uint32_t flags = 0;  // format::ApiCallFlags
};

// Runs `call` (a CUDA function) and records it when it is the outermost CUDA call of the thread.
// errno is left as the CUDA function left it.
template <typename Call>
inline auto RecordCall(RuntimeApi api, CallStream stream, Call&& call) {
  ThreadState& state = t_thread_state;
  if (state.depth++ != 0 || !RecordingActive() || CuptiRecordsApiCalls() || CaptureClosedNow()) {
    auto result = call();
    --state.depth;
    return result;
  }
  state.interposition_recording = 1;
  uint64_t enter_ns = MonotonicNs();
  NoteCallEntered(ApiId(api), enter_ns);
  auto result = call();
  uint64_t exit_ns = MonotonicNs();
  NoteCallLeft(exit_ns);
  state.interposition_recording = 0;
  int saved_errno = errno;
  format::ApiCallRecord record;
  record.api_id = ApiId(api);
  record.enter_ns = enter_ns;
  record.exit_ns = exit_ns;
  record.stream = stream.id;
  record.flags = stream.flags;
  record.return_code = static_cast<int32_t>(result);
  record.correlation_id = 0;
  SubmitCall(record);
  errno = saved_errno;
  --state.depth;
  return result;
}

}  // namespace gprof::inject
