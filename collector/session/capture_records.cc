#include "collector/session/capture_records.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>

#include "collector/symbols/demangle.h"
#include "inject/format/session_format.h"

namespace gprof::collector {
namespace {

using Wide = __int128;  // CUPTI's clock and an offset can sum past 64 bits (a realtime clock)

// Puts one process's GPU timestamps on CLOCK_MONOTONIC.
//
// An offset applies to the GPU timestamps taken from its measurement until the next one. Each
// activity is matched by its own timestamp, not by where its record sits in the file: CUPTI hands
// over activity buffers long after the work ran, so file order says nothing about the clock that
// stamped them. As that timestamp is on CUPTI's clock, it is compared with the moment each offset
// took effect read on the same clock (time_ns + offset_ns), and with the next measurement once
// converted: the latest offset in effect at or before the activity is the one it was stamped
// with. Where the clock jumped and no offset fits exactly, the latest that had taken effect is
// used; before the first measurement, the first is the best estimate; without any, CUPTI ran on
// CLOCK_MONOTONIC as the injected library asked.
class GpuClock {
 public:
  explicit GpuClock(const std::vector<ClockOffset>& offsets) : offsets_(offsets) {}

  // The offset `cupti_ns` was stamped with.
  int64_t OffsetAt(uint64_t cupti_ns) {
    if (offsets_.empty()) return 0;
    // Activities come roughly in time order: the last match, or the next, is almost always it.
    for (size_t candidate : {hint_, hint_ + 1}) {
      if (candidate < offsets_.size() && TookEffect(candidate, cupti_ns) &&
          BeforeNext(candidate, cupti_ns)) {
        hint_ = candidate;
        return offsets_[candidate].offset_ns;
      }
    }
    std::optional<size_t> latest_effective;
    for (size_t i = offsets_.size(); i-- > 0;) {
      if (!TookEffect(i, cupti_ns)) continue;
      if (BeforeNext(i, cupti_ns)) {
        hint_ = i;
        return offsets_[i].offset_ns;
      }
      if (!latest_effective) latest_effective = i;
    }
    return offsets_[latest_effective.value_or(0)].offset_ns;
  }

  // `cupti_ns` on CLOCK_MONOTONIC, or nothing when that falls outside it.
  static std::optional<uint64_t> ToMonotonic(uint64_t cupti_ns, int64_t offset_ns) {
    Wide monotonic = Wide{cupti_ns} - offset_ns;
    if (monotonic < 0 || monotonic > Wide{std::numeric_limits<uint64_t>::max()}) return {};
    return static_cast<uint64_t>(monotonic);
  }

 private:
  // Whether offset i had been measured when CUPTI's clock read `cupti_ns`.
  bool TookEffect(size_t i, uint64_t cupti_ns) const {
    return Wide{cupti_ns} >= Wide{offsets_[i].time_ns} + offsets_[i].offset_ns;
  }
  // Whether `cupti_ns`, converted with offset i, comes before the next measurement.
  bool BeforeNext(size_t i, uint64_t cupti_ns) const {
    return i + 1 == offsets_.size() ||
           Wide{cupti_ns} - offsets_[i].offset_ns < Wide{offsets_[i + 1].time_ns};
  }

