// loader_lock_app: one thread holds the dynamic loader's lock for a while, as a program that
// loads a plugin or walks its own stack does, while another makes slow CUDA calls (on the fake
// runtime) that need no loader at all. Under a profiler, those calls must take as long as they
// take without it: a profiler that looks anything up through the loader at a call (dladdr,
// dl_iterate_phdr, dlsym, dlopen) waits for the lock and makes the program wait with it.
//
//   loader_lock_app --hold dlopen|iterate [--hold-ms M] [--calls N]
//
// --hold dlopen: a thread dlopens libslow_init.so (beside this program), whose constructor runs
// M ms under the loader's load lock. --hold iterate: a thread sleeps M ms inside a dl_iterate_phdr
// callback, under the loader's write lock. Meanwhile a thread ("syncer") makes N rounds of a 20 ms
// kernel and cudaStreamSynchronize, each a slow call.
//
// Prints "held_ms <how long the lock was held>", "calls_in_hold <rounds that ended inside the
// hold>" and "longest_sync_ms <the longest cudaStreamSynchronize, as the program timed it>".
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "loader_lock_app --hold dlopen|iterate [--hold-ms M] [--calls N]";
constexpr uint32_t kKernelUs = 20'000;

std::atomic<uint64_t> g_held_at{0}, g_released_at{0};
int g_hold_ms = 800;

void HoldByDlopen(int ready_fd) {
  char exe[PATH_MAX] = {};
  if (readlink("/proc/self/exe", exe, sizeof(exe) - 1) <= 0) std::exit(3);
  std::string library = exe;
  library = library.substr(0, library.rfind('/')) + "/libslow_init.so";
  setenv("LOADER_LOCK_FD", std::to_string(ready_fd).c_str(), 1);
  setenv("LOADER_LOCK_HOLD_MS", std::to_string(g_hold_ms).c_str(), 1);
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  g_released_at = apps::MonotonicNs();
  if (handle == nullptr) {
    std::fprintf(stderr, "loader_lock_app: %s\n", dlerror());
    std::exit(3);
  }
}

void HoldByIterating(int ready_fd) {
  dl_iterate_phdr(
      [](dl_phdr_info*, size_t, void* fd) -> int {
        const char held = 'h';
        if (write(*static_cast<int*>(fd), &held, 1) != 1) std::exit(3);
        apps::SleepNs(uint64_t(g_hold_ms) * 1'000'000);
        return 1;  // one object is enough
      },
      &ready_fd);
  g_released_at = apps::MonotonicNs();
}

// Named so that a test can find it in the call's native stack.
__attribute__((noinline)) uint64_t SyncWhileTheLoaderIsHeld(cudaStream_t stream) {
  apps::Check(fake_cuda::LaunchKernel(kKernelUs, stream), "cudaLaunchKernel");
  const uint64_t start = apps::MonotonicNs();
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const uint64_t took = apps::MonotonicNs() - start;
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return took;
}

}  // namespace

int main(int argc, char** argv) {
  apps::PrintStackOnCrash();
  const char* hold = nullptr;
  int calls = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--hold") == 0) {
      hold = argv[i + 1];
    } else if (std::strcmp(argv[i], "--hold-ms") == 0) {
      g_hold_ms = int(apps::ParseInt(argv[i + 1], 100, 60'000, kUsage));
    } else if (std::strcmp(argv[i], "--calls") == 0) {
      calls = int(apps::ParseInt(argv[i + 1], 1, 100, kUsage));
    } else {
      std::fprintf(stderr, "usage: %s\n", kUsage);
      return 2;
    }
  }
  if (hold == nullptr || (std::strcmp(hold, "dlopen") != 0 && std::strcmp(hold, "iterate") != 0)) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  cudaStream_t stream;
  apps::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  int ready[2];
  if (pipe(ready) != 0) return 3;
  std::thread holder([&] {
    apps::SetThreadName("loader-holder");
    if (std::strcmp(hold, "dlopen") == 0) {
      HoldByDlopen(ready[1]);
    } else {
      HoldByIterating(ready[1]);
    }
  });
  char byte;
  if (read(ready[0], &byte, 1) != 1) return 3;
  g_held_at = apps::MonotonicNs();

  uint64_t longest_ns = 0;
  int in_hold = 0;
  std::thread syncer([&] {
    apps::SetThreadName("syncer");
    for (int i = 0; i < calls; ++i) {
      longest_ns = std::max(longest_ns, SyncWhileTheLoaderIsHeld(stream));
      if (g_released_at.load() == 0) ++in_hold;
    }
  });
  syncer.join();
  holder.join();
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  std::printf("held_ms %.1f\ncalls_in_hold %d\nlongest_sync_ms %.1f\n",
              double(g_released_at - g_held_at) / 1e6, in_hold, double(longest_ns) / 1e6);
  return 0;
}
