// capture_app: a program that asks to be recorded only in parts (--capture-range), on the fake
// CUDA runtime.
//
// A "worker" thread launches a 50 us kernel and synchronizes every ~2 ms for the whole run. The
// main thread alternates phases of --phase-ms: outside, inside, outside, ..., outside (--windows
// inside phases). Each phase it allocates and frees device memory and sleeps the rest of the phase
// in one nanosleep (one long off-CPU interval per phase). Between phases it switches recording:
// cudaProfilerStart/cudaProfilerStop, or with --start-cmd/--stop-cmd those shell commands
// (`gprof-run start DIR`), run to their end, or with --nvtx NAME an NVTX range NAME pushed and
// popped (nested in a range "run" that spans every phase, and holding a range "inner" of its own
// in each inside phase, so that only NAME's own pop ends it).
//
// --times-out FILE receives, as ground truth, one line per inside phase:
//   inside <CLOCK_MONOTONIC ns after the switch on> <ns before the switch off>
//
// capture_app --bench-calls N makes N cudaStreamQuery calls in a row instead, and prints
// `calls=N elapsed_ns=T` (scripts/bench/capture_cost.py: the cost of a call outside a window).
#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "capture_app [--windows N] [--phase-ms MS] [--start-cmd CMD --stop-cmd CMD] "
    "[--nvtx NAME] [--times-out FILE] | capture_app --bench-calls N";

struct Options {
  int windows = 3;
  uint64_t phase_ms = 400;
  const char* start_cmd = nullptr;
  const char* stop_cmd = nullptr;
  const char* times_out = nullptr;
  const char* nvtx = nullptr;
  long bench_calls = 0;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "capture_app: %s needs a value\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
    const char* value = argv[++i];
    if (std::strcmp(flag, "--windows") == 0) {
      options.windows = int(apps::ParseInt(value, 1, 100, kUsage));
    } else if (std::strcmp(flag, "--phase-ms") == 0) {
      options.phase_ms = uint64_t(apps::ParseInt(value, 50, 60'000, kUsage));
    } else if (std::strcmp(flag, "--start-cmd") == 0) {
      options.start_cmd = value;
    } else if (std::strcmp(flag, "--stop-cmd") == 0) {
      options.stop_cmd = value;
    } else if (std::strcmp(flag, "--bench-calls") == 0) {
      options.bench_calls = apps::ParseInt(value, 1, 1'000'000'000, kUsage);
    } else if (std::strcmp(flag, "--nvtx") == 0) {
      options.nvtx = value;
    } else if (std::strcmp(flag, "--times-out") == 0) {
      options.times_out = value;
    } else {
      std::fprintf(stderr, "capture_app: unknown option %s\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
  }
  if ((options.start_cmd == nullptr) != (options.stop_cmd == nullptr)) {
    std::fprintf(stderr, "capture_app: --start-cmd and --stop-cmd go together\n");
    std::exit(2);
  }
  return options;
}

void Switch(const Options& options, bool on) {
  if (options.nvtx != nullptr) {
    if (on) {
      nvtxRangePushA(options.nvtx);
      nvtxRangePushA("inner");
    } else {
      nvtxRangePop();  // inner
      nvtxRangePop();
    }
    return;
  }
  if (options.start_cmd == nullptr) {
    apps::Check(on ? cudaProfilerStart() : cudaProfilerStop(),
                on ? "cudaProfilerStart" : "cudaProfilerStop");
    return;
  }
  if (std::system(on ? options.start_cmd : options.stop_cmd) != 0) {
    std::fprintf(stderr, "capture_app: '%s' failed\n", on ? options.start_cmd : options.stop_cmd);
    std::exit(1);
  }
}

// One phase of the main thread: a little CUDA work, then one sleep to the phase's end.
void Phase(uint64_t phase_ns) {
  uint64_t end = apps::MonotonicNs() + phase_ns;
  void* memory = nullptr;
  apps::Check(cudaMalloc(&memory, 4096), "cudaMalloc");
  apps::Check(cudaFree(memory), "cudaFree");
  uint64_t now = apps::MonotonicNs();
  if (now < end) apps::SleepNs(end - now);
}

int BenchCalls(long calls) {
  cudaStream_t stream = nullptr;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  uint64_t start = apps::MonotonicNs();
  for (long i = 0; i < calls; ++i) apps::Check(cudaStreamQuery(stream), "cudaStreamQuery");
  uint64_t elapsed = apps::MonotonicNs() - start;
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  std::printf("calls=%ld elapsed_ns=%llu\n", calls, static_cast<unsigned long long>(elapsed));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  apps::PrintStackOnCrash();
  Options options = ParseOptions(argc, argv);
  if (options.bench_calls > 0) return BenchCalls(options.bench_calls);
  std::atomic<bool> done{false};
  std::thread worker([&] {
    apps::SetThreadName("worker");
    cudaStream_t stream = nullptr;
    apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
    while (!done.load()) {
      apps::Check(fake_cuda::LaunchKernel(50, stream), "cudaLaunchKernel");
      apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      apps::SleepNs(2'000'000);
    }
    apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  });
  const uint64_t phase_ns = options.phase_ms * 1'000'000;
  std::string times;
  if (options.nvtx != nullptr) nvtxRangePushA("run");
  for (int window = 0; window < options.windows; ++window) {
    Phase(phase_ns);  // outside
    Switch(options, true);
    uint64_t on_ns = apps::MonotonicNs();
    Phase(phase_ns);  // inside
    uint64_t off_ns = apps::MonotonicNs();
    Switch(options, false);
    times += "inside " + std::to_string(on_ns) + " " + std::to_string(off_ns) + "\n";
  }
  Phase(phase_ns);  // outside, to the end
  if (options.nvtx != nullptr) nvtxRangePop();  // run
  done.store(true);
  worker.join();
  if (options.times_out != nullptr) {
    FILE* out = std::fopen(options.times_out, "w");
    if (out == nullptr || std::fputs(times.c_str(), out) < 0 || std::fclose(out) != 0) return 1;
  }
  std::printf("capture_app: %d windows\n", options.windows);
  return 0;
}
