// The files the collector writes into a session (trace, reports): created with mode 0644 whatever
// the umask, so that a umask of 000 never leaves a session file anyone can change; and created
// afresh, never written through a link or into a file that was there (session_files.h).
#pragma once

#include <fcntl.h>

#include <cstdio>
#include <memory>
#include <string>

#include "inject/shared/status.h"

namespace gprof::collector {

using OutputFile = std::unique_ptr<FILE, int (*)(FILE*)>;

// Replaces `name` in the directory `dir_fd` (AT_FDCWD: `name` is a path) with a new file open for
// writing; an error names it as `shown`.
Expected<OutputFile> CreateOutputFile(int dir_fd, const std::string& name,
                                      const std::string& shown);
// The same for a path.
inline Expected<OutputFile> CreateOutputFile(const std::string& path) {
  return CreateOutputFile(AT_FDCWD, path, path);
}

// Why a write failed, in words ("the file size limit (ulimit -f) that gprof-run was started under").
std::string WriteError(int error);

// `text` written whole into a new `name` of `dir_fd` (shown as `path`); an error says why not.
Status WriteTextFile(int dir_fd, const std::string& name, const std::string& path,
                     const std::string& text);

}  // namespace gprof::collector
