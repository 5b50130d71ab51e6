#include <algorithm>
#include <map>
#include <numeric>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnoser.h"
#include "collector/analysis/user_lock.h"
#include "collector/symbols/user_symbols.h"

namespace gprof::collector::diagnosis {

// A lock on the heap (or a stack, or anonymous memory) is named by the code that waited on it, as
// most of its waits' user stacks say (the first waits may have none: short sleeps carry no stack).
void NameLocksByTheirUsers(const Session& session, Analysis& analysis) {
  constexpr size_t kWaitsLooked = 64;
  for (Cause& cause : analysis.causes) {
    if (cause.wait_class != WaitClass::kUserLock) continue;
    std::vector<std::pair<UserNamedLock, size_t>> votes;
    int best = -1;
    for (size_t i = 0; i < std::min(cause.stalls.size(), kWaitsLooked); ++i) {
      const Stall& stall = analysis.stalls[cause.stalls[i]];
      std::optional<UserNamedLock> name = NameLockByItsUser(session, stall.wait, stall.call);
      if (!name) continue;
      auto vote = std::find_if(votes.begin(), votes.end(),
                               [&](const auto& entry) { return entry.first == *name; });
      if (vote == votes.end()) vote = votes.insert(vote, {std::move(*name), 0});
      const size_t count = ++vote->second;
      if (best < 0 || count > votes[best].second) best = static_cast<int>(vote - votes.begin());
    }
    if (best < 0) continue;
    cause.user_named = votes[best].first;
    if (!cause.user_named->library.empty())
      analysis.lock_users[{cause.object.pid, cause.object.address}].library =
          cause.user_named->library;
  }
}

// A Python lock is named by what its waiters' Python frames show it is (NamePythonLock), one name
// per futex word: the name most of the waits on the word give (the stalls' and their chains').
void NamePythonLocks(const Session& session, Analysis& analysis) {
  if (session.python.empty()) return;
  constexpr size_t kWaitsLooked = 64;  // per word
  std::map<std::pair<uint32_t, uint64_t>, std::map<std::string, size_t>> votes;
  auto vote = [&](const Wait& wait) {
    if (wait.object.kind != WaitKind::kFutex || wait.python_stack == nullptr) return;
    auto& word = votes[{wait.object.pid, wait.object.address}];
    size_t looked = 0;
    for (const auto& [name, count] : word) looked += count;
    if (looked >= kWaitsLooked) return;
    if (std::optional<std::string> name = NamePythonLock(session, wait)) ++word[*name];
  };
  for (const Stall& stall : analysis.stalls) {
    vote(stall.wait);
    for (const ChainLink& link : stall.chain) {
      if (link.wait) vote(*link.wait);
    }
  }
  for (const auto& [word, names] : votes) {
    const std::string* best = nullptr;
    size_t most = 0;
    for (const auto& [name, count] : names) {
      if (count > most) most = count, best = &name;
    }
    if (best != nullptr) analysis.lock_users[word].python = *best;
  }
  for (Cause& cause : analysis.causes) {
    if (cause.object.kind != WaitKind::kFutex || cause.kind == CauseKind::kHandoff) continue;
    auto named = analysis.lock_users.find({cause.object.pid, cause.object.address});
    if (named != analysis.lock_users.end()) cause.python_lock = named->second.python;
  }
}

int Diagnoser::CauseFor(const std::string& key, Cause first) {
  auto [entry, inserted] = cause_by_key_.try_emplace(key, 0);
  if (inserted) {
    entry->second = static_cast<int>(analysis_.causes.size());
    analysis_.causes.push_back(std::move(first));
  }
  return entry->second;
}

Cause CauseOfKind(CauseKind kind, WaitClass wait_class, uint32_t thread_tid) {
  Cause cause;
  cause.kind = kind;
  cause.wait_class = wait_class;
  cause.thread_tid = thread_tid;
  return cause;
}

void AddThread(std::vector<uint32_t>& tids, uint32_t tid) {
  if (std::find(tids.begin(), tids.end(), tid) == tids.end()) tids.push_back(tid);
}

namespace {

// The producer a handoff waited for: the root of its chain when that is a thread at work (on a
// CPU, short of one, or waiting for the GPU), whose work a relay only forwarded (a queue's feeder
// thread, a socket's reader thread, a process pool's result thread); else the thread that ended
// the wait.
uint32_t ProducerOf(const Stall& stall) {
  const ChainLink& root = stall.chain.back();
  if (root.state == ChainLink::State::kOnCpu || root.state == ChainLink::State::kRunnable ||
      root.state == ChainLink::State::kGpu)
    return root.tid;
  return stall.chain.front().tid;
}

// Whether two waits of a thread waited at the same place: the same Python stack, or without one
// the same user stack.
bool SamePlace(const Wait& a, const Wait& b) {
  if (a.python_stack != nullptr || b.python_stack != nullptr)
    return a.python_stack != nullptr && b.python_stack != nullptr &&
           a.python_stack->frames == b.python_stack->frames;
  return a.user_stack_id >= 0 && a.user_stack_id == b.user_stack_id;
}

// A thread woken by a delivery it did not want yet (a DataLoader's batch that came before the one
// it waits for), that put it aside and waited again at the same place, running less than this
// share of the shorter of the two waits between them, waited once: for the producer that ended
// the last wait.
constexpr double kPutAsideShare = 0.1;

}  // namespace

std::vector<uint32_t> Diagnoser::HandoffProducers() const {
  std::vector<uint32_t> producer(analysis_.stalls.size(), 0);
  std::map<uint32_t, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    const Stall& stall = analysis_.stalls[i];
    if (stall.profiler_tid != 0 || !IsCostlyHandoff(stall)) continue;
    producer[i] = ProducerOf(stall);
    by_thread[stall.tid].push_back(i);
  }
  for (auto& [tid, indexes] : by_thread) {
    std::sort(indexes.begin(), indexes.end(), [&](size_t a, size_t b) {
      return analysis_.stalls[a].wait.start_ns < analysis_.stalls[b].wait.start_ns;
    });
    // Back from the last, so that a put-aside wait takes the producer its next one resolved to;
    // the waits between at other places (fetching the batch's shared memory) are the delivery's.
    for (size_t k = indexes.size(); k-- > 1;) {
      const Stall& first = analysis_.stalls[indexes[k - 1]];
      for (size_t m = k; m < indexes.size(); ++m) {
        const Stall& next = analysis_.stalls[indexes[m]];
        if (next.wait.start_ns < first.wait.end_ns || !SamePlace(first.wait, next.wait)) continue;
        const uint64_t ran =
            reader_.Split(tid, first.wait.end_ns, next.wait.start_ns).on_cpu_ns;
        const uint64_t waited = std::min(first.wait.end_ns - first.wait.start_ns,
                                         next.wait.end_ns - next.wait.start_ns);
        if (static_cast<double>(ran) < kPutAsideShare * static_cast<double>(waited))
          producer[indexes[k - 1]] = producer[indexes[m]];
        break;
      }
    }
  }
  return producer;
}

