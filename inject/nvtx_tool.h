// The NVTX tool of the injected library (nvtx_tool.cc, docs/nvtx.md): what the rest of the
// library asks of it. Its entry point, InitializeInjectionNvtx2, is NVTX's to call.
#pragma once

namespace gprof::inject {

// At exit: where the program changed NVTX_INJECTION64_PATH since it started (unset it, or named
// another tool), says so in the report: an NVTX instance whose first call came after that was
// not recorded, and cannot be listed (NVTX's state of each library is not exported).
void NoteNvtxVariableChanged();

}  // namespace gprof::inject
