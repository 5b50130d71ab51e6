// How the fake runtime calls the fake driver's entry points (fake_libcuda.cc): each cu* function of
// libcuda.so.1 takes the work of the call and runs it, returning its result (a CUresult).
#pragma once

// Every entry point libcuda.so.1 exports: X(name) for each.
#define FAKE_CUDA_DRIVER_ENTRY_POINTS(X) \
  X(cuCtxSynchronize)                    \
  X(cuEventCreate)                       \
  X(cuEventDestroy_v2)                   \
  X(cuEventQuery)                        \
  X(cuEventRecord)                       \
  X(cuEventRecord_ptsz)                  \
  X(cuEventSynchronize)                  \
  X(cuGraphDestroy)                      \
  X(cuGraphExecDestroy)                  \
  X(cuGraphInstantiateWithFlags)         \
  X(cuGraphLaunch)                       \
  X(cuGraphLaunch_ptsz)                  \
  X(cuLaunchKernel)                      \
  X(cuLaunchKernel_ptsz)                 \
  X(cuMemAlloc_v2)                       \
  X(cuMemFreeHost)                       \
  X(cuMemFree_v2)                        \
  X(cuMemHostAlloc)                      \
  X(cuMemHostRegister_v2)                \
  X(cuMemHostUnregister)                 \
  X(cuMemcpy)                            \
  X(cuMemcpyAsync)                       \
  X(cuMemcpyAsync_ptsz)                  \
  X(cuMemcpy_ptds)                       \
  X(cuMemsetD8Async)                     \
  X(cuMemsetD8Async_ptsz)                \
  X(cuMemsetD8_v2)                       \
  X(cuMemsetD8_v2_ptds)                  \
  X(cuStreamBeginCapture_v2)             \
  X(cuStreamBeginCapture_v2_ptsz)        \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy_v2)                  \
  X(cuStreamEndCapture)                  \
  X(cuStreamEndCapture_ptsz)             \
  X(cuStreamQuery)                       \
  X(cuStreamQuery_ptsz)                  \
  X(cuStreamSynchronize)                 \
  X(cuStreamSynchronize_ptsz)            \
  X(cuStreamWaitEvent)                   \
  X(cuStreamWaitEvent_ptsz)

extern "C" {
typedef int (*fake_cuda_driver_work)(void* context);
typedef int (*fake_cuda_driver_entry_point)(fake_cuda_driver_work work, void* context);
}
