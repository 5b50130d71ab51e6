#include "profiler_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gprof::inject {

namespace {

// /proc/<pid>/stat's state (field 3) and start time (field 22); false when there is none.
bool ReadStat(int pid, char* state, unsigned long long* start_ticks) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[1024];
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  // The name (field 2) may hold spaces and parentheses: count fields from its last ')'.
  const char* field = strrchr(text, ')');
  if (field == nullptr || field[1] != ' ') return false;
  *state = field[2];
  for (int number = 2; field != nullptr && number < 22; ++number) field = strchr(field + 1, ' ');
  if (field == nullptr) return false;
  *start_ticks = strtoull(field + 1, nullptr, 10);
  return true;
}

}  // namespace

unsigned long long ProcessStartTicks(int pid) {
  char state = 0;
  unsigned long long start_ticks = 0;
  return ReadStat(pid, &state, &start_ticks) ? start_ticks : 0;
}

ProfilerWatch::~ProfilerWatch() {
  if (pidfd_ >= 0) close(pidfd_);
}

void ProfilerWatch::Start() {
  const char* value = getenv(kProfilerPidEnv);
  if (value == nullptr) return;
  char* end = nullptr;
  long pid = strtol(value, &end, 10);
  if (pid <= 0 || end == nullptr || *end != ':') return;
  pid_ = static_cast<int>(pid);
  start_ticks_ = strtoull(end + 1, nullptr, 10);
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  // Opened after the pid was reused by another process: that one is not gprof-run.
  if (pidfd_ >= 0 && ProcessStartTicks(pid_) != start_ticks_) {
    close(pidfd_);
    pidfd_ = -1;
    start_ticks_ = ~0ull;  // never matches: gone
  }
}

bool ProfilerWatch::Gone(int* pid) const {
  if (pid_ == 0) return false;
  *pid = pid_;
  if (pidfd_ >= 0) {
    pollfd ready{pidfd_, POLLIN, 0};
    if (poll(&ready, 1, 0) == 0) return false;  // the common case: one system call
  }
  // The pidfd says it exited (or the program closed our descriptor): /proc decides. A zombie
  // (killed, not yet reaped) is gone too.
  char state = 0;
  unsigned long long start_ticks = 0;
  return !ReadStat(pid_, &state, &start_ticks) || start_ticks != start_ticks_ || state == 'Z' ||
         state == 'X';
}

}  // namespace gprof::inject
