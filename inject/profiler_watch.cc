#include "inject/profiler_watch.h"

#include "inject/shared/clock.h"
#include "inject/shared/held_directory.h"
#include "inject/shared/namespaces.h"
#include "inject/shared/session_control.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gprof::inject {

namespace {

enum class Stat { kRead, kNone, kUnknown };

// /proc/<pid>/stat's state (field 3) and start time (field 22). kNone: no such process; kUnknown:
// another thread of the program closed the descriptor each time before it was read (close_range),
// so nothing can be said.
Stat ReadStat(int pid, char* state, unsigned long long* start_ticks) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  char text[1024];
  ssize_t n = -1;
  for (int attempt = 0; n < 0 && attempt < kReopenAttempts; ++attempt) {
    FileIdentity id;
    int fd = OpenHigh(path, O_RDONLY, &id);
    if (fd < 0) {
      if (errno == ENOENT || errno == ESRCH) return Stat::kNone;
      continue;  // closed under us (close_range from another thread): again
    }
    n = read(fd, text, sizeof(text) - 1);
    CloseHeld(fd, id);
  }
  if (n < 0) return Stat::kUnknown;
  if (n == 0) return Stat::kNone;  // a process that is ending
  text[n] = '\0';
  // The name (field 2) may hold spaces and parentheses: count fields from its last ')'.
  const char* field = strrchr(text, ')');
  if (field == nullptr || field[1] != ' ') return Stat::kNone;
  *state = field[2];
  for (int number = 2; field != nullptr && number < 22; ++number) field = strchr(field + 1, ' ');
  if (field == nullptr) return Stat::kNone;
  *start_ticks = strtoull(field + 1, nullptr, 10);
  return Stat::kRead;
}

}  // namespace

unsigned long long ProcessStartTicks(int pid) {
  char state = 0;
  unsigned long long start_ticks = 0;
  return ReadStat(pid, &state, &start_ticks) == Stat::kRead ? start_ticks : 0;
}

bool ProcessRunning(int pid, unsigned long long start_ticks) {
  char state = 0;
  unsigned long long ticks = 0;
  switch (ReadStat(pid, &state, &ticks)) {
    case Stat::kRead:
      return ticks == start_ticks && state != 'Z' && state != 'X';
    case Stat::kNone:
      return false;
    case Stat::kUnknown:  // not known to be gone
      return true;
  }
  return true;
}

uint32_t ProfilerPidNamespace() {
  const char* value = getenv(kProfilerPidEnv);
  if (value == nullptr || (value = strchr(value, ':')) == nullptr ||
      (value = strchr(value + 1, ':')) == nullptr) {
    return 0;
  }
  unsigned long long inode = strtoull(value + 1, nullptr, 10);
  return inode <= UINT32_MAX ? static_cast<uint32_t>(inode) : 0;
}

void ProfilerWatch::Start(const SessionControl* control) {
  const char* value = getenv(kProfilerPidEnv);
  char* end = nullptr;
  long pid = value != nullptr ? strtol(value, &end, 10) : 0;
  if (control != nullptr && control->attached()) {
    control_ = control;
    if (pid > 0) pid_ = static_cast<int>(pid);
    return;
  }
  if (pid <= 0 || end == nullptr || *end != ':') return;
  unsigned long long start_ticks = strtoull(end + 1, nullptr, 10);
  uint32_t pid_namespace = ProfilerPidNamespace();
  // Another PID namespace names another process (or none) with that pid, and another time
  // namespace shows another start time: unknown there.
  if (pid_namespace == 0 || pid_namespace != OwnPidNamespace() || g_time_namespace_offset_ns != 0)
    return;
  pid_ = static_cast<int>(pid);
  start_ticks_ = start_ticks;
}

bool ProfilerWatch::Gone(int* pid) const {
  *pid = pid_;
  if (control_ != nullptr) return control_->profiler_ended();
  return pid_ != 0 && !ProcessRunning(pid_, start_ticks_);
}

}  // namespace gprof::inject
