// gprof-run's own exit statuses, as env(1), timeout(1) and the shells use them, so that a caller
// can tell gprof-run's failures from the command's own statuses (which gprof-run passes through).
#pragma once

namespace gprof::cli {

inline constexpr int kExitToolFailure = 125;  // gprof-run itself failed (bad usage, no session...)
inline constexpr int kExitCannotExecute = 126;  // the command exists but could not be executed
inline constexpr int kExitNotFound = 127;       // the command was not found
inline constexpr int kExitSignalBase = 128;     // the command died of signal N: 128 + N

}  // namespace gprof::cli
