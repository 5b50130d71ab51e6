// Reads a whole session directory into one Session: session.json (what gprof-run knew about the
// run), every inject-*.gpr (one per process that made CUDA calls) and kernel.gpr (the kernel
// recorder). Damaged input is salvaged and described in Session::diagnostics; only a directory
// with nothing readable in it is an error.
#pragma once

#include <string>

#include "collector/model/model.h"
#include "collector/session/read_progress.h"
#include "inject/format/session_directory.h"
#include "inject/shared/status.h"

namespace gprof::collector {

// The directory's file names are the contract's (inject/format/session_directory.h).
using format::kInjectFilePrefix;
using format::kKernelFile;
using format::kRecordingFileSuffix;
using format::kSessionMetaFile;
using format::kSessionMetaVersion;

// `progress`, when given, shows how far the read of the recording files is (read_progress.h).
Expected<Session> ReadSession(const std::string& directory, ReadProgress* progress = nullptr);
// The same for the directory open as `dir_fd` (shown as `directory`): every file is opened
// relative to it, and only a regular file is read (session_files.h).
// `meta_text`, when given, is read as session.json instead of the file (gprof-run could not write
// it: a disk quota).
Expected<Session> ReadSession(int dir_fd, const std::string& directory,
                              ReadProgress* progress = nullptr,
                              const std::string* meta_text = nullptr);

}  // namespace gprof::collector
