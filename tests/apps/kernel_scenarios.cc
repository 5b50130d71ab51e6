// kernel_scenarios: the real kernel waits that the kernel recorder must explain (issue 4), one
// scenario per run, each with named threads and its ground truth on stdout.
//
//   kernel_scenarios SCENARIO
//
// mutex-convoy  "holder" keeps a pthread mutex 50 ms, on CPU; "waiter-0..2" block on it 2 ms apart,
//               and each, once it has the mutex, keeps it 5 ms on CPU and passes it on.
// condvar       "cv-waiter" waits on a pthread condition variable; "cv-signaller" signals it 30 ms
//               after the wait began.
// munmap-fault  "unmapper" munmaps a populated 512 MB region of 4 KB pages while "faulter" touches
//               the first page of fresh mappings, one every 100 us, and "mapper" maps and unmaps
//               1 MB regions. munmap holds the process's mmap_lock for write only briefly, then for
//               read while it frees the pages; a fault takes the per-VMA lock and needs the
//               mmap_lock only to set up a mapping's first page, with a trylock that fails once a
//               writer is queued. So the mapper's mmap queues behind the munmap (woken by the
//               unmapper), and the faulter's faults queue behind the mapper (woken by the mapper):
//               without a mapper, on Linux 6.18, no fault waits.
// overcommit    as many threads "spin-<i>" as CPUs this process may use, plus two, spin on CPU for
//               the same 300 ms.
// pipe          "pipe-reader" blocks in read() on a pipe until "pipe-writer" writes 30 ms later.
// kernel-mutex  "fpos-holder" reads a 1 GB hole of a tmpfs file (/dev/shm) in one readv(); 5 ms
//               later "fpos-waiter" calls lseek() on the same file and sleeps on the kernel mutex
//               file->f_pos_lock (taken by read, write and lseek on a regular file shared by
//               threads) until the readv returns. Both run on one CPU: the waiter runs while the
//               holder is preempted, so the kernel puts it to sleep at once instead of spinning
//               while the holder runs.
// device-ioctl  "dev-waiter" makes ioctl(FIONREAD) calls on the master of a pseudo-terminal (device
//               file /dev/ptmx, name "ptmx") and waits on it in poll(), then in epoll_wait(), each
//               time until "dev-writer" writes a byte to the terminal's other side 30 ms later (the
//               wakeup itself comes from a kworker, as a driver's comes from its interrupt).
// futex-waitv   "waitv-waiter" waits in futex_waitv (syscall 449) on two private futex words;
//               "waitv-waker" sets the second and wakes it with FUTEX_WAKE 30 ms later.
// odd-names     "holder" and "waiter" of mutex-convoy's kind, named with a quote, control
//               characters and bytes that are not UTF-8 (a program may name its threads anything):
//               holder `q"uote\x01\xff`, waiter `w\xc3(\x1b[1m`; the holder keeps the mutex 30 ms.
// deadlock      "lock-ab" holds a pthread mutex and "lock-ba" a pthread rwlock for writing; then
//               each waits 300 ms for the other's (pthread_rwlock_timedwrlock,
//               pthread_mutex_timedlock): a cycle of waits that only the timeouts end (each keeps
//               its own lock until both have timed out).
// control       no contention, for the diagnosis to find none: fewer "worker-<i>" threads than
//               CPUs each compute for 200 ms, taking and releasing a mutex of their own; the main
//               thread waits for them.
// lock-names    locks that only the code waiting on them can name (issue 18), one after another,
//               each held 40 ms on CPU by "<tag>-holder" while "<tag>-waiter-0..1" wait:
//               library-heap  a mutex on the heap inside libheaplock.so (heaplock_hold);
//               wrapped       another, its waiters calling it through libheapwrap.so;
//               cxx-mutex     a std::mutex in a heap object of libcxxlock.so;
//               program-heap  a pthread mutex on the heap of this program's own (ProgramHold);
//               library-bss   libheaplock.so's static mutex, in its .bss;
//               stdout        stdout's lock, held by flockfile, the waiters in printf.
//               Objects: `kind=lock phase=<phase> tag=<tag> addr=<futex word>`; tags: lib,
//               wrap, cxx, prog, bss, out.
// deep-stack    "deep-waiter" recurses 200 calls deep (Recurse) and waits there 40 ms for a mutex
//               "deep-holder" keeps on CPU: its user stack repeats one frame to the walk's limit.
// mutex-chain   16 rounds of a chain of three pthread mutexes: "link-0" holds m0; "link-1" holds
//               m1 and waits for m0; "link-2" holds m2 and waits for m1. link-0 keeps m0 2 to 6
//               ms on CPU, releases it and at once waits for m2; link-1, once it has m0, releases
//               both and waits on something else (a timed condition nobody signals, a sleep),
//               link-2 likewise. link-1 shares its CPU with "chain-hog-0..1": woken, it waits
//               for a CPU, while link-0 sleeps on m2 behind link-2 behind it. No thread ever waits
//               for a lock whose holder waits for one it holds. Then a real cycle: link-0 and
//               link-1 each hold a mutex and wait 150 ms for the other's in
//               pthread_mutex_timedlock, keeping their own until both have timed out.
// late-waker    3 rounds: "late-waiter" waits on a condition variable; "spawner" computes 20, 35
//               then 50 ms and only then creates "late-waker-<r>", which signals it at once: the
//               thread that ends each wait did not exist for most of it.
// preempted-producer
//               "producer", on the last CPU this process may use, hands 8 items to "consumer"
//               through a condition variable, each after computing 6 to 14 ms of its own CPU
//               time: CPU hogs that the test pins to that CPU (outside the recorded tree) make
//               it wait for the CPU, and the consumer waits that much longer.
// oversubscribed
//               as many "t-hog-<i>" as CPUs this process may use, plus four, spin for 300 ms;
//               alongside, "ticker" sleeps 2 ms and computes 0.2 ms, over and over: the thread
//               whose waits the lack of CPU makes longer (each wakeup waits for a CPU).
//
// stdout, printed once every thread has finished (printing meanwhile would add waits of its own):
// one fact per line, `key=value` fields, numbers in decimal or 0x-prefixed hex, times in
// CLOCK_MONOTONIC nanoseconds:
//   scenario name=<scenario> pid=<pid> cpus=<CPUs it may run on>
//   thread tid=<tid> role=<role> name=<thread name>                  one line per thread
//   object kind=<kind> ...                                            locks, futex words, files
//   span tid=<tid> what=<call> start_ns=<ns> end_ns=<ns> [key=value...]   ordered by start
//   result key=value...                                               figures derived from spans
// Exits 0; 2 with usage for a bad argument; 1 when a system call fails or the 20 s watchdog fires.
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/apps/lock_libs/lock_libs.h"

namespace {

constexpr unsigned kWatchdogS = 20;
constexpr uint64_t kMs = 1'000'000;
constexpr size_t kPageBytes = 4096;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

timespec ToTimespec(uint64_t ns) { return {time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)}; }

