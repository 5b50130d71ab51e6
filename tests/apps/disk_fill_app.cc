// disk_fill_app: a program on the fake CUDA runtime that needs disk room (issue 17):
//   disk_fill_app PATH BYTES|fill BUSY_MS
// Makes CUDA calls for BUSY_MS ms (sleeping 1 ms after every few, so that an injected library and
// the kernel recorder keep writing), then writes BYTES bytes to PATH (created, truncated) in 64 KiB
// pieces, or with "fill" writes until a write fails; then makes a few more CUDA calls. Prints
//   wrote=<bytes> error=<errno name, or 0>
// and exits 0 when every byte asked for was written ("fill": when the failure was ENOSPC), 1
// otherwise (and when a CUDA call fails), 2 on bad arguments.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "disk_fill_app PATH BYTES|fill BUSY_MS";

void CallFor(uint64_t duration_ns) {
  const uint64_t end = apps::MonotonicNs() + duration_ns;
  do {
    for (int i = 0; i < 4; ++i) {
      apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
      apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    }
    apps::SleepNs(1'000'000);
  } while (apps::MonotonicNs() < end);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string path = argv[1];
  const bool fill = std::strcmp(argv[2], "fill") == 0;
  const long bytes = fill ? -1 : apps::ParseInt(argv[2], 0, 1L << 40, kUsage);
  const long busy_ms = apps::ParseInt(argv[3], 0, 600'000, kUsage);
  CallFor(uint64_t(busy_ms) * 1'000'000);

  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    std::printf("wrote=0 error=%s\n", strerrorname_np(errno));
    return 1;
  }
  std::vector<char> piece(64 << 10, 'x');
  long written = 0;
  int error = 0;
  while (fill || written < bytes) {
    size_t size = fill ? piece.size() : std::min<size_t>(piece.size(), size_t(bytes - written));
    ssize_t n = write(fd, piece.data(), size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      break;
    }
    written += n;
  }
  if (close(fd) != 0 && error == 0) error = errno;
  CallFor(0);
  std::printf("wrote=%ld error=%s\n", written, error == 0 ? "0" : strerrorname_np(error));
  return fill ? (error == ENOSPC ? 0 : 1) : (error == 0 && written == bytes ? 0 : 1);
}
