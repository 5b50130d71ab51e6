#include "analysis.h"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>

#include "gpu_timeline.h"
#include "kernel_stack.h"
#include "record_storage.h"
#include "wait_class.h"

namespace gprof::collector {
namespace {

uint64_t StartOf(const ApiCall& call) { return call.enter_ns; }
uint64_t EndOf(const ApiCall& call) { return call.exit_ns; }
template <typename Record>
uint64_t StartOf(const Record& record) {
  return record.start_ns;
}
template <typename Record>
uint64_t EndOf(const Record& record) {
  return record.end_ns;
}

// One kind of record, by thread, in time order. A thread is in one system call, one page fault,
// one lock wait at a time, and off-CPU once: such records of one thread never overlap, so sorted
// by start they are sorted by end too, which During needs. (CUDA calls nest: only At is asked of
// them.) Held as 4-byte indices into the session's vector, grouped by thread in one array: the
// index is as long as the session and is made while the whole model is in memory, at the peak.
template <typename Record>
class PerThread {
 public:
  // Counted first, so that the array is made once at its size and each thread's part placed.
  explicit PerThread(const RecordVector<Record>& records) : records_(records.data()) {
    // A vector of 4 G records or more would need hundreds of GiB: the index stops short of it.
    const size_t count = std::min<size_t>(records.size(), UINT32_MAX);
    for (size_t i = 0; i < count; ++i) ++by_tid_[records[i].tid].end;
    uint32_t next = 0;
    for (auto& [tid, part] : by_tid_) {
      part.begin = part.end = next + part.end;  // `end` counted; filled from the part's end down
      next = part.begin;
    }
    ReserveLarge(order_, count);
    order_.resize(count);
    uint32_t last_tid = 0;
    Part* last = nullptr;
    for (size_t i = count; i-- > 0;) {  // backwards, so that each part fills in time order
      if (last == nullptr || records[i].tid != last_tid) {
        last_tid = records[i].tid;
        last = &by_tid_[last_tid];
      }
      order_[--last->begin] = static_cast<uint32_t>(i);
    }
  }

  // Those of `tid` that overlap [start, end).
  ThreadRecords<Record> During(uint32_t tid, uint64_t start, uint64_t end) const {
    auto all = Of(tid);
    auto first = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return EndOf(records_[i]) <= start; });
    auto last = std::partition_point(first, all.end(),
                                     [&](uint32_t i) { return StartOf(records_[i]) < end; });
    return ThreadRecords<Record>(records_, {first, last});
  }

  // Those of `tid` that began in [start, end), in start order (for records that may nest).
  ThreadRecords<Record> StartingIn(uint32_t tid, uint64_t start, uint64_t end) const {
    auto all = Of(tid);
    auto first = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return StartOf(records_[i]) < start; });
    auto last = std::partition_point(first, all.end(),
                                     [&](uint32_t i) { return StartOf(records_[i]) < end; });
    return ThreadRecords<Record>(records_, {first, last});
  }

  // The one of `tid` in progress at `time`: the latest that began at or before it, unless it
  // ended before.
  const Record* At(uint32_t tid, uint64_t time) const {
    auto all = Of(tid);
    auto after = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return StartOf(records_[i]) <= time; });
    if (after == all.begin()) return nullptr;
    const Record* candidate = &records_[*(after - 1)];
    return EndOf(*candidate) >= time ? candidate : nullptr;
  }

 private:
  struct Part {
    uint32_t begin = 0;
    uint32_t end = 0;
  };
  std::span<const uint32_t> Of(uint32_t tid) const {
    auto it = by_tid_.find(tid);
    if (it == by_tid_.end()) return {};
    return std::span<const uint32_t>(order_).subspan(it->second.begin,
                                                     it->second.end - it->second.begin);
  }

  const Record* records_;
  RecordVector<uint32_t> order_;  // indices into the records, a thread's together, in time order
  std::unordered_map<uint32_t, Part> by_tid_;  // its part of order_
};

// Per-thread views of the session, for interval lookups.
struct ThreadIndex {
  explicit ThreadIndex(const Session& session)
      : off_cpu(session.off_cpu),
        futex(session.futex_calls),
        futex_waitv(session.futex_waitv_calls),
        calls(session.api_calls),
        lock_waits(session.lock_waits),
        page_faults(session.page_faults),
        device_waits(session.device_waits),
        memory_map_calls(session.memory_map_calls) {}

  PerThread<OffCpuInterval> off_cpu;
  PerThread<FutexCall> futex;
  PerThread<FutexWaitvCall> futex_waitv;
  PerThread<ApiCall> calls;
  PerThread<LockWait> lock_waits;
  PerThread<PageFault> page_faults;
  PerThread<DeviceWait> device_waits;
  PerThread<MemoryMapCall> memory_map_calls;
};

}  // namespace

struct WaitReader::Index : ThreadIndex {
  using ThreadIndex::ThreadIndex;
};

WaitReader::WaitReader(const Session& session)
    : session_(session), index_(std::make_unique<Index>(session)) {}
WaitReader::~WaitReader() = default;

