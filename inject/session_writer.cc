#include "session_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "clock.h"
#include "cupti_tracer.h"
#include "native_stack.h"
#include "profiler_watch.h"
#include "recorder.h"
#include "ring_registry.h"
#include "runtime_api_table.h"

namespace gprof::inject {
namespace {

constexpr size_t kStagingBytes = 1u << 20;
// Data reaches the file at least this often, so a SIGKILLed target loses at most this much.
constexpr int kFlushIntervalMs = 200;
constexpr uint64_t kNameRefreshIntervalNs = 500'000'000;
// CUPTI's periodic flush hands over full buffers only: a quiet process would keep its GPU records
// in a half-full buffer indefinitely, lost if it is killed. When no buffer came for this long, the
// writer asks for the rest. (Not in a busy process: a flush can take long enough for the threads'
// rings to fill meanwhile, and its buffers come anyway.)
constexpr uint64_t kCuptiFlushIntervalNs = 500'000'000;

// Reads a small /proc file whole; returns its contents or an empty string.
std::string ReadProcFile(const char* path) {
  std::string text;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace

SessionWriter::SessionWriter() : staging_(new uint8_t[kStagingBytes]) {}

int SessionWriter::Open(const char* session_dir) {
  pid_t pid = getpid();
  // Without its budget file a capped session would grow unbounded: better not record this process.
  if (const char* budget = SizeBudgetPath()) {
    if (int error = file_.AttachBudget(budget); error != 0) return error;
  }
  int error = EEXIST;
  // The same pid comes back when a process execs: each image gets its own file.
  for (int generation = 0; generation < 1000 && error == EEXIST; ++generation) {
    char path[PATH_MAX];
    if (generation == 0) {
      snprintf(path, sizeof(path), "%s/inject-%d.gpr", session_dir, pid);
    } else {
      snprintf(path, sizeof(path), "%s/inject-%d.%d.gpr", session_dir, pid, generation);
    }
    error = file_.Create(path, format::Source::kInject, static_cast<uint32_t>(pid));
    if (error == 0) path_ = path;
  }
  if (error != 0) return error;
  std::string reserve = std::string(session_dir) + "/" + format::kReserveFile;
  if (access(reserve.c_str(), F_OK) == 0) reserve_path_ = reserve;
  WriteProcessInfo();
  WriteApiNames();
  WriteMaps();
  Flush();
  return 0;
}

void SessionWriter::Cycle(bool force_flush) {
  // Another writer found the disk full and freed the reserve for the stop records: stop too, or
  // this process would eat that room. (After gprof-run's death the reserve goes for that reason.)
  int profiler_pid = 0;
  if (!stopped_ && !reserve_path_.empty() && access(reserve_path_.c_str(), F_OK) != 0 &&
      (profiler_ == nullptr || !profiler_->Gone(&profiler_pid))) {
    Stop(format::StopCause::kSessionFull, 0, "the session's disk is full");
  }
  DrainAll();
  uint64_t now = MonotonicNs();
  if (now - last_name_refresh_ns_ >= kNameRefreshIntervalNs) {
    RefreshThreadNames();
    last_name_refresh_ns_ = now;
  }
  if (force_flush || staged_bytes_ > 0) Flush();
}

void SessionWriter::Finish() {
  DrainAll();
  Flush();
  file_.SetClosing();  // what names and places the records above: kept even at the size cap
  if (!stopped_) {
    RefreshThreadNames();
    WriteMaps();
  }
  Flush();                          // after a stop: only counts
  if (stopped_) WriteStopRecord();  // the first, or one with what was lost since
  file_.Close();
}

void SessionWriter::ReleaseDiskReserve() {
  if (!reserve_path_.empty()) unlink(reserve_path_.c_str());
}

void SessionWriter::Stop(format::StopCause cause, int error, const char* reason) {
  if (stopped_) return;
  StopRecording();
  stopped_ = true;
  stopped_ns_ = MonotonicNs();
  stop_cause_ = cause;
  stop_error_ = error;
  stop_reason_ = reason;
  // The disk is full: free the reserve, room for every writer's last word (they stop on seeing it
  // gone).
  if (cause == format::StopCause::kWriteFailed && !reserve_path_.empty()) {
    unlink(reserve_path_.c_str());
  }
  records_lost_after_stop_ += staged_records_;
  staged_bytes_ = 0;
  staged_records_ = 0;
  WriteStopRecord();
}

void SessionWriter::WriteStopRecord() {
  uint64_t lost = records_lost_after_stop_ - records_lost_reported_;
  if (stop_written_ && lost == 0) return;
  auto record = format::MakeRecord<format::RecordingStoppedRecord>(format::kRecordingStopped,
                                                                   stop_reason_.size());
  record.time_ns = stopped_ns_;
  record.cause = static_cast<uint32_t>(stop_cause_);
  record.error = stop_error_;
  record.records_lost = lost;
  record.text_len = static_cast<uint32_t>(stop_reason_.size());
  std::string bytes(reinterpret_cast<const char*>(&record), sizeof(record));
  bytes += stop_reason_;
  if (file_.Write(bytes.data(), bytes.size(), 1) == 0) {
    stop_written_ = true;
    records_lost_reported_ += lost;
  }
}

void SessionWriter::DrainAll() {
  WriteCaptureStatus();
  WritePostedMessages();
  DrainRings();
  WriteClockOffset();  // before the GPU records it applies to
  DrainActivityBuffers();
  WriteSlowCallStacks();
  if (uint64_t lost = TakeUnregisteredDrops(); lost > 0) WriteDrops(0, lost);
}

void SessionWriter::WriteCaptureStatus() {
  CaptureStatus status;
  if (!TakeCaptureStatus(&status)) return;
  size_t length = strlen(status.text);
  auto record = format::MakeRecord<format::CaptureInfoRecord>(format::kCaptureInfo, length);
  record.time_ns = MonotonicNs();
  record.mode = static_cast<uint32_t>(status.mode);
  record.cupti_version = status.cupti_version;
  record.text_len = static_cast<uint32_t>(length);
  Append(&record, sizeof(record), status.text, length);
}

void SessionWriter::WritePostedMessages() {
  PostedMessage messages[8];
  size_t count;
  while ((count = TakePostedMessages(messages, 8)) > 0) {
    for (size_t i = 0; i < count; ++i) {
      size_t length = strlen(messages[i].text);
      auto record = format::MakeRecord<format::MessageRecord>(format::kMessage, length);
      record.time_ns = MonotonicNs();
      record.level = messages[i].level;
      record.text_len = static_cast<uint32_t>(length);
      Append(&record, sizeof(record), messages[i].text, length);
    }
  }
}

// Written when it moves by more than a microsecond: another library can re-register CUPTI's
// clock at any time (Kineto does), and GPU timestamps are only as good as this offset.
void SessionWriter::WriteClockOffset() {
  int64_t offset_ns = 0;
  uint64_t uncertainty_ns = 0;
  if (!MeasureCuptiClockOffset(&offset_ns, &uncertainty_ns)) return;
  int64_t moved = offset_ns - clock_offset_ns_;
  if (clock_offset_written_ && moved < 1000 && moved > -1000) return;
  auto record = format::MakeRecord<format::ClockOffsetRecord>(format::kClockOffset);
  record.time_ns = MonotonicNs();
  record.offset_ns = offset_ns;
  record.uncertainty_ns = uncertainty_ns;
  Append(&record, sizeof(record));
  clock_offset_written_ = true;
  clock_offset_ns_ = offset_ns;
}

void SessionWriter::DrainActivityBuffers() {
  const CuptiLibrary* cupti = ActiveCupti();
  if (uint64_t now = MonotonicNs(); cupti != nullptr &&
                                    now - last_cupti_flush_ns_ >= kCuptiFlushIntervalNs &&
                                    now - LastActivityBufferNs() >= kCuptiFlushIntervalNs) {
    cupti->ActivityFlushAll(0);  // buffers whose records are complete, full or not
    last_cupti_flush_ns_ = now;
  }
  ActivityBuffer buffer;
  while (TakeCompletedActivityBuffer(&buffer)) {
    if (cupti != nullptr) {
      gpu_.Encode(*cupti, buffer.data, buffer.valid_size, clock_offset_ns_, Window());
    }
    ReturnActivityBuffer(buffer.data);
  }
  if (uint64_t dropped = TakeDroppedActivityRecords(); dropped > 0) {
    auto record = format::MakeRecord<format::GpuDroppedRecord>(format::kGpuDropped);
    record.time_ns = MonotonicNs();
    record.count = dropped;
    Append(&record, sizeof(record));
  }
}

void SessionWriter::WriteSlowCallStacks() {
  static SlowCallStack stacks[16];  // writer thread only; 6 KiB off its stack
  size_t count;
  while ((count = TakeSlowCallStacks(stacks, 16)) > 0) {
    for (size_t i = 0; i < count; ++i) {
      const SlowCallStack& stack = stacks[i];
      std::string text;
      for (uint32_t frame = 0; frame < stack.frame_count; ++frame) {
        char symbol[256];
        size_t length = SymbolizeReturnAddress(stack.frames[frame], symbol, sizeof(symbol));
        text.append(symbol, length);
        text.push_back('\n');
      }
      auto record = format::MakeRecord<format::CallStackRecord>(
          format::kCallStack, stack.frame_count * sizeof(uint64_t) + text.size());
      record.enter_ns = stack.enter_ns;
      record.tid = stack.tid;
      record.frame_count = stack.frame_count;
      record.text_len = static_cast<uint32_t>(text.size());
      std::string tail(reinterpret_cast<const char*>(stack.frames),
                       stack.frame_count * sizeof(uint64_t));
      tail += text;
      Append(&record, sizeof(record), tail.data(), tail.size());
    }
  }
  if (uint64_t dropped = TakeDroppedStacks(); dropped > 0) {
    PostMessage(format::MessageLevel::kWarning,
                "native stacks of some slow calls were not kept (too many at once)");
  }
}

void SessionWriter::DrainRings() {
  uint32_t count = RingCount();
  if (ring_views_.size() < count) ring_views_.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    ThreadRing* ring = RingAt(i);
    RingState state = ring->state.load(std::memory_order_acquire);
    if (state == RingState::kFree) continue;
    RingView& view = ring_views_[i];
    if (view.owner_serial != ring->owner_serial) {
      // A new thread owns this ring: name it now, before it can exit and take /proc's entry along.
      view.owner_serial = ring->owner_serial;
      view.tid = ring->tid;
      memcpy(view.name, ring->initial_name, sizeof(view.name));
      WriteThreadName(view.tid, view.name);
    }
    uint64_t head = ring->head.load(std::memory_order_acquire);
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    for (; tail < head; ++tail) {
      const format::ApiCallRecord& record = ring->slots[tail % ThreadRing::kSlots];
      if (record.api_id >= (1u << 16)) gpu_.NameApi(record.api_id);  // a CUPTI id
      Append(&record, sizeof(record));
    }
    ring->tail.store(tail, std::memory_order_release);

    uint64_t dropped = ring->dropped.load(std::memory_order_relaxed);
    if (dropped != view.dropped_seen) {
      WriteDrops(view.tid, dropped - view.dropped_seen);
      view.dropped_seen = dropped;
    }
    // The owner stopped pushing before it marked the ring retired, so empty now means empty
    // forever.
    if (state == RingState::kRetired && ring->head.load(std::memory_order_acquire) == tail) {
      ReleaseRing(ring);
    }
  }
}

void SessionWriter::RefreshThreadNames() {
  for (uint32_t i = 0; i < ring_views_.size(); ++i) {
    ThreadRing* ring = RingAt(i);
    if (ring->state.load(std::memory_order_acquire) != RingState::kActive) continue;
    RingView& view = ring_views_[i];
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%u/comm", view.tid);
    std::string name = ReadProcFile(path);
    while (!name.empty() && name.back() == '\n') name.pop_back();
    if (name.empty() || strncmp(name.c_str(), view.name, sizeof(view.name)) == 0) continue;
    memset(view.name, 0, sizeof(view.name));
    memcpy(view.name, name.data(), std::min(name.size(), sizeof(view.name) - 1));
    WriteThreadName(view.tid, view.name);
  }
}

void SessionWriter::WriteThreadName(uint32_t tid, const char* name) {
  auto record = format::MakeRecord<format::ThreadNameRecord>(format::kThreadName);
  record.tid = tid;
  record.time_ns = MonotonicNs();
  strncpy(record.name, name, sizeof(record.name) - 1);
  Append(&record, sizeof(record));
}

void SessionWriter::WriteProcessInfo() {
  char exe[PATH_MAX] = {};
  ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (exe_len < 0) exe_len = 0;
  std::string cmdline = ReadProcFile("/proc/self/cmdline");
  auto record = format::MakeRecord<format::ProcessInfoRecord>(
      format::kProcessInfo, static_cast<size_t>(exe_len) + cmdline.size());
  record.pid = static_cast<uint32_t>(getpid());
  record.ppid = static_cast<uint32_t>(getppid());
  record.time_ns = MonotonicNs();
  record.exe_len = static_cast<uint32_t>(exe_len);
  record.cmdline_len = static_cast<uint32_t>(cmdline.size());
  std::string tail(exe, static_cast<size_t>(exe_len));
  tail += cmdline;
  Append(&record, sizeof(record), tail.data(), tail.size());
}

void SessionWriter::WriteApiNames() {
  for (uint32_t i = 0; i < static_cast<uint32_t>(RuntimeApi::kCount); ++i) {
    const char* name = kRuntimeApiNames[i];
    size_t length = strlen(name);
    auto record = format::MakeRecord<format::ApiNameRecord>(format::kApiName, length);
    record.api_id = ApiId(static_cast<RuntimeApi>(i));
    record.domain = static_cast<uint32_t>(format::ApiDomain::kRuntime);
    record.name_len = static_cast<uint32_t>(length);
    Append(&record, sizeof(record), name, length);
  }
}

void SessionWriter::WriteMaps() {
  std::string maps = ReadProcFile("/proc/self/maps");
  auto record = format::MakeRecord<format::MapsSnapshotRecord>(format::kMapsSnapshot, maps.size());
  record.time_ns = MonotonicNs();
  record.text_len = static_cast<uint32_t>(maps.size());
  Append(&record, sizeof(record), maps.data(), maps.size());
}

void SessionWriter::WriteDrops(uint32_t tid, uint64_t count) {
  auto record = format::MakeRecord<format::DroppedRecord>(format::kDropped);
  record.time_ns = MonotonicNs();
  record.count = count;
  record.tid = tid;
  Append(&record, sizeof(record));
}

void SessionWriter::Append(const void* head, size_t head_size, const void* tail, size_t tail_size) {
  size_t size = head_size + tail_size;
  if (staged_bytes_ + size > kStagingBytes) Flush();
  if (size > kStagingBytes) {
    // Larger than the staging buffer (a huge maps file): a chunk of its own.
    std::string whole(static_cast<const char*>(head), head_size);
    whole.append(static_cast<const char*>(tail), tail_size);
    if (stopped_) {
      ++records_lost_after_stop_;
    } else if (int error = file_.Write(whole.data(), whole.size(), 1);
               error != 0 && error != EDQUOT) {  // the size budget counts what it refused
      ++records_lost_after_stop_;
      Stop(format::StopCause::kWriteFailed, error, ("cannot write " + path_).c_str());
    }
    return;
  }
  memcpy(staging_.get() + staged_bytes_, head, head_size);
  if (tail_size > 0) memcpy(staging_.get() + staged_bytes_ + head_size, tail, tail_size);
  staged_bytes_ += size;
  ++staged_records_;
}

void SessionWriter::Flush() {
  if (staged_bytes_ == 0) return;
  if (stopped_) {  // what still came out of the rings: counted in the stop record
    records_lost_after_stop_ += staged_records_;
    staged_bytes_ = 0;
    staged_records_ = 0;
    if (!stop_written_) WriteStopRecord();  // the disk may have room again
    return;
  }
  if (int error = file_.Write(staging_.get(), staged_bytes_, staged_records_); error != 0) {
    if (error == EDQUOT) {  // --max-size: the size budget counts what it refused
      staged_bytes_ = 0;
      staged_records_ = 0;
      return;
    }
    // Disk full or an I/O error: the target must run on unharmed. Recording stops here, and the
    // file says when and what it lost (Write left the file whole).
    Stop(format::StopCause::kWriteFailed, error, ("cannot write " + path_).c_str());
    return;
  }
  staged_bytes_ = 0;
  staged_records_ = 0;
}

void* WriterThreadMain(void* session_dir) {
  prctl(PR_SET_NAME, format::kWriterThreadName);
  SessionWriter writer;
  if (writer.Open(static_cast<const char*>(session_dir)) != 0) {
    StopRecording();
    return nullptr;
  }
  ProfilerWatch profiler;
  profiler.Start();
  writer.WatchProfiler(&profiler);
  bool signal_flushed = false;
  while (!WriterStopRequested()) {
    WaitForWork(kFlushIntervalMs);
    if (!signal_flushed && SignalFlushRequested()) {
      signal_flushed = true;
      // A fatal signal waits for this in its handler (cupti_tracer.cc): everything out, now.
      RunBeforeShutdown();
      writer.Cycle(/*force_flush=*/true);
      FinishSignalFlush();
      continue;
    }
    writer.Cycle(/*force_flush=*/false);
    if (int profiler_pid = 0; profiler.Gone(&profiler_pid)) {
      char text[200];
      snprintf(text, sizeof(text), "gprof-run (pid %d) ended before this process did",
               profiler_pid);
      // Everything recorded until now goes out first; only then does the record stop.
      StopRecording();
      writer.Cycle(/*force_flush=*/true);
      writer.Stop(format::StopCause::kProfilerEnded, 0, text);
      writer.Finish();
      // gprof-run would have deleted it at the end; no one else will.
      writer.ReleaseDiskReserve();
      // The one line the user sees: their job runs on, no longer profiled.
      snprintf(text, sizeof(text),
               "gprof-run: profiler (pid %d) ended; pid %d runs on unprofiled, its record in %s "
               "stops here\n",
               profiler_pid, static_cast<int>(getpid()), static_cast<const char*>(session_dir));
      if (write(STDERR_FILENO, text, strlen(text)) < 0) {
      }
      return nullptr;
    }
  }
  writer.Finish();
  return nullptr;
}

}  // namespace gprof::inject
