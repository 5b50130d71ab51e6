// nvtx_app: a program that says where it is through NVTX v3 (the CUDA toolkit's headers), on the
// fake CUDA runtime, with freezes inside its ranges (tests/nvtx_test.cc).
//
// Launcher threads ("launcher-<i>") loop: push "train_step" (a registered string, category 1
// named "phase"), push "forward", launch a 20 us kernel, sleep ~0.5 ms, pop, pop. A "holder"
// thread, each round (~100 ms apart), opens the start/end range "hold" in the domain "loader",
// marks "round" there, launches a long kernel and calls cudaDeviceSynchronize: the launches issued
// meanwhile block (a freeze inside "train_step > forward"). The main thread names itself with
// nvtxNameOsThreadA, holds the wide-string range "main" (nvtxRangePushW) around it all, and
// starts "never_ended" in the default domain and never ends it, and pushes "op::fake" five times
// with per-call details in its name, as PyTorch's emit_nvtx names operators.
//
// --late-library PATH: first takes NVTX_INJECTION64_PATH out of the environment, then (after
// the threads) dlopens PATH (nvtx_late_lib.cc) and runs its nvtx_late_lib_work, whose NVTX
// instance makes its first call then: one "late_library" range. The program's own instance,
// whose first call comes after the unsetenv too, stays silent.
//
// --truth FILE receives, as ground truth, one line per range name of the program, with the
// program's own count and time (taken just outside the NVTX calls) and, for "forward", the time
// its launches took when they were slow (>= 1 ms):
//   range name=<name> domain=<domain> count=<n> total_ns=<ns> slow_launch_ns=<ns>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvtx3/nvToolsExt.h"
#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "nvtx_app [--launchers N] [--rounds R] [--long-kernel-ms M] "
    "[--late-library PATH] [--truth FILE]";
constexpr uint64_t kLaunchIntervalNs = 500'000;
constexpr uint64_t kRoundSpacingNs = 100'000'000;
constexpr uint64_t kSlowCallNs = 1'000'000;

