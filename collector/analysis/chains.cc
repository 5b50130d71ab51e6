#include <algorithm>
#include <set>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnoser.h"
#include "collector/analysis/on_cpu_samples.h"
#include "collector/analysis/wait_class.h"

namespace gprof::collector::diagnosis {

ChainLink Diagnoser::MakeLink(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const {
  ChainLink link;
  link.tid = tid;
  link.start_ns = start_ns;
  link.end_ns = std::max(start_ns, end_ns);
  if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
    link.pid = thread->second.pid;
    if (thread->second.exit_ns != 0 && thread->second.exit_ns < start_ns) {
      link.state = ChainLink::State::kExited;
      return link;
    }
    // Created inside the window: it accounts for the part it existed, no more.
    if (thread->second.start_ns > link.start_ns) {
      link.created_ns = thread->second.start_ns;
      link.start_ns = std::min(thread->second.start_ns, link.end_ns);
    }
  }
  link.call = reader_.CallAt(tid, link.end_ns);
  TimeInCalls(link);
  TimeSplit split = reader_.Split(tid, link.start_ns, link.end_ns);
  link.on_cpu_ns = split.on_cpu_ns;
  link.asleep_ns = split.asleep_ns;
  link.runnable_ns = split.runnable_ns;
  if (split.asleep_ns > split.on_cpu_ns && split.asleep_ns >= split.runnable_ns) {
    link.state = ChainLink::State::kAsleep;
    const Wait* longest = nullptr;
    for (const Wait& wait : split.waits) {
      if (wait.state == OffCpuState::kRunnable) continue;
      if (longest == nullptr || wait.asleep_ns() > longest->asleep_ns()) longest = &wait;
    }
    // The wait that ended last was ended by data another thread wrote (a socket's reader woken
    // from softirq): what it waited for at the end, whatever its longer waits were (timeouts).
    // Waits after it that nobody ended (a poll's timeout, an interrupt that brought nothing) do
    // not hide it.
    for (auto wait = split.waits.rbegin(); wait != split.waits.rend(); ++wait) {
      if (wait->state == OffCpuState::kRunnable) continue;
      if (wait->data_written_ns != 0) longest = &*wait;
      if (wait->data_written_ns != 0 || wait->waker_tid != 0 || wait->ended_by_exit) break;
    }
    if (longest != nullptr) {
      link.wait = *longest;
      link.wait_class = longest->wait_class;
    }
    // A CUDA call asleep, not on a lock, while the GPU was busy most of the time waited for the
    // GPU: name what the GPU ran.
    if (link.call != nullptr && gpu_busy_.Recorded(link.pid) &&
        (link.wait == std::nullopt || !IsContention(link.wait_class))) {
      GpuUse use = gpu_busy_.UseDuring(link.pid, link.start_ns, link.end_ns);
      if (use.longest != nullptr && use.busy_ns * 2 >= link.end_ns - link.start_ns) {
        link.state = ChainLink::State::kGpu;
        link.gpu_activity = use.longest;
      }
    }
  } else if (split.runnable_ns > split.on_cpu_ns) {
    link.state = ChainLink::State::kRunnable;
  } else {
    // On CPU in a memory map call: a munmap freeing a large region, holding the mmap_lock.
    link.memory_call = reader_.MemoryCallAt(tid, link.end_ns);
    link.ran = WhatRanOnCpu(session_, tid, link.start_ns, link.end_ns);
    link.faults = reader_.QuickFaultsDuring(tid, link.start_ns, link.end_ns);
  }
  return link;
}

void Diagnoser::TimeInCalls(ChainLink& link) const {
  CallTime time = reader_.CallTimeDuring(link.tid, link.start_ns, link.end_ns, link.call);
  if (link.call != nullptr) {
    const uint64_t from = std::max(link.call->enter_ns, link.start_ns);
    link.call_ns = link.end_ns > from ? link.end_ns - from : 0;
  }
  link.other_calls_ns = time.in_calls_ns > link.call_ns ? time.in_calls_ns - link.call_ns : 0;
  link.other_calls = time.other_calls;
  link.longest_other_call = time.longest_other;
}

namespace {

// A link's window shorter than this, on CPU or short of one, is a moment: a thread about to hand
// something on.
constexpr uint64_t kMomentNs = 1'000'000;

}  // namespace

void Diagnoser::FollowChain(Stall& stall) const {
  std::vector<ChainLink>& chain = stall.chain;
  std::set<uint32_t> seen = {stall.tid};
  const Wait* wait = &stall.wait;
  uint64_t from_ns = wait->start_ns;  // the start of the window the next link accounts for
  uint32_t waiter = stall.tid;
  while (chain.size() < analysis_.options.max_chain) {
    const Holder holder = HolderOf(waiter, *wait);
    if (holder.tid == 0 || !InTree(holder.tid)) break;
    // gprof-run's own thread is no link: what it held up is its cost, not the program's.
    if (Ours(holder.tid)) {
      stall.profiler_tid = holder.tid;
      break;
    }
    if (!seen.insert(holder.tid).second) {
      // Back to a thread of the chain.
      if (IsDeadlock(stall, holder)) stall.deadlock_tid = holder.tid;
      break;
    }
    ChainLink link = MakeLink(holder.tid, from_ns, holder.until_ns);
    // A waiter that polls (a socket thread woken by its timeouts) waited only a moment before the
    // data came, and its producer ran only that moment: what held the producer up came before.
    // Over the stall's whole wait, the producer's own wait says it (what woke it, and so on).
    if ((link.state == ChainLink::State::kOnCpu || link.state == ChainLink::State::kRunnable) &&
        from_ns > stall.wait.start_ns && link.end_ns - link.start_ns < kMomentNs) {
      ChainLink wider = MakeLink(holder.tid, stall.wait.start_ns, holder.until_ns);
      if (wider.state == ChainLink::State::kAsleep && wider.wait) link = std::move(wider);
    }
    link.owner = holder.by_owner;
    link.released = holder.released;
    if (holder.memory_call != nullptr) link.memory_call = holder.memory_call;
    chain.push_back(std::move(link));
    const ChainLink& last = chain.back();
    if (last.created_ns != 0 && last.created_ns - from_ns > last.end_ns - last.start_ns) {
      // It did not exist for most of the wait: until it did, the wait was held up by what its
      // creator did before creating it.
      auto creator = creator_of_.find(last.tid);
      if (creator == creator_of_.end() || !InTree(creator->second) || Ours(creator->second) ||
          chain.size() == analysis_.options.max_chain || !seen.insert(creator->second).second)
        break;
      ChainLink made = MakeLink(creator->second, from_ns, last.created_ns);
      made.creator = true;
      chain.push_back(std::move(made));
    }
    const ChainLink& followed = chain.back();
    if (followed.state != ChainLink::State::kAsleep || !followed.wait) break;
    wait = &*followed.wait;
    waiter = followed.tid;
    // A reader that polled (a socket's thread in epoll with timeouts) and was ended by data
    // waited for that data all through its window, not only in its last poll.
    from_ns = wait->data_written_ns != 0 ? followed.start_ns : wait->start_ns;
  }
}

Diagnoser::Holder Diagnoser::HolderOf(uint32_t waiter, const Wait& wait) const {
  const uint64_t asleep_until = wait.wake_ns != 0 ? wait.wake_ns : wait.end_ns;
  // Found through its data: the writer held it up until it wrote. The TCP send that queued the
  // bytes it read may have begun after its wake (a poll's timeout woke it, the bytes came
  // before its read): until then all the same.
  Holder holder{wait.waker_tid, wait.data_send != nullptr ? wait.data_send->start_ns
                                : wait.data_written_ns != 0
                                    ? std::min(wait.data_written_ns, asleep_until)
                                    : asleep_until};
  if (const LockWait* lock = wait.kernel_lock;
      lock != nullptr && lock->owner_tid != 0 && !wait.owner_hint_stale) {
    if (holder.tid == 0 || !InTree(holder.tid)) holder.tid = lock->owner_tid;
    if (holder.tid == lock->owner_tid) holder.memory_call = wait.owner_memory_call;
  } else if (holder.tid == 0 || !InTree(holder.tid)) {
    holder = wait.wait_class == WaitClass::kPythonGil ? GilHolder(waiter, wait)
                                                       : LockOwner(waiter, wait);
  }
  return holder;
}

// A wait for the GIL whose last sleep timed out (the holder dropped it between two of the
// interpreter's timed sleeps, or its wake was too short to record) names no waker. Only one
// thread of a process runs Python at a time: the thread of the waiter's process that ran on a CPU
// for most of the wait held the GIL, and is what the waiter waited for (a multiprocessing
// queue's feeder thread waits for its process's main thread computing the next item).
Diagnoser::Holder Diagnoser::GilHolder(uint32_t waiter, const Wait& wait) const {
  const uint64_t asleep_until = wait.wake_ns != 0 ? wait.wake_ns : wait.end_ns;
  if (asleep_until <= wait.start_ns) return {};
  auto thread = session_.threads.find(waiter);
  if (thread == session_.threads.end()) return {};
  uint32_t best = 0;
  uint64_t best_ns = 0;
  for (const auto& [tid, other] : session_.threads) {
    if (tid == waiter || other.pid != thread->second.pid || Ours(tid)) continue;
    const uint64_t ran = reader_.Split(tid, wait.start_ns, asleep_until).on_cpu_ns;
    if (ran > best_ns) best = tid, best_ns = ran;
  }
  if (best_ns * 2 < asleep_until - wait.start_ns) return {};
  return {best, asleep_until};
}

// The thread a contended glibc mutex or rwlock named as its holder when `tid` began `wait` on it,
// when that is another thread of the same process (the field read may belong to some other
// lock), up to its release: its first wake of the word after the waiter read the holder (its
// unlock wakes a waiter, not necessarily this one). Released before the sleep began, it held
// nothing this thread waited for: none.
//
// Only a lock names a holder: the GIL's condition variable sits beside its mutex, whose holder
// field a wait on the condition's word reads (a thread that holds the GIL's mutex for a moment,
// or none), and a GIL passed around with such a hint looked like a cycle of locks. A holder that
// was itself asleep on the same word then was waiting for it, not holding it: a stale hint.
Diagnoser::Holder Diagnoser::LockOwner(uint32_t tid, const Wait& wait) const {
  if (wait.object.kind != WaitKind::kFutex || wait.wait_class != WaitClass::kUserLock) return {};
  const FutexCall* futex = reader_.FutexAt(tid, wait.start_ns);
  if (futex == nullptr || futex->uaddr != wait.object.address) return {};
  const uint32_t owner = RecordedLockHolder(session_, tid, *futex);
  if (owner == 0) return {};
  if (const FutexCall* own = reader_.FutexAt(owner, wait.start_ns);
      own != nullptr && own->is_wait() && own->uaddr == futex->uaddr &&
      own->start_ns <= wait.start_ns)
    return {};
  const uint64_t asleep_until = wait.wake_ns != 0 ? wait.wake_ns : wait.end_ns;
  for (const FutexCall* call : reader_.FutexDuring(owner, futex->start_ns, asleep_until)) {
    if (call->start_ns < futex->start_ns || !call->is_wake() || call->uaddr != futex->uaddr)
      continue;
    if (call->start_ns <= wait.start_ns) return {};
    return {owner, call->start_ns, true, true};
  }
  return {owner, asleep_until, true, false};
}

// The cycle: from where `closing.tid` first appears (the waiter, or a link) around to it, each
// thread's wait (the stall's, or the link's longest sleep) held up by the next. A deadlock only
// when one of them was named by a lock (a cycle of wakes is time moving on), none is a creation,
// and at the latest start of the waits all were still asleep and every holder still held.
bool Diagnoser::IsDeadlock(const Stall& stall, const Holder& closing) const {
  const std::vector<ChainLink>& chain = stall.chain;
  size_t first = 0;  // the cycle's first waiter: 0 the stall's thread, k the link chain[k - 1]
  if (closing.tid != stall.tid) {
    while (first < chain.size() && chain[first].tid != closing.tid) ++first;
    if (first == chain.size()) return false;
    ++first;
  }
  bool by_owner = closing.by_owner;
  uint64_t instant = 0, until = closing.until_ns;
  for (size_t k = first; k <= chain.size(); ++k) {
    const Wait* wait = k == 0 ? &stall.wait : chain[k - 1].wait ? &*chain[k - 1].wait : nullptr;
    if (wait == nullptr) return false;
    instant = std::max(instant, wait->start_ns);
    until = std::min(until, wait->wake_ns != 0 ? wait->wake_ns : wait->end_ns);
    if (k < chain.size()) {
      if (chain[k].creator) return false;
      by_owner |= chain[k].owner;
      until = std::min(until, chain[k].end_ns);
    }
  }
  return by_owner && instant < until;
}

std::vector<ChainLink> Diagnoser::ChainFrom(uint32_t tid, uint64_t start_ns,
                                            uint64_t end_ns) const {
  Stall stall;
  stall.wait.start_ns = start_ns;
  stall.wait.wake_ns = end_ns;
  stall.wait.end_ns = end_ns;
  stall.wait.waker_tid = tid;
  FollowChain(stall);
  return std::move(stall.chain);
}

}  // namespace gprof::collector::diagnosis

namespace gprof::collector {

struct ChainFollower::Parts {
  Parts(const Session& session, const WaitReader& waits, const AnalysisOptions& options)
      : correlation(session), gpu_busy(session), scratch(WithOptions(options)),
        diagnoser(session, waits, correlation, gpu_busy, scratch) {}
  static Analysis WithOptions(const AnalysisOptions& options) {
    Analysis analysis;
    analysis.options = options;
    return analysis;
  }
  const GpuCorrelation correlation;
  const GpuBusyTimeline gpu_busy;
  Analysis scratch;
  diagnosis::Diagnoser diagnoser;
};

ChainFollower::ChainFollower(const Session& session, const WaitReader& waits,
                             const AnalysisOptions& options)
    : parts_(std::make_unique<Parts>(session, waits, options)) {}
ChainFollower::~ChainFollower() = default;

std::vector<ChainLink> ChainFollower::From(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const {
  return parts_->diagnoser.ChainFrom(tid, start_ns, end_ns);
}

}  // namespace gprof::collector