void SleepUntil(uint64_t deadline_ns) {
  const timespec deadline = ToTimespec(deadline_ns);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

void SleepNs(uint64_t duration_ns) { SleepUntil(NowNs() + duration_ns); }

void SpinUntil(uint64_t deadline_ns) {
  while (NowNs() < deadline_ns) {
  }
}

uintptr_t Addr(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

[[noreturn]] void Fail(const char* what, int error) {
  std::fprintf(stderr, "kernel_scenarios: %s: %s\n", what, std::strerror(error));
  std::exit(1);
}

// For calls that return -1 and set errno.
template <typename T>
T Check(T result, const char* what) {
  if (result == T(-1)) Fail(what, errno);
  return result;
}

// For calls that return an error number (pthread_*).
void CheckError(int error, const char* what) {
  if (error != 0) Fail(what, error);
}

// Waits until another thread has raised `counter` to `value`. It polls with short sleeps rather
// than wait on a futex, so that the scenario's futex record holds only the waits it is about.
void AwaitAtLeast(const std::atomic<int>& counter, int value) {
  while (counter.load() < value) SleepNs(100'000);
}

void PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  CheckError(pthread_setaffinity_np(pthread_self(), sizeof set, &set), "pthread_setaffinity_np");
}

cpu_set_t AllowedCpus() {
  cpu_set_t set;
  Check(sched_getaffinity(0, sizeof set, &set), "sched_getaffinity");
  return set;
}

struct Span {
  pid_t tid;
  const char* what;
  uint64_t start_ns;
  uint64_t end_ns;
  char details[160];  // " key=value...": a fixed buffer, so recording allocates nothing
};

// One named thread of a scenario. Only the thread writes its spans; others read them once it has
// been joined.
class Actor {
 public:
  Actor(std::string role, std::string name) : role_(std::move(role)), name_(std::move(name)) {
    spans_.reserve(kMaxSpans);
  }

  void Start(std::function<void(Actor&)> body) {
    thread_ = std::thread([this, body = std::move(body)] {
      CheckError(pthread_setname_np(pthread_self(), name_.c_str()), "pthread_setname_np");
      tid_ = gettid();
      body(*this);
    });
  }

  void Join() { thread_.join(); }

  void Record(const char* what, uint64_t start_ns, uint64_t end_ns, const char* format = "", ...)
      __attribute__((format(printf, 5, 6))) {
    if (spans_.size() == kMaxSpans) Fail("Actor::Record", ENOSPC);
    Span& span = spans_.emplace_back(Span{tid_, what, start_ns, end_ns, {}});
    va_list args;
    va_start(args, format);
    std::vsnprintf(span.details, sizeof span.details, format, args);
    va_end(args);
  }

  pid_t tid() const { return tid_; }
  const std::string& role() const { return role_; }
  const std::string& name() const { return name_; }
  const std::vector<Span>& spans() const { return spans_; }

 private:
  static constexpr size_t kMaxSpans = 64;
  std::string role_;
  std::string name_;
  pid_t tid_ = 0;
  std::vector<Span> spans_;
  std::thread thread_;
};

class Scenario {
 public:
  Actor& Add(std::string role, std::string name) {
    return *actors_.emplace_back(std::make_unique<Actor>(std::move(role), std::move(name)));
  }

  void JoinAll() {
    for (auto& actor : actors_) actor->Join();
  }

  void Object(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, format);
    objects_.push_back(Format(format, args));
    va_end(args);
  }

  void Result(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, format);
    results_.push_back(Format(format, args));
    va_end(args);
  }

  std::vector<Span> AllSpans() const {
    std::vector<Span> spans;
    for (const auto& actor : actors_) {
      spans.insert(spans.end(), actor->spans().begin(), actor->spans().end());
    }
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    return spans;
  }

  void Print(const char* name) const {
    const cpu_set_t allowed = AllowedCpus();
    std::printf("scenario name=%s pid=%d cpus=%d\n", name, int(getpid()), CPU_COUNT(&allowed));
    for (const auto& actor : actors_) {
      std::printf("thread tid=%d role=%s name=%s\n", int(actor->tid()), actor->role().c_str(),
                  actor->name().c_str());
    }
    for (const std::string& object : objects_) std::printf("object %s\n", object.c_str());
    for (const Span& span : AllSpans()) {
      std::printf("span tid=%d what=%s start_ns=%" PRIu64 " end_ns=%" PRIu64 "%s\n", int(span.tid),
                  span.what, span.start_ns, span.end_ns, span.details);
    }
    for (const std::string& result : results_) std::printf("result %s\n", result.c_str());
  }

 private:
  static std::string Format(const char* format, va_list args) {
    char text[256];
    std::vsnprintf(text, sizeof text, format, args);
    return text;
  }

  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<std::string> objects_;
  std::vector<std::string> results_;
};

// The holder keeps the mutex on CPU, as a thread inside cudaFree keeps the driver's lock; the
// waiters sleep on its futex word, and each one woken wakes the next when it unlocks.
// Spans: holder and waiters "hold" (from having the mutex to calling unlock); waiters "lock" (the
// pthread_mutex_lock call). Results: one `tid=<waiter> released_by=<tid>` per waiter, the thread
// that had the mutex before it.
void MutexConvoy(Scenario& scenario) {
  constexpr int kWaiters = 3;
  constexpr uint64_t kHolderHoldNs = 50 * kMs;
  constexpr uint64_t kWaiterHoldNs = 5 * kMs;
  constexpr uint64_t kWaiterSpacingNs = 2 * kMs;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  scenario.Object("kind=pthread_mutex addr=0x%" PRIxPTR " size=%zu", Addr(&mutex), sizeof mutex);
  std::atomic<int> held{0};

  scenario.Add("holder", "holder").Start([&](Actor& self) {
    CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
    const uint64_t acquired_ns = NowNs();
    held.store(1);
    SpinUntil(acquired_ns + kHolderHoldNs);
    self.Record("hold", acquired_ns, NowNs(), " mutex=0x%" PRIxPTR, Addr(&mutex));
    CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
  });
  AwaitAtLeast(held, 1);
  for (int i = 0; i < kWaiters; ++i) {
    scenario.Add("waiter", "waiter-" + std::to_string(i)).Start([&, i](Actor& self) {
      SleepNs(uint64_t(i) * kWaiterSpacingNs);  // they queue in index order
      const uint64_t lock_ns = NowNs();
      CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
      const uint64_t acquired_ns = NowNs();
      self.Record("lock", lock_ns, acquired_ns, " mutex=0x%" PRIxPTR, Addr(&mutex));
      SpinUntil(acquired_ns + kWaiterHoldNs);
      self.Record("hold", acquired_ns, NowNs(), " mutex=0x%" PRIxPTR, Addr(&mutex));
      CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
    });
  }
  scenario.JoinAll();

  pid_t previous_holder = 0;
  for (const Span& span : scenario.AllSpans()) {
    if (std::string_view(span.what) != "hold") continue;
    if (previous_holder != 0) {
      scenario.Result("tid=%d released_by=%d", int(span.tid), int(previous_holder));
    }
    previous_holder = span.tid;
  }
}

