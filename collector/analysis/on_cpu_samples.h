// What a thread ran while it was on CPU over a window, from the kernel recorder's on-CPU samples:
// the Python frame of the program's code sampled most (Python threads), and the hottest native
// frames, as the program reached them: the function its code called ("malloc_trim") and the
// program's frame that called it ("janitor_loop", app.c:41), or the program's own function where
// the thread ran its own code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/model/model.h"
#include "collector/symbols/python_frames.h"

namespace gprof::collector {

// One native frame, named.
struct NativeFrame {
  std::string function;  // demangled symbol; empty when no symbol names it
  std::string module;    // the mapped file's base name
  std::string source;    // "app.c:41" where the file's DWARF line table has it; empty otherwise
  bool program = false;  // the program's own code: not the system's libraries or Python's
};

struct OnCpuActivity {
  uint32_t native_total = 0;  // native samples in the window
  // The hottest frames, innermost first, as the program reached them: the library function its
  // code called ("malloc_trim") and the program's frame that called it ("janitor_loop"); or the
  // program's own function it ran, then (where a library called it back, a qsort comparator) the
  // library function and the program's frame around that. Empty without a named frame.
  uint32_t native_samples = 0;  // samples with these frames
  std::vector<NativeFrame> frames;
  uint32_t python_total = 0;    // Python samples in the window
  uint32_t python_samples = 0;  // with the frame below
  // The innermost frame of the program's own Python code (else the innermost frame) sampled most.
  std::optional<PythonFrame> python;
  bool empty() const { return frames.empty() && !python; }
};

// What tid ran on CPU in [start_ns, end_ns), from the samples taken then.
OnCpuActivity WhatRanOnCpu(const Session& session, uint32_t tid, uint64_t start_ns,
                           uint64_t end_ns);

}  // namespace gprof::collector
