// native_producer: a consumer thread waits on a condition variable for a producer thread busy in
// a libc call (qsort of a large array, 40-100 ms a batch), for issue 35's handoff tests.
//
// stdout, as tests/apps/handoffs/common.py prints it:
//   thread tid=<tid> pid=<pid> role=<consumer|producer>
//   wait tid=<tid> start_ns=<ns> end_ns=<ns>   the consumer's wait for each batch
//   work tid=<tid> start_ns=<ns> end_ns=<ns>   the producer's qsort of it
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr int kBatches = 5;

uint64_t Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

int Tid() { return int(syscall(SYS_gettid)); }

int CompareInts(const void* a, const void* b) {
  const int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  return (x > y) - (x < y);
}

std::mutex mutex;
std::condition_variable ready;
int batches_ready = 0;

// Elements qsort takes about `ms` milliseconds over on this machine (measured once).
size_t ElementsFor(double ms, double ns_per_element) { return size_t(ms * 1e6 / ns_per_element); }

void Fill(std::vector<int>& values, unsigned seed) {
  for (int& v : values) v = int(rand_r(&seed));
}

}  // namespace

int main() {
  std::printf("thread tid=%d pid=%d role=consumer\n", Tid(), int(getpid()));
  std::fflush(stdout);
  std::vector<int> probe(1 << 18);
  Fill(probe, 1);
  const uint64_t probe_start = Now();
  std::qsort(probe.data(), probe.size(), sizeof(int), CompareInts);
  const double ns_per_element = double(Now() - probe_start) / double(probe.size());
  std::thread producer([&] {
    pthread_setname_np(pthread_self(), "producer");
    std::printf("thread tid=%d pid=%d role=producer\n", Tid(), int(getpid()));
    std::fflush(stdout);
    for (int i = 0; i < kBatches; ++i) {
      std::vector<int> values(ElementsFor(40 + 15 * i, ns_per_element));
      Fill(values, unsigned(i) + 2);
      const uint64_t start = Now();
      std::qsort(values.data(), values.size(), sizeof(int), CompareInts);
      std::printf("work tid=%d start_ns=%llu end_ns=%llu\n", Tid(), (unsigned long long)start,
                  (unsigned long long)Now());
      std::fflush(stdout);
      std::lock_guard<std::mutex> lock(mutex);
      ++batches_ready;
      ready.notify_one();
    }
  });
  for (int i = 0; i < kBatches; ++i) {
    const uint64_t start = Now();
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait(lock, [&] { return batches_ready > i; });
    lock.unlock();
    std::printf("wait tid=%d start_ns=%llu end_ns=%llu\n", Tid(), (unsigned long long)start,
                (unsigned long long)Now());
    std::fflush(stdout);
  }
  producer.join();
  return 0;
}
