#include "collector/analysis/freezes.h"

#include <algorithm>
#include <map>
#include <set>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

void AddThread(std::vector<uint32_t>& tids, uint32_t tid) {
  if (std::find(tids.begin(), tids.end(), tid) == tids.end()) tids.push_back(tid);
}

class FreezeFinder {
 public:
  FreezeFinder(const Session& session, const WaitReader& waits, const GpuCorrelation& correlation,
               const GpuBusyTimeline& gpu_busy, Analysis& analysis)
      : session_(session),
        waits_(waits),
        correlation_(correlation),
        gpu_busy_(gpu_busy),
        analysis_(analysis) {}

  void Run() {
    std::vector<Freeze> of_stalls = StallFreezes();
    std::vector<CallsInFreeze> of_calls = CallFreezes();
    // A freeze of slow calls is the stalls' freeze that overlaps it with a wait on its object
    // (the first such one not already taken): one freeze, seen from both sides.
    std::vector<Freeze> only_calls;
    std::vector<std::pair<int, int>> call_positions;  // (freeze, call freeze in time order)
    for (size_t c = 0; c < of_calls.size(); ++c) {
      CallsInFreeze& calls = of_calls[c];
      Freeze* same = nullptr;
      for (Freeze& stalls : of_stalls) {
        if (stalls.start_ns >= calls.end_ns || calls.start_ns >= stalls.end_ns) continue;
        const bool on_object = std::any_of(stalls.stalls.begin(), stalls.stalls.end(), [&](int i) {
          return analysis_.stalls[i].wait.object == calls.object;
        });
        if (on_object && !stalls.calls) {
          same = &stalls;
          break;
        }
      }
      int index = 0;
      if (same != nullptr) {
        index = static_cast<int>(same - of_stalls.data());
        same->calls = std::move(calls);
      } else {
        index = -1 - static_cast<int>(only_calls.size());
        Freeze freeze;
        freeze.start_ns = calls.start_ns;
        freeze.end_ns = calls.end_ns;
        freeze.tids = calls.tids;
        freeze.calls = std::move(calls);
        only_calls.push_back(std::move(freeze));
      }
      call_positions.emplace_back(index, static_cast<int>(c));
    }
    std::vector<Freeze>& freezes = analysis_.freezes;
    freezes = std::move(of_stalls);
    const int stall_freezes = static_cast<int>(freezes.size());
    for (Freeze& freeze : only_calls) freezes.push_back(std::move(freeze));
    for (size_t f = 0; f < freezes.size(); ++f) {
      const int index = static_cast<int>(f);
      for (int i : freezes[f].stalls) analysis_.stalls[i].freeze = index;
      if (freezes[f].cause >= 0) analysis_.causes[freezes[f].cause].freezes.push_back(index);
    }
    for (auto [index, c] : call_positions) {
      const int f = index >= 0 ? index : stall_freezes + (-1 - index);
      for (const FreezeMember& member : freezes[f].calls->members)
        analysis_.blocked_calls[member.blocked_call].freeze = f;
    }
  }

 private:
  // Overlapping stalls with one cause, of at least two threads, in time order.
  std::vector<Freeze> StallFreezes() const;
  // Blocked calls of several threads whose longest wait is on the same object and overlap in
  // time, in time order. (A single thread's wait is explained by its own waker, in its
  // BlockedCall.)
  std::vector<CallsInFreeze> CallFreezes() const;
  std::optional<CallsInFreeze> CallFreeze(const WaitObject& object,
                                          const std::vector<int>& members) const;
  // When `tid` last took hold of `object` before `release`: the end of its last wait on it, or,
  // when it did not wait on it, the freeze's start or its CUDA call's, whichever is earlier.
  uint64_t HoldStart(uint32_t tid, const WaitObject& object, uint64_t freeze_start,
                     uint64_t release) const;
  HolderActivity DescribeHolder(uint32_t tid, uint64_t hold_start, uint64_t release_ns) const;

  const Session& session_;
  const WaitReader& waits_;
  const GpuCorrelation& correlation_;
  const GpuBusyTimeline& gpu_busy_;
  Analysis& analysis_;
};

