#include "collector/writers/perfetto/timeline_writer.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/model/value_format.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/perfetto/flow_ids.h"
#include "collector/writers/perfetto/pending_queue.h"
#include "collector/writers/perfetto/slice_names.h"
#include "collector/writers/perfetto/stack_callstacks.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector::perfetto {
namespace {

// Where each GPU activity's slice ends on its stream's lane, for those that do not end at their
// recorded end: a stream runs one thing at a time, so one that overlaps the next on its stream is
// inconsistent data, and is cut where the next starts to keep the lane a sequence. By index into
// Session::gpu_activities.
std::unordered_map<size_t, uint64_t> ClipOverlapsOnStreams(const Session& session);

// Writes the events of the record vectors in one pass, in global timestamp order, so every
// track's events are in order. What a record causes later (a slice end, the runnable half of an
// off-CPU interval, a wake instant) waits in a queue that holds only what is open at the moment
// (about threads x nesting depth), never the session.
class TimelineWriter {
 public:
  TimelineWriter(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                 StringInterner& interner, CallstackInterner& callstacks,
                 const Vocabulary& vocabulary)
      : session_(session),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary),
        scheduler_names_(session, interner),
        futex_names_(interner),
        user_stacks_(session, callstacks),
        callstacks_(session, user_stacks_, callstacks),
        kernel_names_(session, interner),
        gpu_names_(session, interner),
        correlation_(session),
        flow_ids_(session),
        clipped_gpu_ends_(ClipOverlapsOnStreams(session)),
        api_name_iids_(session.api_names.size(), 0) {}

  void Write();

 private:
  // What a queued event does. At one timestamp, ends come first (innermost first), then instants,
  // then begins: a slice that ends where the next starts closes before it, and a flow starts before
  // the event it ends in.
  enum class Action : uint8_t { kEndSlice, kWakeInstant, kBeginRunnable };

  struct Pending {
    // What runs first has the smallest key: the time, then the action, then the later queued
    // (of two equal ends, the later queued is the inner slice), in one integer compared at once.
    // Kept as two words: a 16-byte load of what was just stored as two 8-byte ones stalls.
    uint64_t time;
    uint64_t action_and_order;
    EventTrack* track;     // kEndSlice, kBeginRunnable
    size_t off_cpu_index;  // kWakeInstant, kBeginRunnable
    unsigned __int128 key() const {
      return (static_cast<unsigned __int128>(time) << 64) | action_and_order;
    }
    uint64_t time_ns() const { return time; }
    Action action() const { return static_cast<Action>(action_and_order >> 62); }
  };

  static constexpr uint64_t kOrderMask = (uint64_t{1} << 62) - 1;

  void Schedule(uint64_t time_ns, Action action, EventTrack* track, size_t off_cpu_index) {
    uint64_t low = (uint64_t{static_cast<uint8_t>(action)} << 62) | (kOrderMask - next_order_++);
    pending_.Push(Pending{time_ns, low, track, off_cpu_index});
  }

  void RunPendingUpTo(uint64_t time_ns);
  void Run(const Pending& pending);
  void BeginNvtxRange(const NvtxRange& range);
  void BeginNcclEvent(const NcclEvent& nccl);
  TrackEventSpec NvtxEvent(uint32_t name, uint32_t domain, uint64_t time_ns);
  void WriteNvtxMark(const NvtxMark& mark);
  uint64_t InnermostRangeIid(uint32_t tid, uint64_t time_ns);
  void BeginApiCall(const ApiCall& call);
  void BeginOffCpu(size_t index);
  void BeginRunnable(EventTrack& track, size_t index);
  void WriteWakeInstant(size_t index);
  void BeginFutex(const FutexCall& call);
  void BeginFutexWaitv(const FutexWaitvCall& call);
  void BeginMemoryMapCall(const MemoryMapCall& call);
  void BeginDeviceWait(const DeviceWait& wait);
  void BeginPageFault(const PageFault& fault);
  void BeginLockWait(const LockWait& lock);
  EventTrack& KernelTrack(uint32_t tid, uint32_t pid) {
    return tracks_.Kernel(tracks_.Thread(tid, pid));
  }
  void BeginGpuActivity(size_t index);
  void AnnotateGpuDetail(TrackEventSpec& event, const GpuActivity& activity);
  void BeginSlice(EventTrack& track, TrackEventSpec& event, uint64_t end_ns);
  void EndSlice(EventTrack& track, uint64_t time_ns);

