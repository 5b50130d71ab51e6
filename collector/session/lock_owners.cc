#include "collector/session/lock_owners.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace gprof::collector {
namespace {

// The holder releases the lock a little before its system call returns: a call that ends this
// much before the release still spans the wait.
constexpr uint64_t kReleaseSlackNs = 200'000;

// One process's memory map calls by start, with the latest end among each prefix: a backward
// scan from a wait's start stops where no earlier call can still be running at its end.
struct ProcessCalls {
  std::vector<const MemoryMapCall*> calls;
  std::vector<uint64_t> max_end_upto;
};

bool WaitsOnTheLock(const Session& session, uint32_t tid, uint64_t lock, uint64_t start_ns,
                    uint64_t end_ns) {
  for (const LockWait& wait : session.lock_waits) {
    if (wait.start_ns >= end_ns) break;
    if (wait.tid == tid && wait.lock_address == lock && wait.end_ns > start_ns) return true;
  }
  return false;
}

// When the lock was released to the wait: the wakeup that ended the waiter's last sleep in it.
// The wait itself ends only when the woken waiter runs again, which on a busy machine is
// milliseconds after the release, past the end of the holder's call.
uint64_t ReleasedAt(const LockWait& wait, const std::vector<const OffCpuInterval*>& sleeps) {
  uint64_t released_ns = wait.end_ns;
  auto sleep = std::lower_bound(sleeps.begin(), sleeps.end(), wait.start_ns,
                                [](const OffCpuInterval* interval, uint64_t time_ns) {
                                  return interval->start_ns < time_ns;
                                });
  for (; sleep != sleeps.end() && (*sleep)->start_ns < wait.end_ns; ++sleep) {
    const uint64_t wake_ns = (*sleep)->wake_ns;
    if (wake_ns != 0 && wake_ns <= wait.end_ns) released_ns = wake_ns;
  }
  return released_ns;
}

}  // namespace

void InferMmapLockOwners(Session& session) {
  std::unordered_map<uint32_t, std::vector<const OffCpuInterval*>> sleeps_of;  // by start
  for (const LockWait& wait : session.lock_waits) {
    if (wait.owner_tid == 0 && wait.is_mmap_lock()) sleeps_of[wait.tid];
  }
  if (sleeps_of.empty()) return;
  for (const OffCpuInterval& interval : session.off_cpu) {
    auto sleeps = sleeps_of.find(interval.tid);
    if (sleeps != sleeps_of.end()) sleeps->second.push_back(&interval);
  }
  std::unordered_map<uint32_t, ProcessCalls> by_pid;
  for (const MemoryMapCall& call : session.memory_map_calls) {
    ProcessCalls& process = by_pid[call.pid];
    uint64_t max_end = process.max_end_upto.empty() ? 0 : process.max_end_upto.back();
    process.calls.push_back(&call);
    process.max_end_upto.push_back(std::max(max_end, call.end_ns));
  }
  for (LockWait& wait : session.lock_waits) {
    if (wait.owner_tid != 0 || !wait.is_mmap_lock()) continue;
    auto process = by_pid.find(wait.pid);
    if (process == by_pid.end()) continue;
    const auto& calls = process->second.calls;
    const uint64_t released_ns = ReleasedAt(wait, sleeps_of[wait.tid]);
    const uint64_t must_end_after =
        released_ns > kReleaseSlackNs ? released_ns - kReleaseSlackNs : 0;
    auto after = std::upper_bound(
        calls.begin(), calls.end(), wait.start_ns,
        [](uint64_t time_ns, const MemoryMapCall* call) { return time_ns < call->start_ns; });
    const MemoryMapCall* holder = nullptr;
    for (size_t i = static_cast<size_t>(after - calls.begin()); i-- > 0;) {
      if (process->second.max_end_upto[i] < must_end_after) break;
      const MemoryMapCall* call = calls[i];
      if (call->tid == wait.tid || call->end_ns < must_end_after) continue;
      if (holder != nullptr && call->duration() <= holder->duration()) continue;
      if (WaitsOnTheLock(session, call->tid, wait.lock_address, wait.start_ns, wait.end_ns))
        continue;
      holder = call;
    }
    if (holder == nullptr) continue;
    wait.owner_pid = holder->pid;
    wait.owner_tid = holder->tid;
    auto thread = session.threads.find(holder->tid);
    wait.owner_comm = thread != session.threads.end() ? thread->second.name : std::string();
    wait.owner_inferred = true;
  }
}

}  // namespace gprof::collector
