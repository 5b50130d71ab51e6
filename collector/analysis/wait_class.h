// What kind of wait a sleep was, in the terms of the diagnosis: the lock, the Python GIL, the
// kernel, the GPU driver, or no contention at all.
#pragma once

#include <cstdint>
#include <string>

#include "collector/analysis/waits.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct ThreadIndex;

// "user lock", "condition variable", "Python GIL", "kernel lock", "GPU driver", "page fault",
// "I/O", "sleep", "waiting for a CPU", "other".
const char* WaitClassName(WaitClass wait_class);

// Waits that are contention: one thread kept another from going on (the diagnosis ranks these).
// Conditions, I/O and sleeps are how threads idle by design; a slow page fault is I/O unless it
// waited on the mmap_lock (then it is that kernel lock).
bool IsContention(WaitClass wait_class);

// The holder the recorder read from the lock `tid` waited on in `futex` (FutexCall::owner_tid),
// when it names another thread of the same process; 0 otherwise (nothing read, or a word that was
// not such a lock).
uint32_t RecordedLockHolder(const Session& session, uint32_t tid, const FutexCall& futex);

// Classifies a wait of the session (its futex calls are looked up in `index`).
class WaitClassifier {
 public:
  WaitClassifier(const Session& session, const ThreadIndex& index)
      : session_(session), index_(index) {}
  WaitClass Classify(uint32_t tid, const Wait& wait) const;

 private:
  bool InPythonRuntime(const Wait& wait) const;
  // The waker's user stack in an unlock, or the sleeper's in a lock call.
  bool LockByStacks(const Wait& wait) const;
  // A semaphore used as a lock: posted by a thread that had itself waited on it meanwhile, or
  // taken by this waiter and posted by it to the next.
  bool SemaphoreUsedAsLock(uint32_t tid, const Wait& wait) const;
  const Session& session_;
  const ThreadIndex& index_;
};

}  // namespace gprof::collector