std::vector<Freeze> FreezeFinder::StallFreezes() const {
  std::vector<Freeze> freezes;
  std::map<int, std::vector<int>> by_cause;
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    if (analysis_.stalls[i].cause >= 0)
      by_cause[analysis_.stalls[i].cause].push_back(static_cast<int>(i));
  }
  auto close = [&](int cause, std::vector<int>& group, uint64_t start, uint64_t end) {
    Freeze freeze;
    freeze.start_ns = start;
    freeze.end_ns = end;
    freeze.cause = cause;
    for (int i : group) AddThread(freeze.tids, analysis_.stalls[i].tid);
    if (freeze.tids.size() >= 2) {
      freeze.stalls = group;
      freezes.push_back(std::move(freeze));
    }
    group.clear();
  };
  for (auto& [cause, stalls] : by_cause) {
    std::vector<int> group;
    uint64_t start = 0, end = 0;
    for (int i : stalls) {  // in start order: stalls are
      // Until the thread ran again: woken but kept from a CPU, it is still held up.
      const Wait& wait = analysis_.stalls[i].wait;
      uint64_t wait_end = wait.end_ns;
      // Waits a moment apart are one freeze: a woken waiter that loses the race waits again.
      if (!group.empty() && wait.start_ns > end + analysis_.options.threshold_ns)
        close(cause, group, start, end);
      if (group.empty()) start = wait.start_ns, end = wait_end;
      group.push_back(i);
      end = std::max(end, wait_end);
    }
    if (!group.empty()) close(cause, group, start, end);
  }
  std::stable_sort(freezes.begin(), freezes.end(),
                   [](const Freeze& a, const Freeze& b) { return a.start_ns < b.start_ns; });
  return freezes;
}

std::vector<CallsInFreeze> FreezeFinder::CallFreezes() const {
  struct Span {
    uint64_t start, end;
    int blocked_call;
  };
  auto by_key = [](const WaitObject& a, const WaitObject& b) { return a.Key() < b.Key(); };
  std::map<WaitObject, std::vector<Span>, decltype(by_key)> by_object(by_key);
  for (int i = 0; i < static_cast<int>(analysis_.blocked_calls.size()); ++i) {
    const BlockedCall& blocked = analysis_.blocked_calls[i];
    if (!blocked.main_object) continue;
    uint64_t start = UINT64_MAX, end = 0;
    for (const Wait& wait : blocked.waits) {
      if (wait.object != *blocked.main_object) continue;
      start = std::min(start, wait.start_ns);
      end = std::max(end, wait.end_ns);
    }
    by_object[*blocked.main_object].push_back(Span{start, end, i});
  }
  std::vector<CallsInFreeze> freezes;
  for (auto& [key, spans] : by_object) {
    const WaitObject& object = key;  // a structured binding clang 14 will not capture
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.start < b.start; });
    std::vector<int> group;
    uint64_t group_end = 0;
    auto close = [&] {
      if (auto freeze = CallFreeze(object, group)) freezes.push_back(std::move(*freeze));
      group.clear();
    };
    for (const Span& span : spans) {
      if (!group.empty() && span.start > group_end) close();
      group.push_back(span.blocked_call);
      group_end = group.size() == 1 ? span.end : std::max(group_end, span.end);
    }
    if (!group.empty()) close();
  }
  std::stable_sort(freezes.begin(), freezes.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return freezes;
}

uint64_t FreezeFinder::HoldStart(uint32_t tid, const WaitObject& object, uint64_t freeze_start,
                                 uint64_t release) const {
  // The hold may have begun before the first victim blocked: look back over the CUDA call the
  // releaser was in, too.
  uint64_t since = freeze_start;
  if (const ApiCall* call = waits_.CallAt(tid, release)) since = std::min(since, call->enter_ns);
  uint64_t start = since;
  for (const OffCpuInterval* interval : waits_.OffCpuDuring(tid, since, release)) {
    if (interval->end_ns > release) break;
    if (waits_.WaitOf(*interval).object == object) start = interval->end_ns;
  }
  return start;
}

