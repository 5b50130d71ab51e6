// privilege_limits_app: a program on the fake CUDA runtime for tests/privilege_limits_test.cc,
// whose output depends only on what it was allowed, never on pids or times:
//   privilege_limits_app who
//       prints `uid U euid E gid G egid F`, makes a few CUDA calls, sleeps 30 ms, and has a forked
//       child make a few more; then `calls ok`. Run set-user-ID, set-group-ID or with file
//       capabilities, it is a secure execution.
//   privilege_limits_app calls N
//       makes N CUDA calls (a launch, and a synchronize after every 100), then prints `calls=N`.
//   privilege_limits_app descriptors N
//       makes a CUDA call, opens /dev/null until the descriptor limit refuses one, makes N more
//       CUDA calls, closes them all, and prints `opened=<count> calls=N`.
// Exit 0; 1 when a CUDA call fails (said on stderr); 2 for bad arguments.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

void MakeCalls(long count) {
  for (long i = 0; i < count; ++i) {
    apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
    if (i % 100 == 99) apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

int Who() {
  std::printf("uid %u euid %u gid %u egid %u\n", getuid(), geteuid(), getgid(), getegid());
  std::fflush(stdout);
  MakeCalls(10);
  apps::SleepNs(30'000'000);
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    MakeCalls(10);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return 1;
  std::printf("calls ok\n");
  return 0;
}

int Descriptors(long calls) {
  MakeCalls(1);
  std::vector<int> opened;
  for (;;) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    opened.push_back(fd);
  }
  MakeCalls(calls);
  for (int fd : opened) close(fd);
  std::printf("opened=%zu calls=%ld\n", opened.size(), calls);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "who") == 0) return Who();
  if (argc == 3 && std::strcmp(argv[1], "calls") == 0) {
    long count = std::atol(argv[2]);
    MakeCalls(count);
    std::printf("calls=%ld\n", count);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "descriptors") == 0) return Descriptors(std::atol(argv[2]));
  std::fprintf(stderr, "usage: privilege_limits_app who | calls N | descriptors N\n");
  return 2;
}
