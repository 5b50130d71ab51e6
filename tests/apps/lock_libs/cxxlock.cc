#include <time.h>

#include <mutex>
#include <new>

#include "tests/apps/lock_libs/lock_libs.h"

namespace cxxlock_impl {

class Counter {
 public:
  __attribute__((noinline)) void Add(uint64_t hold_ns) {
    std::lock_guard<std::mutex> guard(mutex_);
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t until = uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec) + hold_ns;
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &ts);
      if (uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec) >= until) break;
    }
    ++count_;
  }
  const void* address() const { return &mutex_; }

 private:
  std::mutex mutex_;
  uint64_t count_ = 0;
};

}  // namespace cxxlock_impl

struct cxxlock {
  cxxlock_impl::Counter counter;
};

extern "C" {

cxxlock* cxxlock_create() { return new (std::nothrow) cxxlock; }

void cxxlock_destroy(cxxlock* counter) { delete counter; }

__attribute__((noinline)) void cxxlock_add(cxxlock* counter, uint64_t hold_ns) {
  counter->counter.Add(hold_ns);
}

const void* cxxlock_address(const cxxlock* counter) { return counter->counter.address(); }

}  // extern "C"
