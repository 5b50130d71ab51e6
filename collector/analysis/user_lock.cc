#include "collector/analysis/user_lock.h"

#include "collector/symbols/user_symbols.h"

namespace gprof::collector {

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
