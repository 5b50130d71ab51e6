// A lock whose word lies in memory that no module names (the heap, a stack, anonymous memory),
// named by the code that waited on it (FindLockUser): which library, where, and the memory. The
// writers say it in words (report_format.h's DescribeLockByItsUser).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "collector/analysis/waits.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct UserNamedLock {
  enum class Memory : uint8_t {
    kHeap,       // "[heap]"
    kMainStack,  // "[stack]"
    kAnonymous,  // anonymous memory
    kMapping,    // another mapping without a module's symbols: `mapping`
  };
  std::string library;    // whose code waited on it: "libcuda.so.580.159.04"
  std::string waited_in;  // that library's function on the stack, else the CUDA call; may be empty
  uint64_t address = 0;   // the futex word
  Memory memory = Memory::kHeap;
  std::string mapping;  // kMapping: the mapping's name
  bool operator==(const UserNamedLock&) const = default;
};

// The Python lock `wait` slept on, as the waiter's Python frames (read at the wait) show it: for the
// standard library's well-known objects their name and where the library waited
// ("logging.Handler.lock in logging/__init__.py:923", "queue.Queue.not_empty in queue.py:171"),
// for a lock of the program's own the kind and the innermost program frame that took it
// ("threading.Lock in app.py:12 (acquire)"). None when the word is a module's, the wait has no
// Python stack, or its native stack shows a lock that is not Python's (a C extension's mutex under
// a Python frame).
std::optional<std::string> NamePythonLock(const Session& session, const Wait& wait);

// The lock `wait` slept on as its waiter's code names it; `call` (may be null) is the CUDA call the
// wait was in, named when the library's frames have no symbol. None when the word is a module's,
// or the waiter's user stack names no code outside the system's libraries.
std::optional<UserNamedLock> NameLockByItsUser(const Session& session, const Wait& wait,
                                               const ApiCall* call);

}  // namespace gprof::collector
