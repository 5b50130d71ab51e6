#include "inject/session_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "inject/capture_range.h"
#include "inject/cupti_tracer.h"
#include "inject/freeze_watch.h"
#include "inject/native_stack.h"
#include "inject/own_descriptors.h"
#include "inject/profiler_watch.h"
#include "inject/recorder.h"
#include "inject/ring_registry.h"
#include "inject/runtime_api_table.h"
#include "inject/shared/capture_windows.h"
#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"
#include "inject/shared/namespaces.h"

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
// --flight-recorder: how often old data is punched out; the file holds up to this much more.
constexpr uint64_t kTrimIntervalNs = 1'000'000'000;

// --flight-recorder: records of what happened, which go once older than the seconds kept. Every
// other record (names, maps, process and clock facts, messages, loss counts, and any type this
// list does not know) names or places what later records refer to, and stays.
bool IsTrimmableRecord(const void* head, size_t head_size) {
  format::RecordHeader header{};
  memcpy(&header, head, sizeof(header));
  if (header.type == format::kNvtxEvent && head_size >= sizeof(format::NvtxEventRecord)) {
    // Ranges and marks are data; names of domains, strings, categories and threads are state.
    format::NvtxEventRecord event;
    memcpy(&event, head, sizeof(event));
    return event.kind <= static_cast<uint16_t>(format::NvtxEventKind::kMark);
  }
  if (header.type == format::kNcclEvent && head_size >= sizeof(format::NcclEventRecord)) {
    // Collectives are data; a communicator's start names what they belong to.
    format::NcclEventRecord event;
    memcpy(&event, head, sizeof(event));
    return event.kind != static_cast<uint16_t>(format::NcclEventKind::kCommInit);
  }
  switch (header.type) {
    case format::kApiCall:
    case format::kGpuKernel:
    case format::kGpuMemcpy:
    case format::kGpuMemset:
    case format::kGpuSync:
    case format::kGpuOverhead:
    case format::kCallStack:
    case format::kStackCopy:
      return true;
    default:
      return false;
  }
}

// The writer's own memory for /proc files of any size (the maps of a large process, the command
// line): mapped and grown with mremap, never taken from the program's heap, whose allocator's
// locks the program's threads take. Writer thread only; reused by every read.
struct ProcBuffer {
  char* data = nullptr;
  size_t capacity = 0;
};
constinit ProcBuffer g_proc_buffer;

bool GrowProcBuffer(size_t at_least) {
  size_t capacity = g_proc_buffer.capacity == 0 ? size_t{256} << 10 : g_proc_buffer.capacity * 2;
  while (capacity < at_least) capacity *= 2;
  void* grown =
      g_proc_buffer.data == nullptr
          ? mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
          : mremap(g_proc_buffer.data, g_proc_buffer.capacity, capacity, MREMAP_MAYMOVE);
  if (grown == MAP_FAILED) return false;
  g_proc_buffer.data = static_cast<char*>(grown);
  g_proc_buffer.capacity = capacity;
  return true;
}

