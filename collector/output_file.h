// The files the collector writes into a session (trace, reports): created with mode 0644 whatever
// the umask, so that a umask of 000 never leaves a session file anyone can change.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "status.h"

namespace gprof::collector {

using OutputFile = std::unique_ptr<FILE, int (*)(FILE*)>;

// Creates or truncates `path` for writing; an error names the path.
Expected<OutputFile> CreateOutputFile(const std::string& path);

}  // namespace gprof::collector