// glibc's condition variable: the waiter sleeps on a futex word inside the pthread_cond_t. The
// signaller signals after unlocking, so the waiter's wake is the signal's alone.
// Spans: "cond_wait" (the waiter's pthread_cond_wait loop), "cond_signal".
void Condvar(Scenario& scenario) {
  constexpr uint64_t kSignalAfterNs = 30 * kMs;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  bool ready = false;  // guarded by mutex
  std::atomic<int> waiting{0};
  scenario.Object("kind=pthread_cond addr=0x%" PRIxPTR " size=%zu", Addr(&cond), sizeof cond);
  scenario.Object("kind=pthread_mutex addr=0x%" PRIxPTR " size=%zu", Addr(&mutex), sizeof mutex);

  scenario.Add("waiter", "cv-waiter").Start([&](Actor& self) {
    CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
    waiting.store(1);
    const uint64_t wait_ns = NowNs();
    while (!ready) CheckError(pthread_cond_wait(&cond, &mutex), "pthread_cond_wait");
    const uint64_t woken_ns = NowNs();
    CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
    self.Record("cond_wait", wait_ns, woken_ns, " cond=0x%" PRIxPTR, Addr(&cond));
  });
  scenario.Add("signaller", "cv-signaller").Start([&](Actor& self) {
    AwaitAtLeast(waiting, 1);
    SleepNs(kSignalAfterNs);
    CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
    ready = true;
    CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
    const uint64_t signal_ns = NowNs();
    CheckError(pthread_cond_signal(&cond), "pthread_cond_signal");
    self.Record("cond_signal", signal_ns, NowNs(), " cond=0x%" PRIxPTR, Addr(&cond));
  });
  scenario.JoinAll();
}

