// pingpong: two threads hand a token back and forth, each hand-over a wakeup and a context switch:
// the context-switch-heavy load of the kernel recorder's cost benchmark (scripts/bench).
//
//   pingpong futex ROUNDS   the token is a private futex word: FUTEX_WAKE, then FUTEX_WAIT
//   pingpong pipe ROUNDS    the token is a byte, sent over one pipe and back over another
//   pingpong convoy ROUNDS  64 threads take one pthread mutex ROUNDS / 64 times each, holding it
//                           for a few hundred instructions: a lock convoy; a round is one
//                           acquisition
//   pingpong faults ROUNDS  one thread touches ROUNDS fresh pages of anonymous memory (mapped in
//                           batches, 4 KiB pages, unmapped after): a round is one minor page fault
//   pingpong tcp ROUNDS     the token is a byte, sent over a loopback TCP connection and back
//                           (TCP_NODELAY): a write and a read of a TCP socket per hand-over
//   pingpong bulk ROUNDS    pong streams ROUNDS writes of 16 KiB over a loopback TCP connection
//                           and ping reads them 16 KiB at a time: a round is one write
//
// The main thread ("ping") times its ROUNDS round trips with the other thread ("pong") (convoy:
// all acquisitions, from the threads' start to the last's end; faults: its own touches, with the
// mmap and munmap calls) and prints one line on stdout:
//   pingpong kind=<futex|pipe|convoy|faults|tcp|bulk> rounds=<N> elapsed_ns=<ns> ns_per_round=<x.x>
//   rounds_per_s=<x>
// With PINGPONG_CPUS=A,B in the environment, ping runs on CPU A and pong on CPU B (futex and pipe):
// every hand-over crosses the same two CPUs, not whichever the scheduler picked that round.
// Exits 0; 2 with usage for bad arguments; 1 when a system call fails.
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <utility>

namespace {

constexpr const char* kUsage = "usage: pingpong futex|pipe|convoy|faults|tcp|bulk ROUNDS";
constexpr size_t kBulkBytes = 16384;
constexpr int kConvoyThreads = 64;
constexpr long kPageBytes = 4096;
constexpr long kFaultBatchPages = 16384;  // 64 MiB mapped at a time

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "pingpong: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// The futex word says whose turn it is; a thread sleeps in FUTEX_WAIT until it is its own.
class FutexToken {
 public:
  void AwaitTurn(uint32_t mine) {
    for (uint32_t seen; (seen = turn_.load()) != mine;) {
      if (syscall(SYS_futex, &turn_, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0) == -1 &&
          errno != EAGAIN && errno != EINTR) {
        Fail("futex(FUTEX_WAIT)");
      }
    }
  }

  void Pass(uint32_t to) {
    turn_.store(to);
    if (syscall(SYS_futex, &turn_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0) == -1) {
      Fail("futex(FUTEX_WAKE)");
    }
  }

 private:
  std::atomic<uint32_t> turn_{0};
};

void PipeSend(int fd) {
  while (write(fd, "x", 1) != 1) {
    if (errno != EINTR) Fail("write");
  }
}

void PipeReceive(int fd) {
  char byte;
  while (read(fd, &byte, 1) != 1) {
    if (errno != EINTR) Fail("read");
  }
}

// PINGPONG_CPUS's two CPUs, or {-1, -1}.
struct PinnedCpus {
  int ping = -1;
  int pong = -1;
};

PinnedCpus ReadPinnedCpus() {
  const char* text = std::getenv("PINGPONG_CPUS");
  PinnedCpus cpus;
  if (text == nullptr || *text == '\0') return cpus;
  if (std::sscanf(text, "%d,%d", &cpus.ping, &cpus.pong) != 2 || cpus.ping < 0 || cpus.pong < 0 ||
      cpus.ping >= CPU_SETSIZE || cpus.pong >= CPU_SETSIZE) {
    std::fprintf(stderr, "pingpong: PINGPONG_CPUS must be two CPU numbers, A,B (not %s)\n", text);
    std::exit(2);
  }
  return cpus;
}

void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) == -1) Fail("sched_setaffinity");
}

// Runs `ping` for each round on this thread and `pong` for each round on another; returns the
// elapsed time of this thread's rounds.
template <typename Ping, typename Pong>
uint64_t PlayRounds(long rounds, Ping ping, Pong pong) {
  const PinnedCpus cpus = ReadPinnedCpus();
  PinTo(cpus.ping);
  std::thread other([&] {
    PinTo(cpus.pong);
    pthread_setname_np(pthread_self(), "pong");
    for (long i = 0; i < rounds; ++i) pong();
  });
  const uint64_t start_ns = NowNs();
  for (long i = 0; i < rounds; ++i) ping();
  const uint64_t elapsed_ns = NowNs() - start_ns;
  other.join();
  return elapsed_ns;
}