  uint64_t ApiNameIid(uint32_t name_index);
  uint64_t StreamIid(uint64_t stream);
  bool HasWakeFlow(const OffCpuInterval& interval);
  const ApiCall* LaunchFlowOrigin(const GpuActivity& activity) const;
  static uint64_t WakeTime(const OffCpuInterval& interval);
  size_t IndexOf(const GpuActivity& activity) const {
    return static_cast<size_t>(&activity - session_.gpu_activities.data());
  }

  const Session& session_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
  SchedulerNames scheduler_names_;
  FutexNames futex_names_;
  UserStackNames user_stacks_;
  StackCallstacks callstacks_;
  KernelNames kernel_names_;
  GpuNames gpu_names_;
  GpuCorrelation correlation_;
  FlowIds flow_ids_;
  std::unordered_map<size_t, uint64_t> clipped_gpu_ends_;
  std::vector<uint64_t> launch_flow_ids_;               // of the API call being written
  std::vector<uint64_t> api_name_iids_;                 // by Session::api_names index; 0: not yet
  std::unordered_map<uint64_t, uint64_t> stream_iids_;  // by stream handle
  // Each thread's NVTX ranges begun and maybe still open, innermost last; the name each GPU
  // activity's launch was made in (the activity's nvtx_range annotation), by activity index.
  std::unordered_map<uint32_t, std::vector<const NvtxRange*>> open_ranges_;
  std::unordered_map<size_t, uint64_t> launch_range_iids_;
  PendingQueue<Pending> pending_;
  uint64_t next_order_ = 0;
};

uint64_t StartOf(const ApiCall& call) { return call.enter_ns; }
uint64_t EndOf(const ApiCall& call) { return call.exit_ns; }
uint64_t StartOf(const NvtxMark& mark) { return mark.time_ns; }
uint64_t EndOf(const NvtxMark& mark) { return mark.time_ns; }
template <typename Record>
uint64_t StartOf(const Record& record) {
  return record.start_ns;
}
template <typename Record>
uint64_t EndOf(const Record& record) {
  return record.end_ns;
}

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// Walks a vector sorted by start time. Records that start in the same nanosecond come longest
// first, so that of two nested slices the outer one opens first.
template <typename Record>
class RecordCursor {
 public:
  explicit RecordCursor(const RecordVector<Record>& records) : records_(records) { LoadGroup(); }

  uint64_t next_start() const { return next_start_; }

  size_t Take() {
    size_t index = group_.back();
    group_.pop_back();
    if (group_.empty()) LoadGroup();
    return index;
  }

 private:
  // The next run of records with one start time, ordered so that the longest is at the back.
  void LoadGroup() {
    if (group_end_ == records_.size()) {
      next_start_ = kNever;
      return;
    }
    next_start_ = StartOf(records_[group_end_]);
    // The records are read once, in order, in between the other vectors' and the trace's bytes.
    __builtin_prefetch(&records_[std::min(group_end_ + kPrefetchAhead, records_.size() - 1)]);
    group_.push_back(group_end_++);
    // Most runs are one record long: nothing to order.
    if (group_end_ == records_.size() || StartOf(records_[group_end_]) != next_start_) return;
    while (group_end_ < records_.size() && StartOf(records_[group_end_]) == next_start_)
      group_.push_back(group_end_++);
    std::sort(group_.begin(), group_.end(), [&](size_t a, size_t b) {
      uint64_t end_a = EndOf(records_[a]), end_b = EndOf(records_[b]);
      return end_a != end_b ? end_a < end_b : a > b;
    });
  }

  static constexpr size_t kPrefetchAhead = 8;
  const RecordVector<Record>& records_;
  size_t group_end_ = 0;
  uint64_t next_start_ = kNever;  // of the records at the back of group_
  std::vector<size_t> group_;
};

