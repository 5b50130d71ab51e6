// namespace_app: the program the container tests (tests/namespaces_test.cc) run inside PID, IPC,
// mount, user and time namespaces. `namespace_app THREADS CALLS [CHILD_THREADS [PAUSE_US]]`:
// THREADS threads, named "nsw<pid>-<i>", each make CALLS CUDA calls (a memset and a sync on a
// stream of their own, in turns, PAUSE_US apart) and then sleep 5 ms, off-CPU; with CHILD_THREADS
// above 0 the process first forks a child that does the same with that many threads. Each process
// prints on stdout how many calls it made ("child calls=N", then "first calls=N" when it is a PID
// namespace's first process, pid 1, else "main calls=N"), and the main one a line on stderr when
// it ends: what a test compares with a run without gprof-run, byte for byte, and with the record.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

int Work(int threads, int calls, int pause_us) {
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([i, calls, pause_us] {
      apps::SetThreadName("nsw" + std::to_string(getpid()) + "-" + std::to_string(i));
      cudaStream_t stream = nullptr;
      apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
      static char unused;
      void* device = &unused;
      apps::Check(cudaMalloc(&device, 4096), "cudaMalloc");
      for (int call = 2; call < calls - 1; ++call) {
        if (pause_us > 0) apps::SleepNs(uint64_t(pause_us) * 1000);
        if (call % 2 == 0) {
          apps::Check(cudaMemsetAsync(device, call & 0xff, 4096, stream), "cudaMemsetAsync");
        } else {
          apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        }
      }
      apps::Check(cudaFree(device), "cudaFree");
      apps::SleepNs(5'000'000);  // an off-CPU interval on this thread, after its calls
    });
  }
  for (auto& worker : workers) worker.join();
  return threads * calls;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: namespace_app THREADS CALLS [CHILD_THREADS [PAUSE_US]]\n");
    return 2;
  }
  int threads = std::atoi(argv[1]), calls = std::atoi(argv[2]);
  int child_threads = argc > 3 ? std::atoi(argv[3]) : 0;
  int pause_us = argc > 4 ? std::atoi(argv[4]) : 0;
  if (threads < 1 || calls < 4) return 2;
  pid_t child = -1;
  if (child_threads > 0) {
    std::fflush(stdout);
    child = fork();
    if (child == 0) {
      int made = Work(child_threads, calls, pause_us);
      std::printf("child calls=%d\n", made);
      std::fflush(stdout);
      std::_Exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);  // its line first: the output's order is fixed
  }
  int made = Work(threads, calls, pause_us);
  std::printf("%s calls=%d\n", getpid() == 1 ? "first" : "main", made);
  std::fflush(stdout);
  std::fprintf(stderr, "namespace_app: done\n");
  return 0;
}