// Two ends of a loopback TCP connection, with Nagle off: {accepted, connected}.
std::pair<int, int> TcpPair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener == -1 || bind(listener, reinterpret_cast<sockaddr*>(&address), length) == -1 ||
      listen(listener, 1) == -1 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == -1)
    Fail("listen");
  const int connected = socket(AF_INET, SOCK_STREAM, 0);
  if (connected == -1 || connect(connected, reinterpret_cast<sockaddr*>(&address), length) == -1)
    Fail("connect");
  const int accepted = accept(listener, nullptr, nullptr);
  if (accepted == -1) Fail("accept");
  close(listener);
  const int on = 1;
  setsockopt(accepted, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  setsockopt(connected, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  return {accepted, connected};
}

// Streams `rounds` writes of kBulkBytes from another thread and reads them all here; returns the
// time from the first write to the last byte read.
uint64_t Bulk(long rounds) {
  const auto [reader, writer] = TcpPair();
  std::atomic<bool> go{false};
  std::thread other([&, writer = writer] {
    pthread_setname_np(pthread_self(), "pong");
    static char chunk[kBulkBytes];
    while (!go.load()) std::this_thread::yield();
    for (long i = 0; i < rounds; ++i) {
      for (size_t sent = 0; sent < kBulkBytes;) {
        const ssize_t n = write(writer, chunk + sent, kBulkBytes - sent);
        if (n <= 0 && errno != EINTR) Fail("write");
        if (n > 0) sent += size_t(n);
      }
    }
  });
  static char buffer[kBulkBytes];
  const uint64_t total = uint64_t(rounds) * kBulkBytes;
  const uint64_t start_ns = NowNs();
  go.store(true);
  for (uint64_t got = 0; got < total;) {
    const ssize_t n = read(reader, buffer, kBulkBytes);
    if (n <= 0 && errno != EINTR) Fail("read");
    if (n > 0) got += uint64_t(n);
  }
  const uint64_t elapsed_ns = NowNs() - start_ns;
  other.join();
  return elapsed_ns;
}

// kConvoyThreads threads share one mutex; returns the time from their common start to the end of
// the last acquisition.
uint64_t Convoy(long rounds) {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  volatile uint64_t shared = 0;
  const long each = (rounds + kConvoyThreads - 1) / kConvoyThreads;
  std::thread threads[kConvoyThreads];
  for (auto& thread : threads) {
    thread = std::thread([&] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (long i = 0; i < each; ++i) {
        pthread_mutex_lock(&mutex);
        for (int k = 0; k < 200; ++k) shared = shared + 1;
        pthread_mutex_unlock(&mutex);
      }
    });
  }
  while (ready.load() < kConvoyThreads) std::this_thread::yield();
  const uint64_t start_ns = NowNs();
  go.store(true);
  for (auto& thread : threads) thread.join();
  return NowNs() - start_ns;
}

// Touches `rounds` fresh pages, one write each; returns the elapsed time. Huge pages are refused
// so that every page is one fault.
uint64_t Faults(long rounds) {
  const uint64_t start_ns = NowNs();
  for (long done = 0; done < rounds;) {
    const long pages = rounds - done < kFaultBatchPages ? rounds - done : kFaultBatchPages;
    const size_t bytes = size_t(pages) * kPageBytes;
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) Fail("mmap");
    madvise(mapped, bytes, MADV_NOHUGEPAGE);  // best effort: without THP there is nothing to refuse
    auto* memory = static_cast<volatile char*>(mapped);
    for (long page = 0; page < pages; ++page) memory[page * kPageBytes] = 1;
    if (munmap(mapped, bytes) == -1) Fail("munmap");
    done += pages;
  }
  return NowNs() - start_ns;
}

}  // namespace

int main(int argc, char** argv) {
  char* end = nullptr;
  const long rounds = argc == 3 ? std::strtol(argv[2], &end, 10) : 0;
  const bool futex = argc == 3 && std::strcmp(argv[1], "futex") == 0;
  const bool pipe_kind = argc == 3 && std::strcmp(argv[1], "pipe") == 0;
  const bool convoy = argc == 3 && std::strcmp(argv[1], "convoy") == 0;
  const bool faults = argc == 3 && std::strcmp(argv[1], "faults") == 0;
  const bool tcp = argc == 3 && std::strcmp(argv[1], "tcp") == 0;
  const bool bulk = argc == 3 && std::strcmp(argv[1], "bulk") == 0;
  if ((!futex && !pipe_kind && !convoy && !faults && !tcp && !bulk) || end == argv[2] ||
      *end != '\0' || rounds < 1) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  pthread_setname_np(pthread_self(), "ping");

  uint64_t elapsed_ns = 0;
  long done = rounds;
  if (convoy) {
    done = (rounds + kConvoyThreads - 1) / kConvoyThreads * kConvoyThreads;
    elapsed_ns = Convoy(rounds);
  } else if (faults) {
    elapsed_ns = Faults(rounds);
  } else if (bulk) {
    elapsed_ns = Bulk(rounds);
  } else if (tcp) {
    const auto [ping_end, pong_end] = TcpPair();
    elapsed_ns = PlayRounds(
        rounds,
        [&, ping_end = ping_end] {
          PipeSend(ping_end);
          PipeReceive(ping_end);
        },
        [&, pong_end = pong_end] {
          PipeReceive(pong_end);
          PipeSend(pong_end);
        });
  } else if (futex) {
    FutexToken token;
    elapsed_ns = PlayRounds(
        rounds,
        [&] {
          token.Pass(1);
          token.AwaitTurn(0);
        },
        [&] {
          token.AwaitTurn(1);
          token.Pass(0);
        });
  } else {
    int to_pong[2], to_ping[2];
    if (pipe(to_pong) == -1 || pipe(to_ping) == -1) Fail("pipe");
    elapsed_ns = PlayRounds(
        rounds,
        [&] {
          PipeSend(to_pong[1]);
          PipeReceive(to_ping[0]);
        },
        [&] {
          PipeReceive(to_pong[0]);
          PipeSend(to_ping[1]);
        });
  }
  std::printf("pingpong kind=%s rounds=%ld elapsed_ns=%" PRIu64
              " ns_per_round=%.1f rounds_per_s=%.0f\n",
              argv[1], done, elapsed_ns, double(elapsed_ns) / double(done),
              double(done) * 1e9 / double(elapsed_ns));
  return 0;
}
