// flight_app: a long calm run that then goes wrong, for --flight-recorder, on the fake CUDA
// runtime.
//
// A "worker" thread launches a 50 us kernel and synchronizes every ~5 ms; a "calls" thread
// allocates and frees device memory every ~100 ms. After --calm-s seconds:
//   --freeze-ms MS   the worker launches a kernel of MS and waits for it (cudaStreamSynchronize
//                    takes MS): a freeze inside CUDA;
//   --block-ms MS    the main thread holds a mutex for MS that the worker and the calls thread
//                    then wait for: a freeze outside CUDA;
//   --silent-s SEC   then both threads stop calling CUDA for SEC (they sleep): a hang;
//   --after-s SEC    then both go on calmly for SEC more, and the program ends.
// --period-us US sets the worker's pause between its calls (default 5000; 0: none, as many calls
// as the fake runtime takes: scripts/bench/flight_cost.py's load).
// --idle-threads N adds a pool of N threads that wait on purpose: each makes a few CUDA calls at
// its start, then waits on a queue that the main thread feeds an item every 400 ms, and makes
// one call per item (a DataLoader's consumers, an idle pool).
// --times-out FILE receives, as ground truth, lines of CLOCK_MONOTONIC ns:
//   freeze <before the synchronize> <after it>
//   block <the mutex taken> <released>
//   silent <start> <end>
//   end <ns>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "flight_app --calm-s SEC [--freeze-ms MS] [--block-ms MS] [--silent-s SEC] [--after-s SEC] "
    "[--period-us US] [--idle-threads N] [--times-out FILE]";

