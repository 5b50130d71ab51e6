// Whether a file is gprof-run's injected library, checked before the command is started with it
// in LD_PRELOAD: the loader's complaint about anything else would land on the command's stderr.
#pragma once

#include <string>

#include "inject/status.h"

namespace gprof::cli {

// OK when `path` is an ELF shared object for this machine that exports InitializeInjection (the
// entry point the CUDA driver calls in libgprof_inject.so); otherwise the error says what it is
// not, in a few words that follow the path ("is not an ELF shared object").
Status CheckInjectLibrary(const std::string& path);

}  // namespace gprof::cli
