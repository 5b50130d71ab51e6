// freeze_app: the freeze of design.md sections 1.2 and 6, on the fake CUDA runtime.
//
// Launcher threads ("launcher-<i>") each launch a 20 us kernel on their own stream every ~0.5 ms.
// A "holder" thread, each round (~100 ms apart), launches a long kernel, then calls
// cudaDeviceSynchronize (--holder sync: holds the driver lock asleep) or cudaFree (--holder free:
// holds it spinning on-CPU) until the GPU drains: every launch issued meanwhile blocks until then.
//
// --calls-out FILE receives, as ground truth for a profiler's report, one line per CUDA call of any
// thread that took >= 1 ms (the holder's own calls included), ordered by exit time:
//   call tid=<kernel tid> thread=<name> api=<function> enter_ns=<CLOCK_MONOTONIC ns> exit_ns=<ns>
// The file is written when the program ends; stdout gets a short summary.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "freeze_app [--launchers N] [--rounds R] [--long-kernel-ms M] [--holder sync|free] "
    "[--calls-out FILE]";
constexpr uint32_t kShortKernelUs = 20;
constexpr uint64_t kLaunchIntervalNs = 500'000;
constexpr uint64_t kRoundSpacingNs = 100'000'000;
constexpr uint64_t kSlowCallNs = 1'000'000;

enum class Holder { kSync, kFree };

struct Options {
  int launchers = 3;
  int rounds = 3;
  uint32_t long_kernel_ms = 40;
  Holder holder = Holder::kSync;
  const char* calls_out = nullptr;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "freeze_app: %s needs a value\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
    const char* value = argv[++i];
    if (std::strcmp(flag, "--launchers") == 0) {
      options.launchers = int(apps::ParseInt(value, 1, 64, kUsage));
    } else if (std::strcmp(flag, "--rounds") == 0) {
      options.rounds = int(apps::ParseInt(value, 1, 1000, kUsage));
    } else if (std::strcmp(flag, "--long-kernel-ms") == 0) {
      options.long_kernel_ms = uint32_t(apps::ParseInt(value, 1, 60'000, kUsage));
    } else if (std::strcmp(flag, "--holder") == 0 && std::strcmp(value, "sync") == 0) {
      options.holder = Holder::kSync;
    } else if (std::strcmp(flag, "--holder") == 0 && std::strcmp(value, "free") == 0) {
      options.holder = Holder::kFree;
    } else if (std::strcmp(flag, "--calls-out") == 0) {
      options.calls_out = value;
    } else {
      std::fprintf(stderr, "freeze_app: bad option %s %s\nusage: %s\n", flag, value, kUsage);
      std::exit(2);
    }
  }
  return options;
}

struct SlowCall {
  pid_t tid;
  std::string thread;
  const char* api;
  uint64_t enter_ns;
  uint64_t exit_ns;
};

// Times CUDA calls and keeps those that took >= 1 ms, from all threads.
class CallTimer {
 public:
  // Makes one CUDA call, exits on failure, logs it if slow; returns its duration.
  template <typename Call>
  uint64_t Time(const std::string& thread, const char* api, Call&& call) {
    const uint64_t enter_ns = apps::MonotonicNs();
    const cudaError_t error = call();
    const uint64_t exit_ns = apps::MonotonicNs();
    apps::Check(error, api);
    if (exit_ns - enter_ns >= kSlowCallNs) {
      std::lock_guard lock(mutex_);
      slow_calls_.push_back({gettid(), thread, api, enter_ns, exit_ns});
    }
    return exit_ns - enter_ns;
  }