std::optional<CallsInFreeze> FreezeFinder::CallFreeze(const WaitObject& object,
                                                      const std::vector<int>& members) const {
  std::set<uint32_t> member_tids;
  for (int i : members) member_tids.insert(analysis_.blocked_calls[i].call->tid);
  if (member_tids.size() < 2) return std::nullopt;

  CallsInFreeze freeze;
  freeze.object = object;
  freeze.start_ns = UINT64_MAX;
  for (int i : members) {
    for (const Wait& wait : analysis_.blocked_calls[i].waits) {
      if (wait.object != object) continue;
      freeze.start_ns = std::min(freeze.start_ns, wait.start_ns);
      freeze.end_ns = std::max(freeze.end_ns, wait.end_ns);
    }
  }
  // Each member's longest sleep on the object was ended by a release. The holder is the thread
  // whose release ended the longest hold: from its own last wait on the object (or the freeze's
  // start) to the release. Releases after a short hold only passed the lock on (a convoy), and a
  // holder may itself have waited on the lock before it took it for long.
  uint32_t holder = 0;
  uint64_t release = 0, longest_hold = 0, hold_start = freeze.start_ns;
  for (int i : members) {
    FreezeMember member;
    member.blocked_call = i;
    // A woken mutex waiter that loses the lock again sleeps twice: the long sleep counts (the
    // members are the calls whose main object this is).
    const Wait* decisive = analysis_.blocked_calls[i].MainWait();
    if (decisive != nullptr && decisive->wake_ns != 0 && decisive->waker_tid != 0) {
      member.woken_by_tid = decisive->waker_tid;
      uint64_t start = HoldStart(decisive->waker_tid, object, freeze.start_ns, decisive->wake_ns);
      uint64_t hold = decisive->wake_ns - std::min(start, decisive->wake_ns);
      if (holder == 0 || hold > longest_hold ||
          (hold == longest_hold && decisive->wake_ns < release)) {
        holder = decisive->waker_tid;
        release = decisive->wake_ns;
        longest_hold = hold;
        hold_start = start;
      }
    }
    freeze.members.push_back(member);
  }
  // Held by gprof-run's own thread (the writer holding the loader's lock): not the program's
  // freeze. The diagnosis counts it once, as gprof-run's own cost.
  if (holder != 0 && session_.IsProfilerThread(holder)) return std::nullopt;
  for (FreezeMember& member : freeze.members) {
    member.passed_on = member.woken_by_tid != 0 && member.woken_by_tid != holder &&
                       member_tids.contains(member.woken_by_tid);
  }
  if (holder != 0) {
    freeze.holder = DescribeHolder(holder, hold_start, release);
    // Its own slow call waited on the lock only before taking it: it is the cause, not a victim.
    std::erase_if(freeze.members, [&](const FreezeMember& member) {
      return analysis_.blocked_calls[member.blocked_call].call == freeze.holder->call;
    });
  }
  for (const FreezeMember& member : freeze.members)
    AddThread(freeze.tids, analysis_.blocked_calls[member.blocked_call].call->tid);
  if (freeze.thread_count() < 2) return std::nullopt;
  return freeze;
}

HolderActivity FreezeFinder::DescribeHolder(uint32_t tid, uint64_t hold_start,
                                            uint64_t release_ns) const {
  HolderActivity holder;
  holder.tid = tid;
  holder.hold_start_ns = hold_start;
  holder.release_ns = release_ns;
  holder.call = waits_.CallAt(tid, release_ns);
  if (holder.call != nullptr) {
    for (size_t i = 0; i < analysis_.blocked_calls.size(); ++i) {
      if (analysis_.blocked_calls[i].call == holder.call) holder.blocked_call = static_cast<int>(i);
    }
    holder.gpu = GpuDuring(correlation_, gpu_busy_, holder.call->pid, holder.call->enter_ns,
                           holder.call->exit_ns, holder.call);
  } else if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
    holder.gpu = GpuDuring(correlation_, gpu_busy_, thread->second.pid, hold_start,
                           std::max(hold_start, release_ns), nullptr);
  }
  if (release_ns <= hold_start) return holder;
  TimeSplit split = waits_.Split(tid, hold_start, release_ns);
  holder.on_cpu_ns = split.on_cpu_ns;
  holder.asleep_ns = split.asleep_ns;
  holder.runnable_ns = split.runnable_ns;
  if (holder.on_cpu_ns > 0) holder.ran = WhatRanOnCpu(session_, tid, hold_start, release_ns);
  auto [object, ns] = LongestWaitObject(split.waits);
  holder.own_wait = object;
  if (object) {
    // The waker of its longest sleep on that object is what it was waiting for.
    const Wait* longest = LongestWaitOn(split.waits, *object);
    holder.own_waker_tid = longest->waker_tid;
    holder.own_waker_comm = longest->waker_comm;
  }
  return holder;
}

}  // namespace

void FindFreezes(const Session& session, const WaitReader& waits,
                 const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                 Analysis& analysis) {
  FreezeFinder(session, waits, correlation, gpu_busy, analysis).Run();
}

size_t StallFreezes(const Analysis& analysis) {
  return std::count_if(analysis.freezes.begin(), analysis.freezes.end(),
                       [](const Freeze& freeze) { return freeze.of_stalls(); });
}

}  // namespace gprof::collector
