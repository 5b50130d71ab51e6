// A library with an NVTX instance of its own, for nvtx_app --late-library: dlopened after the
// program took NVTX_INJECTION64_PATH out of its environment, it makes its first NVTX call then
// (tests/nvtx_test.cc, docs/nvtx.md "What cannot be seen").
#include "nvtx3/nvToolsExt.h"

extern "C" __attribute__((visibility("default"))) void nvtx_late_lib_work() {
  nvtxRangePushA("late_library");
  nvtxRangePop();
}
