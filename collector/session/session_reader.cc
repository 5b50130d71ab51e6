#include "collector/session/session_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "collector/model/record_storage.h"
#include "collector/session/capture_records.h"
#include "collector/session/chunk_reader.h"
#include "collector/session/kernel_events_records.h"
#include "collector/session/lock_owners.h"
#include "collector/session/nccl_records.h"
#include "collector/session/nvtx_records.h"
#include "collector/session/pid_namespaces.h"
#include "collector/session/process_maps.h"
#include "collector/session/rank_identity.h"
#include "collector/session/session_files.h"
#include "collector/session/session_meta.h"
#include "collector/session/thread_sightings.h"
#include "collector/session/unrecorded_processes.h"
#include "inject/format/session_format.h"

namespace gprof::collector {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> SplitNul(std::string_view text) {
  std::vector<std::string> parts;
  while (!text.empty()) {
    size_t end = text.find('\0');
    parts.push_back(PrintableName(text.substr(0, end)));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return parts;
}

// Runs `read`, a reader of the file at `path`: one that throws (out of memory, a library's own
// exception) loses the rest of that file, not the session.
template <typename Read>
void ReadGuarded(const std::string& path, std::vector<Diagnostic>* diagnostics, Read read) {
  const char* what = "unknown error";
  try {
    return read();
  } catch (const std::bad_alloc&) {
    what = "out of memory";
  } catch (const std::exception& error) {
    diagnostics->push_back(
        {path, 0, "reading stopped (" + PrintableName(error.what()) + "); the rest not read"});
    return;
  } catch (...) {
  }
  diagnostics->push_back({path, 0, std::string("reading stopped (") + what + "); the rest not read"});
}

class SessionBuilder {
 public:
  SessionBuilder(Session* session, ReadProgress* progress)
      : session_(session), progress_(progress) {}

  void ReadInjectFile(int dir_fd, const std::string& name, const std::string& path) {
    std::unordered_map<uint32_t, uint32_t> api_index;  // this file's api_id -> Session::api_names
    CaptureRecordDecoder capture(session_, &kernel_name_index_, path);
    NvtxRecordDecoder nvtx(session_, &nvtx_strings_, path);
    NcclRecordDecoder nccl(session_, path);
    bool reserved = false;
    // A process in a PID namespace of its own names it first: its ids become the kernel's.
    std::optional<NamespaceTranslation> translation;
    std::vector<uint8_t> scratch;
    uint64_t records = 0;
    auto visit = [&](const RecordView& given) {
      if (given.type == format::kNamespaces) {
        bool unmatched = false;
        translation = NamespaceTranslation::For(given.bytes, session_->task_starts, &unmatched);
        if (unmatched) {
          session_->messages.push_back(
              PrintableName(name) +
              ": in another PID namespace, its start not in the kernel's record: its ids are that "
              "namespace's");
        }
        return;
      }
      RecordView record = translation ? translation->Translate(given, &scratch) : given;
      ++records;
      if (!reserved) {
        // Nearly all of a file's records are CUDA calls.
        ReserveLarge(session_->api_calls, session_->api_calls.size() + record.file_records);
        reserved = true;
      }
      if (!capture.Decode(record) && !nvtx.Decode(record) && !nccl.Decode(record))
        DecodeInject(record, record.writer_pid, &api_index, path);
    };
    ReadGuarded(path, &session_->diagnostics, [&] {
      auto summary = ReadChunkFile(dir_fd, name, path, visit, &session_->diagnostics, progress_);
      CountTrimmed(summary);
      if (!summary.ok()) {
        session_->diagnostics.push_back({path, 0, summary.status().message()});
        // Nothing of it read (unreadable to its owner, say, under `umask 0777`): whatever calls
        // it holds are missing, and the lost line says so.
        if (records == 0) {
          LostEvents lost{"CUDA calls of " + PrintableName(name) + ": the file could not be read (" +
                              summary.status().message() + ")",
                          0,
                          {}};
          lost.count_known = false;
          session_->lost.push_back(std::move(lost));
        }
      }
    });
    capture.Finish();
    nvtx.Finish(session_->meta.end_monotonic_ns);
  }

