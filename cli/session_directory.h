// The session directory: where every recorder writes and the collector reads. gprof-run names and
// creates it, never reuses a non-empty one, and keeps session.json in it up to date.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/target_process.h"
#include "collector/model/model.h"
#include "collector/session/session_files.h"
#include "inject/shared/status.h"

namespace gprof::cli {

// The session directory, open. Once it is made, gprof-run names every file of the session relative
// to `fd` and never resolves `path` again: the directory may be the user's while gprof-run runs as
// root, and the user may rename or relink its path's components at any moment.
struct SessionDirectory {
  collector::FileDescriptor fd;
  collector::FileDescriptor parent_fd;  // the directory it is in, to remove it again
  std::string name;                     // its name in that directory
  std::string path;      // absolute, without links: for messages and the command's environment
  bool created = false;  // by gprof-run (an empty directory given with -o was not)
  // The directory, or its file `file`, named through the descriptor (/proc/self/fd/N[/file]), for
  // code that takes a path: no component of that path can be swapped.
  std::string FilePath(const std::string& file = "") const;
};

// The file-system ids root takes to make a file in the session (inject/shared/file_owner.h): the
// invoking user's under sudo; -1 where this process already is whom the session belongs to.
struct FileOwner {
  int uid = -1;
  int gid = -1;
};
FileOwner SessionFileOwner(const LaunchSettings& as);

// Creates the session directory, mode 0700: `requested` when given, otherwise a new
// gprof-<command>-<YYYYMMDD-HHMMSS>-<pid>[-N] in the current directory. An existing `requested`
// must be an empty directory of the user the command runs as (for root: writable by no one else),
// not a link to one; its mode stays. The directory is claimed by making session.json in it with
// O_EXCL: of two runs given the same directory at once, one gets it, the other an error. Under sudo (`as` has run_as_uid) the path is resolved and the
// directory made by a child process with the invoking user's credentials, so that root never
// makes or opens anything there the user could not, and the directory is the user's from its
// first moment. Returns it open, or the error.
Expected<SessionDirectory> CreateSessionDirectory(const std::string& requested,
                                                  const std::string& command,
                                                  const LaunchSettings& as);

// A new directory for outputs made from sessions (`gprof-run merge -o`), made and checked as a
// session directory given with -o is (mode 0700; an existing one empty, this process's user's, for
// root writable by no one else, not a link) and claimed by making `claim` in it.
Expected<SessionDirectory> CreateOutputDirectory(const std::string& requested, const char* claim);

// What session.json says about the run (read back by collector/session/session_reader.cc).
struct RunDescription {
  std::vector<std::string> command;
  int root_pid = 0;
  unsigned long long start_monotonic_ns = 0;
  unsigned long long start_realtime_ns = 0;
  unsigned long long start_boottime_ns = 0;
  unsigned long long end_monotonic_ns = 0;  // 0: still running
  // Where, and the clocks at the start and the end (the end's 0: still running).
  std::string host_name;
  std::string boot_id;
  collector::ClockAnchor start_anchor;
  collector::ClockAnchor end_anchor;
  int64_t time_namespace_monotonic_ns = 0;  // gprof-run's own, taken off its times
  int64_t time_namespace_boottime_ns = 0;
  int64_t test_realtime_skew_ns = 0;
  std::optional<collector::RankIdentity> rank;  // from gprof-run's environment
  // Written false when the command starts and true once gprof-run has seen it end: a session that
  // still says false was cut short by gprof-run's own death.
  bool finished = false;
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  bool kernel_recording = false;
  std::string kernel_recording_note;
  uint64_t kernel_stack_min_ns = 0;  // off-CPU stacks only for intervals this long (0: every one)
  std::string inject_library;
  std::string nvtx_tool;  // the user's own NVTX_INJECTION64_PATH, forwarded to; empty: none
  std::string nccl_plugin;  // the user's own NCCL_PROFILER_PLUGIN, chained; empty: none
  std::string cuda_mode;  // --cuda

  // --delay / --duration: recording only in [window_start_ns, window_end_ns) (start 0: no
  // window; end 0: no end).
  double delay_s = 0;
  double duration_s = 0;  // 0: to the end
  unsigned long long window_start_ns = 0;
  unsigned long long window_end_ns = 0;
  // --capture-range: the windows the session's recorders kept (inject/shared/capture_windows.h).
  std::string capture_range;    // empty: none
  std::string capture_control;  // the control's handle while the command runs
  struct CaptureWindow {
    unsigned long long start_ns = 0;
    unsigned long long end_ns = 0;  // 0: open
    std::string opened_by, closed_by;
    unsigned open_pid = 0, close_pid = 0;
  };
  std::vector<CaptureWindow> capture_windows;
  unsigned long long capture_refused_opens = 0;
  std::optional<collector::FlightRecording> flight;  // --flight-recorder
  // --max-size: the size budget's counters at the end (inject/shared/recording_limits.h).
  unsigned long long max_size_bytes = 0;  // 0: no cap
  unsigned long long size_used_bytes = 0;
  unsigned long long size_stopped_at_ns = 0;  // when recording stopped at the cap; 0: it did not
  unsigned long long size_refused_records = 0;
  unsigned long long size_refused_bytes = 0;
  // When kernel.gpr stopped taking records (disk full, the disk margin), and why; 0: it did not.
  unsigned long long kernel_writes_stopped_ns = 0;
  std::string kernel_writes_stopped_cause;  // "write_failed", "disk_room", ...
  std::string kernel_writes_stopped_reason;
  // Stops that no recording file holds (a writer had no room even for its stop record, or no
  // file at all), from the session's control file; and the whole session's, when the disk had no
  // room at the start. Each goes into "recording_stopped" as it is.
  struct Stop {
    std::string file;
    unsigned long long time_ns = 0;
    std::string cause;
    std::string reason;
  };
  std::vector<Stop> other_stops;
  // Processes of the tree still running when gprof-run ended the recording (the command's own
  // process had ended); `still_writing`: its injected library had not closed its file yet, so the
  // file may change after the report.
  struct Running {
    int pid = 0;
    bool still_writing = false;
  };
  std::vector<Running> running_at_end;
  // What gprof-run counted as lost that no recording file says: the CUDA calls still in the
  // memory of a process that ended without exiting (SIGKILL). No count: unknown.
  struct Lost {
    std::string what;
    std::optional<unsigned long long> count;
  };
  std::vector<Lost> lost;
  // gprof-runs started inside the command: where their sessions are (session_control.h).
  struct Nested {
    int pid = 0;
    std::string directory;
    std::optional<unsigned long long> calls;
  };
  std::vector<Nested> nested_sessions;
  // gprof-run -p: the running processes recorded (no command was started, none has an exit
  // status), how many the tree held with their descendants, and what ended the recording.
  struct Attach {
    std::vector<int> pids;
    int processes = 0;
    std::string ended;  // "duration", "signal", "exited", "max_size"
  };
  std::optional<Attach> attach;
};

// session.json's contents for `run`.
std::string SessionMetaText(const RunDescription& run);
// Writes session.json atomically (a temporary file renamed over it), as `as`'s user under sudo.
Status WriteSessionMeta(const SessionDirectory& directory, const LaunchSettings& as,
                        const RunDescription& run);

// Removes what a session that never ran left in the directory (its files, not what is in a
// subdirectory), and the directory itself when gprof-run created it and it is still there under
// its name; under sudo with the user's file-system identity, so only what they could remove.
void DiscardSession(const SessionDirectory& directory, const LaunchSettings& as);

}  // namespace gprof::cli
