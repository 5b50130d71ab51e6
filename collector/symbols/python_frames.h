// Python stacks for the outputs: each raw frame named by its code object (file, line, function),
// checked against it; merged with a native stack at the eval loop, as `py-spy --native` does; and
// written for a reader, the program's own frames first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collector/model/model.h"
#include "collector/symbols/user_symbols.h"

namespace gprof::collector {

// "3.11.7" from PY_VERSION_HEX; "3.10" when only major and minor are known.
std::string PythonVersionName(uint32_t version_hex);

struct PythonFrame {
  uint64_t code = 0;
  int32_t offset = -1;
  bool named = false;       // the code object was read: file and function are known
  std::string file;         // co_filename, as the program named it
  std::optional<int> line;  // none where the line table gives none
  std::string function;     // co_qualname (3.11 on) or co_name
  bool entry = false;       // the outermost frame of one run of the eval loop
  int error = 0;            // !named: why (errno of the loader's read; 0: no record of it)
};

struct ResolvedPythonStack {
  std::vector<PythonFrame> frames;  // innermost first
  // The frames end before the stack's outermost: the walk stopped (incomplete), went deeper than
  // it reads (truncated), or a frame failed its check against its code object here (its offset is
  // not in the code's bytecode: not the code object the frame ran), and that frame and those
  // outside it are left out.
  bool incomplete = false;
  bool truncated = false;
};

// The frames of `stack` (of the session's Python record) named. A code object is looked for in the
// stack's process, then in the processes it was forked from (a DataLoader worker runs its parent's
// code objects at the same addresses), never across an exec.
ResolvedPythonStack ResolvePythonStack(const Session& session, const PythonStack& stack);

// "train.py:42 in train_step"; an unnamed frame as "code object 0x7f3a1c2d4040 (not read: the
// process had exited)". Library files by their path from the library's top ("threading.py",
// "torch/utils/data/dataloader.py").
std::string PythonFrameText(const PythonFrame& frame);
// The file as PythonFrameText shows it.
std::string PythonShortPath(const std::string& file);

// Whether a frame is the program's own code, not Python's standard library, an installed package
// (site-packages, dist-packages) or frozen bootstrap code.
bool IsProgramFrame(const PythonFrame& frame);

// The text report's lines for a Python stack: the program's own frames first, innermost first, one
// a line (at most `max_frames`), then the library frames the innermost of them called into; when
// no frame is the program's, the innermost library frames one a line. The last line says so when
// the stack is incomplete or truncated.
std::vector<std::string> PythonStackLines(const ResolvedPythonStack& stack, size_t max_frames);

// The merge of a native stack with Python frames, as `py-spy --native` shows it: the native
// frames' symbols (innermost first) and, in merged order, each frame's source: a native frame's
// index, or a Python frame (then `native` is the index of the eval loop's frame it takes the
// place of, or symbols.size() for the Python frames no eval-loop frame reached, which come last).
// Each _PyEval_EvalFrameDefault frame gives way to one run of the loop (Python frames up to an
// entry frame) while runs are left. MergeStacks, MergeFrameTexts and the trace's callstacks merge
// through it.
struct MergeSlot {
  size_t native = 0;
  const PythonFrame* python = nullptr;  // into the ResolvedPythonStack given
};
std::vector<MergeSlot> MergeOrder(const std::vector<std::string_view>& symbols,
                                  const ResolvedPythonStack* python);

// A frame of a native stack merged with Python frames.
struct MergedFrame {
  bool python = false;
  PythonFrame python_frame;  // python
  std::string text;          // native: "symbol+0x1c" or "module+0x1c40"; python: PythonFrameText
  std::string module;        // native: the mapped file
  uint64_t address = 0;      // native
};

// User stack `stack_id` of `pid` at `time_ns` with the Python frames of `python` in place of the
// eval loop's C frames that ran them (one _PyEval_EvalFrameDefault frame per run of the loop), as
// py-spy --native shows a stack. Native frames are kept while the frame-pointer walk stays in
// executable code; Python frames no eval-loop frame of the walk reached come after the native
// ones. Either stack may be missing (a negative id, a null python).
std::vector<MergedFrame> MergeStacks(const Session& session, uint32_t pid, int32_t stack_id,
                                     uint64_t time_ns, const ResolvedPythonStack* python);

// The same for a native stack already written as text, innermost first (a slow CUDA call's):
// every frame kept, the eval loop's named by its symbol.
std::vector<MergedFrame> MergeFrameTexts(const std::vector<std::string>& native,
                                         const ResolvedPythonStack* python);

}  // namespace gprof::collector
