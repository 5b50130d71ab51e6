// attach_app: a program that runs on its own until told to stop, for `gprof-run -p` to attach to
// and detach from while it runs (tests/attach_test.cc). Its output depends on nothing but its
// arguments and on what happened to it: a run that was attached to must print exactly what a run
// that was not prints, and end with the same status.
//
//   attach_app pipe    two threads hand a token back and forth over two pipes
//   attach_app cuda    two threads, each on its own stream of the fake CUDA runtime: a copy to the
//                      device, a kernel, a copy back, a stream synchronize, round after round
//
//   attach_app calls N one thread waits for a line on stdin, then times N cudaStreamQuery calls on
//                      an idle stream (one cuStreamQuery each) and prints
//                      "calls n=N ns_per_call=X"; then it waits for the end of stdin and exits 0
//                      (scripts/bench/uprobe_cost.py: the cost of a probed call)
//
// pipe and cuda run until their stdin reaches its end (the test closes it), then prints what it
// checked (every token came back as sent; every CUDA call succeeded) and exits 3 (pipe) or 4
// (cuda). Every signal it can catch is caught and printed: a profiler that sent one would show in
// the output.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

std::atomic<bool> stop{false};
std::atomic<int> signals_seen[65];

void NoteSignal(int signal_number) { signals_seen[signal_number].fetch_add(1); }

void CatchEverySignal() {
  for (int signal_number = 1; signal_number < 65; ++signal_number) {
    if (signal_number == SIGKILL || signal_number == SIGSTOP) continue;
    struct sigaction action {};
    action.sa_handler = NoteSignal;
    sigaction(signal_number, &action, nullptr);
  }
}

// Stops the work at the end of stdin.
void StopAtEndOfInput() {
  char byte;
  while (read(STDIN_FILENO, &byte, 1) != 0) {
  }
  stop.store(true);
}

// Ping sends a counter, pong sends it back plus one; both check what they get.
bool PipeRounds() {
  int to_pong[2], to_ping[2];
  if (pipe(to_pong) != 0 || pipe(to_ping) != 0) return false;
  std::atomic<bool> pong_ok{true};
  std::thread pong([&] {
    apps::SetThreadName("pong");
    uint64_t expected = 0, token = 0;
    while (read(to_pong[0], &token, sizeof(token)) == sizeof(token)) {
      if (token != expected) pong_ok.store(false);
      expected = token + 2;
      ++token;
      if (write(to_ping[1], &token, sizeof(token)) != sizeof(token)) pong_ok.store(false);
    }
    close(to_ping[1]);
  });
  bool ok = true;
  for (uint64_t token = 0; !stop.load(); token += 2) {
    uint64_t back = 0;
    if (write(to_pong[1], &token, sizeof(token)) != sizeof(token) ||
        read(to_ping[0], &back, sizeof(back)) != sizeof(back) || back != token + 1) {
      ok = false;
      break;
    }
  }
  close(to_pong[1]);
  pong.join();
  close(to_pong[0]);
  close(to_ping[0]);
  return ok && pong_ok.load();
}

// One worker's rounds on its own stream. (The fake GPU moves no bytes: a failed call ends the
// program, a round's check is that every call succeeded.)
bool CudaRounds(int worker) {
  apps::SetThreadName("cuda-" + std::to_string(worker));
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  constexpr size_t kWords = 256;
  std::vector<uint32_t> host(kWords, uint32_t(worker)), back(kWords);
  void* device = nullptr;
  apps::Check(cudaMalloc(&device, kWords * sizeof(uint32_t)), "cudaMalloc");
  for (uint32_t round = 0; !stop.load(); ++round) {
    apps::Check(cudaMemcpyAsync(device, host.data(), kWords * 4, cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync");
    apps::Check(fake_cuda::LaunchKernel(400, stream), "cudaLaunchKernel");
    apps::Check(cudaMemcpyAsync(back.data(), device, kWords * 4, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync");
    apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  apps::Check(cudaFree(device), "cudaFree");
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return true;
}

// Times `count` calls once a line has come on stdin, then waits for its end.
int TimeCalls(long count) {
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  apps::Check(cudaStreamQuery(stream), "cudaStreamQuery");  // the driver initialised
  char byte = 0;
  while (read(STDIN_FILENO, &byte, 1) == 1 && byte != '\n') {
  }
  const uint64_t start = apps::MonotonicNs();
  for (long i = 0; i < count; ++i) apps::Check(cudaStreamQuery(stream), "cudaStreamQuery");
  const uint64_t elapsed = apps::MonotonicNs() - start;
  std::printf("calls n=%ld ns_per_call=%.1f\n", count, double(elapsed) / double(count));
  std::fflush(stdout);
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "calls") == 0) return TimeCalls(std::atol(argv[2]));
  const bool cuda = argc == 2 && std::strcmp(argv[1], "cuda") == 0;
  if (argc != 2 || (!cuda && std::strcmp(argv[1], "pipe") != 0)) {
    std::fprintf(stderr, "usage: attach_app pipe|cuda|calls N\n");
    return 2;
  }
  CatchEverySignal();
  std::thread stopper(StopAtEndOfInput);
  bool ok = true;
  if (cuda) {
    bool worker_ok[2] = {true, true};
    std::thread second([&] { worker_ok[1] = CudaRounds(1); });
    worker_ok[0] = CudaRounds(0);
    second.join();
    ok = worker_ok[0] && worker_ok[1];
  } else {
    ok = PipeRounds();
  }
  stopper.join();
  std::printf("attach_app %s: %s\n", argv[1], ok ? "every round went as it should" : "MISMATCH");
  for (int signal_number = 1; signal_number < 65; ++signal_number) {
    if (int seen = signals_seen[signal_number].load(); seen > 0)
      std::printf("signal %d seen %d times\n", signal_number, seen);
  }
  return cuda ? 4 : 3;
}
