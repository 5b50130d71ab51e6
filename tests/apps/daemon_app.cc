// daemon_app: a command that leaves processes behind it, as a daemon does (issue 17):
//   daemon_app OUT BUSY_MS LATE_MS
// The command's process makes a few CUDA calls and double-forks two daemons (setsid), waits for
// the intermediate children and for daemon "busy" to have made CUDA calls for 100 ms (an injected
// library records it by then), and exits 0. Daemon "busy" makes CUDA calls for BUSY_MS ms from
// its start; daemon "late" sleeps LATE_MS ms, then makes CUDA calls for 100 ms. Each then
// appends "<name> pid=<pid> calls=<n>\n" to OUT and exits. The daemons keep the command's stdout
// and stderr. Exit 2 on bad arguments, 1 when a CUDA call fails.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "daemon_app OUT BUSY_MS LATE_MS";

long CallFor(uint64_t duration_ns) {
  long calls = 0;
  const uint64_t end = apps::MonotonicNs() + duration_ns;
  while (apps::MonotonicNs() < end) {
    apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
    apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    calls += 2;
    apps::SleepNs(1'000'000);
  }
  return calls;
}

// Forks a daemon (double fork, new session) that runs `body`, and reaps the intermediate child.
template <typename Body>
void Daemonize(Body body) {
  pid_t child = fork();
  if (child < 0) std::exit(1);
  if (child == 0) {
    if (fork() == 0) {
      setsid();
      body();
      _exit(0);
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
}

void Report(const std::string& out, const char* name, long calls) {
  char line[128];
  int length =
      std::snprintf(line, sizeof(line), "%s pid=%d calls=%ld\n", name, int(getpid()), calls);
  int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0 || write(fd, line, size_t(length)) != length) std::exit(1);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string out = argv[1];
  const long busy_ms = apps::ParseInt(argv[2], 0, 600'000, kUsage);
  const long late_ms = apps::ParseInt(argv[3], 0, 600'000, kUsage);
  CallFor(20'000'000);
  int started[2];
  if (pipe(started) != 0) return 1;
  Daemonize([&] {
    close(started[0]);
    long calls = CallFor(100'000'000);
    close(started[1]);  // the command may end now
    Report(out, "busy", calls + CallFor(uint64_t(busy_ms) * 1'000'000));
  });
  close(started[1]);
  char none;
  while (read(started[0], &none, 1) < 0 && errno == EINTR) {
  }
  close(started[0]);
  Daemonize([&] {
    apps::SleepNs(uint64_t(late_ms) * 1'000'000);
    Report(out, "late", CallFor(100'000'000));
  });
  return 0;
}
