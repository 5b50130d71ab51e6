#include "collector/analysis/user_lock.h"

#include <string_view>
#include <vector>

#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"

namespace gprof::collector {
namespace {

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// "Queue.get" -> "get"; "Handler.acquire" -> "acquire".
std::string_view Method(std::string_view qualname) {
  size_t dot = qualname.rfind('.');
  return dot == std::string_view::npos ? qualname : qualname.substr(dot + 1);
}

std::string_view ClassOf(std::string_view qualname) {
  size_t dot = qualname.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : qualname.substr(0, dot);
}

// "app.py:12" (a program's file by its name, as a lock's name is short), "queue.py:171".
std::string Where(const PythonFrame& frame) {
  std::string where = PythonShortPath(frame.file);
  if (IsProgramFrame(frame)) where = where.substr(where.rfind('/') + 1);
  if (frame.line) where += ":" + std::to_string(*frame.line);
  return where;
}

// Whether the waiter's native stack shows a lock that is not one of CPython's: a pthread mutex or
// rwlock (a C extension's, under a Python frame). CPython's threading locks are semaphores up to
// 3.12, and PyMutexes parked on semaphores from 3.13. (The stack often ends at the innermost libc
// frame, glibc having no frame pointers: what it shows is what is known.)
bool InForeignLock(const Session& session, const Wait& wait) {
  for (const std::string& frame :
       UserStackFrames(session, wait.pid, wait.user_stack_id, wait.start_ns)) {
    for (std::string_view part : {"lll_lock", "pthread_mutex", "pthread_rwlock", "mutex_lock",
                                  "mutex_timedlock", "rwlock_rdlock", "rwlock_wrlock"}) {
      if (Contains(frame, part)) return true;
    }
  }
  return false;
}

}  // namespace

std::optional<std::string> NamePythonLock(const Session& session, const Wait& wait) {
  const WaitObject& object = wait.object;
  if (object.kind != WaitKind::kFutex || wait.python_stack == nullptr) return std::nullopt;
  if (wait.wait_class != WaitClass::kUserLock && wait.wait_class != WaitClass::kCondition)
    return std::nullopt;
  UserLocation word =
      LocateUserAddress(session, object.pid, object.address, object.seen_ns, AddressUse::kData);
  if (word.in_module()) return std::nullopt;
  ResolvedPythonStack stack = ResolvePythonStack(session, *wait.python_stack);
  const std::vector<PythonFrame>& frames = stack.frames;
  if (frames.empty() || !frames.front().named) return std::nullopt;
  // The threading module's own frames (a Condition's wait, an Event's, a with statement's
  // __enter__), innermost first; then the frame that called into them.
  size_t caller = 0;
  while (caller < frames.size() && frames[caller].named &&
         PythonShortPath(frames[caller].file) == "threading.py")
    ++caller;
  if (caller == frames.size() || !frames[caller].named) return std::nullopt;
  const PythonFrame& by = frames[caller];
  const PythonFrame* threading = caller > 0 ? &frames[caller - 1] : nullptr;
  const std::string file = PythonShortPath(by.file);
  const std::string_view function = by.function;
  if (file == "queue.py") {
    // A Queue's three conditions share its mutex: a Condition's wait is the condition its method
    // waits on; taking the mutex (a with statement on a condition, or on the mutex) is the mutex.
    std::string what = "mutex";
    if (threading != nullptr && Method(threading->function) == "wait") {
      std::string_view method = Method(function);
      what = method == "get"    ? "not_empty"
             : method == "put"  ? "not_full"
             : method == "join" ? "all_tasks_done"
                                : "mutex";
    }
    return "queue." + std::string(ClassOf(function).empty() ? "Queue" : ClassOf(function)) + "." +
           what + " in " + Where(by);
  }
  if (file == "logging/__init__.py") {
    // A handler's lock (Handler.acquire, or a with statement in a handler's method from 3.13),
    // else the module's lock (_acquireLock, or `with _lock` from 3.13).
    const bool handler = Contains(function, "Handler");
    return std::string(handler ? "logging.Handler.lock" : "logging._lock") + " in " + Where(by);
  }
  if (!IsProgramFrame(by) && threading == nullptr) return std::nullopt;
  if (threading != nullptr) {
    // "threading.Condition in app.py:12 (wait)", "threading.Event in app.py:30 (wait)".
    std::string_view kind = ClassOf(threading->function);
    std::string_view method = Method(threading->function);
    if (kind.empty()) return std::nullopt;
    if (method == "__enter__") method = "with";
    if (method == "_wait_for_tstate_lock") method = "join";
    return "threading." + std::string(kind) + " in " + Where(by) + " (" + std::string(method) + ")";
  }
  // The program's frame called a lock's acquire (or entered a with statement on it) itself: one
  // of threading's C locks, if the native stack agrees.
  if (InForeignLock(session, wait)) return std::nullopt;
  return "threading.Lock in " + Where(by) + " (acquire)";
}

std::optional<UserNamedLock> NameLockByItsUser(const Session& session, const Wait& wait,
                                               const ApiCall* call) {
  const WaitObject& object = wait.object;
  if (object.kind != WaitKind::kFutex) return std::nullopt;
  UserLocation word =
      LocateUserAddress(session, object.pid, object.address, object.seen_ns, AddressUse::kData);
  if (word.in_module() || word.module.empty()) return std::nullopt;
  std::optional<LockUser> user = FindLockUser(session, wait.pid, wait.user_stack_id, wait.start_ns);
  if (!user) return std::nullopt;
  UserNamedLock lock;
  lock.library = user->module;
  lock.address = object.address;
  if (word.module == "[heap]") {
    lock.memory = UserNamedLock::Memory::kHeap;
  } else if (word.module.starts_with("[stack")) {
    lock.memory = UserNamedLock::Memory::kMainStack;
  } else if (word.module == "anonymous memory") {
    lock.memory = UserNamedLock::Memory::kAnonymous;
  } else {
    lock.memory = UserNamedLock::Memory::kMapping;
    lock.mapping = word.module;
  }
  if (!user->function.empty()) {
    lock.waited_in = user->function;
  } else if (call != nullptr) {
    lock.waited_in = session.ApiName(*call);
  }
  return lock;
}

}  // namespace gprof::collector
