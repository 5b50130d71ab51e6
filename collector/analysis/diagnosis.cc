#include "collector/analysis/diagnosis.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "collector/analysis/analysis.h"
#include "collector/analysis/critical_path.h"
#include "collector/analysis/diagnoser.h"
#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/user_lock.h"
#include "collector/symbols/user_symbols.h"
#include "inject/format/cuda_api_roles.h"
#include "inject/format/session_format.h"

namespace gprof::collector::diagnosis {

namespace {

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

// Driver calls that load a module or resolve a kernel in one: under lazy loading, a kernel's
// first use loads its module inside them, and CUPTI's overhead records do not cover all of it.
bool LoadsModules(std::string_view name) {
  return format::HasCudaApiRole(name, format::kCudaLoadsModules);
}

// A thread that runnable-waits at least this share of its life, for at least the threshold,
// was short of CPU.
constexpr double kCpuStarvedShare = 0.05;

}  // namespace

Diagnoser::Diagnoser(const Session& session, const WaitReader& reader,
                     const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                     Analysis& analysis)
    : session_(session),
      reader_(reader),
      correlation_(correlation),
      gpu_busy_(gpu_busy),
      analysis_(analysis) {
  analysis_.kernel_recorded = session.meta.kernel_recording;
  for (const TaskStart& start : session.task_starts) creator_of_[start.tid] = start.parent_tid;
  // gprof-run's own threads, and any they created (task_starts are in time order).
  for (const auto& [tid, role] : session.profiler_threads) ours_.insert(tid);
  for (const TaskStart& start : session.task_starts) {
    if (ours_.contains(start.parent_tid)) ours_.insert(start.tid);
  }
  analysis_.profiler_cost.tids.assign(ours_.begin(), ours_.end());
  for (const std::string& name : session.api_names)
    loading_call_names_.push_back(LoadsModules(name));
  // A load CUPTI did not name a thread for is its call's thread's.
  for (const ModuleLoad& load : session.module_loads) {
    uint32_t tid = load.tid;
    if (tid == 0) {
      const ApiCall* call = correlation_.CallOf(load.pid, load.correlation_id);
      if (call == nullptr) continue;
      tid = call->tid;
    }
    module_loads_[tid].push_back(&load);
  }
}

void Diagnoser::Run() {
  FindStalls();
  CountProfilerCost();
  GroupCauses();
  NameLocksByTheirUsers(session_, analysis_);
  NamePythonLocks(session_, analysis_);
  FindCpuStarvation();
  FindGpuGaps();
  Rank();
}

bool Diagnoser::WaitedForGpu(const Stall& stall) const {
  if (stall.call == nullptr || !gpu_busy_.Recorded(stall.pid)) return false;
  const uint64_t until = stall.wait.wake_ns != 0 ? stall.wait.wake_ns : stall.wait.end_ns;
  GpuUse use = gpu_busy_.UseDuring(stall.pid, stall.wait.start_ns, until);
  return use.busy_ns * 2 >= until - stall.wait.start_ns;
}

bool Diagnoser::EndedByTheDriver(const Stall& stall) const {
  if (stall.call == nullptr || !gpu_busy_.Recorded(stall.pid)) return false;
  const uint32_t waker = stall.wait.waker_tid;
  auto thread = session_.threads.find(waker);
  if (waker == 0 || waker == stall.tid || thread == session_.threads.end() ||
      thread->second.pid != stall.pid)
    return false;
  return reader_.CallsDuring(waker, 0, UINT64_MAX).empty();
}

uint64_t Diagnoser::ModuleLoadDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const {
  // CUPTI's overhead records, and the driver calls that load: the two overlap (a load inside a
  // call), so the union is what counts.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  auto add = [&](uint64_t from, uint64_t to) {
    from = std::max(from, start_ns);
    to = std::min(to, end_ns);
    if (to > from) spans.emplace_back(from, to);
  };
  if (auto loads = module_loads_.find(tid); loads != module_loads_.end()) {
    for (const ModuleLoad* load : loads->second) add(load->start_ns, load->end_ns);
  }
  for (const ApiCall* call : reader_.CallsDuring(tid, start_ns, end_ns)) {
    if (loading_call_names_[call->name_index]) add(call->enter_ns, call->exit_ns);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t total = 0, covered_ns = start_ns;
  for (const auto& [from, to] : spans) {
    if (to <= covered_ns) continue;
    total += to - std::max(from, covered_ns);
    covered_ns = to;
  }
  return total;
}

void Diagnoser::FindStalls() {
  path_ = FindCriticalPath(session_, reader_, ours_);
  const CriticalPath& path = path_;
  analysis_.critical_path_tid = path.end_tid;
  // A wait for the GIL is a run of sleeps (WaitReader), some shorter than the threshold: in a
  // Python process every sleep is looked at, elsewhere only the long ones.
  auto looked_at = [&](const OffCpuInterval& interval) {
    if (interval.state() == OffCpuState::kRunnable) return false;
    const uint64_t asleep_until = interval.wake_ns != 0 ? interval.wake_ns : interval.end_ns;
    return asleep_until - interval.start_ns >= analysis_.options.threshold_ns ||
           session_.python.processes.contains(interval.pid);
  };
  for (const OffCpuInterval& interval : session_.off_cpu) {
    if (!looked_at(interval) || Ours(interval.tid)) continue;  // gprof-run's own waits are not the program's
    // A wait of several pieces is one stall, made at its first piece (or at the first looked at).
    const auto [first, last] = reader_.PiecesOf(interval);
    if (&session_.off_cpu[first] != &interval && looked_at(session_.off_cpu[first])) continue;
    const Wait& whole = reader_.WaitOf(interval);
    uint64_t asleep_until = whole.wake_ns != 0 ? whole.wake_ns : whole.end_ns;
    if (asleep_until - whole.start_ns < analysis_.options.threshold_ns) continue;
    Stall stall;
    stall.pid = interval.pid;
    stall.tid = interval.tid;
    stall.wait = reader_.MakeWait(interval, whole.start_ns, whole.end_ns);
    stall.wait_class = stall.wait.wait_class;
    stall.call = reader_.CallAt(interval.tid, whole.start_ns);
    // A wait inside a CUDA call while its process's GPU was busy most of it, or ended by a thread
    // of the driver, waited for the GPU: the GPU's time, not a handoff's.
    for (size_t piece = first; piece <= last; ++piece) {
      if (session_.off_cpu[piece].tid != interval.tid) continue;
      stall.on_critical_path |= path.Holds(session_, session_.off_cpu[piece]);
      stall.joined_on_critical_path |= path.joins.contains(piece);
    }
    stall.on_critical_path =
        stall.on_critical_path && !WaitedForGpu(stall) && !EndedByTheDriver(stall);
    FollowChain(stall);
    analysis_.stalls.push_back(std::move(stall));
  }
}

namespace {

// A futex in the injected library's own memory: its data, or its zero-filled .bss in the anonymous
// mapping just past them (the exit's wait for the writer's last flush).
bool InInjectedLibrary(const Session& session, const WaitObject& object) {
  if (object.kind != WaitKind::kFutex) return false;
  auto process = session.processes.find(object.pid);
  if (process == session.processes.end()) return false;
  const MapsSnapshot* maps = process->second.MapsHolding(object.address, object.seen_ns);
  if (maps == nullptr) return false;
  const Mapping* mapping = maps->Find(object.address);
  if (mapping == nullptr) return false;
  if (mapping->path.empty() && mapping != maps->mappings.data() &&
      (mapping - 1)->end == mapping->start)
    mapping = mapping - 1;
  std::string_view path = mapping->path;
  return path.substr(path.rfind('/') + 1).starts_with("libgprof_inject");
}

}  // namespace

// Every wait of the program's that gprof-run's own thread held up: a lock it held (the loader's,
// CUPTI's), or gprof-run's own signal the program waited for (the writer's last flush at exit).
// A wait it merely ended (a driver thread's condition, signalled by a flush the writer asked
// for) delayed nothing: it is no cost, and no cause either.
void Diagnoser::CountProfilerCost() {
  ProfilerCost& cost = analysis_.profiler_cost;
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    Stall& stall = analysis_.stalls[i];
    if (stall.profiler_tid == 0) continue;
    if (!IsContention(stall.wait_class) && !InInjectedLibrary(session_, stall.wait.object))
      continue;
    stall.profiler_cost = true;
    cost.stalls.push_back(static_cast<int>(i));
    cost.total_ns += stall.asleep_ns();
    if (cost.longest < 0 || stall.asleep_ns() > analysis_.stalls[cost.longest].asleep_ns())
      cost.longest = static_cast<int>(i);
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

namespace {

// A cause of no object: the CPUs, the GPU side, a late thread.
Cause CauseOfKind(CauseKind kind, WaitClass wait_class, uint32_t thread_tid = 0) {
  Cause cause;
  cause.kind = kind;
  cause.wait_class = wait_class;
  cause.thread_tid = thread_tid;
  return cause;
}

void AddThread(std::vector<uint32_t>& tids, uint32_t tid) {
  if (std::find(tids.begin(), tids.end(), tid) == tids.end()) tids.push_back(tid);
}

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

uint64_t Diagnoser::RunnableDuring(uint32_t tid, uint64_t start, uint64_t end) const {
  uint64_t runnable = 0;
  for (const OffCpuInterval* interval : reader_.OffCpuDuring(tid, start, end)) {
    uint64_t from = std::max(start, interval->state() == OffCpuState::kRunnable
                                        ? interval->start_ns
                                        : std::max(interval->start_ns, interval->wake_ns));
    uint64_t to = std::min(end, interval->end_ns);
    if ((interval->state() == OffCpuState::kRunnable || interval->wake_ns != 0) && from < to)
      runnable += to - from;
  }
  return runnable;
}

// Threads ready to run without a CPU: no lock, only time runnable. Short of CPU is a thread that
// was runnable the threshold or more, for a share of its life or of the time another thread's
// wait was held up by it (a handoff's producer preempted: the consumer waits longer). A cause when
// that made waits longer: threads of the program kept each other from a CPU, or a wait was held up
// by a thread without one, or a thread woken waited for one. (A lone thread that other programs
// preempted, with nobody waiting for it, only ran slower: the report says so, as no cause.)
void Diagnoser::FindCpuStarvation() {
  const uint64_t threshold = analysis_.options.threshold_ns;
  struct Life {
    uint64_t first_ns = UINT64_MAX, last_ns = 0;
  };
  std::map<uint32_t, CpuWait> threads;
  std::map<uint32_t, Life> lives;
  for (const OffCpuInterval& interval : session_.off_cpu) {
    if (Ours(interval.tid)) continue;
    CpuWait& time = threads[interval.tid];
    Life& life = lives[interval.tid];
    time.tid = interval.tid;
    life.first_ns = std::min(life.first_ns, interval.start_ns);
    life.last_ns = std::max(life.last_ns, interval.end_ns);
    if (interval.state() == OffCpuState::kRunnable) {
      time.runnable_ns += interval.duration();
    } else if (interval.wake_ns != 0 && interval.wake_ns <= interval.end_ns) {
      const uint64_t late = interval.end_ns - interval.wake_ns;
      time.runnable_ns += late;
      time.after_wakeup_ns += late;
      time.longest_after_wakeup_ns = std::max(time.longest_after_wakeup_ns, late);
      if (late > 0) ++time.wakeups;
    }
  }
  // Waits too short to be recorded one by one still add up: their time runnable is counted.
  std::map<uint32_t, std::vector<const CountedWaits*>> counted_of;
  for (const CountedWaits& counted : session_.counted_waits) {
    if (counted.kind != CountedWaits::Kind::kOffCpu || session_.IsProfilerThread(counted.tid))
      continue;
    if (counted.runnable_ns != 0) counted_of[counted.tid].push_back(&counted);
    CpuWait& time = threads[counted.tid];
    Life& life = lives[counted.tid];
    time.tid = counted.tid;
    life.first_ns = std::min(life.first_ns, counted.start_ns);
    life.last_ns = std::max(life.last_ns, counted.end_ns);
    time.runnable_ns += counted.runnable_ns;
    if (counted.how != 0) {
      time.after_wakeup_ns += counted.runnable_ns;
      time.wakeups += counted.woken;
    }
  }
  // Each link of a chain accounts for part of the previous link's sleep (or of the part before
  // its thread existed): the links' runnable times in one chain never overlap, and add up to the
  // time the wait was held up by threads without a CPU. For the threads that held waits up, the
  // windows are merged, so that several waits on one producer count its time once.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> awaited;
  uint64_t path_held_up_ns = 0;  // the program's critical path held up by threads without a CPU
  for (const Stall& stall : analysis_.stalls) {
    auto waiter = threads.find(stall.tid);
    for (const ChainLink& link : stall.chain) {
      if (link.end_ns <= link.start_ns) continue;
      awaited[link.tid].emplace_back(link.start_ns, link.end_ns);
      if (stall.on_critical_path) path_held_up_ns += link.runnable_ns;
      if (link.runnable_ns == 0 || waiter == threads.end()) continue;
      CpuWait& time = waiter->second;
      time.held_up_ns += link.runnable_ns;
      auto by = std::find_if(time.held_up_by.begin(), time.held_up_by.end(),
                             [&](const auto& entry) { return entry.first == link.tid; });
      if (by == time.held_up_by.end()) {
        time.held_up_by.emplace_back(link.tid, link.runnable_ns);
      } else {
        by->second += link.runnable_ns;
      }
    }
  }
  std::map<uint32_t, uint64_t> awaited_window_ns;  // how long others waited for it, in all
  for (auto& [tid, windows] : awaited) {
    auto time = threads.find(tid);
    if (time == threads.end()) continue;
    std::sort(windows.begin(), windows.end());
    auto [from, to] = windows.front();
    for (size_t i = 1; i <= windows.size(); ++i) {
      if (i < windows.size() && windows[i].first <= to) {
        to = std::max(to, windows[i].second);
        continue;
      }
      time->second.awaited_ns += RunnableDuring(tid, from, to);
      // Of the counted ones, the share of their period that falls in the window (when in it they
      // were is not recorded).
      for (const CountedWaits* counted : counted_of[tid]) {
        const uint64_t overlap_from = std::max(from, counted->start_ns);
        const uint64_t overlap_to = std::min(to, counted->end_ns);
        if (overlap_from >= overlap_to) continue;
        const uint64_t period = counted->end_ns - counted->start_ns;
        time->second.awaited_ns += static_cast<uint64_t>(
            static_cast<double>(counted->runnable_ns) *
            static_cast<double>(overlap_to - overlap_from) / static_cast<double>(period));
      }
      awaited_window_ns[tid] += to - from;
      if (i < windows.size()) std::tie(from, to) = windows[i];
    }
  }
  std::vector<CpuWait>& waits = analysis_.cpu_waits;
  bool made_late = false;
  for (auto& [tid, time] : threads) {
    if (time.runnable_ns < threshold && time.delayed_ns() < threshold) continue;
    const Life& life = lives[tid];
    time.life_ns = life.last_ns > life.first_ns ? life.last_ns - life.first_ns : 0;
    // The same share of the time others waited for it as of its life: a moment's preemption
    // while another thread waits for it all along is no shortage.
    time.short_of_cpu = time.runnable_ns >= threshold &&
                        (time.runnable_ns >= time.life_ns * kCpuStarvedShare ||
                         (time.awaited_ns >= threshold &&
                          time.awaited_ns >= awaited_window_ns[tid] * kCpuStarvedShare));
    time.latency_sensitive = time.delayed_ns() >= threshold &&
                             time.delayed_ns() >= time.runnable_ns - time.after_wakeup_ns;
    made_late |= time.latency_sensitive || (time.short_of_cpu && time.awaited_ns >= threshold);
    std::stable_sort(time.held_up_by.begin(), time.held_up_by.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    waits.push_back(std::move(time));
  }
  std::stable_sort(waits.begin(), waits.end(), [](const CpuWait& a, const CpuWait& b) {
    return a.runnable_ns > b.runnable_ns;
  });
  const auto short_of_cpu =
      std::count_if(waits.begin(), waits.end(), [](const CpuWait& w) { return w.short_of_cpu; });
  if (short_of_cpu == 0 || (short_of_cpu < 2 && !made_late)) return;
  int index = CauseFor("cpu", CauseOfKind(CauseKind::kCpu, WaitClass::kCpu));
  Cause& cause = analysis_.causes[index];
  cause.held_up_ns = path_held_up_ns;
  for (const CpuWait& time : waits) {
    if (!time.short_of_cpu) continue;
    // A thread of the path waiting for a CPU held the program up itself.
    if (path_.tids.contains(time.tid)) cause.held_up_ns += time.runnable_ns;
    cause.blocked_ns += time.runnable_ns;
    cause.longest_ns = std::max(cause.longest_ns, time.runnable_ns);
    AddThread(cause.tids, time.tid);
    ++cause.wait_count;
  }
}

void Diagnoser::FindGpuGaps() {
  GpuDeviceTimeline timeline = FindGpuIdle(session_, analysis_.options.gap_threshold_ns);
  for (const GpuIdleInterval& idle : timeline.idle) {
    GpuGap gap;
    gap.device = idle.device;
    gap.pid = idle.after->pid;
    gap.device_id = idle.after->device_id;
    gap.stream_id = idle.after->stream_id;
    gap.start_ns = idle.start_ns;
    gap.end_ns = idle.end_ns;
    gap.before = idle.before;
    gap.after = idle.after;
    gap.before_call = correlation_.LauncherOf(*idle.before);
    gap.after_call = correlation_.LauncherOf(*idle.after);
    analysis_.gaps.push_back(gap);
  }
  analysis_.devices = std::move(timeline.devices);
  for (GpuGap& gap : analysis_.gaps) ExplainGap(gap);
}

void Diagnoser::ExplainGap(GpuGap& gap) {
  const ApiCall* launch = gap.after_call;
  if (launch == nullptr) return;  // no launching call recorded: nothing to follow
  int cause = -1;
  // The work is queued when its call returns: the host held it up until then, outside the call
  // (late to call) or inside it (blocked in it).
  const uint64_t queued_ns = std::min(launch->exit_ns, gap.end_ns);
  if (queued_ns <= gap.start_ns) {
    // Queued before the GPU went idle, started late: held on the GPU side (a host function or an
    // event its stream waited for, another process's work on a GPU CUPTI did not name).
    gap.gpu_side = true;
    cause = CauseFor("gpu", CauseOfKind(CauseKind::kGpuSide, WaitClass::kOther));
  } else {
    // The host launched it only after the GPU had gone idle: why was that thread late?
    gap.late_thread = MakeLink(launch->tid, gap.start_ns, queued_ns);
    uint64_t longest = 0;
    for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
      const Stall& stall = analysis_.stalls[i];
      if (stall.tid != launch->tid || stall.wait.start_ns >= queued_ns) continue;
      uint64_t stall_end = stall.wait.wake_ns != 0 ? stall.wait.wake_ns : stall.wait.end_ns;
      if (stall_end <= gap.start_ns) continue;
      uint64_t overlap =
          std::min(stall_end, queued_ns) - std::max(stall.wait.start_ns, gap.start_ns);
      if (overlap > longest) {
        longest = overlap;
        gap.stall = static_cast<int>(i);
      }
    }
    const ChainLink& late = *gap.late_thread;
    gap.module_load_ns = ModuleLoadDuring(launch->tid, gap.start_ns, queued_ns);
    if (gap.stall >= 0 && analysis_.stalls[gap.stall].profiler_cost &&
        late.state == ChainLink::State::kAsleep) {
      // The thread slept in a wait gprof-run's own thread held up: gprof-run's cost.
      gap.profiler_cost = true;
      analysis_.profiler_cost.gpu_idle_ns += gap.duration();
      ++analysis_.profiler_cost.gaps;
      return;
    }
    if (gap.module_load_ns * 2 >= queued_ns - gap.start_ns) {
      // Most of the wait was the driver loading modules at their first use (a kernel's under
      // lazy loading, a whole library's under EAGER): a cause of its own, which warming up moves
      // out of the measured part of the run.
      Cause loading = CauseOfKind(CauseKind::kModuleLoad, WaitClass::kOther, launch->tid);
      loading.launch = launch;
      loading.loaded_in_launch =
          ModuleLoadDuring(launch->tid, launch->enter_ns, queued_ns) * 2 >= gap.module_load_ns;
      cause = CauseFor("module|" + std::to_string(launch->tid), std::move(loading));
      if (!analysis_.causes[cause].root) analysis_.causes[cause].root = late;
    } else if (gap.stall >= 0 && analysis_.stalls[gap.stall].cause >= 0 &&
               late.state == ChainLink::State::kAsleep) {
      cause = analysis_.stalls[gap.stall].cause;
    } else {
      // Not contention: the thread worked, lacked a CPU, or waited for something else (its input,
      // a sleep). One cause per late thread: the gaps it left add up; its root is the largest
      // gap's, followed through the wait to the thread that ended it when there is one.
      cause = CauseFor("host|" + std::to_string(launch->tid),
                       CauseOfKind(CauseKind::kLateHost, WaitClass::kOther, launch->tid));
      Cause& host = analysis_.causes[cause];
      uint64_t& largest = largest_gap_ns_[cause];
      if (gap.duration() > largest) {
        largest = gap.duration();
        const bool asleep = gap.stall >= 0 && late.state == ChainLink::State::kAsleep;
        host.root = asleep && !analysis_.stalls[gap.stall].chain.empty()
                        ? analysis_.stalls[gap.stall].chain.back()
                        : late;
      }
    }
  }
  gap.cause = cause;
  Cause& explained = analysis_.causes[cause];
  explained.gpu_idle_ns += gap.duration();
  explained.gaps.push_back(static_cast<int>(&gap - analysis_.gaps.data()));
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

namespace gprof::collector {

void DiagnoseWaits(const Session& session, const WaitReader& waits,
                   const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                   Analysis& analysis) {
  diagnosis::Diagnoser(session, waits, correlation, gpu_busy, analysis).Run();
}

bool IsIdleWait(const Stall& stall) {
  if (stall.wait_class == WaitClass::kCondition) return true;
  const WaitObject& object = stall.wait.object;
  bool waits_for_events =
      object.device_call == DeviceCall::kPoll || object.device_call == DeviceCall::kEpoll;
  return stall.wait_class == WaitClass::kGpuDriver && waits_for_events && stall.call == nullptr;
}

bool IsCostlyHandoff(const Stall& stall) {
  if (IsContention(stall.wait_class) && !IsIdleWait(stall)) return false;
  if (!stall.on_critical_path || stall.wait.wake_ns == 0 || stall.wait.ended_by_exit) return false;
  return !stall.chain.empty() && !stall.chain.front().owner && !stall.chain.front().creator &&
         stall.chain.front().tid == stall.wait.waker_tid;
}

bool InDeadlock(const Stall& stall) {
  return stall.deadlock_tid != 0 && stall.deadlock_tid == stall.tid;
}

}  // namespace gprof::collector
