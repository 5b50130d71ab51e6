// job_app: a program for the job-control tests (tests/job_control_test.cc), on the fake CUDA
// runtime. It makes a CUDA call (so that an injected library is active in it), prints what it
// inherited and where it stands, then obeys lines read from its standard input:
//   counts   print the signals it has received so far and whether it is in the foreground
//   kill-group  send SIGINT to its own process group, kill(0, SIGINT), as a script's `kill 0` does
//   exit N   exit(N)
// and exits 0 at end of file. Its words on the command line, before that:
//   catch-tstp      count SIGTSTP, then stop by it as curses programs do (default, raise, catch)
//   ignore-tstp     ignore SIGTSTP (Ctrl-Z stops nothing)
//   int-exits N     exit(N) on SIGINT; otherwise SIGINT is counted
//   keep-int        leave SIGINT as inherited (a script's `&` ignores it), do not count it
//   wait MS         instead of reading commands, wait MS milliseconds (time stopped counts), print
//                   "waited" and the counts, and exit 0
//   count-exits N MS  instead of reading commands, wait for signal N (caught and counted), print
//                   "counting", wait MS milliseconds more (as a program that shuts down gracefully
//                   at its first SIGTERM and would abort at a second), print "got N" (how many
//                   came) and exit N
// SIGCONT is always counted. Every line it prints starts with "job_app".
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/apps/app_common.h"

namespace {

volatile sig_atomic_t g_int = 0, g_tstp = 0, g_cont = 0, g_counted = 0;
int g_int_exit = -1;

void OnInt(int) {
  if (g_int_exit >= 0) _exit(g_int_exit);
  g_int = g_int + 1;
}
void OnCont(int) { g_cont = g_cont + 1; }
void OnCounted(int) { g_counted = g_counted + 1; }
void OnTstp(int) {
  g_tstp = g_tstp + 1;
  signal(SIGTSTP, SIG_DFL);
  raise(SIGTSTP);  // pending until this handler returns: the program stops there
}

void Catch(int signal_number, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(signal_number, &action, nullptr);
}

const char* Disposition(int signal_number) {
  struct sigaction current {};
  sigaction(signal_number, nullptr, &current);
  return current.sa_handler == SIG_IGN   ? "ignored"
         : current.sa_handler == SIG_DFL ? "default"
                                         : "caught";
}

// Whether this process's group is the terminal's foreground group (as `ps` shows with '+').
int Foreground() { return tcgetpgrp(STDIN_FILENO) == getpgrp() ? 1 : 0; }

std::string Counts() {
  return "int=" + std::to_string(g_int) + " tstp=" + std::to_string(g_tstp) +
         " cont=" + std::to_string(g_cont) + " foreground=" + std::to_string(Foreground());
}

void Say(const std::string& line) {
  std::string text = "job_app " + line + "\n";
  if (write(STDOUT_FILENO, text.data(), text.size()) < 0) std::exit(1);
}

// A line of stdin without the newline; false at end of file.
bool ReadLine(std::string* line) {
  line->clear();
  char c;
  for (;;) {
    ssize_t n = read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !line->empty();
    if (c == '\n') return true;
    line->push_back(c);
  }
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "job_app [catch-tstp | ignore-tstp] [int-exits N | keep-int] [wait MS | count-exits N MS]";
  std::string inherited = std::string("inherited int=") + Disposition(SIGINT) +
                          " quit=" + Disposition(SIGQUIT) + " tstp=" + Disposition(SIGTSTP);
  bool keep_int = false;
  long wait_ms = -1;
  int counted = 0;
  long count_ms = -1;
  Catch(SIGCONT, OnCont);
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "catch-tstp") {
      Catch(SIGTSTP, OnTstp);
    } else if (word == "ignore-tstp") {
      Catch(SIGTSTP, SIG_IGN);
    } else if (word == "int-exits" && i + 1 < argc) {
      g_int_exit = int(apps::ParseInt(argv[++i], 0, 255, kUsage));
    } else if (word == "keep-int") {
      keep_int = true;
    } else if (word == "wait" && i + 1 < argc) {
      wait_ms = apps::ParseInt(argv[++i], 0, 600'000, kUsage);
    } else if (word == "count-exits" && i + 2 < argc) {
      counted = int(apps::ParseInt(argv[++i], 1, SIGRTMAX, kUsage));
      count_ms = apps::ParseInt(argv[++i], 0, 600'000, kUsage);
    } else {
      std::fprintf(stderr, "job_app: unknown word '%s'\nusage: %s\n", argv[i], kUsage);
      return 2;
    }
  }
  if (!keep_int) Catch(SIGINT, OnInt);
  // Blocked until it is waited for: one that comes before is not lost between a test and a wait.
  sigset_t counted_only, unblocked;
  sigemptyset(&counted_only);
  if (counted != 0) {
    Catch(counted, OnCounted);
    sigaddset(&counted_only, counted);
    sigprocmask(SIG_BLOCK, &counted_only, &unblocked);
  }
  int devices = 0;
  apps::Check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");

  Say(inherited);
  Say("ready pid=" + std::to_string(getpid()) + " pgrp=" + std::to_string(getpgrp()) +
      " foreground=" + std::to_string(Foreground()));
  if (counted != 0) {
    while (g_counted == 0) sigsuspend(&unblocked);
    sigprocmask(SIG_SETMASK, &unblocked, nullptr);
    Say("counting");
    apps::SleepNs(uint64_t(count_ms) * 1'000'000);
    Say("got " + std::to_string(g_counted));
    return g_counted;
  }
  if (wait_ms >= 0) {
    apps::SleepNs(uint64_t(wait_ms) * 1'000'000);
    Say("waited " + Counts());
    return 0;
  }
  std::string line;
  while (ReadLine(&line)) {
    if (line == "counts") {
      Say(Counts());
    } else if (line == "kill-group") {
      kill(0, SIGINT);
    } else if (line.rfind("exit ", 0) == 0) {
      return int(apps::ParseInt(line.c_str() + 5, 0, 255, kUsage));
    } else if (!line.empty()) {
      Say("unknown command " + line);
    }
  }
  return 0;
}
