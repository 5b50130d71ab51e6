#include <pthread.h>
#include <time.h>

#include <new>

#include "tests/apps/lock_libs/lock_libs.h"

struct heaplock {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
};

namespace {

pthread_mutex_t g_heaplock_static_mutex;  // zero-initialized: PTHREAD_MUTEX_INITIALIZER, in .bss

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

void Spin(uint64_t ns) {
  for (const uint64_t until = NowNs() + ns; NowNs() < until;) {
  }
}

}  // namespace

extern "C" {

heaplock* heaplock_create() { return new (std::nothrow) heaplock; }

void heaplock_destroy(heaplock* lock) { delete lock; }

void heaplock_hold(heaplock* lock, uint64_t hold_ns) {
  pthread_mutex_lock(&lock->mutex);
  Spin(hold_ns);
  pthread_mutex_unlock(&lock->mutex);
}

void heaplock_hold_static(uint64_t hold_ns) {
  pthread_mutex_lock(&g_heaplock_static_mutex);
  Spin(hold_ns);
  pthread_mutex_unlock(&g_heaplock_static_mutex);
}

const void* heaplock_static_address() { return &g_heaplock_static_mutex; }

const void* heaplock_address(const heaplock* lock) { return &lock->mutex; }

}  // extern "C"
