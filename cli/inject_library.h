// Whether a file is gprof-run's injected library (or a CUPTI library), checked before the command is started with it
// in LD_PRELOAD: the loader's complaint about anything else would land on the command's stderr.
#pragma once

#include <string>

#include "inject/shared/status.h"

namespace gprof::cli {

// OK when `path` is an ELF shared object for this machine that exports InitializeInjection (the
// entry point the CUDA driver calls in libgprof_inject.so); otherwise the error says what it is
// not, in a few words that follow the path ("is not an ELF shared object").
Status CheckInjectLibrary(const std::string& path);

// The same for --cupti-lib: an ELF shared object for this machine that exports cuptiSubscribe. Read,
// never loaded: the injected library dlopens it in every process of the command.
Status CheckCuptiLibrary(const std::string& path);

// What LD_PRELOAD names for `library`: its platform/$PLATFORM/ path, when that directory has it for
// this process's platform and a do-nothing library for 32-bit x86 (inject/CMakeLists.txt), so
// that ld.so gives a 32-bit program of the tree the stub rather than a "wrong ELF class" line on
// its stderr; otherwise `library` itself.
std::string PreloadPath(const std::string& library);

}  // namespace gprof::cli
