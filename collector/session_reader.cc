#include "session_reader.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "capture_records.h"
#include "chunk_reader.h"
#include "kernel_events_records.h"
#include "lock_owners.h"
#include "process_maps.h"
#include "record_storage.h"
#include "session_files.h"
#include "session_format.h"
#include "thread_sightings.h"

namespace gprof::collector {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

class SessionBuilder {
 public:
  explicit SessionBuilder(Session* session) : session_(session) {}

  void ReadInjectFile(int dir_fd, const std::string& name, const std::string& path) {
    std::unordered_map<uint32_t, uint32_t> api_index;  // this file's api_id -> Session::api_names
    CaptureRecordDecoder capture(session_, &kernel_name_index_, path);
    bool reserved = false;
    auto visit = [&](const RecordView& record) {
      if (!reserved) {
        // Nearly all of a file's records are CUDA calls.
        ReserveLarge(session_->api_calls, session_->api_calls.size() + record.file_records);
        reserved = true;
      }
      if (!capture.Decode(record)) DecodeInject(record, record.writer_pid, &api_index, path);
    };
    auto summary = ReadChunkFile(dir_fd, name, path, visit, &session_->diagnostics);
    if (!summary.ok()) session_->diagnostics.push_back({path, 0, summary.status().message()});
    capture.Finish();
  }

  void ReadKernelFile(int dir_fd, const std::string& name, const std::string& path) {
    KernelRecordDecoder kernel(session_, &threads_, path);
    auto summary = ReadChunkFile(
        dir_fd, name, path, [&](const RecordView& record) { kernel.Decode(record); },
        &session_->diagnostics);
    if (!summary.ok()) session_->diagnostics.push_back({path, 0, summary.status().message()});
  }

  void Finish();

 private:
  void Malformed(const std::string& path, const RecordView& record, const char* what) {
    session_->diagnostics.push_back(
        {path, record.chunk_offset,
         std::string("malformed ") + what + " record skipped (" + RecordPlace(record) + ")"});
  }
  void DecodeInject(const RecordView& record, uint32_t pid,
                    std::unordered_map<uint32_t, uint32_t>* api_index, const std::string& path);
  uint32_t InternApiName(std::string_view name);

  Session* session_;
  ThreadSightings threads_;
  std::unordered_map<std::string, uint32_t> api_name_index_;
  KernelNameIndex kernel_name_index_;
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
      switch (static_cast<StopCause>(stopped.cause)) {
        case StopCause::kWriteFailed:
          stop.cause = "write_failed";
          break;
        case StopCause::kSessionFull:
          stop.cause = "session_full";
          break;
        case StopCause::kProfilerEnded:
          stop.cause = "profiler_ended";
          break;
        default:
          stop.cause = "unknown";
      }
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
  std::sort(session_->task_starts.begin(), session_->task_starts.end(),
            [](const TaskStart& a, const TaskStart& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->gpu_activities.begin(), session_->gpu_activities.end(), by_start);
  std::sort(session_->futex_waitv_calls.begin(), session_->futex_waitv_calls.end(), by_start);
  std::sort(session_->lock_waits.begin(), session_->lock_waits.end(), by_start);
  std::sort(session_->device_waits.begin(), session_->device_waits.end(), by_start);
  std::sort(session_->page_faults.begin(), session_->page_faults.end(), by_start);
  std::sort(session_->recording_stops.begin(), session_->recording_stops.end(),
            [](const RecordingStop& a, const RecordingStop& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->memory_map_calls.begin(), session_->memory_map_calls.end(), by_start);
  for (auto& [pid, process] : session_->processes) {
    std::stable_sort(
        process.maps.begin(), process.maps.end(),
        [](const MapsSnapshot& a, const MapsSnapshot& b) { return a.time_ns < b.time_ns; });
    std::sort(process.exec_ns.begin(), process.exec_ns.end());
  }
  threads_.ApplyTo(session_);
  InferMmapLockOwners(*session_);
  for (const auto& [pid, process] : session_->processes) {
    if (process.dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"CUDA call records of pid " + std::to_string(pid) + " (thread buffer full)",
                     process.dropped_records,
                     {}});
    }
    if (process.gpu_dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"GPU activity records of pid " + std::to_string(pid) + " (CUPTI buffers full)",
                     process.gpu_dropped_records,
                     {}});
    }
  }
}

