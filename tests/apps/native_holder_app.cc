// native_holder_app: a thread that holds a lock while busy on CPU in native code, built without
// frame pointers (-O2 -fomit-frame-pointer, as glibc and most libraries are), while others wait
// for it: what the kernel recorder's on-CPU samples must name (tests/native_samples_test.cc).
//
//   native_holder_app SHAPE
//
// qsort  "holder" takes a pthread mutex and sorts an array with qsort and a slow comparator
//        (compare_slowly) for about 300 ms; "waiter-0" and "waiter-1" block on the mutex meanwhile.
//        The samples are inside compare_slowly, called back from libc's qsort, called by
//        sort_under_lock.
// spin   as qsort, but the holder runs a loop of the program's own (checksum_rounds, called by
//        spin_under_lock) for about 300 ms.
// stdio  "holder" locks a stdio stream (flockfile: glibc's internal lock, whose unlock wakes a
//        waiter through __lll_lock_wake_private) and runs checksum_rounds for about 300 ms, then
//        unlocks it in release_stream; "waiter-0" and "waiter-1" block in flockfile meanwhile.
//
// burn   (for scripts/bench/sample_cost.py) no lock: THREADS threads (argv[2], default 2) each
//        sort ROUNDS times (argv[3], default 200) with the slow comparator: a fixed amount of CPU
//        work; prints "burn elapsed_ns=..." (its own time, gprof-run's start and report not in it).
//
// Prints its ground truth: "scenario ...", "thread tid=... name=...", and "held start_ns=...
// end_ns=..." for the holder's hold.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace {

constexpr uint64_t kHoldNs = 300'000'000;
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_held{0};
volatile uint64_t g_sink = 0;

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void Name(const char* name) {
  prctl(PR_SET_NAME, name);
  printf("thread tid=%ld name=%s\n", long(syscall(SYS_gettid)), name);
}

}  // namespace

// Not static, not inlined: the names the report must give.
extern "C" __attribute__((noinline)) int compare_slowly(const void* a, const void* b) {
  uint64_t x = *static_cast<const uint64_t*>(a), y = *static_cast<const uint64_t*>(b);
  for (int i = 0; i < 400; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  g_sink = g_sink + x;
  return (*static_cast<const uint64_t*>(a) > y) - (*static_cast<const uint64_t*>(a) < y);
}

extern "C" __attribute__((noinline)) uint64_t checksum_rounds(uint64_t seed, int rounds) {
  for (int i = 0; i < rounds; ++i) seed = (seed ^ (seed >> 13)) * 0x9e3779b97f4a7c15ULL + i;
  return seed;
}

extern "C" __attribute__((noinline)) void sort_under_lock() {
  enum { kCount = 4096 };
  static uint64_t values[kCount];
  uint64_t end = NowNs() + kHoldNs;
  while (NowNs() < end) {
    for (int i = 0; i < kCount; ++i) values[i] = checksum_rounds(i, 3);
    qsort(values, kCount, sizeof(values[0]), compare_slowly);
  }
}

extern "C" __attribute__((noinline)) void spin_under_lock() {
  uint64_t end = NowNs() + kHoldNs;
  while (NowNs() < end) g_sink = g_sink + checksum_rounds(g_sink, 100000);
}

// Not a tail call: its own frame stays on the stack under funlockfile's.
extern "C" __attribute__((noinline)) void release_stream(FILE* stream) {
  funlockfile(stream);
  g_sink = g_sink + 1;
}

namespace {

std::string g_shape;
FILE* g_stream = nullptr;

void* Holder(void*) {
  Name("holder");
  if (g_shape == "stdio") {
    flockfile(g_stream);
  } else {
    pthread_mutex_lock(&g_mutex);
  }
  uint64_t start = NowNs();
  g_held = 1;
  if (g_shape == "qsort") {
    sort_under_lock();
  } else {
    spin_under_lock();
  }
  uint64_t end = NowNs();
  printf("held start_ns=%llu end_ns=%llu\n", (unsigned long long)start, (unsigned long long)end);
  if (g_shape == "stdio") {
    release_stream(g_stream);
  } else {
    pthread_mutex_unlock(&g_mutex);
  }
  return nullptr;
}

void* Waiter(void* arg) {
  char name[16];
  snprintf(name, sizeof(name), "waiter-%d", int(reinterpret_cast<intptr_t>(arg)));
  Name(name);
  while (!g_held) usleep(1000);
  usleep(20000);  // well inside the hold
  if (g_shape == "stdio") {
    flockfile(g_stream);
    funlockfile(g_stream);
  } else {
    pthread_mutex_lock(&g_mutex);
    pthread_mutex_unlock(&g_mutex);
  }
  return nullptr;
}

void* Burn(void* arg) {
  enum { kCount = 4096 };
  static thread_local uint64_t values[kCount];
  for (intptr_t round = 0; round < reinterpret_cast<intptr_t>(arg); ++round) {
    for (int i = 0; i < kCount; ++i) values[i] = checksum_rounds(i + round, 3);
    qsort(values, kCount, sizeof(values[0]), compare_slowly);
  }
  return nullptr;
}

int BurnMain(int threads, intptr_t rounds) {
  uint64_t start = NowNs();
  pthread_t workers[64];
  threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
  for (int i = 0; i < threads; ++i)
    pthread_create(&workers[i], nullptr, Burn, reinterpret_cast<void*>(rounds));
  for (int i = 0; i < threads; ++i) pthread_join(workers[i], nullptr);
  printf("burn threads=%d rounds=%ld elapsed_ns=%llu\n", threads, long(rounds),
         (unsigned long long)(NowNs() - start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_shape = argc > 1 ? argv[1] : "";
  if (g_shape == "burn")
    return BurnMain(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atol(argv[3]) : 200);
  if (g_shape != "qsort" && g_shape != "spin" && g_shape != "stdio") {
    fprintf(stderr, "usage: native_holder_app qsort|spin|stdio|burn [THREADS [ROUNDS]]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_stream = fopen("/dev/null", "w");
  if (g_stream == nullptr) return 1;
  printf("scenario name=%s pid=%d\n", g_shape.c_str(), int(getpid()));
  pthread_t holder, waiters[2];
  pthread_create(&holder, nullptr, Holder, nullptr);
  for (intptr_t i = 0; i < 2; ++i)
    pthread_create(&waiters[i], nullptr, Waiter, reinterpret_cast<void*>(i));
  pthread_join(holder, nullptr);
  for (pthread_t waiter : waiters) pthread_join(waiter, nullptr);
  fclose(g_stream);
  return 0;
}
