// The fake's driver library, libcuda.so.1: a real shared object exporting the driver entry points
// (cu*) the fake runtime calls, so that a profiler that probes libcuda's exported functions
// (gprof-run -p's uprobes, bpf/cuda_probes.h) finds them where it finds the real driver's. Each
// entry point runs, on the caller's thread, the work the runtime hands it (the runtime keeps the
// fake GPU): the call's entry and return are this library's, whatever its arguments are. The
// runtime loads it as the real runtime loads the driver, with dlopen next to itself
// (fake_driver.cc); without it, the runtime runs the work itself.
#include "tests/fake_cuda/fake_libcuda.h"

// Not inlined, not merged: each is a function of its own with its own entry and return.
#define FAKE_CUDA_DEFINE_ENTRY_POINT(name)                                    \
  extern "C" __attribute__((visibility("default"), noinline, used)) int name( \
      fake_cuda_driver_work work, void* context) {                            \
    int result = work(context);                                               \
    asm volatile("" ::: "memory");                                            \
    return result;                                                            \
  }

FAKE_CUDA_DRIVER_ENTRY_POINTS(FAKE_CUDA_DEFINE_ENTRY_POINT)