template <typename T>
std::optional<T> Field(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) return it->get<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (it->is_number()) return it->get<double>();
  } else {
    if (it->is_number_integer()) return it->get<T>();
  }
  return std::nullopt;
}

Status ReadSessionMeta(int dir_fd, const std::string& path, Session* session) {
  struct stat info {};
  if (fstatat(dir_fd, kSessionMetaFile, &info, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
    session->diagnostics.push_back(
        {path, 0, "missing: the run's command and exit status are unknown"});
    return {};
  }
  // Not a FIFO or a device, which would block or never end, nor a link.
  auto in = OpenSessionFile(dir_fd, kSessionMetaFile);
  std::string text;
  if (in.ok()) {
    char block[65536];
    for (ssize_t n; (n = read(in->get(), block, sizeof(block))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(block, static_cast<size_t>(n));
    }
  }
  if (!in.ok()) {
    session->diagnostics.push_back(
        {path, 0,
         "unreadable or not a regular file: the run's command and exit status are unknown"});
    return {};
  }
  json meta;
  try {
    meta = json::parse(text);
  } catch (const json::parse_error& parse_error) {
    // Its byte counts from 1, at the first byte that does not fit.
    session->diagnostics.push_back(
        {path, parse_error.byte > 0 ? parse_error.byte - 1 : 0,
         "not valid JSON: the run's command and exit status are unknown"});
    return {};
  }
  if (!meta.is_object()) {
    session->diagnostics.push_back(
        {path, 0, "not a JSON object: the run's command and exit status are unknown"});
    return {};
  }
  // Read whole: a version past int's range must still count as newer, not wrap to an old one.
  auto version_field = meta.find("version");
  uint64_t version = version_field != meta.end() && version_field->is_number_unsigned()
                         ? version_field->get<uint64_t>()
                         : 0;
  if (version > static_cast<uint64_t>(kSessionMetaVersion)) {
    return Status::Error(PrintableName(path) +
                         ": session written by a newer gprof-run (session version " +
                         std::to_string(version) + ", this build reads up to " +
                         std::to_string(kSessionMetaVersion) + ")");
  }
  SessionMeta& out = session->meta;
  out.tool_version = PrintableName(Field<std::string>(meta, "tool_version").value_or(""));
  if (auto command = meta.find("command"); command != meta.end() && command->is_array()) {
    for (const auto& arg : *command) {
      if (arg.is_string()) out.command.push_back(PrintableName(arg.get<std::string>()));
    }
  }
  out.root_pid = Field<uint32_t>(meta, "root_pid").value_or(0);
  json start = meta.value("start", json::object());
  out.start_monotonic_ns = Field<uint64_t>(start, "monotonic_ns").value_or(0);
  out.start_realtime_ns = Field<uint64_t>(start, "realtime_ns").value_or(0);
  out.start_boottime_ns = Field<uint64_t>(start, "boottime_ns").value_or(0);
  out.end_monotonic_ns =
      Field<uint64_t>(meta.value("end", json::object()), "monotonic_ns").value_or(0);
  json exit = meta.value("exit", json::object());
  out.exit_code = Field<int>(exit, "code");
  out.exit_signal = Field<int>(exit, "signal");
  // Sessions of gprof-run before "finished" was written: an end time meant the same.
  bool finished = Field<bool>(meta, "finished").value_or(out.end_monotonic_ns != 0);
  if (!finished) {
    out.cut_short = "gprof_run_ended";
    out.cut_short_text =
        "gprof-run ended before the command did (killed?): the record stops there; the "
        "command's end and exit status are unknown";
  } else if (out.exit_signal) {
    const char* name = sigabbrev_np(*out.exit_signal);
    out.cut_short = "killed_by_signal";
    out.cut_short_text = "the command was killed by signal " + std::to_string(*out.exit_signal) +
                         (name != nullptr ? std::string(" (SIG") + name + ")" : "") +
                         ": the record holds what it did until then";
  }
  if (auto stops = meta.find("recording_stopped"); stops != meta.end() && stops->is_array()) {
    for (const auto& entry : *stops) {
      RecordingStop stop;
      stop.file = PrintableName(Field<std::string>(entry, "file").value_or(""));
      stop.time_ns = Field<uint64_t>(entry, "time_ns").value_or(0);
      stop.cause = PrintableName(Field<std::string>(entry, "cause").value_or("write_failed"));
      stop.description = PrintableName(Field<std::string>(entry, "reason").value_or(""));
      if (!stop.file.empty()) session->recording_stops.push_back(std::move(stop));
    }
  }
  json kernel = meta.value("kernel_recording", json::object());
  out.kernel_recording = Field<bool>(kernel, "enabled").value_or(false);
  out.kernel_recording_note = PrintableName(Field<std::string>(kernel, "note").value_or(""));
  out.kernel_stack_min_ns = Field<uint64_t>(kernel, "stack_min_ns").value_or(0);
  if (json window = meta.value("window", json()); window.is_object()) {
    SessionMeta::Window& bounds = out.window.emplace();
    bounds.delay_s = Field<double>(window, "delay_s").value_or(0);
    bounds.duration_s = Field<double>(window, "duration_s").value_or(0);
    bounds.start_monotonic_ns = Field<uint64_t>(window, "start_monotonic_ns").value_or(0);
    bounds.end_monotonic_ns = Field<uint64_t>(window, "end_monotonic_ns").value_or(0);
  }
  if (json size = meta.value("max_size", json()); size.is_object()) {
    SessionMeta::MaxSize& cap = out.max_size.emplace();
    cap.limit_bytes = Field<uint64_t>(size, "limit_bytes").value_or(0);
    cap.used_bytes = Field<uint64_t>(size, "used_bytes").value_or(0);
    cap.stopped_at_monotonic_ns = Field<uint64_t>(size, "stopped_at_monotonic_ns").value_or(0);
    cap.refused_records = Field<uint64_t>(size, "refused_records").value_or(0);
    cap.refused_bytes = Field<uint64_t>(size, "refused_bytes").value_or(0);
  }
  return {};
}

}  // namespace

Expected<Session> ReadSession(const std::string& directory) {
  auto dir = OpenSessionDirectory(directory);
  if (!dir.ok()) return Status::Error(PrintableName(directory) + ": no such session directory");
  return ReadSession(dir->get(), directory);
}

Expected<Session> ReadSession(int dir_fd, const std::string& directory) {
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
  if (listing == nullptr) return Status::Error(shown + ": cannot list: " + strerror(errno));
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
  if (list_error != 0) return Status::Error(shown + ": cannot list: " + strerror(list_error));
  if (!has_meta && !has_kernel && inject_files.empty()) {
    return Status::Error(shown + ": not a gprof-run session (no " + kSessionMetaFile + ", " +
                         kKernelFile + " or " + kInjectFilePrefix + "*" + kRecordingFileSuffix +
                         ")");
  }
  std::sort(inject_files.begin(), inject_files.end());

  Status meta =
      ReadSessionMeta(dir_fd, (fs::path(directory) / kSessionMetaFile).string(), &session);
  if (!meta.ok()) return meta;

  SessionBuilder builder(&session);
  if (has_kernel) {
    builder.ReadKernelFile(dir_fd, kKernelFile, (fs::path(directory) / kKernelFile).string());
  }
  for (const auto& name : inject_files) {
    builder.ReadInjectFile(dir_fd, name, (fs::path(directory) / name).string());
  }
  builder.Finish();
  for (Diagnostic& diagnostic : session.diagnostics)
    diagnostic.file = PrintableName(diagnostic.file);
  return session;
}

}  // namespace gprof::collector
