// The end of a session for the processes of the command that outlive it (session_control.h):
// gprof-run closes the session once the command's own process has ended, waits a bounded time for
// their writers to close their files, and puts in session.json what the control file knows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "cli/session_directory.h"
#include "inject/shared/session_control.h"

namespace gprof::cli {

// A writer's pid and start time (/proc/<pid>/stat's clock ticks; 0: not written yet).
using OpenWriter = std::pair<uint32_t, uint64_t>;

// Closes the session and waits, at most 2 s and recording the kernel meanwhile (`kernel` may be
// null), for the writers of processes that run on to close their files. Returns the writers that
// were open when it closed.
std::vector<OpenWriter> CloseSession(SessionControl* control, bpf::KernelRecorder* kernel);

// Into `run`: the stops that no recording file holds, and the processes of the tree still running
// (those whose writers were open when the session closed; still_writing for those whose files are
// open yet).
// Also: the CUDA calls of processes that ended without closing their files (SIGKILL), counted
// in the control and never written, and the sessions of gprof-runs started inside the command.
void RecordSessionControl(const SessionControl& control,
                          const std::vector<OpenWriter>& open_at_close,
                          int session_dir_fd, RunDescription* run);

// A gprof-run started inside another's command (gprof-run -- gprof-run -- CMD) records CMD into
// its own session; the enclosing session's report names it there, from the note this leaves in
// that session's control (inherited as GPROF_SESSION_CONTROL).
class EnclosingSession {
 public:
  // Attaches the control of the session this gprof-run runs in, if any; before the command runs.
  void AttachFromEnvironment();
  // Names this gprof-run's own session and the calls it holds (none: unknown).
  void NoteNested(const std::string& directory, std::optional<uint64_t> calls);

 private:
  SessionControl control_;
};

}  // namespace gprof::cli
