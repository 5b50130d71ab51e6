// A small fixed-capacity queue behind a mutex, for the rare hand-overs to the writer thread (slow
// calls' stacks, messages, CUPTI's completed buffers). Constant-initialisable: usable before any
// constructor has run. Not for the per-call path, which has its lock-free rings.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstring>

namespace gprof::inject {

template <typename T, size_t kCapacity>
class BoundedQueue {
 public:
  // False, and nothing stored, when the queue is full.
  bool Push(const T& item) {
    pthread_mutex_lock(&lock_);
    bool stored = count_ < kCapacity;
    if (stored) items_[count_++] = item;
    pthread_mutex_unlock(&lock_);
    return stored;
  }

  // Moves up to `capacity` items, oldest first, into `out`; returns how many.
  size_t Take(T* out, size_t capacity) {
    pthread_mutex_lock(&lock_);
    size_t taken = count_ < capacity ? count_ : capacity;
    for (size_t i = 0; i < taken; ++i) out[i] = items_[i];
    for (size_t i = taken; i < count_; ++i) items_[i - taken] = items_[i];
    count_ -= taken;
    pthread_mutex_unlock(&lock_);
    return taken;
  }

  // In a forked child: the lock may have been held by a thread that did not come along.
  void ResetAfterFork() {
    pthread_mutex_init(&lock_, nullptr);
    count_ = 0;
  }

 private:
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  T items_[kCapacity] = {};
  size_t count_ = 0;
};

}  // namespace gprof::inject
