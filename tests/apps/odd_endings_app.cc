// Programs that end while threads are blocked, and a program thread that takes gprof-run's own
// thread name (issue 34, cases 6 and 7). Each prints its threads as facts (scenario_facts.h):
//   scenario name=NAME pid=PID
//   thread tid=TID name=NAME
//
//   exit-main         "holder" locks a mutex and sleeps 30 s; "waiter1" and "waiter2" block on
//                     the mutex; main calls exit(0) once they sleep.
//   exit-from-thread  the same, but "quitter" calls exit_group while main waits in pthread_join.
//   condvar-exit      "cwaiter1" and "cwaiter2" wait on a condition variable that "signaller"
//                     would signal after 30 s; main calls exit(0) once they sleep.
//   named-writer      a thread of the program named "gprof-writer" holds a mutex 200 ms while
//                     "waiter1" and "waiter2" block on it; everyone is joined, main returns.
//   calm              two threads nap 50 ms, are joined, main returns: nothing to explain.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace {

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
pthread_mutex_t g_cond_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_print = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> g_locked{false};
bool g_signalled = false;

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

void SleepMs(long ms) {
  timespec duration = {ms / 1000, (ms % 1000) * 1'000'000};
  while (nanosleep(&duration, &duration) == -1 && errno == EINTR) {
  }
}

// Names the calling thread and says so, as a fact line.
pid_t Announce(const char* name) {
  pthread_setname_np(pthread_self(), name);
  pid_t tid = Tid();
  pthread_mutex_lock(&g_print);
  std::printf("thread tid=%d name=%s\n", static_cast<int>(tid), name);
  std::fflush(stdout);
  pthread_mutex_unlock(&g_print);
  return tid;
}

// Until thread `tid` of this process sleeps (state S in its stat), then a little longer: it is
// blocked in its wait, not on its way to it.
void AwaitAsleep(pid_t tid) {
  for (int i = 0; i < 2000; ++i) {
    std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'S') break;
    SleepMs(1);
  }
  SleepMs(50);
}

std::atomic<pid_t> g_tids[4];

void* Holder(void* hold_ms) {
  Announce(hold_ms == nullptr ? "holder" : "gprof-writer");
  pthread_mutex_lock(&g_mutex);
  g_locked = true;
  SleepMs(hold_ms == nullptr ? 30'000 : reinterpret_cast<long>(hold_ms));
  pthread_mutex_unlock(&g_mutex);
  return nullptr;
}

void* Waiter(void* index) {
  const long i = reinterpret_cast<long>(index);
  while (!g_locked) SleepMs(1);
  g_tids[i] = Announce(i == 0 ? "waiter1" : "waiter2");
  pthread_mutex_lock(&g_mutex);
  pthread_mutex_unlock(&g_mutex);
  return nullptr;
}

void* CondWaiter(void* index) {
  const long i = reinterpret_cast<long>(index);
  g_tids[i] = Announce(i == 0 ? "cwaiter1" : "cwaiter2");
  pthread_mutex_lock(&g_cond_mutex);
  while (!g_signalled) pthread_cond_wait(&g_cond, &g_cond_mutex);
  pthread_mutex_unlock(&g_cond_mutex);
  return nullptr;
}

void* Signaller(void*) {
  Announce("signaller");
  SleepMs(30'000);
  pthread_mutex_lock(&g_cond_mutex);
  g_signalled = true;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_cond_mutex);
  return nullptr;
}

void* Quitter(void*) {
  Announce("quitter");
  AwaitAsleep(g_tids[0]);
  AwaitAsleep(g_tids[1]);
  std::fflush(stdout);
  syscall(SYS_exit_group, 0);
  return nullptr;
}

void* Napper(void* name) {
  Announce(static_cast<const char*>(name));
  SleepMs(50);
  return nullptr;
}

pthread_t Start(void* (*body)(void*), void* argument) {
  pthread_t thread;
  if (pthread_create(&thread, nullptr, body, argument) != 0) std::abort();
  return thread;
}

// Both waiters have announced themselves and sleep on what they wait for.
void AwaitWaiters() {
  while (g_tids[0] == 0 || g_tids[1] == 0) SleepMs(1);
  AwaitAsleep(g_tids[0]);
  AwaitAsleep(g_tids[1]);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  std::printf("scenario name=%s pid=%d\n", scenario.c_str(), static_cast<int>(getpid()));
  Announce("main");
  if (scenario == "exit-main" || scenario == "exit-from-thread") {
    pthread_t holder = Start(Holder, nullptr);
    Start(Waiter, reinterpret_cast<void*>(0));
    Start(Waiter, reinterpret_cast<void*>(1));
    if (scenario == "exit-from-thread") {
      while (g_tids[0] == 0 || g_tids[1] == 0) SleepMs(1);
      Start(Quitter, nullptr);
      pthread_join(holder, nullptr);  // never returns: the quitter ends the process
      return 1;
    }
    AwaitWaiters();
    std::fflush(stdout);
    exit(0);
  }
  if (scenario == "condvar-exit") {
    Start(Signaller, nullptr);
    Start(CondWaiter, reinterpret_cast<void*>(0));
    Start(CondWaiter, reinterpret_cast<void*>(1));
    AwaitWaiters();
    std::fflush(stdout);
    exit(0);
  }
  if (scenario == "named-writer") {
    std::vector<pthread_t> threads = {Start(Holder, reinterpret_cast<void*>(200)),
                                      Start(Waiter, reinterpret_cast<void*>(0)),
                                      Start(Waiter, reinterpret_cast<void*>(1))};
    for (pthread_t thread : threads) pthread_join(thread, nullptr);
    return 0;
  }
  if (scenario == "calm") {
    static char first[] = "napper1", second[] = "napper2";
    pthread_t a = Start(Napper, first), b = Start(Napper, second);
    pthread_join(a, nullptr);
    pthread_join(b, nullptr);
    return 0;
  }
  std::fprintf(stderr, "usage: odd_endings_app exit-main|exit-from-thread|condvar-exit|"
                       "named-writer|calm\n");
  return 2;
}
