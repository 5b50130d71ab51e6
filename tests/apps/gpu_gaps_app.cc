// gpu_gaps_app: programs whose GPU goes idle for reasons the report must name, on the fake CUDA
// runtime (its one GPU runs every stream's work in one queue).
//
//   streams      --threads N --rounds R: N threads ("decode-<i>"), each on its own stream, loop R
//                times: decode on the CPU (spin 1-4 ms, then sleep 1-3 ms, varied by thread and
//                round), then launch a 300 us kernel. Streams are idle most of the time the GPU
//                runs the others, and the GPU itself is idle when all threads decode at once.
//   cpu-between  a thread ("worker") launches a kernel, computes on the CPU for 60 ms outside any
//                CUDA call, then queues a copy with cudaMemcpyAsync: the copy's call only ends
//                the GPU's wait, the thread's time went to computing.
//   lazy-module  a thread ("loader") runs a kernel, then launches the first kernel of a module
//                the driver loads on first use (fake_cuda::kInLazyModule: 40 ms on CPU inside the
//                launch), then a second kernel of that module (already loaded).
//   graph        a thread ("capturer") captures 5 launches on a stream into a CUDA graph, then
//                launches the graph 3 times: 5 launches captured, 15 kernels run by graph launches.
// Every mode ends with cudaDeviceSynchronize and exits 0; a failed call exits 1, bad usage 2.
#include <cstring>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "gpu_gaps_app streams [--threads N] [--rounds R] | cpu-between | lazy-module | graph";

void Spin(uint64_t duration_ns) {
  const uint64_t end_ns = apps::MonotonicNs() + duration_ns;
  volatile uint64_t sink = 0;
  while (apps::MonotonicNs() < end_ns) sink = sink + 1;
}

cudaStream_t NewStream() {
  cudaStream_t stream;
  apps::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags");
  return stream;
}

void Decoder(int index, int rounds) {
  apps::SetThreadName("decode-" + std::to_string(index));
  cudaStream_t stream = NewStream();
  for (int round = 0; round < rounds; ++round) {
    const uint64_t vary = uint64_t((index * 7 + round * 3) % 4);
    Spin((1 + vary) * 1'000'000);
    apps::SleepNs((1 + (vary + 1) % 3) * 1'000'000);
    apps::Check(fake_cuda::LaunchKernel(300, stream), "cudaLaunchKernel");
  }
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void Streams(int threads, int rounds) {
  std::vector<std::thread> decoders;
  for (int i = 0; i < threads; ++i) decoders.emplace_back(Decoder, i, rounds);
  for (std::thread& decoder : decoders) decoder.join();
}

void CpuBetween() {
  apps::SetThreadName("worker");
  cudaStream_t stream = NewStream();
  void* device = nullptr;
  apps::Check(cudaMalloc(&device, 1 << 20), "cudaMalloc");
  static char host[4096];
  apps::Check(fake_cuda::LaunchKernel(2000, stream), "cudaLaunchKernel");
  Spin(60'000'000);
  apps::Check(cudaMemcpyAsync(device, host, sizeof host, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync");
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void LazyModule() {
  apps::SetThreadName("loader");
  cudaStream_t stream = NewStream();
  apps::Check(fake_cuda::LaunchKernel(2000, stream), "cudaLaunchKernel");
  apps::Check(fake_cuda::LaunchKernel(500 | fake_cuda::kInLazyModule, stream), "cudaLaunchKernel");
  apps::Check(fake_cuda::LaunchKernel(500 | fake_cuda::kInLazyModule, stream), "cudaLaunchKernel");
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void Graph() {
  apps::SetThreadName("capturer");
  cudaStream_t stream = NewStream();
  apps::Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
              "cudaStreamBeginCapture");
  for (int i = 0; i < 5; ++i) apps::Check(fake_cuda::LaunchKernel(200, stream), "cudaLaunchKernel");
  cudaGraph_t graph;
  apps::Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  apps::Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int i = 0; i < 3; ++i) apps::Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  apps::Check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  apps::Check(cudaGraphDestroy(graph), "cudaGraphDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  apps::PrintStackOnCrash();
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const char* mode = argv[1];
  if (std::strcmp(mode, "streams") == 0) {
    int threads = 4, rounds = 40;
    for (int i = 2; i < argc; i += 2) {
      if (i + 1 == argc) {
        std::fprintf(stderr, "usage: %s\n", kUsage);
        return 2;
      }
      if (std::strcmp(argv[i], "--threads") == 0) {
        threads = int(apps::ParseInt(argv[i + 1], 1, 64, kUsage));
      } else if (std::strcmp(argv[i], "--rounds") == 0) {
        rounds = int(apps::ParseInt(argv[i + 1], 1, 100'000, kUsage));
      } else {
        std::fprintf(stderr, "usage: %s\n", kUsage);
        return 2;
      }
    }
    Streams(threads, rounds);
  } else if (std::strcmp(mode, "cpu-between") == 0 && argc == 2) {
    CpuBetween();
  } else if (std::strcmp(mode, "lazy-module") == 0 && argc == 2) {
    LazyModule();
  } else if (std::strcmp(mode, "graph") == 0 && argc == 2) {
    Graph();
  } else {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return 0;
}
