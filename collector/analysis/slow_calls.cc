#include "collector/analysis/slow_calls.h"

#include <algorithm>
#include <map>
#include <set>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

class SlowCallExplainer {
 public:
  SlowCallExplainer(const Session& session, const WaitReader& waits,
                    const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                    Analysis& analysis)
      : session_(session),
        waits_(waits),
        correlation_(correlation),
        gpu_busy_(gpu_busy),
        analysis_(analysis) {}

  void Run() {
    for (const auto& call : session_.api_calls) {
      if (call.duration() >= analysis_.options.threshold_ns) ExplainCall(call);
    }
    FindFreezes();
  }

 private:
  TimeSplit Split(uint32_t tid, uint64_t start, uint64_t end) const {
    return waits_.Split(tid, start, end);
  }
  Wait MakeWait(const OffCpuInterval& interval, uint64_t start, uint64_t end) const {
    return waits_.MakeWait(interval, start, end);
  }
  void ExplainCall(const ApiCall& call);
  void FindFreezes();
  void BuildFreeze(const WaitObject& object, std::vector<int> members);
  // When `tid` last took hold of `object` before `release`: the end of its last wait on it, or,
  // when it did not wait on it, the freeze's start or its CUDA call's, whichever is earlier.
  uint64_t HoldStart(uint32_t tid, const WaitObject& object, uint64_t freeze_start,
                     uint64_t release) const;
  HolderActivity DescribeHolder(uint32_t tid, uint64_t hold_start, uint64_t release_ns) const;
  // What the GPU of `pid` did in [start, end); `call` (may be null) is whose own work to list.
  std::optional<GpuDuringCall> GpuDuring(uint32_t pid, uint64_t start, uint64_t end,
                                         const ApiCall* call) const;

  const Session& session_;
  const WaitReader& waits_;
  const GpuCorrelation& correlation_;
  const GpuBusyTimeline& gpu_busy_;
  Analysis& analysis_;
};

// The object a thread slept on longest among `waits`, and for how long.
std::pair<std::optional<WaitObject>, uint64_t> LongestWaitObject(const std::vector<Wait>& waits) {
  std::vector<std::pair<const WaitObject*, uint64_t>> totals;
  for (const Wait& wait : waits) {
    if (wait.state == OffCpuState::kRunnable) continue;
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& total) { return *total.first == wait.object; });
    if (it == totals.end()) {
      totals.emplace_back(&wait.object, wait.asleep_ns());
    } else {
      it->second += wait.asleep_ns();
    }
  }
  if (totals.empty()) return {std::nullopt, 0};
  auto longest = std::max_element(totals.begin(), totals.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  return {*longest->first, longest->second};
}

void SlowCallExplainer::ExplainCall(const ApiCall& call) {
  TimeSplit split = Split(call.tid, call.enter_ns, call.exit_ns);
  BlockedCall blocked;
  blocked.call = &call;
  blocked.on_cpu_ns = split.on_cpu_ns;
  blocked.runnable_ns = split.runnable_ns;
  blocked.asleep_ns = split.asleep_ns;
  blocked.waits = std::move(split.waits);
  std::tie(blocked.main_object, blocked.main_object_ns) = LongestWaitObject(blocked.waits);
  blocked.gpu = GpuDuring(call.pid, call.enter_ns, call.exit_ns, &call);
  analysis_.blocked_calls.push_back(std::move(blocked));
}

std::optional<GpuDuringCall> SlowCallExplainer::GpuDuring(uint32_t pid, uint64_t start,
                                                          uint64_t end, const ApiCall* call) const {
  if (!gpu_busy_.Recorded(pid)) return std::nullopt;
  GpuUse use = gpu_busy_.UseDuring(pid, start, end);
  GpuDuringCall gpu;
  gpu.window_ns = end - start;
  gpu.busy_ns = use.busy_ns;
  gpu.main_activity = use.longest;
  gpu.main_overlap_ns = use.longest_overlap_ns;
  if (use.longest != nullptr) gpu.main_launcher = correlation_.LauncherOf(*use.longest);
  if (call != nullptr) {
    for (const GpuActivity* activity : correlation_.ActivitiesOf(*call)) {
      if (activity->occupies_gpu()) gpu.own_work.push_back(activity);
    }
  }
  return gpu;
}

