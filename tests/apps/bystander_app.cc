// bystander_app: a busy process that is not the profiled one, for the tests that check gprof-run
// records nothing of it. Usage: bystander_app NAME MS [FIFO]
// Names itself and its threads NAME (at most 15 characters), then for MS milliseconds: three
// threads contend for a mutex they hold while sleeping (futex waits and wakes), and the main thread
// forks a short-lived child every 20 ms; given a FIFO (not -) it also writes one byte to FIFO every
// 20 ms (waking whoever reads it) and closes it at the end. Finally it prints "pid P", then "tid T"
// for each of its threads and "child C" for each child, one per line. NOTEs are ignored: they only
// mark its command line. Exit 0; errors: exit 1 or 2.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "bystander_app NAME MS FIFO|- [NOTE...]";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string name = argv[1];
  const uint64_t duration_ns = uint64_t(apps::ParseInt(argv[2], 1, 600'000, kUsage)) * 1'000'000;
  prctl(PR_SET_NAME, name.c_str());
  int fifo = -1;
  if (std::string(argv[3]) != "-" && (fifo = open(argv[3], O_WRONLY | O_CLOEXEC)) < 0) {
    std::perror("open fifo");
    return 1;
  }

  const uint64_t end_ns = apps::MonotonicNs() + duration_ns;
  std::mutex mutex;
  std::atomic<bool> stop{false};
  std::vector<pid_t> tids(3);
  std::vector<std::thread> threads;
  for (pid_t& tid : tids) {
    threads.emplace_back([&, name, &tid = tid] {
      apps::SetThreadName(name);
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      while (!stop.load()) {
        std::lock_guard<std::mutex> hold(mutex);
        apps::SleepNs(1'000'000);
      }
    });
  }
  std::vector<pid_t> children;
  while (apps::MonotonicNs() < end_ns) {
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      apps::SleepNs(2'000'000);
      _exit(0);
    }
    children.push_back(child);
    if (fifo >= 0 && write(fifo, "x", 1) != 1) return 1;
    apps::SleepNs(20'000'000);
    waitpid(child, nullptr, 0);
  }
  stop.store(true);
  for (std::thread& thread : threads) thread.join();
  if (fifo >= 0) close(fifo);

  std::printf("pid %d\n", getpid());
  for (pid_t tid : tids) std::printf("tid %d\n", tid);
  for (pid_t child : children) std::printf("child %d\n", child);
  return 0;
}
