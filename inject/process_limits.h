// What the process the library runs in allows it, checked before the library reads any GPROF_*
// variable or takes any memory of the program's:
//
// - A secure execution (set-user-ID, set-group-ID, file capabilities: AT_SECURE) records nothing.
//   Its environment is its caller's, who may have named any directory in GPROF_SESSION_DIR (libcuda
//   dlopens CUDA_INJECTION64_PATH with a plain getenv, even there); a privileged program must not
//   write, read or create anything there for them.
// - Under a finite address-space or data limit (ulimit -v, RLIMIT_DATA) the library records
//   nothing: its rings, writer thread and buffers take megabytes, and any byte of them can make
//   an allocation of the program fail that would succeed without it. gprof-run hears of it through
//   the session's control, for the report.
// - Under a small process limit (ulimit -u under 4096: the user's processes and threads; the
//   default is tens of thousands) the library records nothing: its writer thread could take the
//   last thread the program (or the CUDA driver) starts.
// - Under a file size limit (ulimit -f) the session file is written up to it and no further: a
//   write past it would send the program SIGXFSZ (chunk_file_writer.h).
#pragma once

#include <cstdint>

namespace gprof::inject {

// True in a secure execution (getauxval(AT_SECURE)).
bool SecureExecution();

// The resource (RLIMIT_AS or RLIMIT_DATA) whose soft limit is finite, or -1 when neither is.
int MemoryLimitInForce(uint64_t* limit_bytes);

// True under a small RLIMIT_NPROC (above).
bool SmallThreadLimit();

}  // namespace gprof::inject
