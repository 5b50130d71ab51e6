// storm_app: many threads on the fake CUDA runtime, for the fault tests of gprof-run.
//
//   storm_app threads N
//       N threads alive at once, each makes kCallsPerThread CUDA calls, waits for all the others
//       to have made theirs, then exits. Each prints `thread tid=<tid> calls=<n>`.
//   storm_app reuse-tid
//       a thread ("first-owner") makes 3 calls and exits; another ("second-owner") is then made to
//       get the same tid (through /proc/sys/kernel/ns_last_pid: needs CAP_SYS_ADMIN) and makes 5.
//       Prints `reused tid=<tid> first=3 second=5`, or exits 3 with the reason on stderr when the
//       tid cannot be reused here.
//   storm_app stress THREADS SECONDS [CALLS_PER_S]
//       THREADS threads make CUDA calls for SECONDS seconds, each at about CALLS_PER_S calls a
//       second (default 1000) in bursts of up to 200; prints `calls=<n>`: every CUDA call the
//       program made, all threads together.
// Exits 0; 2 with usage for bad arguments; 1 when a CUDA call or a thread start fails.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "storm_app threads N | storm_app reuse-tid | storm_app stress THREADS SECONDS [CALLS_PER_S]";
constexpr int kCallsPerThread = 3;

uint32_t Tid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

void ThreadStorm(int count) {
  std::latch done(count);
  std::vector<std::thread> threads;
  threads.reserve(size_t(count));
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&done] {
      cudaStream_t stream;
      apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
      apps::Check(fake_cuda::LaunchKernel(1, stream), "cudaLaunchKernel");
      apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
      std::printf("thread tid=%u calls=%d\n", Tid(), kCallsPerThread);
      done.arrive_and_wait();  // all alive at once
    });
  }
  for (auto& thread : threads) thread.join();
}

// Makes `calls` cudaEventQuery calls on a thread named `name`; returns its tid.
uint32_t CallsOnAThread(const char* name, int calls) {
  uint32_t tid = 0;
  std::thread([&] {
    apps::SetThreadName(name);
    tid = Tid();
    for (int i = 0; i < calls; ++i) cudaEventQuery(nullptr);
  }).join();
  return tid;
}

int ReuseTid() {
  const uint32_t first = CallsOnAThread("first-owner", 3);
  apps::SleepNs(300'000'000);  // the writer has retired the first owner's ring by now
  for (int attempt = 0; attempt < 200; ++attempt) {
    FILE* last_pid = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (last_pid == nullptr) {
      std::fprintf(stderr, "storm_app: cannot open ns_last_pid: %s\n", std::strerror(errno));
      return 3;
    }
    std::fprintf(last_pid, "%u", first - 1);
    if (std::fclose(last_pid) != 0) {
      std::fprintf(stderr, "storm_app: cannot write ns_last_pid: %s\n", std::strerror(errno));
      return 3;
    }
    // Only the thread that got the tid makes calls: another tid would be another thread's record.
    std::atomic<bool> reused{false};
    std::thread([&] {
      if (Tid() != first) return;
      reused = true;
      apps::SetThreadName("second-owner");
      for (int i = 0; i < 5; ++i) cudaEventQuery(nullptr);
    }).join();
    if (reused) {
      std::printf("reused tid=%u first=3 second=5\n", first);
      return 0;
    }
  }
  std::fprintf(stderr, "storm_app: other processes kept taking tid %u\n", first);
  return 3;
}

long Stress(int thread_count, long seconds, long calls_per_s) {
  std::atomic<long> total{0};
  std::vector<std::thread> threads;
  const uint64_t end_ns = apps::MonotonicNs() + uint64_t(seconds) * 1'000'000'000;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&total, end_ns, calls_per_s, t] {
      apps::SetThreadName("stress-" + std::to_string(t));
      long calls = 0;
      cudaStream_t stream;
      apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
      ++calls;
      const uint64_t start_ns = apps::MonotonicNs();
      while (apps::MonotonicNs() < end_ns) {
        for (int i = 0; i < 100; ++i) {  // 200 calls a burst
          apps::Check(fake_cuda::LaunchKernel(0, stream), "cudaLaunchKernel");
          cudaStreamQuery(stream);
          calls += 2;
        }
        // Paced: the next burst when the thread is back on its rate.
        const uint64_t due_ns = start_ns + uint64_t(calls) * 1'000'000'000 / uint64_t(calls_per_s);
        if (due_ns > apps::MonotonicNs()) apps::SleepNs(due_ns - apps::MonotonicNs());
      }
      apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
      calls += 2;
      total += calls;
    });
  }
  for (auto& thread : threads) thread.join();
  return total.load();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "threads") == 0) {
    ThreadStorm(int(apps::ParseInt(argv[2], 1, 4000, kUsage)));
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "reuse-tid") == 0) return ReuseTid();
  if ((argc == 4 || argc == 5) && std::strcmp(argv[1], "stress") == 0) {
    const int threads = int(apps::ParseInt(argv[2], 1, 1000, kUsage));
    const long seconds = apps::ParseInt(argv[3], 0, 7 * 24 * 3600, kUsage);
    const long rate = argc == 5 ? apps::ParseInt(argv[4], 1, 100'000'000, kUsage) : 1000;
    std::printf("calls=%ld\n", Stress(threads, seconds, rate));
    return 0;
  }
  std::fprintf(stderr, "usage: %s\n", kUsage);
  return 2;
}