// Blocked calls of several threads whose longest wait is on the same object and overlap in time
// froze together. (A single thread's wait is explained by its own waker, in its BlockedCall.)
void SlowCallExplainer::FindFreezes() {
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
  for (auto& [object, spans] : by_object) {
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.start < b.start; });
    std::vector<int> group;
    uint64_t group_end = 0;
    for (const Span& span : spans) {
      if (!group.empty() && span.start > group_end) {
        BuildFreeze(object, std::move(group));
        group.clear();
      }
      group.push_back(span.blocked_call);
      group_end = group.size() == 1 ? span.end : std::max(group_end, span.end);
    }
    if (!group.empty()) BuildFreeze(object, std::move(group));
  }
  std::vector<int> order(analysis_.call_freezes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return analysis_.call_freezes[a].start_ns < analysis_.call_freezes[b].start_ns;
  });
  std::vector<Freeze> sorted;
  for (int i : order) {
    for (const FreezeMember& member : analysis_.call_freezes[i].members) {
      analysis_.blocked_calls[member.blocked_call].freeze = static_cast<int>(sorted.size());
    }
    sorted.push_back(std::move(analysis_.call_freezes[i]));
  }
  analysis_.call_freezes = std::move(sorted);
}

uint64_t SlowCallExplainer::HoldStart(uint32_t tid, const WaitObject& object, uint64_t freeze_start,
                                      uint64_t release) const {
  // The hold may have begun before the first victim blocked: look back over the CUDA call the
  // releaser was in, too.
  uint64_t since = freeze_start;
  if (const ApiCall* call = waits_.CallAt(tid, release)) since = std::min(since, call->enter_ns);
  uint64_t start = since;
  for (const OffCpuInterval* interval : waits_.OffCpuDuring(tid, since, release)) {
    if (interval->end_ns > release) break;
    if (MakeWait(*interval, interval->start_ns, interval->end_ns).object == object) {
      start = interval->end_ns;
    }
  }
  return start;
}

void SlowCallExplainer::BuildFreeze(const WaitObject& object, std::vector<int> members) {
  std::set<uint32_t> member_tids;
  for (int i : members) member_tids.insert(analysis_.blocked_calls[i].call->tid);
  if (member_tids.size() < 2) return;

  Freeze freeze;
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
    // A woken mutex waiter that loses the lock again sleeps twice: the long sleep counts.
    const Wait* decisive = LongestWaitOn(analysis_.blocked_calls[i].waits, object);
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
  if (holder != 0 && session_.IsProfilerThread(holder)) return;
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
  for (const FreezeMember& member : freeze.members) {
    const uint32_t tid = analysis_.blocked_calls[member.blocked_call].call->tid;
    if (std::find(freeze.tids.begin(), freeze.tids.end(), tid) == freeze.tids.end())
      freeze.tids.push_back(tid);
  }
  if (freeze.thread_count() < 2) return;
  analysis_.call_freezes.push_back(std::move(freeze));
}

HolderActivity SlowCallExplainer::DescribeHolder(uint32_t tid, uint64_t hold_start,
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
    holder.gpu =
        GpuDuring(holder.call->pid, holder.call->enter_ns, holder.call->exit_ns, holder.call);
  } else if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
    holder.gpu =
        GpuDuring(thread->second.pid, hold_start, std::max(hold_start, release_ns), nullptr);
  }
  if (release_ns <= hold_start) return holder;
  TimeSplit split = Split(tid, hold_start, release_ns);
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

const Wait* LongestWaitOn(const std::vector<Wait>& waits, const WaitObject& object) {
  const Wait* longest = nullptr;
  for (const Wait& wait : waits) {
    if (wait.object == object && (longest == nullptr || wait.asleep_ns() > longest->asleep_ns())) {
      longest = &wait;
    }
  }
  return longest;
}

void ExplainSlowCalls(const Session& session, const WaitReader& waits,
                      const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                      Analysis& analysis) {
  SlowCallExplainer(session, waits, correlation, gpu_busy, analysis).Run();
}

}  // namespace gprof::collector