// Reads a /proc file whole into the writer's buffer, after `reserve` bytes left free at its start
// (for the record header that goes before it). Returns the file's bytes (empty where it cannot be
// read), valid until the next read. The descriptor is held high and closed only while it is this
// file: the program may close descriptors (close_range) from another thread and open its own.
std::string_view ReadProcFile(const char* path, size_t reserve = 0) {
  FileIdentity id;
  int fd = OpenHigh(path, O_RDONLY, &id);
  if (fd < 0) return {};
  size_t size = 0;
  for (;;) {
    if (reserve + size + 4096 > g_proc_buffer.capacity && !GrowProcBuffer(reserve + size + 4096))
      break;
    ssize_t n =
        read(fd, g_proc_buffer.data + reserve + size, g_proc_buffer.capacity - reserve - size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size += static_cast<size_t>(n);
  }
  CloseHeld(fd, id);
  return size == 0 ? std::string_view() : std::string_view(g_proc_buffer.data + reserve, size);
}

// A small /proc file (a thread's comm) into `out`; returns its length.
size_t ReadSmallProcFile(const char* path, char* out, size_t capacity) {
  FileIdentity id;
  int fd = OpenHigh(path, O_RDONLY, &id);
  if (fd < 0) return 0;
  ssize_t n;
  do {
    n = read(fd, out, capacity);
  } while (n < 0 && errno == EINTR);
  CloseHeld(fd, id);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

// The report's warning for a process that records without the session's budget or control
// (NamespacesRecord's flags `unreachable`). EINVAL: no such segment here (another IPC namespace,
// `unshare -i`); EPERM or ENOSYS: a seccomp filter that refuses System V shared memory.
void SaySharedMemoryUnreachable(uint32_t unreachable, int error) {
  char text[240];
  snprintf(text, sizeof(text),
           "recorded without the session's shared memory (%s: %s): %sit may have written after "
           "the command ended",
           strerror(error), error == EINVAL ? "another IPC namespace" : "shmat refused",
           (unreachable & format::kSizeBudgetUnreachable) != 0
               ? "--max-size was not enforced on this process's file, and "
               : "");
  PostMessage(format::MessageLevel::kWarning, text);
}

}  // namespace

SessionWriter::SessionWriter() : staging_(new uint8_t[kStagingBytes]) {
  // Never grown while the program runs: a new thread's view must not allocate.
  ring_views_.reserve(kMaxRings);
}

int SessionWriter::Open(const char* session_dir) {
  pid_t pid = getpid();
  // The slot the process's first call took, the writer's from here (Finish unregisters it).
  int early_slot = SessionControl::kClosed;
  const bool has_early_slot = TakeEarlySlot(&early_slot);
  // Opened once, its last component never through a link, and under gprof-run only when it is
  // the directory gprof-run made (held_directory.h): root's processes must not make a file where
  // a user who renamed a component of the path put a directory of their own. A mismatch records
  // nothing, silently: the program's output is its own.
  if (int error = directory_.Open(session_dir, /*follow_last=*/false, SessionDirectoryId());
      error != 0) {
    // gprof-run hears of it through the control (memory, not a file there), for the report.
    if (const char* control = SessionControlHandle(); control != nullptr && *control != '\0' &&
                                                      control_.Attach(control) == 0) {
      if (has_early_slot) {
        CountCallsIn(nullptr);
        control_.Unregister(early_slot);
      }
      char name[64];
      snprintf(name, sizeof(name), "inject-%d.gpr", pid);
      control_.Note(static_cast<uint32_t>(pid), name, format::StopCause::kDirectoryLost, error,
                    MonotonicNs(), 0);
    }
    return error;
  }
  // Without its budget a capped session would grow unbounded, and without its control nothing
  // would keep this process from writing into the session after gprof-run has collected it.
  // Neither can be attached from another IPC namespace (`unshare -i`, a container's): such a
  // process still records, as asked, and its file says what could not be enforced
  // (NamespacesRecord's flags), for the report. It learns that gprof-run is gone only where it can
  // look gprof-run up by pid (profiler_watch.h): one that starts after then records nothing.
  uint32_t unreachable = 0;
  int unreachable_error = 0;  // the first attach's errno
  if (const char* budget = SizeBudgetHandle(); budget != nullptr) {
    if (int attach_error = file_.AttachBudget(budget); attach_error != 0) {
      unreachable |= format::kSizeBudgetUnreachable;
      unreachable_error = attach_error;
    }
  }
  const uint32_t pid_namespace = OwnPidNamespace();
  if (const char* control = SessionControlHandle(); control != nullptr) {
    if (*control == '\0') return ENAMETOOLONG;
    if (int attach_error = control_.Attach(control); attach_error == 0) {
      if (has_early_slot) {
        control_slot_ = early_slot;
        control_.SetStartTicks(control_slot_, ProcessStartTicks(pid));
      } else {
        control_slot_ = control_.Register(static_cast<uint32_t>(pid), ProcessStartTicks(pid),
                                          pid_namespace);
      }
      if (control_slot_ == SessionControl::kClosed) return ECANCELED;
      CountCallsIn(control_.SubmittedCalls(control_slot_));
    } else {
      unreachable |= format::kSessionControlUnreachable;
      if (unreachable_error == 0) unreachable_error = attach_error;
      ProfilerWatch profiler;
      profiler.Start(nullptr);
      if (int profiler_pid = 0; profiler.Gone(&profiler_pid)) return ESRCH;
    }
  }
  // --flight-recorder: the data chunks older than the seconds kept are punched out (Cycle).
  if (const CaptureWindowsState* capture = CaptureWindows();
      capture != nullptr && capture->flight.keep_ns != 0 &&
      capture->mode.load(std::memory_order_relaxed) ==
          static_cast<uint32_t>(CaptureRange::kFlight)) {
    file_.KeepRecentDataOnly();
  }
  int error = EEXIST;
  // The same pid comes back when a process execs: each image gets its own file.
  // A process in a PID namespace of its own (a container's) names its namespace too: two
  // containers' "pid 1" are two processes.
  const uint32_t profiler_namespace = ProfilerPidNamespace();
  char prefix[48];
  if (pid_namespace != 0 && profiler_namespace != 0 && pid_namespace != profiler_namespace) {
    snprintf(prefix, sizeof(prefix), "inject-pidns%u-%d", pid_namespace, pid);
  } else {
    snprintf(prefix, sizeof(prefix), "inject-%d", pid);
  }
  for (int generation = 0; generation < 1000 && error == EEXIST; ++generation) {
    char name[64];
    if (generation == 0) {
      snprintf(name, sizeof(name), "%s.gpr", prefix);
    } else {
      snprintf(name, sizeof(name), "%s.%d.gpr", prefix, generation);
    }
    name_ = name;
    error = file_.Create(&directory_, name, format::Source::kInject, static_cast<uint32_t>(pid));
  }
  path_ = std::string(session_dir) + "/" + name_;
  if (error != 0) {
    // No file to say it in: the session's control file tells gprof-run, for the report.
    if (file_.refused_for_room()) {
      control_.Note(static_cast<uint32_t>(pid), name_.c_str(), format::StopCause::kDiskRoom, 0,
                    MonotonicNs(), 0);
    } else {
      control_.Note(static_cast<uint32_t>(pid), name_.c_str(), format::StopCause::kFileNotCreated,
                    error, MonotonicNs(), 0);
    }
    CountCallsIn(nullptr);
    control_.Unregister(control_slot_);
    control_slot_ = SessionControl::kClosed;
    return error;
  }
  WriteNamespaces(pid_namespace, profiler_namespace, unreachable);
  WriteProcessInfo();
  if (unreachable != 0) SaySharedMemoryUnreachable(unreachable, unreachable_error);
  WriteApiNames();
  WriteMaps();
  Flush();
  return 0;
}

void SessionWriter::Cycle(bool force_flush) {
  if (file_.reopens() != reopens_noted_) {
    reopens_noted_ = file_.reopens();
    PostMessage(format::MessageLevel::kWarning,
                "the program closed or replaced the descriptor of this process's session file; "
                "the file was opened again and recording went on");
  }
  if (control_slot_ >= 0) CountCallsIn(control_.SubmittedCalls(control_slot_));
  DrainAll();
  uint64_t now = MonotonicNs();
  if (now - last_name_refresh_ns_ >= kNameRefreshIntervalNs) {
    RefreshThreadNames();
    last_name_refresh_ns_ = now;
  }
  if (force_flush || staged_bytes_ > 0) Flush();
  if (file_.trims() && now - last_trim_ns_ >= kTrimIntervalNs) {
    file_.TrimBefore(FlightTrimBefore(CaptureWindows(), now));
    last_trim_ns_ = now;
  }
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
  if (file_.trims()) file_.TrimBefore(FlightTrimBefore(CaptureWindows(), MonotonicNs()));
  file_.Close();
  if (stopped_ && !stop_written_) {  // the file could not say it: the control file does
    control_.Note(static_cast<uint32_t>(getpid()), name_.c_str(), stop_cause_, stop_error_,
                  stopped_ns_, records_lost_after_stop_ - records_lost_reported_);
  }
  CountCallsIn(nullptr);
  control_.Unregister(control_slot_);
  control_slot_ = SessionControl::kClosed;
}

void SessionWriter::Stop(format::StopCause cause, int error, const char* reason) {
  if (stopped_) return;
  StopRecording();
  stopped_ = true;
  stopped_ns_ = MonotonicNs();
  stop_cause_ = cause;
  stop_error_ = error;
  stop_reason_ = reason;
  records_lost_after_stop_ += staged_records_;
  staged_bytes_ = 0;
  staged_records_ = 0;
  AccountStagedCalls();
  file_.SetClosing();  // the stop record may use the room kept back for last words
  WriteStopRecord();
}

void SessionWriter::StopAfterFailedWrite(int error) {
  if (file_.refused_for_room()) {
    DiskRoom room = file_.Room();
    char reason[200];
    snprintf(reason, sizeof(reason),
             "the session's filesystem was down to %.1f MiB free, and gprof-run leaves %.0f MiB "
             "free (disk margin)",
             room.free_bytes / 1048576.0, room.margin_bytes / 1048576.0);
    Stop(format::StopCause::kDiskRoom, 0, reason);
  } else if (error == EFBIG) {
    // RLIMIT_FSIZE, the program's own (ulimit -f): passing it would have sent it SIGXFSZ.
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    char reason[200];
    snprintf(reason, sizeof(reason),
             "the file size limit (ulimit -f %llu) of the process was reached: the file stops "
             "below it, as a write past it would end the program with SIGXFSZ",
             static_cast<unsigned long long>(limit.rlim_cur / 1024));
    Stop(format::StopCause::kFileSizeLimit, 0, reason);
  } else if (*file_.descriptor_lost() != '\0') {
    Stop(format::StopCause::kFileLost, 0,
         ("the program closed or replaced the descriptor of " + path_ + ", and " +
          file_.descriptor_lost())
             .c_str());
  } else {
    Stop(format::StopCause::kWriteFailed, error, ("cannot write " + path_).c_str());
  }
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
  WriteProfilerThreads();
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
      gpu_.Encode(*cupti, buffer.data, buffer.valid_size, clock_offset_ns_, Window(),
                  CaptureWindows());
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

// The copies go out as they are: naming their frames is the collector's work (native_stack.h).
void SessionWriter::WriteSlowCallStacks() {
  DrainStackCopies(
      [](void* writer, const format::StackCopyRecord& record, const uint8_t* bytes) {
        static_cast<SessionWriter*>(writer)->Append(&record, sizeof(record), bytes,
                                                    record.copied_bytes);
      },
      this);
  if (uint64_t dropped = TakeDroppedStacks(); dropped > 0) {
    PostMessage(format::MessageLevel::kWarning,
                "native stacks of some slow calls were not kept (too many at once)");
  }
}

void SessionWriter::WriteProfilerThreads() {
  uint32_t tid = 0, role = 0;
  for (uint32_t count = ProfilerThreadCount();
       profiler_threads_written_ < count &&
       ProfilerThreadAt(profiler_threads_written_, &tid, &role);
       ++profiler_threads_written_) {
    auto record = format::MakeRecord<format::ProfilerThreadRecord>(format::kProfilerThread);
    record.time_ns = MonotonicNs();
    record.tid = tid;
    record.role = role;
    Append(&record, sizeof(record));
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
      if (record.header.type == format::kNvtxEvent || record.header.type == format::kNcclEvent) {
        tail += AppendSpanning(*ring, tail) - 1;
        continue;
      }
      if (record.api_id >= (1u << 16)) gpu_.NameApi(record.api_id);  // a CUPTI id
      Append(&record, sizeof(record));
      ++staged_calls_;  // after Append: a flush it made first holds only the calls before
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

uint64_t SessionWriter::AppendSpanning(const ThreadRing& ring, uint64_t at) {
  constexpr uint64_t kMaxSize =
      std::max(sizeof(format::NvtxEventRecord) + format::kNvtxMaxText,
               sizeof(format::NcclEventRecord) + 2 * format::kNcclMaxText);
  char bytes[ThreadRing::SlotsFor(kMaxSize) * ThreadRing::kSlotBytes];
  format::RecordHeader header;
  memcpy(&header, &ring.slots[at % ThreadRing::kSlots], sizeof(header));
  // Only this library pushes it; a size out of bounds would mean a bug: skip the one slot.
  if (header.size < sizeof(header) || header.size > kMaxSize) return 1;
  for (uint64_t copied = 0, slot = at; copied < header.size; ++slot) {
    uint64_t piece = std::min<uint64_t>(header.size - copied, ThreadRing::kSlotBytes);
    memcpy(bytes + copied, &ring.slots[slot % ThreadRing::kSlots], piece);
    copied += piece;
  }
  Append(bytes, header.size);
  return ThreadRing::SlotsFor(header.size);
}

void SessionWriter::RefreshThreadNames() {
  for (uint32_t i = 0; i < ring_views_.size(); ++i) {
    ThreadRing* ring = RingAt(i);
    if (ring->state.load(std::memory_order_acquire) != RingState::kActive) continue;
    RingView& view = ring_views_[i];
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%u/comm", view.tid);
    char name[64];
    size_t length = ReadSmallProcFile(path, name, sizeof(name));
    while (length > 0 && name[length - 1] == '\n') --length;
    if (length >= sizeof(view.name)) length = sizeof(view.name) - 1;
    if (length == 0 || (strncmp(name, view.name, length) == 0 && view.name[length] == '\0'))
      continue;
    memset(view.name, 0, sizeof(view.name));
    memcpy(view.name, name, length);
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

void SessionWriter::WriteNamespaces(uint32_t pid_namespace, uint32_t profiler_pid_namespace,
                                    uint32_t flags) {
  auto record = format::MakeRecord<format::NamespacesRecord>(format::kNamespaces);
  record.time_ns = MonotonicNs();
  record.pid_namespace = pid_namespace;
  record.profiler_pid_namespace = profiler_pid_namespace;
  record.pid = static_cast<uint32_t>(getpid());
  record.flags = flags;
  record.time_offset_ns = g_time_namespace_offset_ns;
  Append(&record, sizeof(record));
}

void SessionWriter::WriteProcessInfo() {
  char exe[PATH_MAX] = {};
  ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (exe_len < 0) exe_len = 0;
  std::string_view cmdline = ReadProcFile("/proc/self/cmdline");
  auto record = format::MakeRecord<format::ProcessInfoRecord>(
      format::kProcessInfo, static_cast<size_t>(exe_len) + cmdline.size());
  record.pid = static_cast<uint32_t>(getpid());
  record.ppid = static_cast<uint32_t>(getppid());
  record.time_ns = MonotonicNs();
  record.exe_len = static_cast<uint32_t>(exe_len);
  record.cmdline_len = static_cast<uint32_t>(cmdline.size());
  char head[sizeof(record) + sizeof(exe)];
  memcpy(head, &record, sizeof(record));
  memcpy(head + sizeof(record), exe, static_cast<size_t>(exe_len));
  Append(head, sizeof(record) + static_cast<size_t>(exe_len), cmdline.data(), cmdline.size());
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
  // Read behind room for the header: a snapshot larger than the staging buffer is then written
  // from where it lies, as one record.
  constexpr size_t kHead = sizeof(format::MapsSnapshotRecord);
  std::string_view maps = ReadProcFile("/proc/self/maps", kHead);
  if (maps.empty() && g_proc_buffer.capacity < kHead) return;
  auto record = format::MakeRecord<format::MapsSnapshotRecord>(format::kMapsSnapshot, maps.size());
  record.time_ns = MonotonicNs();
  record.text_len = static_cast<uint32_t>(maps.size());
  memcpy(g_proc_buffer.data, &record, kHead);
  Append(g_proc_buffer.data, kHead + maps.size());
}

void SessionWriter::WriteDrops(uint32_t tid, uint64_t count) {
  auto record = format::MakeRecord<format::DroppedRecord>(format::kDropped);
  record.time_ns = MonotonicNs();
  record.count = count;
  record.tid = tid;
  Append(&record, sizeof(record));
  staged_calls_ += count;
}

void SessionWriter::AccountStagedCalls() {
  control_.AccountCalls(control_slot_, staged_calls_);
  staged_calls_ = 0;
}

void SessionWriter::Append(const void* head, size_t head_size, const void* tail, size_t tail_size) {
  size_t size = head_size + tail_size;
  if (file_.trims()) {  // a chunk holds data or state, never both
    bool trimmable = IsTrimmableRecord(head, head_size);
    if (staged_bytes_ > 0 && trimmable != staged_trimmable_) Flush();
    staged_trimmable_ = trimmable;
  }
  if (staged_bytes_ + size > kStagingBytes) Flush();
  if (size > kStagingBytes) {
    // Larger than the staging buffer (a huge maps file, which comes whole): a chunk of its own.
    std::string whole;
    if (tail_size > 0) {
      whole.assign(static_cast<const char*>(head), head_size);
      whole.append(static_cast<const char*>(tail), tail_size);
    }
    const void* data = tail_size > 0 ? whole.data() : head;
    if (stopped_) {
      ++records_lost_after_stop_;
    } else if (int error = file_.Write(data, size, 1);
               error != 0 && error != ChunkFileWriter::kSizeBudgetRefused) {  // it counts them
      ++records_lost_after_stop_;
      StopAfterFailedWrite(error);
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
    AccountStagedCalls();
    if (!stop_written_) WriteStopRecord();  // the disk may have room again
    return;
  }
  if (int error = file_.Write(staging_.get(), staged_bytes_, staged_records_, staged_trimmable_);
      error != 0) {
    if (error == ChunkFileWriter::kSizeBudgetRefused) {  // --max-size: the budget counts them
      staged_bytes_ = 0;
      staged_records_ = 0;
      AccountStagedCalls();
      return;
    }
    // No room left above the disk margin, a lost file, or an I/O error: the target must run on
    // unharmed. Recording stops here, and the file says when and what it lost (Write left the
    // file whole).
    StopAfterFailedWrite(error);
    return;
  }
  staged_bytes_ = 0;
  staged_records_ = 0;
  AccountStagedCalls();
}

void* WriterThreadMain(void* session_dir) {
  prctl(PR_SET_NAME, format::kWriterThreadName);
  // Before its first file: on a kernel before 5.9 it shares the program's table, and
  // chunk_file_writer.cc checks each descriptor before it uses one.
  UseOwnDescriptorTable();
  NoteProfilerThread(format::ProfilerThreadRole::kWriter);
  SessionWriter writer;
  if (writer.Open(static_cast<const char*>(session_dir)) != 0) {
    StopRecording();
    return nullptr;
  }
  ProfilerWatch profiler;
  profiler.Start(&writer.control());
  FreezeWatch freeze_watch;
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
    freeze_watch.Check(MonotonicNs());
    // The command has ended and gprof-run collects the session (or gprof-run is gone): this
    // process runs on, and its record ends here.
    bool closed = writer.SessionClosed();
    int profiler_pid = 0;
    if (closed || profiler.Gone(&profiler_pid)) {
      char text[200];
      if (closed) {
        snprintf(text, sizeof(text),
                 "the command ended and gprof-run closed the session while this process ran on");
      } else {
        snprintf(text, sizeof(text), "gprof-run (pid %d) ended before this process did",
                 profiler_pid);
      }
      // Everything recorded until now goes out first; only then does the record stop.
      StopRecording();
      writer.Cycle(/*force_flush=*/true);
      writer.Stop(closed ? format::StopCause::kSessionClosed : format::StopCause::kProfilerEnded, 0,
                  text);
      // Nothing on the program's stdout or stderr, which are the program's own: the file's stop
      // record says it, in the report that `gprof-run report` builds from the session.
      writer.Finish();
      return nullptr;
    }
  }
  writer.Finish();
  return nullptr;
}

}  // namespace gprof::inject
