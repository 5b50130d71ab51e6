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

#include "clock.h"
#include "runtime_api_table.h"
#include "thread_ring.h"

namespace gprof::inject {

// Environment variable naming the session directory. Unset: the library only forwards calls.
inline constexpr char kSessionDirEnv[] = "GPROF_SESSION_DIR";

// Per-thread state on the CUDA call path; initial-exec TLS, so reading it is one instruction.
struct ThreadState {
  ThreadRing* ring;
  uint64_t generation;  // of the process that registered `ring`; differs after fork()
  uint32_t depth;       // CUDA calls in progress on this thread: only the outermost is recorded
  uint32_t registration_failed;
};
extern __thread ThreadState t_thread_state __attribute__((tls_model("initial-exec")));

// True when this process records (session directory set, writer not failed).
bool RecordingActive();

// Stores one finished call of the calling thread. Never blocks, never allocates after the thread's
// first call; drops and counts when the thread's ring is full.
void SubmitCall(RuntimeApi api, uint64_t enter_ns, uint64_t exit_ns, uint64_t stream,
                uint32_t flags, int32_t return_code);

// Stops the writer after a final flush; called at exit and before _exit. Waits a bounded time.
void ShutdownRecording();

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
  if (state.depth++ != 0 || !RecordingActive()) {
    auto result = call();
    --state.depth;
    return result;
  }
  uint64_t enter_ns = MonotonicNs();
  auto result = call();
  uint64_t exit_ns = MonotonicNs();
  int saved_errno = errno;
  SubmitCall(api, enter_ns, exit_ns, stream.id, stream.flags, static_cast<int32_t>(result));
  errno = saved_errno;
  --state.depth;
  return result;
}

}  // namespace gprof::inject