// See the header for why three threads. Spans: "munmap" (addr, length), the mapper's longest
// "mmap" (length, calls), the faulter's longest "fault" (addr, faults, slow_faults: those of at
// least 1 ms). Result: munmap_ns, longest_fault_ns, longest_mmap_ns.
void MunmapFault(Scenario& scenario) {
  constexpr size_t kRegionBytes = size_t(512) << 20;
  constexpr size_t kFreshMappings = 8192;
  constexpr size_t kMapperBytes = size_t(1) << 20;
  constexpr uint64_t kTouchSpacingNs = 100'000;
  constexpr uint64_t kMapSpacingNs = 200'000;
  constexpr uint64_t kSlowFaultNs = kMs;
  constexpr uint64_t kSettleNs = 10 * kMs;  // before and after the munmap
  std::atomic<int> running{0};              // the faulter and the mapper, once they are busy
  std::atomic<int> stop{0};

  // 4 KB pages even where transparent huge pages are always on: a 512 MB batch freed by a
  // program is usually small pages, and 2 MB ones would make the munmap short.
  char* region = static_cast<char*>(
      Check(mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
            "mmap"));
  Check(madvise(region, kRegionBytes, MADV_NOHUGEPAGE), "madvise(MADV_NOHUGEPAGE)");
  Check(madvise(region, kRegionBytes, MADV_POPULATE_WRITE), "madvise(MADV_POPULATE_WRITE)");
  scenario.Object("kind=populated_region addr=0x%" PRIxPTR " length=%zu", Addr(region),
                  kRegionBytes);

  // Fresh mappings: single pages with a PROT_NONE page between them, so that none merges with a
  // neighbour and each first touch has a mapping to set up.
  char* fresh = static_cast<char*>(Check(
      mmap(nullptr, 2 * kFreshMappings * kPageBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
      "mmap"));
  for (size_t i = 0; i < kFreshMappings; ++i) {
    Check(mprotect(fresh + 2 * i * kPageBytes, kPageBytes, PROT_READ | PROT_WRITE), "mprotect");
  }
  scenario.Object("kind=fresh_mappings addr=0x%" PRIxPTR " length=%zu count=%zu stride=%zu",
                  Addr(fresh), 2 * kFreshMappings * kPageBytes, kFreshMappings, 2 * kPageBytes);

  uint64_t munmap_ns = 0, longest_fault_ns = 0, longest_mmap_ns = 0;
  scenario.Add("unmapper", "unmapper").Start([&](Actor& self) {
    AwaitAtLeast(running, 2);
    SleepNs(kSettleNs);
    const uint64_t start_ns = NowNs();
    Check(munmap(region, kRegionBytes), "munmap");
    const uint64_t end_ns = NowNs();
    munmap_ns = end_ns - start_ns;
    self.Record("munmap", start_ns, end_ns, " addr=0x%" PRIxPTR " length=%zu", Addr(region),
                kRegionBytes);
    SleepNs(kSettleNs);
    stop.store(1);
  });
  scenario.Add("mapper", "mapper").Start([&](Actor& self) {
    uint64_t longest_start_ns = 0, calls = 0;
    running.fetch_add(1);
    while (stop.load() == 0) {
      const uint64_t start_ns = NowNs();
      void* mapping = Check(
          mmap(nullptr, kMapperBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
          "mmap");
      const uint64_t took_ns = NowNs() - start_ns;
      Check(munmap(mapping, kMapperBytes), "munmap");
      ++calls;
      if (took_ns > longest_mmap_ns) longest_mmap_ns = took_ns, longest_start_ns = start_ns;
      SleepNs(kMapSpacingNs);
    }
    self.Record("mmap", longest_start_ns, longest_start_ns + longest_mmap_ns,
                " length=%zu calls=%" PRIu64, kMapperBytes, calls);
  });
  scenario.Add("faulter", "faulter").Start([&](Actor& self) {
    uint64_t longest_start_ns = 0, slow_faults = 0;
    const char* longest_address = nullptr;
    size_t touched = 0;
    running.fetch_add(1);
    for (; stop.load() == 0; ++touched) {
      if (touched == kFreshMappings) Fail("faulter", ENOMEM);
      volatile char* page = fresh + 2 * touched * kPageBytes;
      const uint64_t start_ns = NowNs();
      *page = 1;
      const uint64_t took_ns = NowNs() - start_ns;
      if (took_ns >= kSlowFaultNs) ++slow_faults;
      if (took_ns > longest_fault_ns) {
        longest_fault_ns = took_ns, longest_start_ns = start_ns;
        longest_address = const_cast<const char*>(page);
      }
      SleepNs(kTouchSpacingNs);
    }
    self.Record("fault", longest_start_ns, longest_start_ns + longest_fault_ns,
                " addr=0x%" PRIxPTR " faults=%zu slow_faults=%" PRIu64, Addr(longest_address),
                touched, slow_faults);
  });
  scenario.JoinAll();
  scenario.Result("munmap_ns=%" PRIu64 " longest_fault_ns=%" PRIu64 " longest_mmap_ns=%" PRIu64,
                  munmap_ns, longest_fault_ns, longest_mmap_ns);
}

struct SchedStat {
  uint64_t on_cpu_ns = 0;
  uint64_t runqueue_ns = 0;  // runnable, waiting for a CPU
  uint64_t timeslices = 0;
};

// The kernel's own account of this thread (CONFIG_SCHED_INFO).
SchedStat ReadSchedStat() {
  SchedStat stat;
  FILE* file = std::fopen("/proc/thread-self/schedstat", "r");
  if (file == nullptr) Fail("/proc/thread-self/schedstat", errno);
  const int fields = std::fscanf(file, "%" SCNu64 " %" SCNu64 " %" SCNu64, &stat.on_cpu_ns,
                                 &stat.runqueue_ns, &stat.timeslices);
  std::fclose(file);
  if (fields != 3) Fail("/proc/thread-self/schedstat", EINVAL);
  return stat;
}

// Spans: one "spin" per thread (the common 300 ms) with the kernel's schedstat over it: cpu_ns on
// CPU, runq_wait_ns runnable without a CPU, timeslices; and woke_ns, when its sleep until the
// start returned. Result: threads, cpus.
void Overcommit(Scenario& scenario) {
  constexpr uint64_t kSpinNs = 300 * kMs;
  const cpu_set_t allowed = AllowedCpus();
  const int cpus = CPU_COUNT(&allowed);
  const int threads = cpus + 2;
  const uint64_t start_ns = NowNs() + 20 * kMs;  // once every thread exists
  for (int i = 0; i < threads; ++i) {
    scenario.Add("spinner", "spin-" + std::to_string(i)).Start([=](Actor& self) {
      const SchedStat before = ReadSchedStat();
      SleepUntil(start_ns);
      const uint64_t woke_ns = NowNs();
      SpinUntil(start_ns + kSpinNs);
      const uint64_t end_ns = NowNs();
      const SchedStat after = ReadSchedStat();
      self.Record("spin", start_ns, end_ns,
                  " cpu_ns=%" PRIu64 " runq_wait_ns=%" PRIu64 " timeslices=%" PRIu64
                  " woke_ns=%" PRIu64,
                  after.on_cpu_ns - before.on_cpu_ns, after.runqueue_ns - before.runqueue_ns,
                  after.timeslices - before.timeslices, woke_ns);
    });
  }
  scenario.JoinAll();
  scenario.Result("threads=%d cpus=%d", threads, cpus);
}

// Spans: "read" (the reader's blocked read), "write".
void Pipe(Scenario& scenario) {
  constexpr uint64_t kWriteAfterNs = 30 * kMs;
  int fds[2];
  Check(pipe(fds), "pipe");
  struct stat status;
  Check(fstat(fds[0], &status), "fstat");
  scenario.Object("kind=pipe read_fd=%d write_fd=%d inode=%" PRIu64, fds[0], fds[1],
                  uint64_t(status.st_ino));
  std::atomic<int> reading{0};

  scenario.Add("reader", "pipe-reader").Start([&](Actor& self) {
    char byte;
    reading.store(1);
    const uint64_t start_ns = NowNs();
    const ssize_t got = Check(read(fds[0], &byte, 1), "read");
    self.Record("read", start_ns, NowNs(), " fd=%d bytes=%zd", fds[0], got);
  });
  scenario.Add("writer", "pipe-writer").Start([&](Actor& self) {
    AwaitAtLeast(reading, 1);
    SleepNs(kWriteAfterNs);
    const uint64_t start_ns = NowNs();
    const ssize_t put = Check(write(fds[1], "x", 1), "write");
    self.Record("write", start_ns, NowNs(), " fd=%d bytes=%zd", fds[1], put);
  });
  scenario.JoinAll();
  close(fds[0]);
  close(fds[1]);
}

// Spans: "readv" (the holder's, bytes), "lseek" (the waiter's). The holder keeps f_pos_lock for
// the whole readv; the kernel records it as the mutex's owner.
void KernelMutex(Scenario& scenario) {
  constexpr size_t kBufferBytes = size_t(16) << 20;
  constexpr int kReads = 64;  // one readv of kReads * kBufferBytes = 1 GB
  constexpr uint64_t kLseekAfterNs = 5 * kMs;
  // A hole in a tmpfs file reads as zeros without allocating: the readv is long and costs no
  // memory. Opened, not memfd_create'd: only files opened by path get f_pos_lock.
  const int fd = Check(open("/dev/shm", O_TMPFILE | O_RDWR, 0600), "open(/dev/shm, O_TMPFILE)");
  Check(ftruncate(fd, off_t(kBufferBytes) * kReads), "ftruncate");
  char* buffer = static_cast<char*>(Check(mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0),
                                          "mmap"));
  std::vector<iovec> reads(kReads, iovec{buffer, kBufferBytes});
  const cpu_set_t allowed = AllowedCpus();
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  scenario.Object("kind=file fd=%d path=/dev/shm(O_TMPFILE) length=%zu lock=file.f_pos_lock cpu=%d",
                  fd, kBufferBytes * kReads, cpu);
  std::atomic<int> reading{0};

  scenario.Add("holder", "fpos-holder").Start([&](Actor& self) {
    PinToCpu(cpu);
    reading.store(1);
    const uint64_t start_ns = NowNs();
    const ssize_t got = Check(readv(fd, reads.data(), kReads), "readv");
    self.Record("readv", start_ns, NowNs(), " fd=%d bytes=%zd", fd, got);
  });
  scenario.Add("waiter", "fpos-waiter").Start([&](Actor& self) {
    PinToCpu(cpu);
    AwaitAtLeast(reading, 1);
    SleepNs(kLseekAfterNs);
    const uint64_t start_ns = NowNs();
    const off_t offset = Check(lseek(fd, 0, SEEK_CUR), "lseek");
    self.Record("lseek", start_ns, NowNs(), " fd=%d offset=%jd", fd, intmax_t(offset));
  });
  scenario.JoinAll();
  munmap(buffer, kBufferBytes);
  close(fd);
}

// Spans: the waiter's "ioctl" (fd, request, ret, value: bytes readable), "poll" (fd, ret, revents),
// "epoll_wait" (epfd, fd: the device's, ret); the writer's "write" (fd: the terminal's other side).
void DeviceIoctl(Scenario& scenario) {
  constexpr uint64_t kWriteAfterNs = 30 * kMs;
  constexpr int kTimeoutMs = 5000;
  const int master = Check(posix_openpt(O_RDWR | O_NOCTTY), "posix_openpt");
  Check(grantpt(master), "grantpt");
  Check(unlockpt(master), "unlockpt");
  char slave_path[64];
  CheckError(ptsname_r(master, slave_path, sizeof slave_path), "ptsname_r");
  const int slave = Check(open(slave_path, O_RDWR | O_NOCTTY), "open pty");
  termios raw;
  Check(tcgetattr(slave, &raw), "tcgetattr");
  cfmakeraw(&raw);  // bytes pass unchanged
  Check(tcsetattr(slave, TCSANOW, &raw), "tcsetattr");
  scenario.Object("kind=device path=/dev/ptmx name=ptmx fd=%d", master);
  scenario.Object("kind=device path=%s fd=%d", slave_path, slave);
  std::atomic<int> round{0};  // the waiter's wait that the writer is to end

  scenario.Add("waiter", "dev-waiter").Start([&](Actor& self) {
    auto readable = [&] {
      int bytes = 0;
      const uint64_t start_ns = NowNs();
      const int ret = Check(ioctl(master, FIONREAD, &bytes), "ioctl(FIONREAD)");
      self.Record("ioctl", start_ns, NowNs(), " fd=%d request=0x%lx ret=%d value=%d", master,
                  static_cast<unsigned long>(FIONREAD), ret, bytes);
    };
    char byte;
    readable();
    pollfd poll_fd = {master, POLLIN, 0};
    round.store(1);
    uint64_t start_ns = NowNs();
    int ready = Check(poll(&poll_fd, 1, kTimeoutMs), "poll");
    self.Record("poll", start_ns, NowNs(), " fd=%d ret=%d revents=0x%x", master, ready,
                unsigned(poll_fd.revents));
    readable();
    Check(read(master, &byte, 1), "read");

    const int epoll_fd = Check(epoll_create1(EPOLL_CLOEXEC), "epoll_create1");
    epoll_event event = {};
    event.events = EPOLLIN;
    Check(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, master, &event), "epoll_ctl");
    round.store(2);
    start_ns = NowNs();
    ready = Check(epoll_wait(epoll_fd, &event, 1, kTimeoutMs), "epoll_wait");
    self.Record("epoll_wait", start_ns, NowNs(), " epfd=%d fd=%d ret=%d", epoll_fd, master, ready);
    Check(read(master, &byte, 1), "read");
    close(epoll_fd);
  });
  scenario.Add("writer", "dev-writer").Start([&](Actor& self) {
    for (int r = 1; r <= 2; ++r) {
      AwaitAtLeast(round, r);
      SleepNs(kWriteAfterNs);
      const uint64_t start_ns = NowNs();
      Check(write(slave, "x", 1), "write");
      self.Record("write", start_ns, NowNs(), " fd=%d bytes=1", slave);
    }
  });
  scenario.JoinAll();
  close(slave);
  close(master);
}