  void ReadKernelFile(int dir_fd, const std::string& name, const std::string& path) {
    KernelRecordDecoder kernel(session_, &threads_, path);
    ReadGuarded(path, &session_->diagnostics, [&] {
      auto summary = ReadChunkFile(
          dir_fd, name, path, [&](const RecordView& record) { kernel.Decode(record); },
          &session_->diagnostics, progress_);
      CountTrimmed(summary);
      if (!summary.ok()) session_->diagnostics.push_back({path, 0, summary.status().message()});
    });
    kernel.Finish();
  }

  void Finish();

 private:
  void CountTrimmed(const Expected<ChunkFileSummary>& summary) {
    if (!summary.ok()) return;
    session_->trimmed_chunks += summary->trimmed_chunks;
    session_->trimmed_bytes += summary->trimmed_bytes;
  }

  void Malformed(const std::string& path, const RecordView& record, const char* what) {
    session_->diagnostics.push_back(
        {path, record.chunk_offset,
         std::string("malformed ") + what + " record skipped (" + RecordPlace(record) + ")"});
  }
  void DecodeInject(const RecordView& record, uint32_t pid,
                    std::unordered_map<uint32_t, uint32_t>* api_index, const std::string& path);
  uint32_t InternApiName(std::string_view name);

  Session* session_;
  ReadProgress* progress_;
  ThreadSightings threads_;
  std::unordered_map<std::string, uint32_t> api_name_index_;
  KernelNameIndex kernel_name_index_;
  NvtxStringIndex nvtx_strings_;
};

uint32_t SessionBuilder::InternApiName(std::string_view name) {
  auto [it, inserted] = api_name_index_.try_emplace(std::string(name), session_->api_names.size());
  if (inserted) session_->api_names.push_back(PrintableName(name));
  return it->second;
}

void SessionBuilder::DecodeInject(const RecordView& record, uint32_t pid,
                                  std::unordered_map<uint32_t, uint32_t>* api_index,
                                  const std::string& path) {
  using namespace format;
  switch (record.type) {
    case kProcessInfo: {
      ProcessInfoRecord info;
      if (!ReadRecord(record.bytes, &info)) return Malformed(path, record, "process info");
      Process& process = session_->processes[info.pid];
      process.pid = info.pid;
      process.ppid = info.ppid;
      auto tail =
          TrailingText<ProcessInfoRecord>(record.bytes, uint64_t{info.exe_len} + info.cmdline_len);
      if (tail.size() == uint64_t{info.exe_len} + info.cmdline_len) {
        process.exe = PrintableName(tail.substr(0, info.exe_len));
        process.cmdline = SplitNul(tail.substr(info.exe_len));
      }
      return;
    }
    case kApiName: {
      ApiNameRecord name;
      if (!ReadRecord(record.bytes, &name)) return Malformed(path, record, "API name");
      auto text = TrailingText<ApiNameRecord>(record.bytes, name.name_len);
      if (text.size() != name.name_len) return Malformed(path, record, "API name");
      (*api_index)[name.api_id] = InternApiName(text);
      return;
    }
    case kApiCall: {
      ApiCallRecord call;
      if (!ReadRecord(record.bytes, &call)) return Malformed(path, record, "CUDA call");
      auto name = api_index->find(call.api_id);
      uint32_t name_index = name != api_index->end()
                                ? name->second
                                : InternApiName("api#" + std::to_string(call.api_id));
      if (call.exit_ns < call.enter_ns)
        return Malformed(path, record, "CUDA call (exit before enter)");
      session_->api_calls.push_back(ApiCall{call.enter_ns, call.exit_ns, call.stream,
                                            call.correlation_id, pid, call.tid, name_index,
                                            call.return_code, call.flags});
      threads_.SeeThread(call.tid, pid);
      return;
    }
    case kThreadName: {
      ThreadNameRecord name;
      if (!ReadRecord(record.bytes, &name)) return Malformed(path, record, "thread name");
      threads_.SeeName(name.tid, name.time_ns, FixedString(name.name, sizeof(name.name)));
      threads_.SeeThread(name.tid, pid);
      return;
    }
    case kMapsSnapshot: {
      MapsSnapshotRecord maps;
      if (!ReadRecord(record.bytes, &maps)) return Malformed(path, record, "maps");
      auto text = TrailingText<MapsSnapshotRecord>(record.bytes, maps.text_len);
      if (text.size() != maps.text_len) return Malformed(path, record, "maps");
      session_->processes[pid].maps.push_back(MapsSnapshot{maps.time_ns, ParseMaps(text)});
      return;
    }
    case kDropped: {
      DroppedRecord dropped;
      if (!ReadRecord(record.bytes, &dropped)) return Malformed(path, record, "dropped");
      session_->processes[pid].dropped_records += dropped.count;
      return;
    }
    case kMessage: {
      MessageRecord message;
      if (!ReadRecord(record.bytes, &message)) return Malformed(path, record, "message");
      auto text = TrailingText<MessageRecord>(record.bytes, message.text_len);
      session_->messages.push_back("pid " + std::to_string(pid) + ": " + PrintableName(text));
      return;
    }
    case kRecordingStopped: {
      RecordingStoppedRecord stopped;
      if (!ReadRecord(record.bytes, &stopped)) return Malformed(path, record, "recording stopped");
      auto text = TrailingText<RecordingStoppedRecord>(record.bytes, stopped.text_len);
      RecordingStop stop;
      stop.file = PrintableName(fs::path(path).filename().string());
      stop.pid = pid;
      stop.time_ns = stopped.time_ns;
      stop.records_lost = stopped.records_lost;
      stop.cause = StopCauseWord(static_cast<StopCause>(stopped.cause));
      stop.description = PrintableName(text);
      if (stopped.error > 0) stop.description += std::string(": ") + strerror(stopped.error);
      for (auto& earlier : session_->recording_stops) {
        if (earlier.file == stop.file && earlier.time_ns == stop.time_ns) {
          earlier.records_lost += stop.records_lost;  // the same stop, counted again at exit
          return;
        }
      }
      session_->recording_stops.push_back(std::move(stop));
      return;
    }
    default:
      return;  // a newer writer's record: skipped by design
  }
}

// Sorts `records` by `time_of` each, ties in the order they were read, in place and in about one
// pass for what the recorders write: records come nearly in order (the kernel's at their end, the
// injected library's a thread's buffer at a time), so each is either at or past the end of the
// sorted prefix, a few places short of it (moved back there, as an insertion sort would), or far
// short of it (a long interval, another thread's buffer): set aside, and merged in, sorted, when
// the set-aside ones reach a bound, so extra memory stays a sixteenth of the records whatever the
// input. Ties keep their order: once a record with time t is set aside, every later one with time
// t is too (the prefix past t only grows), so a tie between the prefix and the set-aside ones is
// always the prefix's first.
template <typename Record, typename TimeOf>
void SortByTime(RecordVector<Record>& records, TimeOf time_of) {
  constexpr size_t kNearby = 16;  // how far a record is moved back one place at a time
  const size_t count = records.size();
  RecordVector<Record> aside;
  const size_t aside_limit = std::max<size_t>(count / 16, 4096);
  // Merges `aside` into the sorted prefix [0, sorted): the slots [sorted, sorted + aside.size())
  // are free, as the set-aside records came from them or from before the next unread one.
  auto merge_aside = [&](size_t sorted) {
    std::stable_sort(aside.begin(), aside.end(),
                     [&](const Record& a, const Record& b) { return time_of(a) < time_of(b); });
    size_t out = sorted + aside.size();
    size_t from_aside = aside.size();
    while (from_aside > 0) {
      // On a tie the set-aside record goes last (see above); the prefix's stay where they are
      // once every set-aside one is placed.
      if (sorted > 0 && time_of(records[sorted - 1]) > time_of(aside[from_aside - 1])) {
        records[--out] = std::move(records[--sorted]);
      } else {
        records[--out] = std::move(aside[--from_aside]);
      }
    }
    aside.clear();
  };
  size_t sorted = 0;  // records [0, sorted) are in order
  for (size_t next = 0; next < count; ++next) {
    const uint64_t time = time_of(records[next]);
    if (sorted == 0 || time_of(records[sorted - 1]) <= time) {
      if (sorted != next) records[sorted] = std::move(records[next]);
      ++sorted;
      continue;
    }
    // Its place: after the last record of time <= `time`, if that is near.
    size_t place = sorted - 1;
    const size_t nearest = sorted > kNearby ? sorted - kNearby : 0;
    while (place > nearest && time_of(records[place - 1]) > time) --place;
    if (place == 0 || time_of(records[place - 1]) <= time) {
      Record held = std::move(records[next]);
      std::move_backward(records.begin() + place, records.begin() + sorted,
                         records.begin() + sorted + 1);
      records[place] = std::move(held);
      ++sorted;
      continue;
    }
    if (aside.empty()) ReserveLarge(aside, aside_limit);
    aside.push_back(std::move(records[next]));
    if (aside.size() == aside_limit) {
      merge_aside(sorted);
      sorted = next + 1;
    }
  }
  if (!aside.empty()) merge_aside(sorted);
}

void SessionBuilder::Finish() {
  auto start_of = [](const auto& record) { return record.start_ns; };
  auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
  SortByTime(session_->api_calls, [](const ApiCall& call) { return call.enter_ns; });
  SortByTime(session_->off_cpu, start_of);
  SortByTime(session_->futex_calls, start_of);
  std::stable_sort(session_->nvtx_ranges.begin(), session_->nvtx_ranges.end(), by_start);
  std::stable_sort(session_->nccl_events.begin(), session_->nccl_events.end(), by_start);
  std::stable_sort(session_->nvtx_marks.begin(), session_->nvtx_marks.end(),
                   [](const NvtxMark& a, const NvtxMark& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->task_starts.begin(), session_->task_starts.end(),
            [](const TaskStart& a, const TaskStart& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->gpu_activities.begin(), session_->gpu_activities.end(), by_start);
  std::sort(session_->futex_waitv_calls.begin(), session_->futex_waitv_calls.end(), by_start);
  std::sort(session_->lock_waits.begin(), session_->lock_waits.end(), by_start);
  std::sort(session_->device_waits.begin(), session_->device_waits.end(), by_start);
  std::sort(session_->tcp_transfers.begin(), session_->tcp_transfers.end(), by_start);
  std::sort(session_->page_faults.begin(), session_->page_faults.end(), by_start);
  std::sort(session_->quick_fault_runs.begin(), session_->quick_fault_runs.end(), by_start);
  std::sort(session_->recording_stops.begin(), session_->recording_stops.end(),
            [](const RecordingStop& a, const RecordingStop& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->memory_map_calls.begin(), session_->memory_map_calls.end(), by_start);
  for (auto& [pid, process] : session_->processes) {
    std::stable_sort(
        process.maps.begin(), process.maps.end(),
        [](const MapsSnapshot& a, const MapsSnapshot& b) { return a.time_ns < b.time_ns; });
    std::sort(process.exec_ns.begin(), process.exec_ns.end());
    std::stable_sort(
        process.loaded_files.begin(), process.loaded_files.end(),
        [](const LoadedFile& a, const LoadedFile& b) { return a.time_ns < b.time_ns; });
  }
  threads_.ApplyTo(session_);
  threads_.NameWakersInTree(session_);
  session_->python.Finish();
  InferMmapLockOwners(*session_);
  for (const auto& [pid, process] : session_->processes) {
    if (process.dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"CUDA call records of pid " + std::to_string(pid) + " (thread buffer full)",
                     process.dropped_records,
                     {}});
    }
    if (process.capture.mode == CaptureMode::kNone) {
      LostEvents lost{"CUDA calls of pid " + std::to_string(pid) + ", which nothing recorded: " +
                          process.capture.note,
                      0,
                      {}};
      lost.count_known = false;
      session_->lost.push_back(std::move(lost));
    }
    if (process.gpu_dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"GPU activity records of pid " + std::to_string(pid) + " (CUPTI buffers full)",
                     process.gpu_dropped_records,
                     {}});
    }
  }
}

// A session whose run has not ended is either still being recorded or was cut short by
// gprof-run's death: a live gprof-run holds the directory locked (cli/run_command.cc).
bool StillRecorded(int dir_fd) {
  int probe = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // a lock of its own
  if (probe < 0) return false;
  const bool locked = flock(probe, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(probe);
  return locked;
}

// `given`: the file's contents as gprof-run meant them, when it could not write them.
Status ReadSessionMeta(int dir_fd, const std::string& path, const std::string* given,
                       Session* session) {
  Status status;
  if (given != nullptr) {
    ReadGuarded(path, &session->diagnostics,
                [&] { status = ParseSessionMeta(*given, path, session); });
    return status;
  }
  struct stat info {};
  if (fstatat(dir_fd, kSessionMetaFile, &info, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
    session->diagnostics.push_back(
        {path, 0, "missing: the run's command and exit status are unknown"});
    return {};
  }
  // Not a FIFO or a device, which would block or never end, nor a link.
  auto in = OpenSessionFile(dir_fd, kSessionMetaFile);
  // Too large by its size, and so not read at all; or read a block at a time up to one byte past
  // the limit (it may grow while it is read): a sparse 10 GB file costs nothing.
  std::string text;
  struct stat opened {};
  bool too_large = in.ok() && fstat(in->get(), &opened) == 0 &&
                   static_cast<uint64_t>(opened.st_size) > kMaxSessionMetaBytes;
  if (in.ok() && !too_large) {
    text.reserve(static_cast<size_t>(opened.st_size));
    char block[65536];
    while (text.size() <= kMaxSessionMetaBytes) {
      ssize_t n = read(in->get(), block, sizeof(block));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(block, static_cast<size_t>(n));
    }
    too_large = text.size() > kMaxSessionMetaBytes;
  }
  if (!in.ok()) {
    session->diagnostics.push_back(
        {path, 0,
         "unreadable or not a regular file (" + in.status().message() +
             "): the run's command and exit status are unknown"});
    return {};
  }
  if (too_large) {
    session->diagnostics.push_back(
        {path, 0,
         "larger than " + std::to_string(kMaxSessionMetaBytes >> 20) +
             " MiB, which no session.json of gprof-run is: not read; the run's command and exit "
             "status are unknown"});
    return {};
  }
  if (text.empty()) {  // claimed by a run that ended before it described itself (killed)
    session->diagnostics.push_back(
        {path, 0,
         "empty (the run that made it ended before it wrote it): the run's command and exit "
         "status are unknown"});
    return {};
  }
  ReadGuarded(path, &session->diagnostics,
              [&] { status = ParseSessionMeta(text, path, session); });
  return status;
}

// A damaged file can hold a problem every few bytes: the first kListedPerFile of each file are
// kept, the rest counted in one line, so that the report and its warnings stay readable.
void CapDiagnostics(std::vector<Diagnostic>* diagnostics) {
  constexpr size_t kListedPerFile = 20;
  std::unordered_map<std::string, size_t> seen;
  std::vector<std::pair<std::string, size_t>> more;  // by file, in the order of their first
  size_t kept = 0;
  for (size_t i = 0; i < diagnostics->size(); ++i) {
    Diagnostic& diagnostic = (*diagnostics)[i];
    size_t& count = seen[diagnostic.file];
    if (++count <= kListedPerFile) {
      if (kept != i) (*diagnostics)[kept] = std::move(diagnostic);
      ++kept;
      continue;
    }
    if (count == kListedPerFile + 1) more.emplace_back(diagnostic.file, 0);
    auto entry = std::find_if(more.begin(), more.end(),
                              [&](const auto& m) { return m.first == diagnostic.file; });
    ++entry->second;
  }
  diagnostics->resize(kept);
  for (auto& [file, count] : more) {
    diagnostics->push_back(
        {file, 0, std::to_string(count) + " more problems in this file, not listed"});
  }
}

}  // namespace

Expected<Session> ReadSession(const std::string& directory, ReadProgress* progress) {
  auto dir = OpenSessionDirectory(directory);
  if (!dir.ok()) return dir.status();
  return ReadSession(dir->get(), directory, progress);
}

Expected<Session> ReadSession(int dir_fd, const std::string& directory, ReadProgress* progress,
                              const std::string* meta_text) {
  // Paths are shown escaped: a file name may hold any byte but '/' and NUL.
  const std::string shown = PrintableName(directory);
  Session session;
  session.directory = shown;

  std::vector<std::string> inject_files;  // names in the directory
  bool has_meta = false, has_kernel = false;
  DIR* listing = nullptr;
  if (int listing_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); listing_fd >= 0) {
    listing = fdopendir(listing_fd);
    if (listing == nullptr) close(listing_fd);
  }
  if (listing == nullptr)
    return Status::FromErrno(errno, shown + ": cannot list: " + strerror(errno));
  errno = 0;
  while (const dirent* entry = readdir(listing)) {
    std::string name = entry->d_name;
    if (name == kSessionMetaFile) has_meta = true;
    if (name == kKernelFile) has_kernel = true;
    if (name.starts_with(kInjectFilePrefix) && name.ends_with(kRecordingFileSuffix)) {
      inject_files.push_back(name);
    }
  }
  int list_error = errno;
  closedir(listing);
  if (list_error != 0)
    return Status::FromErrno(list_error, shown + ": cannot list: " + strerror(list_error));
  if (!has_meta && meta_text == nullptr && !has_kernel && inject_files.empty()) {
    return Status::Error(StatusCode::kInvalid, shown + ": not a gprof-run session (no " +
                                                   kSessionMetaFile + ", " + kKernelFile + " or " +
                                                   kInjectFilePrefix + "*" + kRecordingFileSuffix +
                                                   ")");
  }
  std::sort(inject_files.begin(), inject_files.end());

  Status meta =
      ReadSessionMeta(dir_fd, (fs::path(directory) / kSessionMetaFile).string(), meta_text,
                      &session);
  if (!meta.ok()) return meta;
  if (session.meta.cut_short == "gprof_run_ended" && StillRecorded(dir_fd)) {
    session.meta.cut_short = "still_recording";
    session.meta.cut_short_text =
        "gprof-run is still recording this session: what was written when it was read is "
        "explained; read it again once the command has ended";
  }
  if (!session.meta.known) {
    // Whether the kernel was recorded is then told by its file, not by a guess that it was not.
    session.meta.kernel_recording = has_kernel;
    if (!has_kernel) {
      session.meta.kernel_recording_note =
          "no kernel.gpr, and session.json, which would say why, could not be read (below)";
    }
  }

  SessionBuilder builder(&session, progress);
  if (has_kernel) {
    builder.ReadKernelFile(dir_fd, kKernelFile, (fs::path(directory) / kKernelFile).string());
  }
  for (const auto& name : inject_files) {
    builder.ReadInjectFile(dir_fd, name, (fs::path(directory) / name).string());
  }
  builder.Finish();
  InheritRanks(&session);
  InferStartedRanks(&session);
  FindUnrecordedProcesses(&session);
  CapDiagnostics(&session.diagnostics);
  for (Diagnostic& diagnostic : session.diagnostics)
    diagnostic.file = PrintableName(diagnostic.file);
  return session;
}

}  // namespace gprof::collector
