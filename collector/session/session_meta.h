// session.json: what gprof-run knew about the run (the command, its pid and exit status, the
// times, the recording options). Written by gprof-run, but read from a directory anyone may have
// written into: every field is checked for its type and range, and one that fails is named in a
// Diagnostic and ignored while the rest is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "collector/model/model.h"
#include "inject/shared/status.h"

namespace gprof::collector {

// The largest session.json read. The file is small by nature: its one unbounded part is the
// command line, which Linux caps at 6 MiB (argv and the environment together, with an unlimited
// stack; 2 MiB with the default 8 MiB one); written as JSON, with every byte a control character
// (\u00XX, 6 bytes), that is at most about 36 MiB. Anything larger was not written by gprof-run.
inline constexpr uint64_t kMaxSessionMetaBytes = uint64_t{64} << 20;

// Deeper nesting than this is refused: session.json has three levels, and nlohmann copies and
// compares nested values by recursion (a file of nested brackets would overflow the stack).
inline constexpr int kMaxSessionMetaDepth = 32;

// Fills session->meta (and the recording stops session.json lists) from `text`, the contents of
// the session.json at `path`. What cannot be read is described in session->diagnostics; only a
// session from a newer gprof-run is an error.
Status ParseSessionMeta(std::string_view text, const std::string& path, Session* session);

}  // namespace gprof::collector
