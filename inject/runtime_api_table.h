// The CUDA runtime functions the injected library interposes, as one list so that the wrappers
// (runtime_interposer.cc) and the names written to the session file cannot drift apart. The order
// is the api_id written to the file (index + 1); append only.
#pragma once

#include <cstdint>

namespace gprof::inject {

// clang-format off
#define GPROF_RUNTIME_APIS(X) \
  X(cudaLaunchKernel) \
  X(cudaLaunchKernel_ptsz) \
  X(__cudaLaunchKernel) \
  X(__cudaLaunchKernel_ptsz) \
  X(cudaLaunchKernelExC) \
  X(cudaLaunchKernelExC_ptsz) \
  X(cudaLaunchCooperativeKernel) \
  X(cudaLaunchCooperativeKernel_ptsz) \
  X(cudaLaunchHostFunc) \
  X(cudaLaunchHostFunc_ptsz) \
  X(cudaMemcpy) \
  X(cudaMemcpy_ptds) \
  X(cudaMemcpyAsync) \
  X(cudaMemcpyAsync_ptsz) \
  X(cudaMemset) \
  X(cudaMemset_ptds) \
  X(cudaMemsetAsync) \
  X(cudaMemsetAsync_ptsz) \
  X(cudaDeviceSynchronize) \
  X(cudaStreamSynchronize) \
  X(cudaStreamSynchronize_ptsz) \
  X(cudaStreamQuery) \
  X(cudaStreamQuery_ptsz) \
  X(cudaEventSynchronize) \
  X(cudaEventRecord) \
  X(cudaEventRecord_ptsz) \
  X(cudaEventQuery) \
  X(cudaStreamWaitEvent) \
  X(cudaStreamWaitEvent_ptsz) \
  X(cudaMalloc) \
  X(cudaFree) \
  X(cudaMallocAsync) \
  X(cudaMallocAsync_ptsz) \
  X(cudaFreeAsync) \
  X(cudaFreeAsync_ptsz) \
  X(cudaMallocHost) \
  X(cudaHostAlloc) \
  X(cudaFreeHost) \
  X(cudaHostRegister) \
  X(cudaHostUnregister) \
  X(cudaGraphLaunch) \
  X(cudaGraphLaunch_ptsz) \
  X(cudaStreamCreate) \
  X(cudaStreamCreateWithFlags) \
  X(cudaStreamCreateWithPriority) \
  X(cudaStreamDestroy) \
  X(cudaEventCreate) \
  X(cudaEventCreateWithFlags) \
  X(cudaEventDestroy) \
  X(cudaProfilerStart) \
  X(cudaProfilerStop)
// clang-format on

enum class RuntimeApi : uint32_t {
#define GPROF_API_ENUM(name) name,
  GPROF_RUNTIME_APIS(GPROF_API_ENUM)
#undef GPROF_API_ENUM
      kCount
};

inline constexpr const char* kRuntimeApiNames[] = {
#define GPROF_API_NAME(name) #name,
    GPROF_RUNTIME_APIS(GPROF_API_NAME)
#undef GPROF_API_NAME
};
static_assert(sizeof(kRuntimeApiNames) / sizeof(kRuntimeApiNames[0]) ==
              static_cast<uint32_t>(RuntimeApi::kCount));

// The api_id of a function in the session file: 0 stays free as "unknown".
inline constexpr uint32_t ApiId(RuntimeApi api) { return static_cast<uint32_t>(api) + 1; }

}  // namespace gprof::inject