std::unordered_map<size_t, uint64_t> ClipOverlapsOnStreams(const Session& session) {
  std::unordered_map<size_t, uint64_t> clipped;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t> last_on_stream;
  // In the order the writer begins them, so that each is compared with the slice before it.
  RecordCursor cursor(session.gpu_activities);
  while (cursor.next_start() != kNever) {
    size_t index = cursor.Take();
    const GpuActivity& activity = session.gpu_activities[index];
    if (!activity.occupies_gpu()) continue;
    auto [last, first_on_stream] = last_on_stream.try_emplace(
        std::make_tuple(activity.pid, activity.device_id, activity.stream_id), index);
    if (first_on_stream) continue;
    size_t previous = std::exchange(last->second, index);
    auto previous_end = clipped.find(previous);
    uint64_t end = previous_end != clipped.end() ? previous_end->second
                                                 : session.gpu_activities[previous].end_ns;
    if (activity.start_ns < end) clipped[previous] = activity.start_ns;
  }
  return clipped;
}

void TimelineWriter::Write() {
  RecordCursor nvtx_ranges(session_.nvtx_ranges);
  RecordCursor nvtx_marks(session_.nvtx_marks);
  RecordCursor api_calls(session_.api_calls);
  RecordCursor off_cpu(session_.off_cpu);
  RecordCursor futex_calls(session_.futex_calls);
  RecordCursor futex_waitv_calls(session_.futex_waitv_calls);
  RecordCursor memory_map_calls(session_.memory_map_calls);
  RecordCursor device_waits(session_.device_waits);
  RecordCursor page_faults(session_.page_faults);
  RecordCursor lock_waits(session_.lock_waits);
  RecordCursor gpu_activities(session_.gpu_activities);
  size_t nccl = 0;  // into session_.nccl_events, by start
  while (true) {
    const uint64_t nccl_next =
        nccl < session_.nccl_events.size() ? session_.nccl_events[nccl].start_ns : kNever;
    // Pairwise, without branches: which vector comes next changes from one record to the next.
    uint64_t next =
        std::min(std::min(std::min(std::min(nvtx_ranges.next_start(), api_calls.next_start()),
                                   std::min(off_cpu.next_start(), nvtx_marks.next_start())),
                          std::min(futex_calls.next_start(), futex_waitv_calls.next_start())),
                 std::min(std::min(memory_map_calls.next_start(), device_waits.next_start()),
                          std::min(std::min(page_faults.next_start(), lock_waits.next_start()),
                                   gpu_activities.next_start())));
    next = std::min(next, nccl_next);
    RunPendingUpTo(next);
    if (next == kNever) return;
    // An API call before the GPU work that starts in the same nanosecond: its launch arrow starts
    // before the slice it ends in. On the kernel track, what holds the others first: a system
    // call, then a page fault in it, then a lock wait in that.
    if (nccl_next == next) {  // an NCCL enqueue holds the calls NCCL makes in it
      BeginNcclEvent(session_.nccl_events[nccl++]);
    } else if (nvtx_ranges.next_start() == next) {  // a range holds the calls that start with it
      BeginNvtxRange(session_.nvtx_ranges[nvtx_ranges.Take()]);
    } else if (nvtx_marks.next_start() == next) {
      WriteNvtxMark(session_.nvtx_marks[nvtx_marks.Take()]);
    } else if (api_calls.next_start() == next) {
      BeginApiCall(session_.api_calls[api_calls.Take()]);
    } else if (off_cpu.next_start() == next) {
      BeginOffCpu(off_cpu.Take());
    } else if (futex_calls.next_start() == next) {
      BeginFutex(session_.futex_calls[futex_calls.Take()]);
    } else if (futex_waitv_calls.next_start() == next) {
      BeginFutexWaitv(session_.futex_waitv_calls[futex_waitv_calls.Take()]);
    } else if (memory_map_calls.next_start() == next) {
      BeginMemoryMapCall(session_.memory_map_calls[memory_map_calls.Take()]);
    } else if (device_waits.next_start() == next) {
      BeginDeviceWait(session_.device_waits[device_waits.Take()]);
    } else if (page_faults.next_start() == next) {
      BeginPageFault(session_.page_faults[page_faults.Take()]);
    } else if (lock_waits.next_start() == next) {
      BeginLockWait(session_.lock_waits[lock_waits.Take()]);
    } else {
      BeginGpuActivity(gpu_activities.Take());
    }
  }
}

void TimelineWriter::RunPendingUpTo(uint64_t time_ns) {
  while (!pending_.empty() && pending_.next().time_ns() <= time_ns) Run(pending_.Pop());
}

