#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnoser.h"

namespace gprof::collector::diagnosis {

namespace {

// A thread that runnable-waits at least this share of its life, for at least the threshold,
// was short of CPU.
constexpr double kCpuStarvedShare = 0.05;

// A thread's life as its switches tell it: from its first switch-out to its last switch-in.
struct Life {
  uint64_t first_ns = UINT64_MAX, last_ns = 0;
};

// Every thread's time without a CPU, counted step by step.
struct CpuTally {
  std::map<uint32_t, CpuWait> threads;
  std::map<uint32_t, Life> lives;
  // Per thread, its counted waits (too short to be recorded one by one) with time runnable.
  std::map<uint32_t, std::vector<const CountedWaits*>> counted_of;
  // Per thread, the windows in which another thread's wait was held up by it (a link's).
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> awaited;
  std::map<uint32_t, uint64_t> awaited_window_ns;  // how long others waited for it, in all
  uint64_t path_held_up_ns = 0;  // the program's critical path held up by threads without a CPU
};

// Time `tid` was runnable in [start, end): preempted, or woken and not yet run.
uint64_t RunnableDuring(const WaitReader& reader, uint32_t tid, uint64_t start, uint64_t end) {
  uint64_t runnable = 0;
  for (const OffCpuInterval* interval : reader.OffCpuDuring(tid, start, end)) {
    uint64_t from = std::max(start, interval->state() == OffCpuState::kRunnable
                                        ? interval->start_ns
                                        : std::max(interval->start_ns, interval->wake_ns));
    uint64_t to = std::min(end, interval->end_ns);
    if ((interval->state() == OffCpuState::kRunnable || interval->wake_ns != 0) && from < to)
      runnable += to - from;
  }
  return runnable;
}

// Each thread's time runnable, and its life, from its recorded and its counted waits (not
// gprof-run's own threads').
void CountRunnable(const Session& session, const std::set<uint32_t>& ours, CpuTally& tally) {
  for (const OffCpuInterval& interval : session.off_cpu) {
    if (ours.contains(interval.tid)) continue;
    CpuWait& time = tally.threads[interval.tid];
    Life& life = tally.lives[interval.tid];
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
  for (const CountedWaits& counted : session.counted_waits) {
    if (counted.kind != CountedWaits::Kind::kOffCpu || session.IsProfilerThread(counted.tid))
      continue;
    if (counted.runnable_ns != 0) tally.counted_of[counted.tid].push_back(&counted);
    CpuWait& time = tally.threads[counted.tid];
    Life& life = tally.lives[counted.tid];
    time.tid = counted.tid;
    life.first_ns = std::min(life.first_ns, counted.start_ns);
    life.last_ns = std::max(life.last_ns, counted.end_ns);
    time.runnable_ns += counted.runnable_ns;
    if (counted.how != 0) {
      time.after_wakeup_ns += counted.runnable_ns;
      time.wakeups += counted.woken;
    }
  }
}

// Each link of a chain accounts for part of the previous link's sleep (or of the part before
// its thread existed): the links' runnable times in one chain never overlap, and add up to the
// time the wait was held up by threads without a CPU. For the threads that held waits up, the
// windows are merged, so that several waits on one producer count its time once.
void CountHeldUp(const std::vector<Stall>& stalls, CpuTally& tally) {
  for (const Stall& stall : stalls) {
    auto waiter = tally.threads.find(stall.tid);
    for (const ChainLink& link : stall.chain) {
      if (link.end_ns <= link.start_ns) continue;
      tally.awaited[link.tid].emplace_back(link.start_ns, link.end_ns);
      if (stall.on_critical_path) tally.path_held_up_ns += link.runnable_ns;
      if (link.runnable_ns == 0 || waiter == tally.threads.end()) continue;
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
}

// Of each thread's time runnable, the part while another thread's wait was held up by it, over
// its merged windows.
void CountAwaited(const WaitReader& reader, CpuTally& tally) {
  for (auto& [tid, windows] : tally.awaited) {
    auto time = tally.threads.find(tid);
    if (time == tally.threads.end()) continue;
    std::sort(windows.begin(), windows.end());
    auto [from, to] = windows.front();
    for (size_t i = 1; i <= windows.size(); ++i) {
      if (i < windows.size() && windows[i].first <= to) {
        to = std::max(to, windows[i].second);
        continue;
      }
      time->second.awaited_ns += RunnableDuring(reader, tid, from, to);
      // Of the counted ones, the share of their period that falls in the window (when in it they
      // were is not recorded).
      for (const CountedWaits* counted : tally.counted_of[tid]) {
        const uint64_t overlap_from = std::max(from, counted->start_ns);
        const uint64_t overlap_to = std::min(to, counted->end_ns);
        if (overlap_from >= overlap_to) continue;
        const uint64_t period = counted->end_ns - counted->start_ns;
        time->second.awaited_ns += static_cast<uint64_t>(
            static_cast<double>(counted->runnable_ns) *
            static_cast<double>(overlap_to - overlap_from) / static_cast<double>(period));
      }
      tally.awaited_window_ns[tid] += to - from;
      if (i < windows.size()) std::tie(from, to) = windows[i];
    }
  }
}

// The threads runnable or held up the threshold or more, into `waits` by runnable time, longest
// first, each judged short of CPU or latency sensitive. Returns whether the lack of CPU made a
// thread late (not only slower).
bool JudgeCpuWaits(uint64_t threshold, CpuTally& tally, std::vector<CpuWait>& waits) {
  bool made_late = false;
  for (auto& [tid, time] : tally.threads) {
    if (time.runnable_ns < threshold && time.delayed_ns() < threshold) continue;
    const Life& life = tally.lives[tid];
    time.life_ns = life.last_ns > life.first_ns ? life.last_ns - life.first_ns : 0;
    // The same share of the time others waited for it as of its life: a moment's preemption
    // while another thread waits for it all along is no shortage.
    time.short_of_cpu = time.runnable_ns >= threshold &&
                        (time.runnable_ns >= time.life_ns * kCpuStarvedShare ||
                         (time.awaited_ns >= threshold &&
                          time.awaited_ns >= tally.awaited_window_ns[tid] * kCpuStarvedShare));
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
  return made_late;
}

}  // namespace

// Threads ready to run without a CPU: no lock, only time runnable. Short of CPU is a thread that
// was runnable the threshold or more, for a share of its life or of the time another thread's
// wait was held up by it (a handoff's producer preempted: the consumer waits longer). A cause when
// that made waits longer: threads of the program kept each other from a CPU, or a wait was held up
// by a thread without one, or a thread woken waited for one. (A lone thread that other programs
// preempted, with nobody waiting for it, only ran slower: the report says so, as no cause.)
void Diagnoser::FindCpuStarvation() {
  CpuTally tally;
  CountRunnable(session_, ours_, tally);
  CountHeldUp(analysis_.stalls, tally);
  CountAwaited(reader_, tally);
  std::vector<CpuWait>& waits = analysis_.cpu_waits;
  const bool made_late = JudgeCpuWaits(analysis_.options.threshold_ns, tally, waits);
  const auto short_of_cpu =
      std::count_if(waits.begin(), waits.end(), [](const CpuWait& w) { return w.short_of_cpu; });
  if (short_of_cpu == 0 || (short_of_cpu < 2 && !made_late)) return;
  int index = CauseFor("cpu", CauseOfKind(CauseKind::kCpu, WaitClass::kCpu));
  Cause& cause = analysis_.causes[index];
  cause.held_up_ns = tally.path_held_up_ns;
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

}  // namespace gprof::collector::diagnosis
