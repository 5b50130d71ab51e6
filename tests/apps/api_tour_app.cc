// api_tour_app: calls each CUDA runtime function that gprof-run must record once, in a fixed order,
// on one stream it creates, and prints one line per call: `api=<function> stream=<0x... or ->`.
// The injected library's test compares those lines with what it recorded. With the argument
// `_exit` it leaves through _exit(0), as multiprocessing workers do, skipping exit handlers. With
// `burst N` it then makes N cudaEventQuery calls at a million a second (the rate of a launch-bound
// PyTorch loop, seven API calls per operation, under CUPTI) and prints `burst=N`.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/apps/app_common.h"

namespace {

cudaStream_t g_stream = nullptr;

void Say(const char* api, bool on_stream) {
  if (on_stream) {
    std::printf("api=%s stream=%p\n", api, static_cast<void*>(g_stream));
  } else {
    std::printf("api=%s stream=-\n", api);
  }
}

}  // namespace

int main(int argc, char** argv) {
  apps::Check(cudaStreamCreate(&g_stream), "cudaStreamCreate");
  Say("cudaStreamCreate", false);
  cudaEvent_t event;
  apps::Check(cudaEventCreate(&event), "cudaEventCreate");
  Say("cudaEventCreate", false);
  void* device = nullptr;
  void* host = nullptr;
  void* pinned = nullptr;
  static char registered[4096];

  apps::Check(cudaMalloc(&device, 1 << 20), "cudaMalloc");
  Say("cudaMalloc", false);
  apps::Check(cudaMallocHost(&host, 1 << 16), "cudaMallocHost");
  Say("cudaMallocHost", false);
  apps::Check(cudaHostAlloc(&pinned, 1 << 16, cudaHostAllocDefault), "cudaHostAlloc");
  Say("cudaHostAlloc", false);
  apps::Check(cudaHostRegister(registered, sizeof(registered), cudaHostRegisterDefault),
              "cudaHostRegister");
  Say("cudaHostRegister", false);
  apps::Check(fake_cuda::LaunchKernel(100, g_stream), "cudaLaunchKernel");
  Say("cudaLaunchKernel", true);
  apps::Check(cudaMemcpy(device, host, 4096, cudaMemcpyHostToDevice), "cudaMemcpy");
  Say("cudaMemcpy", false);
  apps::Check(cudaMemcpyAsync(host, device, 4096, cudaMemcpyDeviceToHost, g_stream),
              "cudaMemcpyAsync");
  Say("cudaMemcpyAsync", true);
  apps::Check(cudaMemset(device, 0, 4096), "cudaMemset");
  Say("cudaMemset", false);
  apps::Check(cudaMemsetAsync(device, 1, 4096, g_stream), "cudaMemsetAsync");
  Say("cudaMemsetAsync", true);
  apps::Check(cudaEventRecord(event, g_stream), "cudaEventRecord");
  Say("cudaEventRecord", true);
  cudaError_t query = cudaEventQuery(event);
  if (query != cudaSuccess && query != cudaErrorNotReady) apps::Check(query, "cudaEventQuery");
  if (query == cudaSuccess) {
    Say("cudaEventQuery", false);
  } else {
    std::printf("api=cudaEventQuery stream=- error=%d\n", static_cast<int>(query));
  }
  apps::Check(cudaStreamWaitEvent(g_stream, event, 0), "cudaStreamWaitEvent");
  Say("cudaStreamWaitEvent", true);
  apps::Check(cudaEventSynchronize(event), "cudaEventSynchronize");
  Say("cudaEventSynchronize", false);
  apps::Check(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
  Say("cudaStreamSynchronize", true);

  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  apps::Check(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal),
              "cudaStreamBeginCapture");
  apps::Check(fake_cuda::LaunchKernel(50, g_stream), "cudaLaunchKernel");  // captured
  Say("cudaLaunchKernel", true);
  apps::Check(cudaStreamEndCapture(g_stream, &graph), "cudaStreamEndCapture");
  apps::Check(cudaGraphInstantiate(&graph_exec, graph, 0), "cudaGraphInstantiate");
  apps::Check(cudaGraphLaunch(graph_exec, g_stream), "cudaGraphLaunch");
  Say("cudaGraphLaunch", true);

  apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Say("cudaDeviceSynchronize", false);
  apps::Check(cudaHostUnregister(registered), "cudaHostUnregister");
  Say("cudaHostUnregister", false);
  apps::Check(cudaFreeHost(pinned), "cudaFreeHost");
  Say("cudaFreeHost", false);
  apps::Check(cudaFree(device), "cudaFree");
  Say("cudaFree", false);
  // A failing call is recorded with its error code.
  cudaError_t bad = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x1234));
  std::printf("api=cudaStreamSynchronize stream=0x1234 error=%d\n", static_cast<int>(bad));
  cudaGetLastError();
  if (argc > 2 && std::strcmp(argv[1], "burst") == 0) {
    long calls = std::atol(argv[2]);
    const uint64_t start_ns = apps::MonotonicNs();
    for (long i = 0; i < calls; ++i) {
      cudaEventQuery(event);
      if (i % 1000 == 999) {
        while (apps::MonotonicNs() - start_ns < uint64_t(i + 1) * 1000) {
        }
      }
    }
    std::printf("burst=%ld\n", calls);
  }
  if (argc > 1 && std::strcmp(argv[1], "_exit") == 0) {
    std::fflush(stdout);
    _exit(0);
  }
  return 0;
}