void TimelineWriter::Run(const Pending& pending) {
  switch (pending.action()) {
    case Action::kEndSlice:
      EndSlice(*pending.track, pending.time_ns());
      break;
    case Action::kWakeInstant:
      WriteWakeInstant(pending.off_cpu_index);
      break;
    case Action::kBeginRunnable:
      BeginRunnable(*pending.track, pending.off_cpu_index);
      break;
  }
}

// An NVTX range's or mark's event: its name, and its domain (else "nvtx") as category.
TrackEventSpec TimelineWriter::NvtxEvent(uint32_t name, uint32_t domain, uint64_t time_ns) {
  TrackEventSpec event;
  event.timestamp_ns = time_ns;
  event.name_iid = interner_.Intern(InternTable::kEventNames,
                                    name != 0 ? session_.nvtx_strings[name] : "(unnamed)");
  event.category_iid =
      domain != 0 ? interner_.Intern(InternTable::kCategories, session_.nvtx_strings[domain])
                  : vocabulary_.nvtx;
  return event;
}

// An NVTX range on its thread's track, nested with the CUDA calls it holds.
void TimelineWriter::BeginNvtxRange(const NvtxRange& range) {
  TrackEventSpec event = NvtxEvent(range.name, range.domain, range.start_ns);
  if (range.open) event.Annotate(vocabulary_.still_open_at_end, Annotation::Kind::kUint, 1);
  open_ranges_[range.tid].push_back(&range);
  BeginSlice(tracks_.Thread(range.tid, range.pid).thread, event, range.end_ns);
}

// An NCCL collective's or send/receive's enqueue on its thread's track (NCCL's profiler plugin),
// with its number on the communicator: the same number on every rank is the same collective.
void TimelineWriter::BeginNcclEvent(const NcclEvent& nccl) {
  using Kind = Annotation::Kind;
  if (nccl.kind == static_cast<uint16_t>(format::NcclEventKind::kCommInit)) return;
  TrackEventSpec event;
  event.timestamp_ns = nccl.start_ns;
  const std::string& func =
      session_.nccl_names[nccl.func < session_.nccl_names.size() ? nccl.func : 0];
  event.name_iid =
      interner_.Intern(InternTable::kEventNames, "nccl" + (func.empty() ? "Event" : func));
  event.category_iid = vocabulary_.nccl;
  if (nccl.flags & format::kNcclHasSeqNumber)
    event.Annotate(vocabulary_.seq_number, Kind::kUint, nccl.seq_number);
  if (nccl.flags & format::kNcclHasCommHash)
    event.Annotate(vocabulary_.comm_hash, Kind::kUint, nccl.comm_hash);
  event.Annotate(vocabulary_.rank, Kind::kUint, static_cast<uint64_t>(std::max(nccl.rank, 0)));
  if (nccl.n_ranks > 0) event.Annotate(vocabulary_.n_ranks, Kind::kUint, nccl.n_ranks);
  event.Annotate(vocabulary_.count, Kind::kUint, nccl.count);
  if (nccl.peer >= 0) event.Annotate(vocabulary_.peer, Kind::kUint, nccl.peer);
  BeginSlice(tracks_.Thread(nccl.tid, nccl.pid).thread, event, nccl.stop_ns);
}

// An NVTX mark: an instant on its thread's track.
void TimelineWriter::WriteNvtxMark(const NvtxMark& mark) {
  packets_.WriteTrackEvent(tracks_.Thread(mark.tid, mark.pid).thread.sequence,
                           NvtxEvent(mark.name, mark.domain, mark.time_ns));
}

// The name of the innermost NVTX range open on `tid` at `time_ns` (times only grow), 0: none.
uint64_t TimelineWriter::InnermostRangeIid(uint32_t tid, uint64_t time_ns) {
  auto found = open_ranges_.find(tid);
  if (found == open_ranges_.end()) return 0;
  std::vector<const NvtxRange*>& open = found->second;
  while (!open.empty() && open.back()->end_ns <= time_ns) open.pop_back();
  if (open.empty() || open.back()->name == 0) return 0;
  return interner_.Intern(InternTable::kAnnotationStrings,
                          session_.nvtx_strings[open.back()->name]);
}

