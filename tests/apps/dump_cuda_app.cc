// A CUDA program stuck on a GPU that never finishes, for `gprof-run dump` (tests/dump_test.cc), on
// the fake runtime: a kernel of 70 minutes, a thread in cudaDeviceSynchronize holding the driver
// lock while the GPU drains, and a thread whose launch waits for that lock. Prints "sync TID",
// "launcher TID", then "ready", then stays stuck until killed.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "tests/fake_cuda/fake_cuda.h"

namespace {

std::atomic<int> started{0};

int Tid() { return static_cast<int>(syscall(SYS_gettid)); }

void* Synchronize(void*) {
  printf("sync %d\n", Tid());
  fflush(stdout);
  started = 1;
  cudaDeviceSynchronize();
  return nullptr;
}

void* Launch(void*) {
  printf("launcher %d\n", Tid());
  fflush(stdout);
  started = 2;
  fake_cuda::LaunchKernel(1, nullptr);
  return nullptr;
}

}  // namespace

int main() {
  // Longer than any test waits (the fake's longest kernel, about 18 minutes).
  if (fake_cuda::LaunchKernel(fake_cuda::kMaxKernelUs, nullptr) != cudaSuccess) return 1;
  pthread_t sync, launch;
  pthread_create(&sync, nullptr, Synchronize, nullptr);
  while (started == 0) usleep(1000);
  usleep(20'000);  // it holds the driver lock now, or soon: the test waits until it does
  pthread_create(&launch, nullptr, Launch, nullptr);
  while (started < 2) usleep(1000);
  puts("ready");
  fflush(stdout);
  for (;;) pause();
}