// Spans: "hold" (the holder's), "lock" (the waiter's).
void OddNames(Scenario& scenario) {
  constexpr uint64_t kHoldNs = 30 * kMs;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<int> held{0};
  scenario.Add("holder", "q\"uote\x01\xff").Start([&](Actor& self) {
    pthread_mutex_lock(&mutex);
    held.store(1);
    const uint64_t start_ns = NowNs();
    SpinUntil(start_ns + kHoldNs);
    pthread_mutex_unlock(&mutex);
    self.Record("hold", start_ns, NowNs(), "");
  });
  scenario.Add("waiter", "w\xc3(\x1b[1m").Start([&](Actor& self) {
    AwaitAtLeast(held, 1);
    const uint64_t start_ns = NowNs();
    pthread_mutex_lock(&mutex);
    const uint64_t end_ns = NowNs();
    pthread_mutex_unlock(&mutex);
    self.Record("lock", start_ns, end_ns, "");
  });
  scenario.JoinAll();
}

// Spans: "work" per worker (iterations done; runq_wait_ns, its time waiting for a CPU meanwhile,
// from schedstat).
void Control(Scenario& scenario) {
  constexpr uint64_t kWorkNs = 200 * kMs;
  const cpu_set_t allowed = AllowedCpus();
  const int workers = std::max(1, std::min(2, CPU_COUNT(&allowed) - 1));
  const uint64_t start_ns = NowNs() + 20 * kMs;  // once every thread exists
  for (int i = 0; i < workers; ++i) {
    scenario.Add("worker", "worker-" + std::to_string(i)).Start([=](Actor& self) {
      pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;  // nobody else takes it
      SleepUntil(start_ns);
      const SchedStat before = ReadSchedStat();
      uint64_t iterations = 0;
      while (NowNs() < start_ns + kWorkNs) {
        pthread_mutex_lock(&own);
        for (int k = 0; k < 1000; ++k) asm volatile("" ::: "memory");
        pthread_mutex_unlock(&own);
        ++iterations;
      }
      const SchedStat after = ReadSchedStat();
      self.Record("work", start_ns, NowNs(), " iterations=%" PRIu64 " runq_wait_ns=%" PRIu64,
                  iterations, after.runqueue_ns - before.runqueue_ns);
    });
  }
  scenario.JoinAll();
  scenario.Result("workers=%d", workers);
}

// Spans: "futex_waitv" (count, ret: the index of the word that woke it), "futex_wake" (addr, ret:
// threads woken).
void FutexWaitv(Scenario& scenario) {
  constexpr uint64_t kWakeAfterNs = 30 * kMs;
  constexpr uint64_t kTimeoutNs = 5'000 * kMs;
  alignas(8) std::atomic<uint32_t> words[2] = {0, 0};
  scenario.Object("kind=futex_word index=0 addr=0x%" PRIxPTR, Addr(&words[0]));
  scenario.Object("kind=futex_word index=1 addr=0x%" PRIxPTR, Addr(&words[1]));
  std::atomic<int> waiting{0};

  scenario.Add("waiter", "waitv-waiter").Start([&](Actor& self) {
    futex_waitv waiters[2] = {};
    for (int i = 0; i < 2; ++i) {
      waiters[i].val = 0;
      waiters[i].uaddr = Addr(&words[i]);
      waiters[i].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
    }
    waiting.store(1);
    const uint64_t start_ns = NowNs();
    const timespec deadline = ToTimespec(start_ns + kTimeoutNs);
    const long woken_by =
        Check(syscall(SYS_futex_waitv, waiters, 2, 0, &deadline, CLOCK_MONOTONIC), "futex_waitv");
    self.Record("futex_waitv", start_ns, NowNs(), " count=2 ret=%ld", woken_by);
  });
  scenario.Add("waker", "waitv-waker").Start([&](Actor& self) {
    AwaitAtLeast(waiting, 1);
    SleepNs(kWakeAfterNs);
    words[1].store(1);
    const uint64_t start_ns = NowNs();
    const long woken =
        Check(syscall(SYS_futex, &words[1], FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0), "futex");
    self.Record("futex_wake", start_ns, NowNs(), " addr=0x%" PRIxPTR " ret=%ld", Addr(&words[1]),
                woken);
  });
  scenario.JoinAll();
}