void TimelineWriter::BeginApiCall(const ApiCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.enter_ns;
  event.name_iid = ApiNameIid(call.name_index);
  event.category_iid = vocabulary_.cuda;
  if (call.flags & format::kApiCallHasStream) {
    event.Annotate(vocabulary_.stream, Annotation::Kind::kInternedString, StreamIid(call.stream));
  }
  if (call.correlation_id != 0)
    event.Annotate(vocabulary_.correlation_id, Annotation::Kind::kUint, call.correlation_id);
  if (call.return_code != 0) event.AnnotateInt(vocabulary_.return_code, call.return_code);
  launch_flow_ids_.clear();
  for (const GpuActivity* activity : correlation_.ActivitiesOf(call)) {
    if (LaunchFlowOrigin(*activity) != &call) continue;
    launch_flow_ids_.push_back(flow_ids_.Launch(IndexOf(*activity)));
    if (uint64_t range = InnermostRangeIid(call.tid, call.enter_ns))
      launch_range_iids_[IndexOf(*activity)] = range;
  }
  event.flow_ids = launch_flow_ids_;
  event.callstack_iid = callstacks_.OfCall(call, session_.python.CudaCall(call.tid, call.enter_ns));
  BeginSlice(tracks_.Thread(call.tid, call.pid).thread, event, call.exit_ns);
}

// Kernels, copies and memsets on their stream's lane, ending a launch arrow from the API call
// that caused them; host waits for the GPU on the process's synchronization track.
void TimelineWriter::BeginGpuActivity(size_t index) {
  const GpuActivity& activity = session_.gpu_activities[index];
  TrackEventSpec event;
  event.timestamp_ns = activity.start_ns;
  event.name_iid = gpu_names_.SliceName(activity);
  event.category_iid = vocabulary_.gpu;
  if (activity.correlation_id != 0) {
    event.Annotate(vocabulary_.correlation_id, Annotation::Kind::kUint, activity.correlation_id);
  }
  AnnotateGpuDetail(event, activity);
  if (!activity.occupies_gpu()) {
    BeginSlice(tracks_.GpuSync(activity.pid), event, activity.end_ns);
    return;
  }
  if (activity.graph_id != 0) {
    event.Annotate(vocabulary_.graph_id, Annotation::Kind::kUint, activity.graph_id);
    event.Annotate(vocabulary_.graph_node_id, Annotation::Kind::kUint, activity.graph_node_id);
  }
  if (LaunchFlowOrigin(activity) != nullptr) event.terminating_flow_id = flow_ids_.Launch(index);
  if (auto range = launch_range_iids_.find(index); range != launch_range_iids_.end()) {
    event.Annotate(vocabulary_.nvtx_range, Annotation::Kind::kInternedString, range->second);
    launch_range_iids_.erase(range);
  }
  uint64_t end = activity.end_ns;
  if (auto clipped = clipped_gpu_ends_.find(index); clipped != clipped_gpu_ends_.end()) {
    end = clipped->second;
    event.Annotate(vocabulary_.recorded_duration_ns, Annotation::Kind::kUint, activity.duration());
    event.Annotate(vocabulary_.overlapped_next_ns, Annotation::Kind::kUint, activity.end_ns - end);
  }
  BeginSlice(tracks_.GpuStream(activity.pid, activity.device_id, activity.stream_id), event, end);
}

void TimelineWriter::AnnotateGpuDetail(TrackEventSpec& event, const GpuActivity& activity) {
  using Kind = Annotation::Kind;
  if (const auto* kernel = std::get_if<GpuKernel>(&activity.detail)) {
    event.Annotate(vocabulary_.grid, Kind::kInternedString, gpu_names_.Dimensions(kernel->grid));
    event.Annotate(vocabulary_.block, Kind::kInternedString, gpu_names_.Dimensions(kernel->block));
    event.Annotate(vocabulary_.registers_per_thread, Kind::kUint, kernel->registers_per_thread);
    event.Annotate(vocabulary_.shared_memory_bytes, Kind::kUint, kernel->shared_memory_bytes);
  } else if (const auto* copy = std::get_if<GpuMemcpy>(&activity.detail)) {
    event.Annotate(vocabulary_.bytes, Kind::kUint, copy->bytes);
    event.Annotate(vocabulary_.from, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(copy->src_kind)));
    event.Annotate(vocabulary_.to, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(copy->dst_kind)));
    event.Annotate(vocabulary_.async, Kind::kBool, copy->async);
  } else if (const auto* memset = std::get_if<GpuMemset>(&activity.detail)) {
    event.Annotate(vocabulary_.bytes, Kind::kUint, memset->bytes);
    event.Annotate(vocabulary_.value, Kind::kUint, memset->value);
    event.Annotate(vocabulary_.memory, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(memset->memory_kind)));
    event.Annotate(vocabulary_.async, Kind::kBool, memset->async);
  } else if (const auto* sync = std::get_if<GpuSync>(&activity.detail)) {
    event.Annotate(vocabulary_.sync_type, Kind::kInternedString,
                   gpu_names_.Text(SyncTypeName(sync->type)));
    if (activity.stream_id != kNoStream)
      event.Annotate(vocabulary_.stream, Kind::kUint, activity.stream_id);
    if (sync->event_id != 0) event.Annotate(vocabulary_.event, Kind::kUint, sync->event_id);
  }
}