  std::vector<SlowCall> SlowCalls() const {
    std::lock_guard lock(mutex_);
    return slow_calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<SlowCall> slow_calls_;
};

// Timed like every other call: on a busy machine a stream's creation waits for the driver lock too.
void CreateStream(const std::string& thread, CallTimer& timer, cudaStream_t* stream) {
  timer.Time(thread, "cudaStreamCreateWithFlags",
             [&] { return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking); });
}

struct LauncherStats {
  uint64_t launches = 0;
  uint64_t longest_ns = 0;
};

void RunLauncher(int index, const std::atomic<bool>& stop, CallTimer& timer, LauncherStats& stats) {
  const std::string name = "launcher-" + std::to_string(index);
  apps::SetThreadName(name);
  cudaStream_t stream;
  CreateStream(name, timer, &stream);
  while (!stop.load()) {
    const uint64_t took_ns = timer.Time(
        name, "cudaLaunchKernel", [&] { return fake_cuda::LaunchKernel(kShortKernelUs, stream); });
    ++stats.launches;
    stats.longest_ns = std::max(stats.longest_ns, took_ns);
    apps::SleepNs(kLaunchIntervalNs);
  }
  timer.Time(name, "cudaStreamSynchronize", [&] { return cudaStreamSynchronize(stream); });
  timer.Time(name, "cudaStreamDestroy", [&] { return cudaStreamDestroy(stream); });
}

// Returns the duration of each round's holding call.
std::vector<uint64_t> RunHolder(const Options& options, CallTimer& timer) {
  const std::string name = "holder";
  apps::SetThreadName(name);
  cudaStream_t stream;
  CreateStream(name, timer, &stream);
  std::vector<uint64_t> hold_ns;
  for (int round = 0; round < options.rounds; ++round) {
    apps::SleepNs(kRoundSpacingNs);
    void* buffer = nullptr;
    if (options.holder == Holder::kFree) {
      timer.Time(name, "cudaMalloc", [&] { return cudaMalloc(&buffer, 64 << 20); });
    }
    timer.Time(name, "cudaLaunchKernel",
               [&] { return fake_cuda::LaunchKernel(options.long_kernel_ms * 1000, stream); });
    if (options.holder == Holder::kSync) {
      hold_ns.push_back(
          timer.Time(name, "cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }));
    } else {
      hold_ns.push_back(timer.Time(name, "cudaFree", [&] { return cudaFree(buffer); }));
    }
  }
  apps::SleepNs(kRoundSpacingNs);  // launchers keep going after the last freeze
  timer.Time(name, "cudaStreamDestroy", [&] { return cudaStreamDestroy(stream); });
  return hold_ns;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  FILE* calls_out = nullptr;
  if (options.calls_out != nullptr && (calls_out = std::fopen(options.calls_out, "w")) == nullptr) {
    std::fprintf(stderr, "freeze_app: cannot write %s: %s\n", options.calls_out,
                 std::strerror(errno));
    return 2;
  }

  CallTimer timer;
  std::atomic<bool> stop{false};
  std::vector<LauncherStats> stats(size_t(options.launchers));
  std::vector<std::thread> launchers;
  for (int i = 0; i < options.launchers; ++i) {
    launchers.emplace_back(RunLauncher, i, std::cref(stop), std::ref(timer),
                           std::ref(stats[size_t(i)]));
  }
  std::vector<uint64_t> hold_ns;
  std::thread holder([&] { hold_ns = RunHolder(options, timer); });
  holder.join();
  stop.store(true);
  for (std::thread& launcher : launchers) launcher.join();

  std::vector<SlowCall> slow_calls = timer.SlowCalls();
  std::sort(slow_calls.begin(), slow_calls.end(),
            [](const SlowCall& a, const SlowCall& b) { return a.exit_ns < b.exit_ns; });
  if (calls_out != nullptr) {
    for (const SlowCall& call : slow_calls) {
      std::fprintf(calls_out, "call tid=%d thread=%s api=%s enter_ns=%llu exit_ns=%llu\n",
                   int(call.tid), call.thread.c_str(), call.api,
                   static_cast<unsigned long long>(call.enter_ns),
                   static_cast<unsigned long long>(call.exit_ns));
    }
    if (std::fclose(calls_out) != 0) {
      std::fprintf(stderr, "freeze_app: cannot write %s: %s\n", options.calls_out,
                   std::strerror(errno));
      return 2;
    }
  }

  const char* holder_api = options.holder == Holder::kSync ? "cudaDeviceSynchronize" : "cudaFree";
  std::printf("freeze_app: holder=%s launchers=%d rounds=%d long_kernel_ms=%u\n",
              options.holder == Holder::kSync ? "sync" : "free", options.launchers, options.rounds,
              options.long_kernel_ms);
  for (size_t round = 0; round < hold_ns.size(); ++round) {
    std::printf("round %zu: %s took %.1f ms\n", round + 1, holder_api,
                double(hold_ns[round]) / 1e6);
  }
  uint64_t launches = 0, longest_ns = 0;
  for (const LauncherStats& launcher : stats) {
    launches += launcher.launches;
    longest_ns = std::max(longest_ns, launcher.longest_ns);
  }
  const auto blocked = std::count_if(slow_calls.begin(), slow_calls.end(),
                                     [](const SlowCall& call) { return call.thread != "holder"; });
  std::printf("launches: %llu, blocked >= 1 ms: %ld, longest %.1f ms\n",
              static_cast<unsigned long long>(launches), long(blocked), double(longest_ns) / 1e6);
  return 0;
}