// See the header. Spans: "timedlock" (lock: the address waited for, result: its error number).
void Deadlock(Scenario& scenario) {
  constexpr uint64_t kTimeoutNs = 300 * kMs;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
  std::atomic<int> holding{0};
  std::atomic<int> gave_up{0};
  scenario.Object("kind=pthread_mutex addr=0x%" PRIxPTR, Addr(&mutex));
  scenario.Object("kind=pthread_rwlock addr=0x%" PRIxPTR, Addr(&rwlock));
  auto deadline = [] {
    timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_sec += (at.tv_nsec + kTimeoutNs) / 1'000'000'000;
    at.tv_nsec = (at.tv_nsec + kTimeoutNs) % 1'000'000'000;
    return at;
  };
  // Each holds its own lock, waits for the other's, and keeps its own until both have given up,
  // so that the other's wait ends by its own timeout, not by this release.
  auto cross = [&](Actor& self, auto take_own, auto wait_other, auto release_own, uintptr_t other) {
    take_own();
    holding.fetch_add(1);
    AwaitAtLeast(holding, 2);
    const uint64_t start_ns = NowNs();
    int result = wait_other();
    self.Record("timedlock", start_ns, NowNs(), " lock=0x%" PRIxPTR " result=%d", other, result);
    gave_up.fetch_add(1);
    AwaitAtLeast(gave_up, 2);
    release_own();
  };
  scenario.Add("mutex-holder", "lock-ab").Start([&](Actor& self) {
    cross(
        self, [&] { CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock"); },
        [&] {
          timespec at = deadline();
          return pthread_rwlock_timedwrlock(&rwlock, &at);
        },
        [&] { CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock"); }, Addr(&rwlock));
  });
  scenario.Add("rwlock-writer", "lock-ba").Start([&](Actor& self) {
    cross(
        self, [&] { CheckError(pthread_rwlock_wrlock(&rwlock), "pthread_rwlock_wrlock"); },
        [&] {
          timespec at = deadline();
          return pthread_mutex_timedlock(&mutex, &at);
        },
        [&] { CheckError(pthread_rwlock_unlock(&rwlock), "pthread_rwlock_unlock"); }, Addr(&mutex));
  });
  scenario.JoinAll();
}

// The kernel recorder copies a process's maps when it next drains its ring buffer after the exec
// (every 100 ms): a scenario whose frames must be named lives past that.
void OutliveTheMapsSnapshot() { SleepNs(250 * kMs); }

// One lock of lock-names: "<tag>-holder" takes it through `hold` (holding it kHoldNs), then
// "<tag>-waiter-0..1" call `wait` while it holds it (a thread's name has at most 15 bytes).
// Lambdas, not std::function: each thread calls the library straight from its own frame, as a
// program does (a call through a pointer hides which function was called, see FindLockUser).
template <typename Hold, typename Wait>
void ContendedPhase(Scenario& scenario, const char* phase, const char* tag, const void* word,
                    Hold hold, Wait wait) {
  constexpr uint64_t kHoldNs = 40 * kMs;
  constexpr int kWaiters = 2;
  scenario.Object("kind=lock phase=%s tag=%s addr=0x%" PRIxPTR, phase, tag, Addr(word));
  std::atomic<int> holding{0};
  std::vector<Actor*> actors;
  actors.push_back(&scenario.Add("holder", std::string(tag) + "-holder"));
  actors.back()->Start([&](Actor& self) {
    holding.store(1);
    const uint64_t start_ns = NowNs();
    hold(kHoldNs);
    self.Record("hold", start_ns, NowNs(), " phase=%s", phase);
  });
  for (int i = 0; i < kWaiters; ++i) {
    actors.push_back(&scenario.Add("waiter", std::string(tag) + "-waiter-" + std::to_string(i)));
    actors.back()->Start([&](Actor& self) {
      AwaitAtLeast(holding, 1);
      SleepNs(5 * kMs);  // the holder has taken it by now
      const uint64_t start_ns = NowNs();
      wait();
      self.Record("lock", start_ns, NowNs(), " phase=%s", phase);
    });
  }
  for (Actor* actor : actors) actor->Join();
}

__attribute__((noinline)) void ProgramHold(pthread_mutex_t* mutex, uint64_t hold_ns) {
  CheckError(pthread_mutex_lock(mutex), "pthread_mutex_lock");
  SpinUntil(NowNs() + hold_ns);
  CheckError(pthread_mutex_unlock(mutex), "pthread_mutex_unlock");
}

// See the header. Spans: "hold", "lock" (phase).
void LockNames(Scenario& scenario) {
  constexpr uint64_t kWaiterHoldNs = 100'000;
  heaplock* library = heaplock_create();
  heaplock* wrapped = heaplock_create();
  cxxlock* counter = cxxlock_create();
  auto* own = new pthread_mutex_t(PTHREAD_MUTEX_INITIALIZER);
  if (library == nullptr || wrapped == nullptr || counter == nullptr) Fail("create", ENOMEM);
  ContendedPhase(
      scenario, "library-heap", "lib", heaplock_address(library),
      [&](uint64_t ns) { heaplock_hold(library, ns); },
      [&] { heaplock_hold(library, kWaiterHoldNs); });
  ContendedPhase(
      scenario, "wrapped", "wrap", heaplock_address(wrapped),
      [&](uint64_t ns) { heaplock_hold(wrapped, ns); },
      [&] { heapwrap_hold(wrapped, kWaiterHoldNs); });
  ContendedPhase(
      scenario, "cxx-mutex", "cxx", cxxlock_address(counter),
      [&](uint64_t ns) { cxxlock_add(counter, ns); }, [&] { cxxlock_add(counter, kWaiterHoldNs); });
  ContendedPhase(
      scenario, "program-heap", "prog", own, [&](uint64_t ns) { ProgramHold(own, ns); },
      [&] { ProgramHold(own, kWaiterHoldNs); });
  ContendedPhase(
      scenario, "library-bss", "bss", heaplock_static_address(),
      [](uint64_t ns) { heaplock_hold_static(ns); }, [] { heaplock_hold_static(kWaiterHoldNs); });
  ContendedPhase(
      scenario, "stdout", "out", stdout->_lock,
      [](uint64_t ns) {
        flockfile(stdout);
        SpinUntil(NowNs() + ns);
        funlockfile(stdout);
      },
      [] {
        std::printf("noise the waiter got stdout\n");
        std::fflush(stdout);
      });
  heaplock_destroy(library);
  heaplock_destroy(wrapped);
  cxxlock_destroy(counter);
  delete own;
  OutliveTheMapsSnapshot();
}

// Each frame reads a local after its call returns: no call is a tail call, none is folded away.
__attribute__((noinline)) int Recurse(int depth, pthread_mutex_t* mutex) {
  volatile int here = depth;
  if (depth == 0) {
    CheckError(pthread_mutex_lock(mutex), "pthread_mutex_lock");
    CheckError(pthread_mutex_unlock(mutex), "pthread_mutex_unlock");
    return 0;
  }
  int below = Recurse(depth - 1, mutex);
  return below + here;
}

// See the header. Spans: "hold", "lock" (depth).
void DeepStack(Scenario& scenario) {
  constexpr int kDepth = 200;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  scenario.Object("kind=pthread_mutex addr=0x%" PRIxPTR, Addr(&mutex));
  std::atomic<int> held{0};
  scenario.Add("holder", "deep-holder").Start([&](Actor& self) {
    CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
    held.store(1);
    const uint64_t start_ns = NowNs();
    SpinUntil(start_ns + 40 * kMs);
    CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
    self.Record("hold", start_ns, NowNs(), " mutex=0x%" PRIxPTR, Addr(&mutex));
  });
  scenario.Add("waiter", "deep-waiter").Start([&](Actor& self) {
    AwaitAtLeast(held, 1);
    const uint64_t start_ns = NowNs();
    Recurse(kDepth, &mutex);
    self.Record("lock", start_ns, NowNs(), " depth=%d", kDepth);
  });
  scenario.JoinAll();
  OutliveTheMapsSnapshot();
}

// The CPU time this thread has used.
uint64_t ThreadCpuNs() {
  timespec ts;
  Check(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

// Computes until this thread has used `cpu_ns` more CPU time (however long that takes).
void ComputeCpuNs(uint64_t cpu_ns) {
  const uint64_t until = ThreadCpuNs() + cpu_ns;
  while (ThreadCpuNs() < until) {
  }
}

// Waits `timeout_ns` on a condition variable nobody signals.
void TimedCondWait(uint64_t timeout_ns) {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond;
  pthread_condattr_t attr;
  CheckError(pthread_condattr_init(&attr), "pthread_condattr_init");
  CheckError(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC), "pthread_condattr_setclock");
  CheckError(pthread_cond_init(&cond, &attr), "pthread_cond_init");
  const timespec deadline = ToTimespec(NowNs() + timeout_ns);
  CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
  int error = 0;
  while (error == 0) error = pthread_cond_timedwait(&cond, &mutex, &deadline);
  if (error != ETIMEDOUT) Fail("pthread_cond_timedwait", error);
  CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
  pthread_cond_destroy(&cond);
}

// The CPUs this process may use, in order.
std::vector<int> AllowedCpuList() {
  const cpu_set_t allowed = AllowedCpus();
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  return cpus;
}

// See the header. Spans: the waits of the chain, "lock" (mutex, round); the cycle's "timedlock"
// (lock, result). Results: chain_end_ns (the rounds done, before the cycle), rounds.
void MutexChain(Scenario& scenario) {
  constexpr int kRounds = 16;
  constexpr int kHogs = 2;
  constexpr uint64_t kCycleTimeoutNs = 150 * kMs;
  pthread_mutex_t m[3] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                          PTHREAD_MUTEX_INITIALIZER};
  pthread_mutex_t cycle[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
  for (int i = 0; i < 3; ++i)
    scenario.Object("kind=pthread_mutex name=m%d addr=0x%" PRIxPTR, i, Addr(&m[i]));
  for (int i = 0; i < 2; ++i)
    scenario.Object("kind=pthread_mutex name=cycle-%d addr=0x%" PRIxPTR, i, Addr(&cycle[i]));
  const std::vector<int> cpus = AllowedCpuList();
  const int cpu0 = cpus.front(), cpu1 = cpus.size() > 1 ? cpus[1] : cpus.front();
  // Per round: link-0 holds m0 (held), link-1 holds m1 and is about to wait (ready1), link-2 too
  // (ready2); each is done (done1, done2).
  std::atomic<int> held{0}, ready1{0}, ready2{0}, done1{0}, done2{0};
  std::atomic<bool> stop_hogs{false};
  std::atomic<int> holding{0}, gave_up{0};
  std::atomic<uint64_t> chain_end_ns{0};
  // The wait after each release: link-1 and link-2 alternate between a timed condition and a
  // sleep, of 1 to 3 ms, in a pattern that differs between them.
  auto then_wait = [](int round, int salt) {
    const uint64_t duration = uint64_t(1 + (round * 7 + salt) % 3) * kMs;
    if ((round + salt) % 2 == 0) {
      TimedCondWait(duration);
    } else {
      SleepNs(duration);
    }
  };
  auto lock = [](Actor& self, pthread_mutex_t* mutex, int round) {
    const uint64_t start_ns = NowNs();
    CheckError(pthread_mutex_lock(mutex), "pthread_mutex_lock");
    self.Record("lock", start_ns, NowNs(), " mutex=0x%" PRIxPTR " round=%d", Addr(mutex), round);
  };
  auto unlock = [](pthread_mutex_t* mutex) {
    CheckError(pthread_mutex_unlock(mutex), "pthread_mutex_unlock");
  };
  // Each holds its own, waits for the other's until the timeout, and keeps its own until both
  // have given up: nobody wakes either wait.
  auto cross = [&](Actor& self, pthread_mutex_t* own, pthread_mutex_t* other) {
    CheckError(pthread_mutex_lock(own), "pthread_mutex_lock");
    holding.fetch_add(1);
    AwaitAtLeast(holding, 2);
    timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_sec += (at.tv_nsec + kCycleTimeoutNs) / 1'000'000'000;
    at.tv_nsec = (at.tv_nsec + kCycleTimeoutNs) % 1'000'000'000;
    const uint64_t start_ns = NowNs();
    const int result = pthread_mutex_timedlock(other, &at);
    self.Record("timedlock", start_ns, NowNs(), " lock=0x%" PRIxPTR " result=%d", Addr(other),
                result);
    gave_up.fetch_add(1);
    AwaitAtLeast(gave_up, 2);
    unlock(own);
  };

  for (int i = 0; i < kHogs; ++i) {
    scenario.Add("hog", "chain-hog-" + std::to_string(i)).Start([&, cpu1](Actor&) {
      PinToCpu(cpu1);
      while (!stop_hogs.load()) {
      }
    });
  }
  scenario.Add("link", "link-0").Start([&, cpu0](Actor& self) {
    PinToCpu(cpu0);
    for (int r = 0; r < kRounds; ++r) {
      AwaitAtLeast(done1, r);
      AwaitAtLeast(done2, r);
      CheckError(pthread_mutex_lock(&m[0]), "pthread_mutex_lock");
      held.store(r + 1);
      AwaitAtLeast(ready2, r + 1);
      SleepNs(2 * kMs);  // link-1 and link-2 asleep on their locks
      SpinUntil(NowNs() + uint64_t(2 + (r * 3) % 5) * kMs);
      unlock(&m[0]);
      lock(self, &m[2], r);  // at once: link-1 has just been woken
      unlock(&m[2]);
    }
    AwaitAtLeast(done1, kRounds);
    AwaitAtLeast(done2, kRounds);
    stop_hogs.store(true);
    chain_end_ns.store(NowNs());
    cross(self, &cycle[0], &cycle[1]);
  });
  scenario.Add("link", "link-1").Start([&, cpu1](Actor& self) {
    PinToCpu(cpu1);
    for (int r = 0; r < kRounds; ++r) {
      AwaitAtLeast(held, r + 1);
      CheckError(pthread_mutex_lock(&m[1]), "pthread_mutex_lock");
      ready1.store(r + 1);
      lock(self, &m[0], r);
      unlock(&m[0]);
      unlock(&m[1]);
      then_wait(r, 0);
      done1.store(r + 1);
    }
    AwaitAtLeast(holding, 1);
    cross(self, &cycle[1], &cycle[0]);
  });
  scenario.Add("link", "link-2").Start([&, cpu0](Actor& self) {
    PinToCpu(cpu0);
    for (int r = 0; r < kRounds; ++r) {
      AwaitAtLeast(ready1, r + 1);
      CheckError(pthread_mutex_lock(&m[2]), "pthread_mutex_lock");
      ready2.store(r + 1);
      lock(self, &m[1], r);
      unlock(&m[1]);
      unlock(&m[2]);
      then_wait(r, 1);
      done2.store(r + 1);
    }
  });
  scenario.JoinAll();
  scenario.Result("rounds=%d chain_end_ns=%" PRIu64, kRounds, chain_end_ns.load());
}

// See the header. Spans: the waiter's "cond_wait" (round), the spawner's "work" (round: from the
// waiter's wait to just before it creates the waker), each waker's "signal".
void LateWaker(Scenario& scenario) {
  constexpr int kRounds = 3;
  constexpr uint64_t kWorkNs[kRounds] = {20 * kMs, 35 * kMs, 50 * kMs};
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  int signalled = 0;  // guarded by mutex
  std::atomic<int> waiting{0};
  scenario.Object("kind=pthread_cond addr=0x%" PRIxPTR, Addr(&cond));
  Actor& waiter = scenario.Add("waiter", "late-waiter");
  Actor& spawner = scenario.Add("spawner", "spawner");
  std::vector<Actor*> wakers;
  for (int r = 0; r < kRounds; ++r)
    wakers.push_back(&scenario.Add("waker", "late-waker-" + std::to_string(r)));

  waiter.Start([&](Actor& self) {
    for (int r = 0; r < kRounds; ++r) {
      CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
      waiting.store(r + 1);
      const uint64_t wait_ns = NowNs();
      while (signalled < r + 1) CheckError(pthread_cond_wait(&cond, &mutex), "pthread_cond_wait");
      const uint64_t woken_ns = NowNs();
      CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
      self.Record("cond_wait", wait_ns, woken_ns, " round=%d", r);
    }
  });
  spawner.Start([&](Actor& self) {
    for (int r = 0; r < kRounds; ++r) {
      AwaitAtLeast(waiting, r + 1);
      const uint64_t start_ns = NowNs();
      SpinUntil(start_ns + kWorkNs[r]);
      self.Record("work", start_ns, NowNs(), " round=%d", r);
      wakers[r]->Start([&, r](Actor& waker) {
        const uint64_t signal_ns = NowNs();
        CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
        signalled = r + 1;
        CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
        CheckError(pthread_cond_signal(&cond), "pthread_cond_signal");
        waker.Record("signal", signal_ns, NowNs(), " round=%d", r);
      });
    }
  });
  scenario.JoinAll();
}

// See the header. Spans: the producer's "item" (its CPU time, cpu_ns, and its time waiting for
// a CPU meanwhile, runq_wait_ns, from schedstat), the consumer's "wait" (item). Result: cpu, the
// CPU the producer ran on.
void PreemptedProducer(Scenario& scenario) {
  constexpr int kItems = 8;
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  int produced = 0;  // guarded by mutex
  const int cpu = AllowedCpuList().back();
  scenario.Object("kind=pthread_cond addr=0x%" PRIxPTR, Addr(&cond));

  scenario.Add("consumer", "consumer").Start([&](Actor& self) {
    for (int item = 0; item < kItems; ++item) {
      CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
      const uint64_t start_ns = NowNs();
      while (produced < item + 1) CheckError(pthread_cond_wait(&cond, &mutex), "pthread_cond_wait");
      const uint64_t end_ns = NowNs();
      CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
      self.Record("wait", start_ns, end_ns, " item=%d", item);
    }
  });
  scenario.Add("producer", "producer").Start([&](Actor& self) {
    PinToCpu(cpu);
    for (int item = 0; item < kItems; ++item) {
      const uint64_t cpu_ns = uint64_t(6 + (item * 5) % 9) * kMs;
      const SchedStat before = ReadSchedStat();
      const uint64_t start_ns = NowNs();
      ComputeCpuNs(cpu_ns);
      CheckError(pthread_mutex_lock(&mutex), "pthread_mutex_lock");
      produced = item + 1;
      CheckError(pthread_mutex_unlock(&mutex), "pthread_mutex_unlock");
      CheckError(pthread_cond_signal(&cond), "pthread_cond_signal");
      const SchedStat after = ReadSchedStat();
      self.Record("item", start_ns, NowNs(), " item=%d cpu_ns=%" PRIu64 " runq_wait_ns=%" PRIu64,
                  item, cpu_ns, after.runqueue_ns - before.runqueue_ns);
      SleepNs(2 * kMs);  // the consumer is waiting again
    }
  });
  scenario.JoinAll();
  scenario.Result("cpu=%d", cpu);
}

// See the header. Spans: each hog's "spin" and the ticker's "ticks" (count), with schedstat's
// runq_wait_ns over them. Result: hogs, cpus.
void Oversubscribed(Scenario& scenario) {
  constexpr uint64_t kRunNs = 300 * kMs;
  const int cpus = int(AllowedCpuList().size());
  const int hogs = cpus + 4;
  const uint64_t start_ns = NowNs() + 20 * kMs;  // once every thread exists
  for (int i = 0; i < hogs; ++i) {
    scenario.Add("hog", "t-hog-" + std::to_string(i)).Start([=](Actor& self) {
      SleepUntil(start_ns);
      const SchedStat before = ReadSchedStat();
      SpinUntil(start_ns + kRunNs);
      const SchedStat after = ReadSchedStat();
      self.Record("spin", start_ns, NowNs(), " runq_wait_ns=%" PRIu64,
                  after.runqueue_ns - before.runqueue_ns);
    });
  }
  scenario.Add("ticker", "ticker").Start([=](Actor& self) {
    SleepUntil(start_ns);
    const SchedStat before = ReadSchedStat();
    int ticks = 0;
    while (NowNs() < start_ns + kRunNs) {
      SleepNs(2 * kMs);
      ComputeCpuNs(200'000);
      ++ticks;
    }
    const SchedStat after = ReadSchedStat();
    self.Record("ticks", start_ns, NowNs(), " count=%d runq_wait_ns=%" PRIu64, ticks,
                after.runqueue_ns - before.runqueue_ns);
  });
  scenario.JoinAll();
  scenario.Result("hogs=%d cpus=%d", hogs, cpus);
}

struct Entry {
  const char* name;
  void (*run)(Scenario&);
};

constexpr Entry kScenarios[] = {
    {"mutex-convoy", MutexConvoy},
    {"condvar", Condvar},
    {"munmap-fault", MunmapFault},
    {"overcommit", Overcommit},
    {"pipe", Pipe},
    {"kernel-mutex", KernelMutex},
    {"device-ioctl", DeviceIoctl},
    {"futex-waitv", FutexWaitv},
    {"deadlock", Deadlock},
    {"control", Control},
    {"odd-names", OddNames},
    {"lock-names", LockNames},
    {"deep-stack", DeepStack},
    {"mutex-chain", MutexChain},
    {"late-waker", LateWaker},
    {"preempted-producer", PreemptedProducer},
    {"oversubscribed", Oversubscribed},
};

void OnWatchdog(int) {
  constexpr char kMessage[] = "kernel_scenarios: watchdog: the scenario did not finish in time\n";
  (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  _exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const Entry* entry = nullptr;
  for (const Entry& candidate : kScenarios) {
    if (argc == 2 && std::strcmp(argv[1], candidate.name) == 0) entry = &candidate;
  }
  if (entry == nullptr) {
    std::fprintf(stderr, "usage: kernel_scenarios SCENARIO\nscenarios:");
    for (const Entry& candidate : kScenarios) std::fprintf(stderr, " %s", candidate.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  signal(SIGALRM, OnWatchdog);
  alarm(kWatchdogS);
  Scenario scenario;
  entry->run(scenario);
  scenario.Print(entry->name);
  return 0;
}