// The wait: from the switch-out to the wakeup, or to the switch-in when the thread was preempted.
void TimelineWriter::BeginOffCpu(size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  if (interval.duration() < session_.trace_detail_under_ns) return;  // counted (WriteCountedWaits)
  EventTrack& track = tracks_.OffCpu(tracks_.Thread(interval.tid, interval.pid));
  TrackEventSpec wait;
  wait.timestamp_ns = interval.start_ns;
  wait.name_iid = scheduler_names_.WaitName(interval);
  wait.category_iid = vocabulary_.sched;
  wait.Annotate(vocabulary_.state, Annotation::Kind::kInternedString,
                scheduler_names_.State(interval));
  wait.callstack_iid =
      callstacks_.OfWait(interval.pid, interval.user_stack_id, interval.kstack_id,
                         interval.start_ns, session_.python.Waiter(interval.tid, interval.start_ns));
  if (interval.flags & GPROF_OFFCPU_UNFINISHED)
    wait.Annotate(vocabulary_.still_off_cpu_at_end, Annotation::Kind::kBool, 1);
  if (interval.wake_ns == 0) {
    BeginSlice(track, wait, interval.end_ns);
    return;
  }
  uint64_t wake_ns = WakeTime(interval);
  Schedule(wake_ns, Action::kBeginRunnable, &track, index);
  if (HasWakeFlow(interval)) Schedule(wake_ns, Action::kWakeInstant, nullptr, index);
  BeginSlice(track, wait, wake_ns);
}

// The time a woken thread waited for a CPU, from the wakeup to the switch-in.
void TimelineWriter::BeginRunnable(EventTrack& track, size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  TrackEventSpec runnable;
  runnable.timestamp_ns = WakeTime(interval);
  runnable.name_iid = scheduler_names_.RunnableName(interval);
  runnable.category_iid = vocabulary_.sched;
  if (HasWakeFlow(interval)) runnable.terminating_flow_id = FlowIds::Wake(index);
  runnable.Annotate(vocabulary_.waker, Annotation::Kind::kInternedString,
                    scheduler_names_.WakerLabel(interval));
  // The waker's stack where it woke this thread (in the waker's process).
  runnable.callstack_iid = callstacks_.OfWait(
      interval.waker_pid, interval.waker_user_stack_id, interval.waker_kstack_id,
      runnable.timestamp_ns, session_.python.Waker(interval.tid, interval.start_ns, interval.wake_ns));
  BeginSlice(track, runnable, interval.end_ns);
}

// "wake X" on the waker's thread track: where the flow arrow to X's runnable slice starts.
void TimelineWriter::WriteWakeInstant(size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  TrackEventSpec wake;
  wake.timestamp_ns = WakeTime(interval);
  wake.name_iid = scheduler_names_.WakeName(interval.tid);
  wake.category_iid = vocabulary_.sched;
  uint64_t flow_id = FlowIds::Wake(index);
  wake.flow_ids = std::span<const uint64_t>(&flow_id, 1);
  packets_.WriteTrackEvent(tracks_.Thread(interval.waker_tid, interval.waker_pid).thread.sequence,
                           wake);
}