  const std::vector<ClockOffset>& offsets_;  // sorted by time_ns
  size_t hint_ = 0;
};

bool MeasuredEarlier(const ClockOffset& a, const ClockOffset& b) { return a.time_ns < b.time_ns; }

GpuActivity FromPlacement(const format::GpuPlacement& placement) {
  GpuActivity activity;
  activity.start_ns = placement.start_ns;
  activity.end_ns = placement.end_ns;
  activity.correlation_id = placement.correlation_id;
  activity.graph_node_id = placement.graph_node_id;
  activity.device_id = placement.device_id;
  activity.context_id = placement.context_id;
  activity.stream_id = placement.stream_id;
  activity.graph_id = placement.graph_id;
  return activity;
}

CaptureMode ModeOf(uint32_t mode) {
  switch (static_cast<format::CaptureMode>(mode)) {
    case format::CaptureMode::kInterposition:
      return CaptureMode::kInterposition;
    case format::CaptureMode::kCupti:
      return CaptureMode::kCupti;
    case format::CaptureMode::kNone:
      return CaptureMode::kNone;
  }
  return CaptureMode::kUnknown;  // a mode of a newer writer
}

// The lines of a call stack's text, one per frame: missing lines are unknown frames, lines past
// the last frame (a final newline) are ignored.
std::vector<std::string> FrameLines(std::string_view text, size_t frame_count) {
  std::vector<std::string> lines;
  lines.reserve(frame_count);
  while (lines.size() < frame_count && !text.empty()) {
    size_t end = text.find('\n');
    lines.push_back(PrintableName(DemangleFrame(text.substr(0, end))));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  lines.resize(frame_count);
  return lines;
}

}  // namespace

bool CaptureRecordDecoder::Decode(const RecordView& record) {
  pid_ = record.writer_pid;
  switch (record.type) {
    case format::kCaptureInfo:
      DecodeCaptureInfo(record);
      return true;
    case format::kGpuName:
      DecodeGpuName(record);
      return true;
    case format::kGpuKernel:
      DecodeKernel(record);
      return true;
    case format::kGpuMemcpy:
      DecodeMemcpy(record);
      return true;
    case format::kGpuMemset:
      DecodeMemset(record);
      return true;
    case format::kGpuSync:
      DecodeSync(record);
      return true;
    case format::kGpuDropped:
      DecodeGpuDropped(record);
      return true;
    case format::kClockOffset:
      DecodeClockOffset(record);
      return true;
    case format::kCallStack:
      DecodeCallStack(record);
      return true;
    case format::kStackCopy:
      DecodeStackCopy(record);
      return true;
    case format::kProfilerThread:
      DecodeProfilerThread(record);
      return true;
    case format::kGpuOverhead:
      DecodeOverhead(record);
      return true;
    case format::kGpuDevice:
      DecodeDevice(record);
      return true;
    default:
      return false;
  }
}

void CaptureRecordDecoder::Malformed(const RecordView& record, const char* what) {
  session_->diagnostics.push_back(
      {path_, record.chunk_offset,
       std::string("malformed ") + what + " record skipped (" + RecordPlace(record) + ")"});
}

void CaptureRecordDecoder::DecodeCaptureInfo(const RecordView& record) {
  format::CaptureInfoRecord info;
  if (!ReadRecord(record.bytes, &info)) return Malformed(record, "capture info");
  auto text = TrailingText<format::CaptureInfoRecord>(record.bytes, info.text_len);
  if (text.size() != info.text_len) return Malformed(record, "capture info");
  // A process may fall back (CUPTI taken after all): the latest word is the one that held.
  if (has_capture_ && info.time_ns < capture_time_ns_) return;
  has_capture_ = true;
  capture_time_ns_ = info.time_ns;
  Process& process = session_->processes[pid_];
  process.pid = pid_;
  process.capture = Capture{ModeOf(info.mode), info.cupti_version, PrintableName(text)};
}

void CaptureRecordDecoder::DecodeGpuName(const RecordView& record) {
  format::GpuNameRecord name;
  if (!ReadRecord(record.bytes, &name)) return Malformed(record, "GPU name");
  auto text = TrailingText<format::GpuNameRecord>(record.bytes, name.name_len);
  if (text.size() != name.name_len) return Malformed(record, "GPU name");
  kernel_name_of_id_[name.name_id] = InternKernelName(PrintableName(Demangle(text)));
}

bool CaptureRecordDecoder::Keep(GpuActivity activity) {
  // A forced flush (at exit, at a fatal signal) hands over what is still running with its times
  // zero: no damage, and nothing to place on the timeline.
  if (activity.start_ns == 0 || activity.end_ns == 0) {
    ++unfinished_;
    return true;
  }
  if (activity.end_ns < activity.start_ns) return false;
  activity.pid = pid_;
  activities_.push_back(std::move(activity));
  return true;
}

void CaptureRecordDecoder::DecodeKernel(const RecordView& record) {
  format::GpuKernelRecord kernel;
  if (!ReadRecord(record.bytes, &kernel)) return Malformed(record, "GPU kernel");
  GpuActivity activity = FromPlacement(kernel.placement);
  GpuKernel detail;
  detail.name_index = kernel.name_id;  // resolved in Finish
  std::copy(std::begin(kernel.grid), std::end(kernel.grid), detail.grid.begin());
  std::copy(std::begin(kernel.block), std::end(kernel.block), detail.block.begin());
  detail.shared_memory_bytes = kernel.shared_memory_bytes;
  detail.registers_per_thread = kernel.registers_per_thread;
  activity.detail = detail;
  if (!Keep(std::move(activity))) Malformed(record, "GPU kernel (end before start)");
}

void CaptureRecordDecoder::DecodeMemcpy(const RecordView& record) {
  format::GpuMemcpyRecord copy;
  if (!ReadRecord(record.bytes, &copy)) return Malformed(record, "GPU memcpy");
  GpuActivity activity = FromPlacement(copy.placement);
  activity.detail =
      GpuMemcpy{copy.bytes, copy.copy_kind, copy.src_kind, copy.dst_kind, copy.async != 0};
  if (!Keep(std::move(activity))) Malformed(record, "GPU memcpy (end before start)");
}

void CaptureRecordDecoder::DecodeMemset(const RecordView& record) {
  format::GpuMemsetRecord memset;
  if (!ReadRecord(record.bytes, &memset)) return Malformed(record, "GPU memset");
  GpuActivity activity = FromPlacement(memset.placement);
  activity.detail = GpuMemset{memset.bytes, memset.value, memset.memory_kind, memset.async != 0};
  if (!Keep(std::move(activity))) Malformed(record, "GPU memset (end before start)");
}

void CaptureRecordDecoder::DecodeSync(const RecordView& record) {
  format::GpuSyncRecord sync;
  if (!ReadRecord(record.bytes, &sync)) return Malformed(record, "GPU synchronization");
  GpuActivity activity;
  activity.start_ns = sync.start_ns;
  activity.end_ns = sync.end_ns;
  activity.correlation_id = sync.correlation_id;
  activity.context_id = sync.context_id;
  activity.stream_id = sync.stream_id;
  activity.detail = GpuSync{sync.type, sync.event_id};
  if (!Keep(std::move(activity))) Malformed(record, "GPU synchronization (end before start)");
}

void CaptureRecordDecoder::DecodeGpuDropped(const RecordView& record) {
  format::GpuDroppedRecord dropped;
  if (!ReadRecord(record.bytes, &dropped)) return Malformed(record, "GPU dropped");
  Process& process = session_->processes[pid_];
  process.pid = pid_;
  process.gpu_dropped_records += dropped.count;
}

void CaptureRecordDecoder::DecodeClockOffset(const RecordView& record) {
  format::ClockOffsetRecord offset;
  if (!ReadRecord(record.bytes, &offset)) return Malformed(record, "clock offset");
  clock_offsets_.push_back(ClockOffset{offset.time_ns, offset.offset_ns, offset.uncertainty_ns});
}

void CaptureRecordDecoder::DecodeCallStack(const RecordView& record) {
  format::CallStackRecord stack;
  if (!ReadRecord(record.bytes, &stack)) return Malformed(record, "call stack");
  uint64_t ips_bytes = uint64_t{stack.frame_count} * sizeof(uint64_t);
  uint64_t available = record.bytes.size() - sizeof(stack);
  if (available < ips_bytes || available - ips_bytes < stack.text_len) {
    return Malformed(record, "call stack");
  }
  NativeStack native;
  native.pid = pid_;
  native.ips.resize(stack.frame_count);
  if (ips_bytes > 0) memcpy(native.ips.data(), record.bytes.data() + sizeof(stack), ips_bytes);
  std::string_view text(
      reinterpret_cast<const char*>(record.bytes.data() + sizeof(stack)) + ips_bytes,
      stack.text_len);
  native.symbols = FrameLines(text, stack.frame_count);
  session_->call_stacks[{stack.tid, stack.enter_ns}] = std::move(native);
}

void CaptureRecordDecoder::DecodeStackCopy(const RecordView& record) {
  format::StackCopyRecord raw;
  if (!ReadRecord(record.bytes, &raw)) return Malformed(record, "stack copy");
  uint64_t available = record.bytes.size() - sizeof(raw);
  if (raw.copied_bytes > available) return Malformed(record, "stack copy");
  StackCopy copy;
  copy.pid = pid_;
  copy.tid = raw.tid;
  copy.enter_ns = raw.enter_ns;
  copy.capture_ns = raw.capture_ns;
  copy.rip = raw.rip;
  copy.rsp = raw.rsp;
  copy.rbp = raw.rbp;
  copy.requested_bytes = raw.requested_bytes;
  copy.error = raw.error;
  if (copy.error != 0) ++uncopied_stacks_[copy.error];
  const uint8_t* bytes = record.bytes.data() + sizeof(raw);
  copy.bytes.assign(bytes, bytes + raw.copied_bytes);
  if (unwinder_ == nullptr) unwinder_ = std::make_unique<StackUnwinder>(*session_);
  if (std::optional<NativeStack> stack = unwinder_->Unwind(copy, /*final=*/false)) {
    KeepStack(copy, std::move(*stack));
  } else {
    pending_stacks_.push_back(std::move(copy));
  }
}

void CaptureRecordDecoder::KeepStack(const StackCopy& copy, NativeStack stack) {
  session_->call_stacks[{copy.tid, copy.enter_ns}] = std::move(stack);
}

void CaptureRecordDecoder::DecodeProfilerThread(const RecordView& record) {
  format::ProfilerThreadRecord thread;
  if (!ReadRecord(record.bytes, &thread)) return Malformed(record, "profiler thread");
  ProfilerRole role = ProfilerRole::kOther;  // a newer library's kind: ours all the same
  switch (static_cast<format::ProfilerThreadRole>(thread.role)) {
    case format::ProfilerThreadRole::kWriter:
      role = ProfilerRole::kWriter;
      break;
    case format::ProfilerThreadRole::kCupti:
      role = ProfilerRole::kCupti;
      break;
  }
  // A process's main thread is the program's, whatever ran on it: real CUPTI asks for its first
  // buffers on the thread that initialises CUDA, which an older library took for CUPTI's.
  if (thread.tid == record.writer_pid) return;
  session_->profiler_threads[thread.tid] = role;
}

void CaptureRecordDecoder::DecodeOverhead(const RecordView& record) {
  format::GpuOverheadRecord overhead;
  if (!ReadRecord(record.bytes, &overhead)) return Malformed(record, "GPU overhead");
  if (overhead.end_ns < overhead.start_ns) return Malformed(record, "GPU overhead (end first)");
  module_loads_.push_back({overhead.start_ns, overhead.end_ns, overhead.correlation_id, pid_,
                           overhead.tid, overhead.overhead_kind});
}

// "GPU-5c1f0b2e-...", as nvidia-smi and CUDA_VISIBLE_DEVICES spell a GPU's UUID.
void CaptureRecordDecoder::DecodeDevice(const RecordView& record) {
  format::GpuDeviceRecord device;
  if (!ReadRecord(record.bytes, &device)) return Malformed(record, "GPU device");
  std::string uuid = "GPU-";
  for (size_t i = 0; i < sizeof(device.uuid); ++i) {
    static constexpr char kHex[] = "0123456789abcdef";
    if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
    uuid += kHex[device.uuid[i] >> 4];
    uuid += kHex[device.uuid[i] & 0xf];
  }
  Process& process = session_->processes[pid_];
  process.pid = pid_;
  process.device_uuids[device.device_id] = std::move(uuid);
}

uint32_t CaptureRecordDecoder::InternKernelName(const std::string& name) {
  auto [it, inserted] =
      kernel_names_->try_emplace(name, static_cast<uint32_t>(session_->kernel_names.size()));
  if (inserted) session_->kernel_names.push_back(name);
  return it->second;
}

void CaptureRecordDecoder::Finish() {
  for (const StackCopy& copy : pending_stacks_)
    KeepStack(copy, *unwinder_->Unwind(copy, /*final=*/true));
  pending_stacks_.clear();
  unwinder_.reset();  // its files closed
  for (const auto& [error, count] : uncopied_stacks_) {
    session_->lost.push_back(LostEvents{"native stacks of slow CUDA calls of pid " +
                                            std::to_string(pid_) + " (the stack could not be copied: " +
                                            std::strerror(error) + ")",
                                        count,
                                        {}});
  }
  if (unfinished_ > 0) {
    session_->lost.push_back(LostEvents{"GPU activity records of pid " + std::to_string(pid_) +
                                            " unfinished when its recording ended (no times)",
                                        unfinished_,
                                        {}});
  }
  if (activities_.empty() && module_loads_.empty() && clock_offsets_.empty()) return;
  std::sort(clock_offsets_.begin(), clock_offsets_.end(), MeasuredEarlier);
  GpuClock clock(clock_offsets_);
  uint64_t off_the_clock = 0;
  for (ModuleLoad& load : module_loads_) {
    int64_t offset = clock.OffsetAt(load.start_ns);
    auto start = GpuClock::ToMonotonic(load.start_ns, offset);
    auto end = GpuClock::ToMonotonic(load.end_ns, offset);
    if (!start || !end) {
      ++off_the_clock;
      continue;
    }
    load.start_ns = *start;
    load.end_ns = *end;
    session_->module_loads.push_back(load);
  }
  for (GpuActivity& activity : activities_) {
    if (auto* kernel = std::get_if<GpuKernel>(&activity.detail)) {
      auto name = kernel_name_of_id_.find(kernel->name_index);
      kernel->name_index = name != kernel_name_of_id_.end()
                               ? name->second
                               : InternKernelName("kernel#" + std::to_string(kernel->name_index));
    }
    int64_t offset = clock.OffsetAt(activity.start_ns);
    auto start = GpuClock::ToMonotonic(activity.start_ns, offset);
    auto end = GpuClock::ToMonotonic(activity.end_ns, offset);
    if (!start || !end) {
      ++off_the_clock;
      continue;
    }
    activity.start_ns = *start;
    activity.end_ns = *end;
    session_->gpu_activities.push_back(std::move(activity));
  }
  if (off_the_clock > 0) {
    session_->diagnostics.push_back(
        {path_, 0,
         std::to_string(off_the_clock) +
             " GPU activity records skipped: their clock offset puts them outside "
             "CLOCK_MONOTONIC"});
  }
  Process& process = session_->processes[pid_];
  process.pid = pid_;
  process.clock_offsets.insert(process.clock_offsets.end(), clock_offsets_.begin(),
                               clock_offsets_.end());
  std::sort(process.clock_offsets.begin(), process.clock_offsets.end(), MeasuredEarlier);
}

}  // namespace gprof::collector
