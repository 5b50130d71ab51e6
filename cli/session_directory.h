// The session directory: where every recorder writes and the collector reads. gprof-run names and
// creates it, never reuses a non-empty one, and keeps session.json in it up to date.
#pragma once

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
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  bool kernel_recording = false;
  std::string kernel_recording_note;
  std::string inject_library;
  std::string cuda_mode;  // --cuda
};

// Writes session.json atomically (a temporary file renamed over it). Returns false with *error.
bool WriteSessionMeta(const std::string& directory, const RunDescription& run, std::string* error);

// Removes what a session that never ran left in `directory`, and the directory itself when
// gprof-run created it (an empty directory the user gave with -o stays).
void DiscardSession(const std::string& directory, bool created);

// Gives the directory and the files in it to `uid`:`gid` (the user who ran sudo).
void ChownSession(const std::string& directory, unsigned uid, unsigned gid);

}  // namespace gprof::cli