const ApiCall* WaitReader::CallAt(uint32_t tid, uint64_t time_ns) const {
  return index_->calls.At(tid, time_ns);
}

CallTime WaitReader::CallTimeDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                                    const ApiCall* except) const {
  CallTime time;
  uint64_t covered_ns = start_ns;  // the calls so far, in start order, cover up to here
  auto add = [&](const ApiCall& call) {
    const uint64_t from = std::max(call.enter_ns, start_ns);
    const uint64_t to = std::min(call.exit_ns, end_ns);
    if (to <= from) return;
    if (to > covered_ns) {
      time.in_calls_ns += to - std::max(from, covered_ns);
      covered_ns = to;
    }
    const bool inside_except =
        except != nullptr && call.enter_ns >= except->enter_ns && call.exit_ns <= except->exit_ns;
    if (inside_except) return;
    ++time.other_calls;
    if (to - from > time.longest_other_ns) {
      time.longest_other = &call;
      time.longest_other_ns = to - from;
    }
  };
  const ApiCall* at_start = CallAt(tid, start_ns);
  if (at_start != nullptr) add(*at_start);
  for (const ApiCall* call : index_->calls.StartingIn(tid, start_ns, end_ns)) {
    if (call != at_start) add(*call);
  }
  return time;
}

ThreadRecords<OffCpuInterval> WaitReader::OffCpuDuring(uint32_t tid, uint64_t start_ns,
                                                       uint64_t end_ns) const {
  return index_->off_cpu.During(tid, start_ns, end_ns);
}

const FutexCall* WaitReader::FutexAt(uint32_t tid, uint64_t time_ns) const {
  return index_->futex.At(tid, time_ns);
}

ThreadRecords<FutexCall> WaitReader::FutexDuring(uint32_t tid, uint64_t start_ns,
                                                 uint64_t end_ns) const {
  return index_->futex.During(tid, start_ns, end_ns);
}

const MemoryMapCall* WaitReader::MemoryCallAt(uint32_t tid, uint64_t time_ns) const {
  return index_->memory_map_calls.At(tid, time_ns);
}

namespace {

class Analyzer {
 public:
  Analyzer(const Session& session, const AnalysisOptions& options, const WaitReader& waits)
      : session_(session), waits_(waits), correlation_(session), gpu_busy_(session) {
    analysis_.options = options;
  }

