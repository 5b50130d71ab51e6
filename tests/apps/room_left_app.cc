// room_left_app: a program on the fake CUDA runtime that leaves its filesystem nearly full
// (issue 34, a full disk under -q):
//   room_left_app FILE BYTES_LEFT BUSY_MS EXIT_CODE
// Makes CUDA calls for BUSY_MS ms (sleeping 1 ms after every few, so that the injected library
// keeps writing), waits 600 ms (so that it has written them all), then writes FILE until its filesystem has at most BYTES_LEFT bytes free for an
// unprivileged writer (statvfs f_bavail), prints "left=<bytes free>", and exits EXIT_CODE (1 when a
// write fails before that, 2 on bad arguments).
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "room_left_app FILE BYTES_LEFT BUSY_MS EXIT_CODE";

long FreeBytes(int fd) {
  struct statvfs info {};
  if (fstatvfs(fd, &info) != 0) return -1;
  return static_cast<long>(info.f_bavail * info.f_frsize);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const long left = apps::ParseInt(argv[2], 0, 1L << 40, kUsage);
  const long busy_ms = apps::ParseInt(argv[3], 0, 600'000, kUsage);
  const long exit_code = apps::ParseInt(argv[4], 0, 255, kUsage);
  const uint64_t end = apps::MonotonicNs() + uint64_t(busy_ms) * 1'000'000;
  do {
    for (int i = 0; i < 4; ++i) {
      apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
      apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    }
    apps::SleepNs(1'000'000);
  } while (apps::MonotonicNs() < end);

  // The injected library writes what it holds at least every 200 ms: all of it before the fill.
  apps::SleepNs(600'000'000);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  std::vector<char> piece(64 << 10, 'x');
  for (long free_bytes = FreeBytes(fd); free_bytes > left; free_bytes = FreeBytes(fd)) {
    // Whole pages: a tmpfs counts them.
    size_t size = std::min<size_t>(piece.size(), size_t(free_bytes - left + 4095) & ~size_t{4095});
    if (write(fd, piece.data(), size) <= 0) return 1;
  }
  std::printf("left=%ld\n", FreeBytes(fd));
  close(fd);
  return static_cast<int>(exit_code);
}
