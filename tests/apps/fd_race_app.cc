// fd_race_app: a program on the fake CUDA runtime that takes back descriptors while its CUDA calls
// are being recorded (issue 17), as a server whose worker threads call close_range while another
// thread uses the GPU:
//   fd_race_app DIR MS
// One thread makes CUDA calls for MS ms; the main thread meanwhile, over and over, closes every
// descriptor above 2 (close_range(3, ~0U, 0)), opens DIR/own-0 .. DIR/own-15 (created, append) and
// appends kLine to each. So each own-N file must hold nothing but whole kLine lines, and the
// injected library's writer finds its descriptor closed at any moment, also between its check and
// its write. Prints "calls=<n>" and exits 0; 2 on bad arguments, 1 when a call of its own failed.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "fd_race_app DIR MS";
constexpr const char kLine[] = "the program's own line\n";
constexpr int kFiles = 16;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string dir = argv[1];
  const long ms = apps::ParseInt(argv[2], 1, 600'000, kUsage);

  std::atomic<bool> done{false};
  long calls = 0;
  std::thread caller([&] {
    while (!done.load()) {
      apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
      apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
      calls += 2;
    }
  });
  const uint64_t end = apps::MonotonicNs() + static_cast<uint64_t>(ms) * 1'000'000;
  while (apps::MonotonicNs() < end) {
    if (syscall(SYS_close_range, 3u, ~0u, 0) != 0) {
      std::fprintf(stderr, "fd_race_app: close_range: %s\n", std::strerror(errno));
      return 1;
    }
    int fds[kFiles];
    for (int i = 0; i < kFiles; ++i) {
      std::string path = dir + "/own-" + std::to_string(i);
      fds[i] = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fds[i] < 0) {
        std::fprintf(stderr, "fd_race_app: open %s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
    }
    for (int fd : fds) {
      if (write(fd, kLine, sizeof(kLine) - 1) != static_cast<ssize_t>(sizeof(kLine) - 1)) {
        std::fprintf(stderr, "fd_race_app: write: %s\n", std::strerror(errno));
        return 1;
      }
    }
  }
  done = true;
  caller.join();
  std::printf("calls=%ld\n", calls);
  return 0;
}