  Analysis Run() {
    for (const auto& call : session_.api_calls) {
      if (call.duration() >= analysis_.options.threshold_ns) ExplainCall(call);
    }
    FindFreezes();
    analysis_.gpu = SummarizeGpu(session_, correlation_);
    return std::move(analysis_);
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
  GpuCorrelation correlation_;
  GpuBusyTimeline gpu_busy_;
  Analysis analysis_;
};

// What a sleep that began at `interval.start_ns` was on: the innermost thing the kernel recorded
// the thread in, a kernel lock (taken in a page fault, taken in a system call) before the page
// fault before a device call before a futex wait; else the kernel function it slept in.
}  // namespace

WaitObject WaitReader::ObjectOf(const OffCpuInterval& interval, const Wait& wait) const {
  WaitObject object;
  object.pid = interval.pid;
  object.seen_ns = interval.start_ns;
  object.kernel_function = BlockingKernelFunction(session_, interval.kstack_id);
  if (const LockWait* lock = wait.kernel_lock) {
    object.kind = WaitKind::kKernelLock;
    object.address = lock->lock_address;
    object.lock_flags = lock->flags;
    object.taken_in = LockTaker(session_.KernelStack(lock->kstack_id));
    if (!lock->is_mmap_lock()) object.pid = 0;  // a kernel lock is the same in every process
  } else if (const PageFault* fault = wait.page_fault) {
    object.kind = WaitKind::kPageFault;
    object.address = fault->address;
  } else if (const DeviceWait* device = wait.device_wait) {
    object.kind = WaitKind::kDevice;
    object.device_call = device->call;
    object.device = device->device;
  } else if (IsFileLockFunction(object.kernel_function)) {
    object.pid = 0;  // a file's lock is the same in every process
  } else if (const FutexCall* futex = index_->futex.At(interval.tid, interval.start_ns);
             futex != nullptr && futex->is_wait()) {
    object.kind = WaitKind::kFutex;
    object.address = futex->uaddr;
  } else if (const FutexWaitvCall* waitv = index_->futex_waitv.At(interval.tid, interval.start_ns);
             waitv != nullptr && !waitv->addresses.empty()) {
    // Of the words it waited on, the one whose wake ended the call stands for them all.
    object.kind = WaitKind::kFutex;
    object.address = waitv->woken_address().value_or(waitv->addresses.front());
  }
  return object;
}

Wait WaitReader::MakeWait(const OffCpuInterval& interval, uint64_t start, uint64_t end) const {
  Wait wait;
  wait.start_ns = start;
  wait.end_ns = end;
  wait.pid = interval.pid;
  wait.state = interval.state();
  wait.kstack_id = interval.kstack_id;
  wait.user_stack_id = interval.user_stack_id;
  if (wait.state == OffCpuState::kRunnable) {
    wait.object.pid = interval.pid;
    wait.object.seen_ns = interval.start_ns;
    wait.object.kernel_function = BlockingKernelFunction(session_, interval.kstack_id);
    if (wait.object.kernel_function.empty()) wait.object.kernel_function = "preempted";
    wait.wait_class = WaitClass::kCpu;
    return wait;
  }
  wait.kernel_lock = index_->lock_waits.At(interval.tid, interval.start_ns);
  wait.page_fault = index_->page_faults.At(interval.tid, interval.start_ns);
  wait.device_wait = index_->device_waits.At(interval.tid, interval.start_ns);
  wait.object = ObjectOf(interval, wait);
  if (const LockWait* lock = wait.kernel_lock; lock != nullptr && lock->owner_tid != 0) {
    wait.owner_memory_call = index_->memory_map_calls.At(lock->owner_tid, lock->start_ns);
    wait.owner_call = index_->calls.At(lock->owner_tid, lock->start_ns);
  }
  // Woken before `start` (the interval clipped to a window it began before): runnable from the
  // window's start, not asleep in it.
  if (interval.wake_ns != 0 && interval.wake_ns <= end) {
    wait.wake_ns = std::max(interval.wake_ns, start);
    wait.waker_pid = interval.waker_pid;
    wait.waker_tid = interval.waker_tid;
    wait.waker_comm = session_.WakerComm(interval);
    wait.waker_user_stack_id = interval.waker_user_stack_id;
    if (interval.waker_tid != 0)
      wait.waker_call = index_->calls.At(interval.waker_tid, interval.wake_ns);
  }
  wait.wait_class = WaitClassifier(session_, *this).Classify(interval.tid, wait);
  return wait;
}

TimeSplit WaitReader::Split(uint32_t tid, uint64_t start, uint64_t end) const {
  TimeSplit split;
  // Before the thread was created, and after it exited, it did nothing at all.
  if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
    if (thread->second.start_ns > start) start = std::min(thread->second.start_ns, end);
    if (thread->second.exit_ns != 0 && thread->second.exit_ns < end)
      end = std::max(thread->second.exit_ns, start);
  }
  for (const OffCpuInterval* interval : index_->off_cpu.During(tid, start, end)) {
    uint64_t clipped_start = std::max(interval->start_ns, start);
    uint64_t clipped_end = std::min(interval->end_ns, end);
    Wait wait = MakeWait(*interval, clipped_start, clipped_end);
    if (wait.state == OffCpuState::kRunnable) {
      split.runnable_ns += clipped_end - clipped_start;
    } else {
      split.asleep_ns += wait.asleep_ns();
      if (wait.wake_ns != 0) split.runnable_ns += clipped_end - wait.wake_ns;
    }
    split.waits.push_back(std::move(wait));
  }
  uint64_t off_cpu = split.asleep_ns + split.runnable_ns;
  split.on_cpu_ns = end - start > off_cpu ? end - start - off_cpu : 0;
  return split;
}

namespace {

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

void Analyzer::ExplainCall(const ApiCall& call) {
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

std::optional<GpuDuringCall> Analyzer::GpuDuring(uint32_t pid, uint64_t start, uint64_t end,
                                                 const ApiCall* call) const {
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
void Analyzer::FindFreezes() {
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
  std::vector<int> order(analysis_.freezes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return analysis_.freezes[a].start_ns < analysis_.freezes[b].start_ns;
  });
  std::vector<Freeze> sorted;
  for (int i : order) {
    for (const FreezeMember& member : analysis_.freezes[i].members) {
      analysis_.blocked_calls[member.blocked_call].freeze = static_cast<int>(sorted.size());
    }
    sorted.push_back(std::move(analysis_.freezes[i]));
  }
  analysis_.freezes = std::move(sorted);
}

uint64_t Analyzer::HoldStart(uint32_t tid, const WaitObject& object, uint64_t freeze_start,
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

void Analyzer::BuildFreeze(const WaitObject& object, std::vector<int> members) {
  std::set<uint32_t> member_tids;
  for (int i : members) member_tids.insert(analysis_.blocked_calls[i].call->tid);
  if (member_tids.size() < 2) return;

  Freeze freeze;
  freeze.object = object;
  freeze.thread_count = member_tids.size();
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
    std::set<uint32_t> victims;
    for (const FreezeMember& member : freeze.members) {
      victims.insert(analysis_.blocked_calls[member.blocked_call].call->tid);
    }
    freeze.thread_count = victims.size();
    if (freeze.thread_count < 2) return;
  }
  analysis_.freezes.push_back(std::move(freeze));
}

HolderActivity Analyzer::DescribeHolder(uint32_t tid, uint64_t hold_start,
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

std::string BlockingKernelFunction(const Session& session, int32_t stack_id) {
  return BlockingFunction(session.KernelStack(stack_id));
}

Analysis Analyze(const Session& session, const AnalysisOptions& options) {
  return Analyze(session, options, WaitReader(session));
}

Analysis Analyze(const Session& session, const AnalysisOptions& options, const WaitReader& waits) {
  return Analyzer(session, options, waits).Run();
}

}  // namespace gprof::collector
