// The locks of Python's threading module that threads wait for, read out of process for
// `gprof-run dump` (issue 38): a _thread.RLock keeps its owner, a _thread.lock keeps none.
//
// A thread blocked in acquire() sleeps on a futex at the lock's semaphore (PyThread_type_lock,
// glibc's sem_t, in 3.9 to 3.13). The lock object is found among the objects its frames hold (their
// locals and value stacks; `with lock:` keeps the bound lock.__exit__ there, whose self is the
// lock), and kept only when its semaphore is that futex: never a lock it does not wait for.
// Objects are checked by their type's tp_name before any field of theirs is believed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "bpf/python_reader.h"
#include "bpf/python_threads.h"

namespace gprof::bpf {

enum class PythonLockType : uint8_t { kLock, kRLock };

struct PythonLock {
  uint64_t object = 0;  // the _thread.lock or _thread.RLock
  PythonLockType type = PythonLockType::kLock;
  uint64_t owner = 0;  // an RLock's rlock_owner: its owner's thread ident (pthread_self()); 0: none
  uint64_t count = 0;  // an RLock's rlock_count: how many times its owner has taken it
  size_t frame = 0;    // the frame of the waiter's (index into its frames) that holds it
  uint64_t frame_first_local = 0;  // that frame's first local: `self` in a method
};

// The lock whose semaphore is futex `address` that `thread`'s innermost frames hold.
std::optional<PythonLock> PythonLockWaitedOn(const ProcessMemory& memory,
                                             const PythonInterpreter& python,
                                             const PythonThreadRead& thread, uint64_t address);

// The objects whose bound builtin __exit__ a frame of `thread` holds: the locks it is inside
// `with` on. A slot above the live top of a frame's value stack is read too (3.11 and 3.12 do not
// store the top of a running frame's stack): it may hold a method of a `with` block already left,
// whose object is checked to be alive (a sane reference count, still a bound builtin method).
std::vector<uint64_t> InsideWithBlocks(const ProcessMemory& memory, const PythonInterpreter& python,
                                       const PythonThreadRead& thread);

}  // namespace gprof::bpf