void TimelineWriter::BeginFutex(const FutexCall& call) {
  if (call.duration() < session_.trace_detail_under_ns) return;  // counted (WriteCountedWaits)
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = futex_names_.SliceName(call);
  event.category_iid = vocabulary_.futex;
  event.Annotate(vocabulary_.op, Annotation::Kind::kInternedString, futex_names_.OpText(call));
  event.Annotate(vocabulary_.uaddr, Annotation::Kind::kPointer, call.uaddr);
  event.Annotate(vocabulary_.val, Annotation::Kind::kUint, call.val);
  if (call.timeout_ns >= 0) event.AnnotateInt(vocabulary_.timeout_ns, call.timeout_ns);
  if (call.uaddr2 != 0) event.Annotate(vocabulary_.uaddr2, Annotation::Kind::kPointer, call.uaddr2);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(tracks_.Futex(tracks_.Thread(call.tid, call.pid)), event, call.end_ns);
}

void TimelineWriter::BeginFutexWaitv(const FutexWaitvCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = kernel_names_.FutexWaitvName(call);
  event.category_iid = vocabulary_.futex;
  event.Annotate(vocabulary_.uaddrs, Annotation::Kind::kInternedString,
                 kernel_names_.AddressList(call.addresses));
  event.Annotate(vocabulary_.count, Annotation::Kind::kUint, call.count);
  if (call.timeout_ns >= 0) event.AnnotateInt(vocabulary_.timeout_ns, call.timeout_ns);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(tracks_.Futex(tracks_.Thread(call.tid, call.pid)), event, call.end_ns);
}

void TimelineWriter::BeginMemoryMapCall(const MemoryMapCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = kernel_names_.MemoryMapName(call);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.address, Annotation::Kind::kPointer, call.address);
  event.Annotate(vocabulary_.length, Annotation::Kind::kUint, call.length);
  if (call.syscall == MemorySyscall::kMmap || call.syscall == MemorySyscall::kMprotect)
    event.Annotate(vocabulary_.prot, Annotation::Kind::kUint, call.prot);
  if (call.syscall == MemorySyscall::kMmap)
    event.Annotate(vocabulary_.flags, Annotation::Kind::kUint, call.flags);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(KernelTrack(call.tid, call.pid), event, call.end_ns);
}

void TimelineWriter::BeginDeviceWait(const DeviceWait& wait) {
  TrackEventSpec event;
  event.timestamp_ns = wait.start_ns;
  event.name_iid = kernel_names_.DeviceName(wait);
  event.category_iid = vocabulary_.kernel;
  event.AnnotateInt(vocabulary_.fd, wait.fd);
  switch (wait.call) {
    case DeviceCall::kIoctl:
      event.Annotate(vocabulary_.request, Annotation::Kind::kPointer, wait.request);
      break;
    case DeviceCall::kMmap:
      event.Annotate(vocabulary_.length, Annotation::Kind::kUint, wait.request);
      break;
    case DeviceCall::kPoll:
    case DeviceCall::kEpoll:
      event.Annotate(vocabulary_.count, Annotation::Kind::kUint, wait.request);
      break;
    case DeviceCall::kUnknown:
      break;
  }
  event.AnnotateInt(vocabulary_.return_value, wait.ret);
  BeginSlice(KernelTrack(wait.tid, wait.pid), event, wait.end_ns);
}

void TimelineWriter::BeginPageFault(const PageFault& fault) {
  UserLocation location =
      LocateUserAddress(session_, fault.pid, fault.address, fault.start_ns, AddressUse::kData);
  TrackEventSpec event;
  event.timestamp_ns = fault.start_ns;
  event.name_iid = kernel_names_.PageFaultName(fault, location);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.address, Annotation::Kind::kPointer, fault.address);
  if (std::string where = DataText(location); !where.empty()) {
    event.Annotate(vocabulary_.location, Annotation::Kind::kInternedString,
                   kernel_names_.Text(where));
  }
  if (std::string flags = PageFaultFlagsText(fault.flags); !flags.empty()) {
    event.Annotate(vocabulary_.flags, Annotation::Kind::kInternedString, kernel_names_.Text(flags));
  }
  event.Annotate(vocabulary_.major, Annotation::Kind::kBool, fault.is_major());
  BeginSlice(KernelTrack(fault.tid, fault.pid), event, fault.end_ns);
}