struct Options {
  long calm_s = 10;
  long freeze_ms = 0;
  long block_ms = 0;
  long idle_threads = 0;
  long silent_s = 0;
  long after_s = 0;
  long period_us = 5000;
  const char* times_out = nullptr;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "flight_app: %s needs a value\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
    const char* value = argv[++i];
    if (std::strcmp(flag, "--calm-s") == 0) {
      options.calm_s = apps::ParseInt(value, 0, 100'000, kUsage);
    } else if (std::strcmp(flag, "--freeze-ms") == 0) {
      options.freeze_ms = apps::ParseInt(value, 0, 600'000, kUsage);
    } else if (std::strcmp(flag, "--block-ms") == 0) {
      options.block_ms = apps::ParseInt(value, 0, 600'000, kUsage);
    } else if (std::strcmp(flag, "--idle-threads") == 0) {
      options.idle_threads = apps::ParseInt(value, 0, 64, kUsage);
    } else if (std::strcmp(flag, "--silent-s") == 0) {
      options.silent_s = apps::ParseInt(value, 0, 100'000, kUsage);
    } else if (std::strcmp(flag, "--after-s") == 0) {
      options.after_s = apps::ParseInt(value, 0, 100'000, kUsage);
    } else if (std::strcmp(flag, "--period-us") == 0) {
      options.period_us = apps::ParseInt(value, 0, 10'000'000, kUsage);
    } else if (std::strcmp(flag, "--times-out") == 0) {
      options.times_out = value;
    } else {
      std::fprintf(stderr, "flight_app: unknown option %s\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
  }
  return options;
}

// --block-ms: while `blocking` holds, a thread that sees it waits for `gate` (the main thread
// holds it).
struct Gate {
  std::mutex mutex;
  std::atomic<bool> blocking{false};
  void PassWhenOpen() {
    if (blocking.load()) {
      std::lock_guard<std::mutex> wait_here(mutex);
    }
  }
};

void MallocFree() {
  void* memory = nullptr;
  apps::Check(cudaMalloc(&memory, 4096), "cudaMalloc");
  apps::Check(cudaFree(memory), "cudaFree");
}

// --idle-threads: a queue that the main thread feeds and a pool that takes from it.
struct IdlePool {
  std::mutex mutex;
  std::condition_variable ready;
  long items = 0;
  bool done = false;
  void Consume() {
    for (int i = 0; i < 3; ++i) MallocFree();
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      ready.wait(lock, [&] { return items > 0 || done; });
      if (done) return;
      --items;
      lock.unlock();
      MallocFree();
      lock.lock();
    }
  }
};

// Calls CUDA calmly while `calm` holds, sleeping while it does not, until `done`.
void CalmLoop(const std::atomic<bool>& calm, const std::atomic<bool>& done, uint64_t period_ns,
              bool kernels, Gate* gate) {
  cudaStream_t stream = nullptr;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  while (!done.load()) {
    gate->PassWhenOpen();
    if (calm.load()) {
      if (kernels) {
        apps::Check(fake_cuda::LaunchKernel(50, stream), "cudaLaunchKernel");
        apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      } else {
        MallocFree();
      }
    }
    apps::SleepNs(period_ns);
  }
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  apps::PrintStackOnCrash();
  Options options = ParseOptions(argc, argv);
  std::atomic<bool> calm{true}, done{false}, freeze{false};
  std::atomic<uint64_t> freeze_start{0}, freeze_end{0};
  Gate gate;
  IdlePool pool;
  std::vector<std::thread> idle;
  for (long i = 0; i < options.idle_threads; ++i) {
    idle.emplace_back([&pool, i] {
      apps::SetThreadName("idle-" + std::to_string(i));
      pool.Consume();
    });
  }
  std::thread worker([&] {
    apps::SetThreadName("worker");
    cudaStream_t stream = nullptr;
    apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
    while (!done.load()) {
      gate.PassWhenOpen();
      if (freeze.exchange(false)) {
        apps::Check(fake_cuda::LaunchKernel(uint32_t(options.freeze_ms * 1000), stream),
                    "cudaLaunchKernel");
        freeze_start.store(apps::MonotonicNs());
        apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        freeze_end.store(apps::MonotonicNs());
      } else if (calm.load()) {
        apps::Check(fake_cuda::LaunchKernel(50, stream), "cudaLaunchKernel");
        apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      if (options.period_us > 0) apps::SleepNs(uint64_t(options.period_us) * 1000);
    }
    apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  });
  std::thread main_calls([&] {
    apps::SetThreadName("calls");
    CalmLoop(calm, done, 100'000'000, /*kernels=*/false, &gate);
  });
  // Feeds the idle pool while the main thread sleeps.
  auto sleep_feeding = [&](uint64_t ns) {
    for (uint64_t end = apps::MonotonicNs() + ns, now; (now = apps::MonotonicNs()) < end;) {
      apps::SleepNs(std::min<uint64_t>(end - now, 400'000'000));
      if (options.idle_threads == 0) continue;
      std::lock_guard<std::mutex> lock(pool.mutex);
      ++pool.items;
      pool.ready.notify_one();
    }
  };

  std::string times;
  sleep_feeding(uint64_t(options.calm_s) * 1'000'000'000);
  if (options.block_ms > 0) {
    uint64_t start = 0, end = 0;
    {
      std::lock_guard<std::mutex> hold(gate.mutex);
      gate.blocking.store(true);
      start = apps::MonotonicNs();
      apps::SleepNs(uint64_t(options.block_ms) * 1'000'000);
      gate.blocking.store(false);
      end = apps::MonotonicNs();
    }
    times += "block " + std::to_string(start) + " " + std::to_string(end) + "\n";
  }
  if (options.freeze_ms > 0) {
    freeze.store(true);
    while (freeze_end.load() == 0) apps::SleepNs(1'000'000);
    times += "freeze " + std::to_string(freeze_start.load()) + " " +
             std::to_string(freeze_end.load()) + "\n";
  }
  if (options.silent_s > 0) {
    calm.store(false);
    uint64_t start = apps::MonotonicNs();
    apps::SleepNs(uint64_t(options.silent_s) * 1'000'000'000);
    uint64_t end = apps::MonotonicNs();
    calm.store(true);
    times += "silent " + std::to_string(start) + " " + std::to_string(end) + "\n";
  }
  sleep_feeding(uint64_t(options.after_s) * 1'000'000'000);
  done.store(true);
  worker.join();
  main_calls.join();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.done = true;
    pool.ready.notify_all();
  }
  for (std::thread& each : idle) each.join();
  times += "end " + std::to_string(apps::MonotonicNs()) + "\n";
  if (options.times_out != nullptr) {
    FILE* out = std::fopen(options.times_out, "w");
    if (out == nullptr || std::fputs(times.c_str(), out) < 0 || std::fclose(out) != 0) return 1;
  }
  std::printf("flight_app: done\n");
  return 0;
}
