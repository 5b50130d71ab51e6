// The session directory: where every recorder writes and the collector reads. gprof-run names and
// creates it, never reuses a non-empty one, and keeps session.json in it up to date.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gprof::cli {

// Creates the session directory, mode 0700: `requested` when given (it may exist only if empty;
// then its mode stays), otherwise a new gprof-<command>-<YYYYMMDD-HHMMSS>[-N] in the current
// directory. Returns its absolute path, or an error line in *error.
std::optional<std::string> CreateSessionDirectory(const std::string& requested,
                                                  const std::string& command, std::string* error);

// What session.json says about the run (read back by collector/session_reader.cc).
struct RunDescription {
  std::vector<std::string> command;
  int root_pid = 0;
  unsigned long long start_monotonic_ns = 0;
  unsigned long long start_realtime_ns = 0;
  unsigned long long start_boottime_ns = 0;
  unsigned long long end_monotonic_ns = 0;  // 0: still running
  // Written false when the command starts and true once gprof-run has seen it end: a session that
  // still says false was cut short by gprof-run's own death.
  bool finished = false;
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  bool kernel_recording = false;
  std::string kernel_recording_note;
  uint64_t kernel_stack_min_ns = 0;  // off-CPU stacks only for intervals this long (0: every one)
  std::string inject_library;
  std::string cuda_mode;  // --cuda

  // --delay / --duration: recording only in [window_start_ns, window_end_ns) (start 0: no
  // window; end 0: no end).
  double delay_s = 0;
  double duration_s = 0;  // 0: to the end
  unsigned long long window_start_ns = 0;
  unsigned long long window_end_ns = 0;
  // --max-size: the size budget's counters at the end (inject/recording_limits.h).
  unsigned long long max_size_bytes = 0;  // 0: no cap
  unsigned long long size_used_bytes = 0;
  unsigned long long size_stopped_at_ns = 0;  // when recording stopped at the cap; 0: it did not
  unsigned long long size_refused_records = 0;
  unsigned long long size_refused_bytes = 0;
  // When kernel.gpr stopped taking records (disk full), and why; 0: it did not.
  unsigned long long kernel_writes_stopped_ns = 0;
  std::string kernel_writes_stopped_reason;
};

// Writes session.json atomically (a temporary file renamed over it). Returns false with *error.
bool WriteSessionMeta(const std::string& directory, const RunDescription& run, std::string* error);

// Sets aside disk space in the session directory (format::kReserveFile) while the command runs:
// the first writer that finds the disk full frees it, so that every writer can still say where it
// stopped. Best effort: a file system without fallocate gets no reserve.
void CreateDiskReserve(const std::string& directory);
// Frees it (idempotent): before session.json and the reports are written.
void ReleaseDiskReserve(const std::string& directory);

// Removes what a session that never ran left in `directory`, and the directory itself when
// gprof-run created it (an empty directory the user gave with -o stays).
void DiscardSession(const std::string& directory, bool created);

// Gives the directory and the files in it to `uid`:`gid` (the user who ran sudo).
void ChownSession(const std::string& directory, unsigned uid, unsigned gid);

}  // namespace gprof::cli