void TimelineWriter::BeginLockWait(const LockWait& lock) {
  TrackEventSpec event;
  event.timestamp_ns = lock.start_ns;
  event.name_iid = kernel_names_.LockName(lock);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.lock, Annotation::Kind::kPointer, lock.lock_address);
  event.Annotate(vocabulary_.lock_kind, Annotation::Kind::kInternedString,
                 kernel_names_.Text(LockKindName(lock.flags)));
  if (std::string owner = LockOwnerLabel(session_, lock); !owner.empty()) {
    event.Annotate(vocabulary_.owner, Annotation::Kind::kInternedString, kernel_names_.Text(owner));
    if (lock.owner_inferred) event.Annotate(vocabulary_.owner_inferred, Annotation::Kind::kBool, 1);
  }
  if (lock.ret != 0) event.AnnotateInt(vocabulary_.return_value, lock.ret);
  event.callstack_iid =
      callstacks_.OfWait(lock.pid, lock.user_stack_id, lock.kstack_id, lock.start_ns, nullptr);
  BeginSlice(KernelTrack(lock.tid, lock.pid), event, lock.end_ns);
}

void TimelineWriter::BeginSlice(EventTrack& track, TrackEventSpec& event, uint64_t end_ns) {
  uint64_t end = std::max(end_ns, event.timestamp_ns);
  if (!track.open_slice_ends.empty() && end > track.open_slice_ends.back()) {
    // It outlives the slice it started in: drawn ending with that one, so nesting stays proper,
    // with its recorded length kept.
    event.Annotate(vocabulary_.recorded_duration_ns, Annotation::Kind::kUint,
                   end - event.timestamp_ns);
    end = track.open_slice_ends.back();
  }
  event.type = TrackEventType::kSliceBegin;
  track.open_slice_ends.push_back(end);
  packets_.WriteTrackEvent(track.sequence, event);
  Schedule(end, Action::kEndSlice, &track, 0);
}

void TimelineWriter::EndSlice(EventTrack& track, uint64_t time_ns) {
  assert(!track.open_slice_ends.empty() && track.open_slice_ends.back() == time_ns);
  track.open_slice_ends.pop_back();
  packets_.WriteSliceEnd(track.sequence, time_ns);
}

uint64_t TimelineWriter::ApiNameIid(uint32_t name_index) {
  if (name_index >= api_name_iids_.size()) {
    return interner_.Intern(InternTable::kEventNames, "CUDA call #" + std::to_string(name_index));
  }
  uint64_t& iid = api_name_iids_[name_index];
  if (iid == 0) iid = interner_.Intern(InternTable::kEventNames, session_.api_names[name_index]);
  return iid;
}

// Streams are few and repeat on every call: an interned "0x..." costs less than a pointer value.
uint64_t TimelineWriter::StreamIid(uint64_t stream) {
  auto [entry, inserted] = stream_iids_.try_emplace(stream, 0);
  if (inserted)
    entry->second = interner_.Intern(InternTable::kAnnotationStrings, FormatHex(stream));
  return entry->second;
}

// Arrows only join threads of the model: a waker outside the tree (or an interrupt, tid 0) has no
// track, and stays named in the runnable slice's annotations.
bool TimelineWriter::HasWakeFlow(const OffCpuInterval& interval) {
  return interval.waker_tid != 0 && interval.waker_tid != interval.tid &&
         tracks_.InModel(interval.waker_tid);
}

// The call whose slice the launch arrow to `activity` starts from: the outermost call of its
// correlation, so that the arrow is drawn once. None for a host wait, for work whose call was not
// recorded, and for work that seems to start before its call entered (a clock gone wrong: an arrow
// back in time would not pair up).
const ApiCall* TimelineWriter::LaunchFlowOrigin(const GpuActivity& activity) const {
  if (!activity.occupies_gpu()) return nullptr;
  const ApiCall* launcher = correlation_.LauncherOf(activity);
  return launcher != nullptr && activity.start_ns >= launcher->enter_ns ? launcher : nullptr;
}

uint64_t TimelineWriter::WakeTime(const OffCpuInterval& interval) {
  return std::clamp(interval.wake_ns, interval.start_ns,
                    std::max(interval.start_ns, interval.end_ns));
}

}  // namespace

void WriteTimeline(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                   StringInterner& interner, CallstackInterner& callstacks,
                   const Vocabulary& vocabulary) {
  TimelineWriter(session, tracks, packets, interner, callstacks, vocabulary).Write();
}

}  // namespace gprof::collector::perfetto
