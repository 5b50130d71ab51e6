// Helpers shared by the test programs that run on the fake CUDA runtime.
#pragma once

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "tests/fake_cuda/fake_cuda.h"

namespace apps {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

inline void SleepNs(uint64_t duration_ns) {
  const uint64_t deadline_ns = MonotonicNs() + duration_ns;
  const timespec deadline = {time_t(deadline_ns / 1'000'000'000),
                             long(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

// Linux keeps 15 characters of a thread name.
inline void SetThreadName(const std::string& name) {
  pthread_setname_np(pthread_self(), name.c_str());
}

// A failed CUDA call ends the program with status 1: a test program that carried on would hide it.
inline void Check(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, call,
               cudaGetErrorName(error));
  std::exit(1);
}

// A crash prints its signal and stack to stderr, then ends the process by that signal as it would
// have without this: a crash seen once, in CI, says where it was.
inline void PrintStackOnCrash() {
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction crash {};
  crash.sa_handler = [](int signal_number) {
    char line[96];
    int length = snprintf(line, sizeof(line), "%s: pid %d: %s, stack:\n",
                          program_invocation_short_name, int(getpid()), strsignal(signal_number));
    if (write(STDERR_FILENO, line, size_t(length)) < 0) {
    }
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    raise(signal_number);  // pending until the handler returns: then the default action
  };
  sigemptyset(&crash.sa_mask);
  crash.sa_flags = SA_RESETHAND;
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
    sigaction(signal_number, &crash, nullptr);
  }
}

// Parses a whole decimal integer in [min, max]; exits with status 2 and `usage` otherwise.
inline long ParseInt(const char* text, long min, long max, const char* usage) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
    std::fprintf(stderr, "%s: bad number '%s'\nusage: %s\n", program_invocation_short_name, text,
                 usage);
    std::exit(2);
  }
  return value;
}

}  // namespace apps