namespace {

// A handoff that held the program up less than this share of its run is no cause.
constexpr double kSmallestHandoffShare = 0.01;

}  // namespace

// Convoys on one object collapse into one cause: the key is the object, not the holder.
void Diagnoser::GroupCauses() {
  const std::vector<uint32_t> producers = HandoffProducers();
  auto handoff_key = [&](size_t i) {
    return "handoff|" + std::to_string(analysis_.stalls[i].tid) + "|" +
           std::to_string(producers[i]);
  };
  // A handoff too small to matter is no cause: its waits (each the threshold or longer) held the
  // program up less than this share of its run in all (a start handshake of 2 ms in a run of
  // seconds). It stays a wait, listed with the others.
  std::map<std::string, uint64_t> handoff_ns;
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    const Stall& stall = analysis_.stalls[i];
    if (producers[i] != 0) handoff_ns[handoff_key(i)] += stall.wait.end_ns - stall.wait.start_ns;
  }
  const uint64_t run_ns = session_.meta.end_monotonic_ns > session_.meta.start_monotonic_ns
                              ? session_.meta.end_monotonic_ns - session_.meta.start_monotonic_ns
                              : 0;
  auto large_enough = [&](size_t i) {
    return static_cast<double>(handoff_ns[handoff_key(i)]) >=
           kSmallestHandoffShare * static_cast<double>(run_ns);
  };
  std::vector<uint64_t> rooted_ns;  // per cause: the longest wait with a chain so far
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    Stall& stall = analysis_.stalls[i];
    if (stall.profiler_tid != 0) continue;
    const bool handoff = IsCostlyHandoff(stall) && large_enough(i);
    if (!handoff && (!IsContention(stall.wait_class) || IsIdleWait(stall))) continue;
    const WaitObject& object = stall.wait.object;
    std::string where = std::to_string(object.address);
    std::string owner = std::to_string(object.pid);
    Cause first;
    if (handoff) first.kind = CauseKind::kHandoff;
    first.wait_class = stall.wait_class;
    first.object = object;
    if (object.kind == WaitKind::kFutex) {
      // A lock in shared memory is one object for every process that waits on it.
      std::string shared = session_.SharedWordKey(object.pid, object.address, object.seen_ns);
      if (!shared.empty()) owner.clear(), where = shared;
      // The words of one lock (a condition variable alternates between two, a mutex and its
      // condition sit side by side in the GIL) are one object: named by the symbol holding them.
      UserLocation location = LocateUserAddress(session_, object.pid, object.address,
                                                object.seen_ns, AddressUse::kData);
      if (!location.symbol.empty()) {
        where = location.module + ":" + location.symbol;
        first.symbol = location.symbol;
        first.symbol_module = location.module;
      }
    }
    // A handoff is one cause per waiter and the producer it waited for, whatever it waited on
    // (a condition variable's two words, a queue's pipe and its lock) and whichever relay
    // handed the work over.
    std::string key =
        handoff ? handoff_key(i)
                : std::string(WaitClassName(stall.wait_class)) + "|" +
                      std::to_string(static_cast<int>(object.kind)) + "|" + owner + "|" + where +
                      "|" + object.device + "|" +
                      (object.kind == WaitKind::kKernelFunction ? object.kernel_function : "");
    stall.cause = CauseFor(key, std::move(first));
    Cause& cause = analysis_.causes[stall.cause];
    rooted_ns.resize(analysis_.causes.size());
    // A handoff held its waiter up until it ran again (woken, it may still have lacked a CPU:
    // the CPU cause says so); a lock's waiters are counted asleep, as ever.
    const uint64_t held_ns = handoff ? stall.wait.end_ns - stall.wait.start_ns : stall.asleep_ns();
    cause.blocked_ns += held_ns;
    if (stall.on_critical_path) cause.held_up_ns += held_ns;
    cause.wait_count += 1;
    AddThread(cause.tids, stall.tid);
    cause.stalls.push_back(static_cast<int>(i));
    cause.longest_ns = std::max(cause.longest_ns, held_ns);
    // A handoff's root is one of the producer's own (a wait put aside names another).
    if (!stall.chain.empty() && stall.asleep_ns() > rooted_ns[stall.cause] &&
        (!handoff || ProducerOf(stall) == producers[i])) {
      rooted_ns[stall.cause] = stall.asleep_ns();
      cause.root = stall.chain.back();
    }
  }
  // The holder is the thread that held the object longest before releasing waiters: from its own
  // last wait on it (or the released wait's start) to the release. A waiter that woke the next
  // one right after it got the lock only passed it on (a convoy).
  std::map<std::pair<int, uint32_t>, std::vector<uint64_t>> wait_ends;  // (cause, tid) -> ends
  for (const Stall& stall : analysis_.stalls) {
    if (stall.cause >= 0) wait_ends[{stall.cause, stall.tid}].push_back(stall.wait.end_ns);
  }
  for (auto& [key, ends] : wait_ends) std::sort(ends.begin(), ends.end());
  std::vector<std::map<uint32_t, uint64_t>> held(analysis_.causes.size());
  for (const Stall& stall : analysis_.stalls) {
    if (stall.cause < 0 || stall.chain.empty()) continue;
    // A wait nobody ended was held up, to its release or the wait's end, by the owner its mutex
    // named.
    if (stall.wait.wake_ns == 0 && !stall.chain.front().owner) continue;
    uint32_t ender = stall.chain.front().tid;
    uint64_t release = stall.chain.front().end_ns;
    uint64_t since = stall.wait.start_ns;
    if (auto ends = wait_ends.find({stall.cause, ender}); ends != wait_ends.end()) {
      // Its last wait on the object that ended by the release.
      auto after = std::upper_bound(ends->second.begin(), ends->second.end(), release);
      if (after != ends->second.begin()) since = std::max(since, *(after - 1));
    }
    held[stall.cause][ender] += release - std::min(since, release);
  }
  for (size_t c = 0; c < held.size(); ++c) {
    Cause& cause = analysis_.causes[c];
    uint64_t longest = 0;
    for (const auto& [tid, ns] : held[c]) {
      if (ns > longest) longest = ns, cause.holder_tid = tid;
    }
    if (cause.holder_tid == 0 && cause.root) cause.holder_tid = cause.root->tid;
  }
}

void Diagnoser::Rank() {
  std::vector<int> order(analysis_.causes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Cause& x = analysis_.causes[a];
    const Cause& y = analysis_.causes[b];
    if (x.gpu_idle_ns != y.gpu_idle_ns) return x.gpu_idle_ns > y.gpu_idle_ns;
    return x.blocked_ns > y.blocked_ns;
  });
  std::vector<int> new_index(order.size());
  std::vector<Cause> ranked;
  for (size_t i = 0; i < order.size(); ++i) {
    new_index[order[i]] = static_cast<int>(i);
    ranked.push_back(std::move(analysis_.causes[order[i]]));
  }
  analysis_.causes = std::move(ranked);
  for (Stall& stall : analysis_.stalls) {
    if (stall.cause >= 0) stall.cause = new_index[stall.cause];
  }
  for (GpuGap& gap : analysis_.gaps) {
    if (gap.cause >= 0) gap.cause = new_index[gap.cause];
  }
}

}  // namespace gprof::collector::diagnosis
