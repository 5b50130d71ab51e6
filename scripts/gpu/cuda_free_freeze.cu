// The driver-lock freeze of the design brief (section 6), on a real GPU: launcher threads launch
// tiny kernels on their own non-blocking streams while a holder thread queues a long kernel and
// calls cudaFree (or, with --holder freehost, cudaFreeHost), which waits for the GPU to go idle
// inside the driver; every launch issued meanwhile blocks. Like tests/apps/freeze_app, it writes the calls it measured at >= 1 ms to
// --calls-out, as ground truth for gprof-run's report:
//   call tid=<tid> thread=<name> api=<cudaLaunchKernel|cudaFree> enter_ns=<ns> exit_ns=<ns>
#include <cuda_runtime.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void Spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void Tiny(float* data) { data[threadIdx.x] += 1.0f; }

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  fprintf(stderr, "cuda_free_freeze: %s: %s\n", what, cudaGetErrorString(error));
  exit(1);
}

struct SlowCall {
  long tid;
  std::string thread;
  const char* api;
  uint64_t enter_ns, exit_ns;
};
std::mutex g_mutex;
std::vector<SlowCall> g_slow;

template <typename Call>
void Timed(const std::string& thread, const char* api, Call call) {
  uint64_t enter = NowNs();
  Check(call(), api);
  uint64_t exit = NowNs();
  if (exit - enter >= 1000000) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_slow.push_back({syscall(SYS_gettid), thread, api, enter, exit});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int launchers = 3, rounds = 3, long_ms = 30;
  const char* calls_out = nullptr;
  bool free_host = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--calls-out")) calls_out = argv[i + 1];
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--long-ms")) long_ms = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--holder")) free_host = !strcmp(argv[i + 1], "freehost");
  }
  int clock_khz = 0;
  Check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
  Check(cudaFree(nullptr), "cudaFree(0)");  // creates the context before the threads start

  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < launchers; ++i) {
    threads.emplace_back([&, i] {
      std::string name = "launcher-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      cudaStream_t stream;
      Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      float* data;
      Check(cudaMalloc(&data, 32 * sizeof(float)), "cudaMalloc");
      while (!stop.load()) {
        Timed(name, "cudaLaunchKernel", [&] {
          Tiny<<<1, 32, 0, stream>>>(data);
          return cudaGetLastError();
        });
        usleep(500);
      }
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
  }
  std::thread holder([&] {
    pthread_setname_np(pthread_self(), "holder");
    cudaStream_t stream;
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int round = 0; round < rounds; ++round) {
      usleep(100000);
      void* buffer;
      if (free_host) {
        Check(cudaMallocHost(&buffer, 64 << 20), "cudaMallocHost");
      } else {
        Check(cudaMalloc(&buffer, 64 << 20), "cudaMalloc");
      }
      Spin<<<1, 1, 0, stream>>>(static_cast<long long>(long_ms) * clock_khz);
      if (free_host) {
        Timed("holder", "cudaFreeHost", [&] { return cudaFreeHost(buffer); });
      } else {
        Timed("holder", "cudaFree", [&] { return cudaFree(buffer); });
      }
    }
    usleep(100000);
  });
  holder.join();
  stop.store(true);
  for (auto& thread : threads) thread.join();

  FILE* out = calls_out ? fopen(calls_out, "w") : nullptr;
  for (const auto& call : g_slow) {
    if (out) {
      fprintf(out, "call tid=%ld thread=%s api=%s enter_ns=%llu exit_ns=%llu\n", call.tid,
              call.thread.c_str(), call.api, (unsigned long long)call.enter_ns,
              (unsigned long long)call.exit_ns);
    }
  }
  if (out) fclose(out);
  printf("cuda_free_freeze: %zu calls took >= 1 ms\n", g_slow.size());
  return 0;
}
