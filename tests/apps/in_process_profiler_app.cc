// in_process_profiler_app: a program that starts its own CUPTI profiler after a few CUDA calls, as
// torch.profiler (Kineto) does inside a PyTorch program: it subscribes to CUPTI and registers its
// own activity buffers. Under gprof-run's CUPTI capture the subscription is refused; the program
// prints what CUPTI answered (`subscribe=<CUptiResult>`) and goes on, as Kineto does.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>

#include "tests/apps/app_common.h"

namespace {

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, 1 << 16));
  *size = 1 << 16;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t) {
  free(buffer);
}

}  // namespace

int main() {
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  apps::Check(fake_cuda::LaunchKernel(50, stream), "cudaLaunchKernel");
  CUpti_SubscriberHandle subscriber;
  CUptiResult subscribed = cuptiSubscribe(&subscriber, OnCallback, nullptr);
  std::printf("subscribe=%d\n", static_cast<int>(subscribed));
  cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted);
  apps::Check(fake_cuda::LaunchKernel(50, stream), "cudaLaunchKernel");
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return 0;
}
