// fork_app: fork without exec while other threads are inside CUDA calls, as PyTorch DataLoaders do.
//
// Two threads call the fake runtime continuously: "sync-worker" launches and calls
// cudaDeviceSynchronize (holding the driver lock asleep), "free-worker" allocates, launches and
// calls cudaFree (holding it spinning), so children are often forked while the lock is held.
// Each of --children K (default 4) children makes --calls M (default 200) CUDA calls, prints
//   child pid=<pid> calls=<n>
// and exits normally. The parent waits for them, stops its threads, prints
//   parent pid=<pid> calls=<n>
// (<n>: the CUDA calls of all its threads) and exits 0; 1 if a call failed or a child failed.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "fork_app [--children K] [--calls M]";
constexpr uint64_t kForkSpacingNs = 5'000'000;

struct Options {
  int children = 4;
  long calls = 200;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    const bool has_value = i + 1 < argc;
    if (has_value && std::strcmp(argv[i], "--children") == 0) {
      options.children = int(apps::ParseInt(argv[i + 1], 0, 1000, kUsage));
    } else if (has_value && std::strcmp(argv[i], "--calls") == 0) {
      options.calls = apps::ParseInt(argv[i + 1], 0, 100'000'000, kUsage);
    } else {
      std::fprintf(stderr, "fork_app: bad option %s\nusage: %s\n", argv[i], kUsage);
      std::exit(2);
    }
  }
  return options;
}

// The child's work: a cycle of launches, syncs, and an allocation freed two calls later.
long RunChild(long calls) {
  void* buffer = nullptr;
  long made = 0;
  for (; made < calls; ++made) {
    switch (made % 6) {
      case 0:
      case 3:
        apps::Check(fake_cuda::LaunchKernel(5, nullptr), "cudaLaunchKernel");
        break;
      case 1:
        apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
        break;
      case 2:
        apps::Check(cudaMalloc(&buffer, 4096), "cudaMalloc");
        break;
      case 4:
        apps::Check(cudaFree(buffer), "cudaFree");
        break;
      case 5:
        apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        break;
    }
  }
  return made;
}

void RunSyncWorker(const std::atomic<bool>& stop, std::atomic<long>& calls) {
  apps::SetThreadName("sync-worker");
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  calls += 1;
  while (!stop.load()) {
    apps::Check(fake_cuda::LaunchKernel(300, stream), "cudaLaunchKernel");
    apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    calls += 2;
  }
}

void RunFreeWorker(const std::atomic<bool>& stop, std::atomic<long>& calls) {
  apps::SetThreadName("free-worker");
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  calls += 1;
  while (!stop.load()) {
    void* buffer = nullptr;
    apps::Check(cudaMalloc(&buffer, 1 << 20), "cudaMalloc");
    apps::Check(fake_cuda::LaunchKernel(200, stream), "cudaLaunchKernel");
    apps::Check(cudaFree(buffer), "cudaFree");
    calls += 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  apps::PrintStackOnCrash();  // a child's crash was seen once in CI and not reproduced since
  std::atomic<bool> stop{false};
  std::atomic<long> parent_calls{0};
  std::thread sync_worker(RunSyncWorker, std::cref(stop), std::ref(parent_calls));
  std::thread free_worker(RunFreeWorker, std::cref(stop), std::ref(parent_calls));

  std::vector<pid_t> children;
  for (int i = 0; i < options.children; ++i) {
    apps::SleepNs(kForkSpacingNs);
    std::fflush(stdout);  // or the child would print the parent's buffered output again
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "fork_app: fork: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      const long made = RunChild(options.calls);
      std::printf("child pid=%d calls=%ld\n", int(getpid()), made);
      std::exit(0);
    }
    children.push_back(pid);
  }

  bool all_children_ok = true;
  for (const pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "fork_app: child %d did not exit 0 (wait status 0x%x)\n", int(pid),
                   status);
      all_children_ok = false;
    }
  }
  stop.store(true);
  sync_worker.join();
  free_worker.join();
  std::printf("parent pid=%d calls=%ld\n", int(getpid()), parent_calls.load());
  return all_children_ok ? 0 : 1;
}
