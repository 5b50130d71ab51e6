// static_runtime_app: a program that links the CUDA runtime statically (libcudart_static.a, as
// nvcc does by default), like a third-party binary: it exports no CUDA function and calls none
// through the PLT, so LD_PRELOAD interposition cannot see its calls; CUPTI, through the driver,
// can. It makes a fixed set of runtime calls on one stream it creates and prints one line per call,
// in order: `api=<function>`. Its driver loads CUDA_INJECTION64_PATH like any other; with no
// libcudart.so beside it, an injected library finds libcupti through GPROF_CUPTI_LIB.
#include <cstdio>

#include "tests/apps/app_common.h"

namespace {

void Call(cudaError_t error, const char* api) {
  apps::Check(error, api);
  std::printf("api=%s\n", api);
}

}  // namespace

int main() {
  cudaStream_t stream;
  cudaEvent_t event;
  void* device = nullptr;
  void* pinned = nullptr;
  Call(cudaStreamCreate(&stream), "cudaStreamCreate");
  Call(cudaEventCreate(&event), "cudaEventCreate");
  Call(cudaMalloc(&device, 1 << 20), "cudaMalloc");
  Call(cudaMallocHost(&pinned, 1 << 16), "cudaMallocHost");
  Call(cudaMemcpyAsync(device, pinned, 1 << 16, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  Call(fake_cuda::LaunchKernel(200, stream), "cudaLaunchKernel");
  Call(cudaMemsetAsync(device, 0, 4096, stream), "cudaMemsetAsync");
  Call(cudaEventRecord(event, stream), "cudaEventRecord");
  Call(cudaEventSynchronize(event), "cudaEventSynchronize");
  Call(cudaMemcpy(pinned, device, 4096, cudaMemcpyDeviceToHost), "cudaMemcpy");
  Call(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  Call(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Call(cudaFreeHost(pinned), "cudaFreeHost");
  Call(cudaFree(device), "cudaFree");
  Call(cudaEventDestroy(event), "cudaEventDestroy");
  Call(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}
