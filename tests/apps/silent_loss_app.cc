// silent_loss_app: a program on the fake CUDA runtime for the "nothing lost in silence" tests
// (tests/silent_loss_test.cc). `silent_loss_app THREADS CALLS END` starts THREADS threads that each
// make exactly CALLS cudaStreamQuery calls on the legacy default stream, as fast as they can, and
// waits for them all; then END:
//   exit   exit(0)
//   kill   raise SIGKILL at once: whatever the injected library had not written yet dies with it
// It prints `calls=<THREADS*CALLS>` (unbuffered) before the end. Built twice: linked to the fake
// libcudart.so, and to the static archive (silent_loss_static_app), which interposition cannot see.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "silent_loss_app THREADS CALLS exit|kill";

void MakeCalls(long calls) {
  for (long i = 0; i < calls; ++i) {
    cudaError_t error = cudaStreamQuery(nullptr);
    if (error != cudaSuccess && error != cudaErrorNotReady) apps::Check(error, "cudaStreamQuery");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[3], "exit") != 0 && strcmp(argv[3], "kill") != 0)) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const long threads = apps::ParseInt(argv[1], 1, 64, kUsage);
  const long calls = apps::ParseInt(argv[2], 1, 10'000'000, kUsage);
  std::vector<std::thread> workers;
  for (long t = 0; t < threads; ++t) workers.emplace_back(MakeCalls, calls);
  for (std::thread& worker : workers) worker.join();
  char line[64];
  int length = std::snprintf(line, sizeof(line), "calls=%ld\n", threads * calls);
  if (write(STDOUT_FILENO, line, size_t(length)) < 0) return 1;
  if (strcmp(argv[3], "kill") == 0) raise(SIGKILL);
  return 0;
}
