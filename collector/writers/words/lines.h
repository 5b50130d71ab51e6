// How the text lays things out in lines: a stack's frames resolved and folded to the ones worth
// reading, and lines kept to a width.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// The widest line the text report prints.
inline constexpr size_t kTextWidth = 160;

// One frame of a native or user stack, resolved.
struct StackFrame {
  uint64_t address = 0;
  std::string name;    // "symbol+0x1c", "libfoo.so+0x1c40", or the address; full, demangled
  std::string module;  // the mapped file's base name, "[vdso]", "anonymous memory"; empty: none
  std::string source;  // "freeze_app.cc:42" where debug information says; empty otherwise
  // The program's own code (the process's executable), not a library's.
  bool program = false;
  // The address lies in no recorded mapping, or in one that is not code: no return address (a
  // frame-pointer walk that read data, such as the text of a path, as a frame).
  bool junk = false;
};

// The frames of `ips` (innermost first) in process `pid` at `time_ns` (kLatest: its latest maps);
// `symbols`, one per ip where given (the injected library's names), name the frames they have.
std::vector<StackFrame> ResolveStack(const Session& session, uint32_t pid,
                                     const std::vector<uint64_t>& ips,
                                     const std::vector<std::string>* symbols, uint64_t time_ns);

// The lines a stack is shown as, innermost first, one frame a line: junk frames dropped; a run of
// frames inside one library folded to its outermost frame (where the caller entered it) after
// "... 2 frames in libcudart.so.13"; the library frames outside the program's outermost frame
// (thread start, libc) folded to one "... 3 frames in libstdc++.so.6, libc.so.6"; the names
// shortened; a frame's source line after it where known. Repeated blocks (recursion) are said once.
std::vector<std::string> FoldedFrameLines(const std::vector<StackFrame>& frames);

// `text` with every line at most `width` columns: a longer line is broken after "; " or ", ", or
// at a space, its continuation indented four more; a word longer than a line is cut.
std::string FitLines(std::string_view text, size_t width = kTextWidth);

}  // namespace gprof::collector
