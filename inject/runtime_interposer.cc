// The CUDA runtime functions, interposed by LD_PRELOAD: each forwards to the real libcudart and
// records the call (inject/recorder.h). The list and order live in runtime_api_table.h.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>

#include "inject/capture_range.h"
#include "inject/real_symbol.h"
#include "inject/recorder.h"

// Variants that cuda_runtime_api.h declares only under per-thread-default-stream macros, and the
// launch entry point that nvcc 13 generates for <<<...>>> (crt/device_functions.h).
extern "C" {
cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t*, const void*, void**);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void*);
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemset_ptds(void*, int, size_t);
cudaError_t cudaMemsetAsync_ptsz(void*, int, size_t, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t, cudaStream_t);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t cudaMallocAsync_ptsz(void**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void*, cudaStream_t);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
}

namespace gprof::inject {
namespace {

constexpr size_t kApiCount = static_cast<size_t>(RuntimeApi::kCount);
std::atomic<void*> g_real_functions[kApiCount] = {};

// The real functions of a libcudart the program links, found when this library loads (nothing
// else runs yet): a call then never looks its function up, which takes the dynamic loader's lock.
__attribute__((constructor)) void FindLinkedRuntime() {
  for (size_t i = 0; i < kApiCount; ++i) {
    if (void* real = dlsym(RTLD_NEXT, kRuntimeApiNames[i]))
      g_real_functions[i].store(real, std::memory_order_release);
  }
}

// Found at its first call: the function of a libcudart loaded after this library and before
// CUDA started (ResolveRuntimeFunctions looks those up then), or in no libcudart at all.
template <typename Fn>
Fn RealFunction(RuntimeApi api) {
  std::atomic<void*>& slot = g_real_functions[static_cast<size_t>(api)];
  void* real = slot.load(std::memory_order_acquire);
  if (real == nullptr) {
    real = FindRealSymbol(kRuntimeApiNames[static_cast<size_t>(api)], "libcudart");
    slot.store(real, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(real);
}

CallStream OnStream(cudaStream_t stream) {
  return {reinterpret_cast<uint64_t>(stream), format::kApiCallHasStream};
}
constexpr CallStream kNoStream{};

}  // namespace

void ResolveRuntimeFunctions() {
  for (size_t i = 0; i < kApiCount; ++i) {
    if (g_real_functions[i].load(std::memory_order_acquire) != nullptr) continue;
    // Only in the libcudart objects: a function this runtime lacks is not looked for in every
    // other library (hundreds in a PyTorch process).
    if (void* real = FindRealSymbol(kRuntimeApiNames[i], "libcudart", /*anywhere=*/false))
      g_real_functions[i].store(real, std::memory_order_release);
  }
}

bool LinkedRuntimeFound() {
  for (size_t i = 0; i < kApiCount; ++i) {
    if (g_real_functions[i].load(std::memory_order_acquire) != nullptr) return true;
  }
  return false;
}

}  // namespace gprof::inject

using gprof::inject::kNoStream;
using gprof::inject::OnStream;
using gprof::inject::RuntimeApi;

// Forwards to the real function through RecordCall.
#define GPROF_FORWARD(name, stream, ...)                                            \
  const auto real = gprof::inject::RealFunction<decltype(&name)>(RuntimeApi::name); \
  if (real == nullptr) return cudaErrorSharedObjectSymbolNotFound;                  \
  return gprof::inject::RecordCall(RuntimeApi::name, stream, [&] { return real(__VA_ARGS__); })

#pragma GCC visibility push(default)
extern "C" {

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                             cudaStream_t stream) {
  GPROF_FORWARD(cudaLaunchKernel, OnStream(stream), func, grid, block, args, shared, stream);
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shared, cudaStream_t stream) {
  GPROF_FORWARD(cudaLaunchKernel_ptsz, OnStream(stream), func, grid, block, args, shared, stream);
}
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared, cudaStream_t stream) {
  GPROF_FORWARD(__cudaLaunchKernel, OnStream(stream), kernel, grid, block, args, shared, stream);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared, cudaStream_t stream) {
  GPROF_FORWARD(__cudaLaunchKernel_ptsz, OnStream(stream), kernel, grid, block, args, shared,
                stream);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  GPROF_FORWARD(cudaLaunchKernelExC, config ? OnStream(config->stream) : kNoStream, config, func,
                args);
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  GPROF_FORWARD(cudaLaunchKernelExC_ptsz, config ? OnStream(config->stream) : kNoStream, config,
                func, args);
}
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t shared, cudaStream_t stream) {
  GPROF_FORWARD(cudaLaunchCooperativeKernel, OnStream(stream), func, grid, block, args, shared,
                stream);
}
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                             size_t shared, cudaStream_t stream) {
  GPROF_FORWARD(cudaLaunchCooperativeKernel_ptsz, OnStream(stream), func, grid, block, args, shared,
                stream);
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  GPROF_FORWARD(cudaLaunchHostFunc, OnStream(stream), stream, fn, user_data);
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  GPROF_FORWARD(cudaLaunchHostFunc_ptsz, OnStream(stream), stream, fn, user_data);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  GPROF_FORWARD(cudaMemcpy, kNoStream, dst, src, count, kind);
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  GPROF_FORWARD(cudaMemcpy_ptds, kNoStream, dst, src, count, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  GPROF_FORWARD(cudaMemcpyAsync, OnStream(stream), dst, src, count, kind, stream);
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  GPROF_FORWARD(cudaMemcpyAsync_ptsz, OnStream(stream), dst, src, count, kind, stream);
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  GPROF_FORWARD(cudaMemset, kNoStream, ptr, value, count);
}
cudaError_t cudaMemset_ptds(void* ptr, int value, size_t count) {
  GPROF_FORWARD(cudaMemset_ptds, kNoStream, ptr, value, count);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  GPROF_FORWARD(cudaMemsetAsync, OnStream(stream), ptr, value, count, stream);
}
cudaError_t cudaMemsetAsync_ptsz(void* ptr, int value, size_t count, cudaStream_t stream) {
  GPROF_FORWARD(cudaMemsetAsync_ptsz, OnStream(stream), ptr, value, count, stream);
}

cudaError_t cudaDeviceSynchronize() { GPROF_FORWARD(cudaDeviceSynchronize, kNoStream, ); }

// --capture-range=cudaProfilerApi (capture_range.h): the window opens before the start is timed
// and closes after the stop, so that both calls are inside it.
cudaError_t cudaProfilerStart() {
  gprof::inject::OnProfilerStart();
  GPROF_FORWARD(cudaProfilerStart, kNoStream, );
}
cudaError_t cudaProfilerStop() {
  const auto real =
      gprof::inject::RealFunction<decltype(&cudaProfilerStop)>(RuntimeApi::cudaProfilerStop);
  cudaError_t result = real == nullptr
                           ? cudaErrorSharedObjectSymbolNotFound
                           : gprof::inject::RecordCall(RuntimeApi::cudaProfilerStop, kNoStream,
                                                       [&] { return real(); });
  gprof::inject::OnProfilerStop();
  return result;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  GPROF_FORWARD(cudaStreamSynchronize, OnStream(stream), stream);
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  GPROF_FORWARD(cudaStreamSynchronize_ptsz, OnStream(stream), stream);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  GPROF_FORWARD(cudaStreamQuery, OnStream(stream), stream);
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  GPROF_FORWARD(cudaStreamQuery_ptsz, OnStream(stream), stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  GPROF_FORWARD(cudaEventSynchronize, kNoStream, event);
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  GPROF_FORWARD(cudaEventRecord, OnStream(stream), event, stream);
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  GPROF_FORWARD(cudaEventRecord_ptsz, OnStream(stream), event, stream);
}
cudaError_t cudaEventQuery(cudaEvent_t event) { GPROF_FORWARD(cudaEventQuery, kNoStream, event); }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  GPROF_FORWARD(cudaStreamWaitEvent, OnStream(stream), stream, event, flags);
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  GPROF_FORWARD(cudaStreamWaitEvent_ptsz, OnStream(stream), stream, event, flags);
}

cudaError_t cudaMalloc(void** ptr, size_t size) { GPROF_FORWARD(cudaMalloc, kNoStream, ptr, size); }
cudaError_t cudaFree(void* ptr) { GPROF_FORWARD(cudaFree, kNoStream, ptr); }
cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  GPROF_FORWARD(cudaMallocAsync, OnStream(stream), ptr, size, stream);
}
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  GPROF_FORWARD(cudaMallocAsync_ptsz, OnStream(stream), ptr, size, stream);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  GPROF_FORWARD(cudaFreeAsync, OnStream(stream), ptr, stream);
}
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  GPROF_FORWARD(cudaFreeAsync_ptsz, OnStream(stream), ptr, stream);
}
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  GPROF_FORWARD(cudaMallocHost, kNoStream, ptr, size);
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  GPROF_FORWARD(cudaHostAlloc, kNoStream, ptr, size, flags);
}
cudaError_t cudaFreeHost(void* ptr) { GPROF_FORWARD(cudaFreeHost, kNoStream, ptr); }
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  GPROF_FORWARD(cudaHostRegister, kNoStream, ptr, size, flags);
}
cudaError_t cudaHostUnregister(void* ptr) { GPROF_FORWARD(cudaHostUnregister, kNoStream, ptr); }

cudaError_t cudaGraphLaunch(cudaGraphExec_t graph, cudaStream_t stream) {
  GPROF_FORWARD(cudaGraphLaunch, OnStream(stream), graph, stream);
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graph, cudaStream_t stream) {
  GPROF_FORWARD(cudaGraphLaunch_ptsz, OnStream(stream), graph, stream);
}

// Creating and destroying streams and events takes the driver's locks too, and can block behind
// them.
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  GPROF_FORWARD(cudaStreamCreate, kNoStream, stream);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  GPROF_FORWARD(cudaStreamCreateWithFlags, kNoStream, stream, flags);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  GPROF_FORWARD(cudaStreamCreateWithPriority, kNoStream, stream, flags, priority);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  GPROF_FORWARD(cudaStreamDestroy, OnStream(stream), stream);
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  GPROF_FORWARD(cudaEventCreate, kNoStream, event);
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  GPROF_FORWARD(cudaEventCreateWithFlags, kNoStream, event, flags);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  GPROF_FORWARD(cudaEventDestroy, kNoStream, event);
}

}  // extern "C"
#pragma GCC visibility pop