struct Options {
  int launchers = 2;
  int rounds = 2;
  uint32_t long_kernel_ms = 40;
  const char* truth = nullptr;
  const char* late_library = nullptr;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* flag = argv[i];
    const char* value = argv[i + 1];
    if (std::strcmp(flag, "--launchers") == 0) {
      options.launchers = int(apps::ParseInt(value, 1, 16, kUsage));
    } else if (std::strcmp(flag, "--rounds") == 0) {
      options.rounds = int(apps::ParseInt(value, 1, 100, kUsage));
    } else if (std::strcmp(flag, "--long-kernel-ms") == 0) {
      options.long_kernel_ms = uint32_t(apps::ParseInt(value, 1, 10'000, kUsage));
    } else if (std::strcmp(flag, "--late-library") == 0) {
      options.late_library = value;
    } else if (std::strcmp(flag, "--truth") == 0) {
      options.truth = value;
    } else {
      std::fprintf(stderr, "nvtx_app: bad option %s\nusage: %s\n", flag, kUsage);
      std::exit(2);
    }
  }
  return options;
}

struct Totals {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t slow_launch_ns = 0;
};

std::mutex g_mutex;
std::map<std::pair<std::string, std::string>, Totals> g_truth;  // by (domain, name)

void Add(const char* domain, const char* name, uint64_t duration_ns, uint64_t slow_ns = 0) {
  std::lock_guard lock(g_mutex);
  Totals& totals = g_truth[{domain, name}];
  totals.count += 1;
  totals.total_ns += duration_ns;
  totals.slow_launch_ns += slow_ns;
}

void RunLauncher(int index, const std::atomic<bool>& stop, nvtxStringHandle_t train_step) {
  apps::SetThreadName("launcher-" + std::to_string(index));
  cudaStream_t stream;
  apps::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  nvtxEventAttributes_t step{};
  step.version = NVTX_VERSION;
  step.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  step.category = 1;
  step.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  step.message.registered = train_step;
  while (!stop.load()) {
    uint64_t step_start = apps::MonotonicNs();
    nvtxRangePushEx(&step);
    uint64_t forward_start = apps::MonotonicNs();
    nvtxRangePushA("forward");
    uint64_t launch_start = apps::MonotonicNs();
    apps::Check(fake_cuda::LaunchKernel(20, stream), "cudaLaunchKernel");
    uint64_t launch_ns = apps::MonotonicNs() - launch_start;
    apps::SleepNs(kLaunchIntervalNs);
    nvtxRangePop();
    uint64_t forward_end = apps::MonotonicNs();
    nvtxRangePop();
    uint64_t step_end = apps::MonotonicNs();
    Add("", "forward", forward_end - forward_start, launch_ns >= kSlowCallNs ? launch_ns : 0);
    Add("", "train_step", step_end - step_start);
  }
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

void RunHolder(const Options& options) {
  apps::SetThreadName("holder");
  nvtxDomainHandle_t loader = nvtxDomainCreateA("loader");
  cudaStream_t stream;
  apps::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int round = 0; round < options.rounds; ++round) {
    apps::SleepNs(kRoundSpacingNs);
    nvtxEventAttributes_t hold{};
    hold.version = NVTX_VERSION;
    hold.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    hold.messageType = NVTX_MESSAGE_TYPE_ASCII;
    hold.message.ascii = "hold";
    uint64_t start = apps::MonotonicNs();
    nvtxRangeId_t id = nvtxDomainRangeStartEx(loader, &hold);
    hold.message.ascii = "round";
    nvtxDomainMarkEx(loader, &hold);
    apps::Check(fake_cuda::LaunchKernel(options.long_kernel_ms * 1000, stream), "cudaLaunchKernel");
    apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    nvtxDomainRangeEnd(loader, id);
    Add("loader", "hold", apps::MonotonicNs() - start);
  }
  apps::SleepNs(kRoundSpacingNs);  // the launchers go on after the last freeze
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  nvtxDomainDestroy(loader);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  if (options.late_library != nullptr) unsetenv("NVTX_INJECTION64_PATH");
  nvtxNameOsThreadA(uint32_t(gettid()), "main thread");
  nvtxNameCategoryA(1, "phase");
  nvtxRangePushW(L"main");
  nvtxRangeStartA("never_ended");
  nvtxStringHandle_t train_step = nvtxDomainRegisterStringA(nullptr, "train_step");
  // Ranges named as PyTorch's emit_nvtx names an operator's calls: one name, details per call.
  for (int call = 0; call < 5; ++call) {
    std::string name = "op::fake, seq = " + std::to_string(call) +
                       ", op_id = " + std::to_string(100 + call) + ", sizes = [[2, 3]]";
    uint64_t start = apps::MonotonicNs();
    nvtxRangePushA(name.c_str());
    apps::SleepNs(200'000);
    nvtxRangePop();
    Add("", "op::fake", apps::MonotonicNs() - start);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> launchers;
  for (int i = 0; i < options.launchers; ++i)
    launchers.emplace_back(RunLauncher, i, std::cref(stop), train_step);
  std::thread holder(RunHolder, std::cref(options));
  holder.join();
  stop.store(true);
  for (std::thread& launcher : launchers) launcher.join();
  nvtxRangePop();
  if (options.late_library != nullptr) {
    void* library = dlopen(options.late_library, RTLD_NOW | RTLD_LOCAL);
    auto* work = library != nullptr
                     ? reinterpret_cast<void (*)()>(dlsym(library, "nvtx_late_lib_work"))
                     : nullptr;
    if (work == nullptr) {
      std::fprintf(stderr, "nvtx_app: %s: %s\n", options.late_library, dlerror());
      return 2;
    }
    work();
  }
  if (options.truth != nullptr) {
    FILE* out = std::fopen(options.truth, "w");
    if (out == nullptr) return 2;
    for (const auto& [key, totals] : g_truth) {
      std::fprintf(out, "range name=%s domain=%s count=%llu total_ns=%llu slow_launch_ns=%llu\n",
                   key.second.c_str(), key.first.c_str(),
                   static_cast<unsigned long long>(totals.count),
                   static_cast<unsigned long long>(totals.total_ns),
                   static_cast<unsigned long long>(totals.slow_launch_ns));
    }
    std::fclose(out);
  }
  std::printf("nvtx_app: %zu range names\n", g_truth.size());
  return 0;
}
