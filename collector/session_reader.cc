#include "session_reader.h"

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
#include "kernel_events.h"
#include "session_format.h"

namespace gprof::collector {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The latest name of each thread, from whichever source saw it last.
struct NameSighting {
  uint64_t time_ns = 0;
  std::string name;
};
using ThreadNames = std::unordered_map<uint32_t, NameSighting>;

void SeeName(ThreadNames* names, uint32_t tid, uint64_t time_ns, std::string_view name) {
  auto& seen = (*names)[tid];
  if (name.empty() || time_ns < seen.time_ns) return;
  seen = NameSighting{time_ns, std::string(name)};
}

std::string_view FixedString(const char* text, size_t capacity) {
  return {text, strnlen(text, capacity)};
}

std::vector<std::string> SplitNul(std::string_view text) {
  std::vector<std::string> parts;
  while (!text.empty()) {
    size_t end = text.find('\0');
    parts.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return parts;
}

std::vector<Mapping> ParseMaps(std::string_view text) {
  std::vector<Mapping> maps;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    Mapping mapping;
    unsigned long long start = 0, end = 0, offset = 0;
    char perms[8] = {};
    int path_at = 0;
    if (sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &offset,
               &path_at) < 4) {
      continue;
    }
    mapping.start = start;
    mapping.end = end;
    mapping.file_offset = offset;
    mapping.perms = perms;
    if (path_at > 0 && static_cast<size_t>(path_at) < line.size())
      mapping.path = line.substr(path_at);
    maps.push_back(std::move(mapping));
  }
  std::sort(maps.begin(), maps.end(),
            [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
  return maps;
}

class SessionBuilder {
 public:
  explicit SessionBuilder(Session* session) : session_(session) {}

  void ReadInjectFile(const std::string& path) {
    std::unordered_map<uint32_t, uint32_t> api_index;  // this file's api_id -> Session::api_names
    CaptureRecordDecoder capture(session_, &kernel_name_index_, path);
    auto visit = [&](const RecordView& record) {
      if (!capture.Decode(record)) DecodeInject(record, record.writer_pid, &api_index, path);
    };
    auto summary = ReadChunkFile(path, visit, &session_->diagnostics);
    if (!summary.ok()) session_->diagnostics.push_back({path, 0, summary.status().message()});
    capture.Finish();
  }

  void ReadKernelFile(const std::string& path) {
    auto summary = ReadChunkFile(
        path, [&](const RecordView& record) { DecodeKernel(record, path); },
        &session_->diagnostics);
    if (!summary.ok()) session_->diagnostics.push_back({path, 0, summary.status().message()});
  }

  void Finish();

 private:
  void Malformed(const std::string& path, const RecordView& record, const char* what) {
    session_->diagnostics.push_back(
        {path, record.chunk_offset, std::string("malformed ") + what + " record skipped"});
  }
  void DecodeInject(const RecordView& record, uint32_t pid,
                    std::unordered_map<uint32_t, uint32_t>* api_index, const std::string& path);
  void DecodeKernel(const RecordView& record, const std::string& path);
  uint32_t InternApiName(std::string_view name);

  Session* session_;
  ThreadNames names_;
  std::unordered_map<std::string, uint32_t> api_name_index_;
  KernelNameIndex kernel_name_index_;
  std::unordered_map<uint32_t, uint32_t> thread_pid_;
};

uint32_t SessionBuilder::InternApiName(std::string_view name) {
  auto [it, inserted] = api_name_index_.try_emplace(std::string(name), session_->api_names.size());
  if (inserted) session_->api_names.emplace_back(name);
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
        process.exe = std::string(tail.substr(0, info.exe_len));
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
      thread_pid_.try_emplace(call.tid, pid);
      return;
    }
    case kThreadName: {
      ThreadNameRecord name;
      if (!ReadRecord(record.bytes, &name)) return Malformed(path, record, "thread name");
      SeeName(&names_, name.tid, name.time_ns, FixedString(name.name, sizeof(name.name)));
      thread_pid_.try_emplace(name.tid, pid);
      return;
    }
    case kMapsSnapshot: {
      MapsSnapshotRecord maps;
      if (!ReadRecord(record.bytes, &maps)) return Malformed(path, record, "maps");
      auto text = TrailingText<MapsSnapshotRecord>(record.bytes, maps.text_len);
      if (text.size() != maps.text_len) return Malformed(path, record, "maps");
      session_->processes[pid].maps = ParseMaps(text);
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
      session_->messages.push_back("pid " + std::to_string(pid) + ": " + std::string(text));
      return;
    }
    default:
      return;  // a newer writer's record: skipped by design
  }
}

const char* KernelRecordName(uint32_t type) {
  switch (type) {
    case GPROF_REC_OFFCPU:
      return "off-CPU intervals";
    case GPROF_REC_FUTEX:
      return "futex calls";
    case GPROF_REC_TASK_NEW:
      return "thread starts";
    case GPROF_REC_TASK_RENAME:
      return "thread renames";
    case GPROF_REC_TASK_EXIT:
      return "thread exits";
    default:
      return "records";
  }
}

const char* LostKindName(uint32_t kind) {
  switch (kind) {
    case GPROF_LOST_RINGBUF:
      return "ring buffer full";
    case GPROF_LOST_STACK:
      return "kernel stack unavailable";
    case GPROF_LOST_PENDING:
      return "per-thread state map full";
    case GPROF_LOST_TRACKED:
      return "process map full, a child process not followed";
    case GPROF_LOST_MALFORMED:
      return "malformed ring-buffer sample";
    case GPROF_LOST_WRITE:
      return "kernel.gpr could not be written";
    default:
      return "lost";
  }
}

void SessionBuilder::DecodeKernel(const RecordView& record, const std::string& path) {
  switch (record.type) {
    case GPROF_REC_OFFCPU: {
      gprof_offcpu event;
      if (!ReadRecord(record.bytes, &event)) return Malformed(path, record, "off-CPU");
      if (event.end_ns < event.start_ns)
        return Malformed(path, record, "off-CPU (end before start)");
      OffCpuInterval interval;
      interval.start_ns = event.start_ns;
      interval.end_ns = event.end_ns;
      interval.wake_ns = event.wake_ns;
      interval.pid = event.pid;
      interval.tid = event.tid;
      interval.waker_pid = event.waker_pid;
      interval.waker_tid = event.waker_tid;
      interval.kstack_id = event.kstack_id;
      interval.waker_kstack_id = event.waker_kstack_id;
      interval.raw_state = event.state;
      interval.cpu = event.cpu;
      interval.flags = event.flags;
      interval.waker_comm = std::string(FixedString(event.waker_comm, sizeof(event.waker_comm)));
      session_->off_cpu.push_back(std::move(interval));
      thread_pid_.try_emplace(event.tid, event.pid);
      return;
    }
    case GPROF_REC_FUTEX: {
      gprof_futex event;
      if (!ReadRecord(record.bytes, &event)) return Malformed(path, record, "futex");
      if (event.end_ns < event.start_ns) return Malformed(path, record, "futex (end before start)");
      session_->futex_calls.push_back(
          FutexCall{event.start_ns, event.end_ns, event.uaddr, event.uaddr2, event.pid, event.tid,
                    event.op, event.val, event.val3, event.timeout_ns, event.ret, event.flags});
      thread_pid_.try_emplace(event.tid, event.pid);
      return;
    }
    case GPROF_REC_TASK_NEW: {
      gprof_task_new event;
      if (!ReadRecord(record.bytes, &event)) return Malformed(path, record, "thread start");
      bool is_thread = (event.flags & GPROF_TASK_NEW_THREAD) != 0;
      session_->task_starts.push_back(TaskStart{event.time_ns, event.pid, event.tid,
                                                event.parent_pid, event.parent_tid,
                                                event.parent_kstack_id, is_thread});
      SeeName(&names_, event.tid, event.time_ns, FixedString(event.comm, sizeof(event.comm)));
      thread_pid_[event.tid] = event.pid;
      if (!is_thread) {
        Process& process = session_->processes[event.pid];
        process.pid = event.pid;
        if (process.ppid == 0) process.ppid = event.parent_pid;
      }
      return;
    }
    case GPROF_REC_TASK_RENAME: {
      gprof_task_rename event;
      if (!ReadRecord(record.bytes, &event)) return Malformed(path, record, "thread rename");
      SeeName(&names_, event.tid, event.time_ns, FixedString(event.comm, sizeof(event.comm)));
      thread_pid_.try_emplace(event.tid, event.pid);
      return;
    }
    case GPROF_REC_TASK_EXIT: {
      gprof_task_exit event;
      if (!ReadRecord(record.bytes, &event)) return Malformed(path, record, "thread exit");
      Thread& thread = session_->threads[event.tid];
      thread.tid = event.tid;
      thread.pid = event.pid;
      thread.exit_ns = event.time_ns;
      thread_pid_.try_emplace(event.tid, event.pid);
      return;
    }
    case GPROF_REC_KERNEL_STACK: {
      gprof_kernel_stack stack;
      if (!ReadRecord(record.bytes, &stack)) return Malformed(path, record, "kernel stack");
      uint64_t frames_bytes = uint64_t{stack.depth} * sizeof(uint64_t);
      if (stack.depth > GPROF_MAX_STACK_DEPTH ||
          record.bytes.size() - sizeof(stack) < frames_bytes) {
        return Malformed(path, record, "kernel stack");
      }
      std::vector<uint64_t> ips(stack.depth);
      memcpy(ips.data(), record.bytes.data() + sizeof(stack), frames_bytes);
      session_->kernel_stacks[stack.stack_id] = std::move(ips);
      return;
    }
    case GPROF_REC_KERNEL_SYMBOL: {
      gprof_kernel_symbol symbol;
      if (!ReadRecord(record.bytes, &symbol)) return Malformed(path, record, "kernel symbol");
      auto name = TrailingText<gprof_kernel_symbol>(record.bytes, symbol.name_len);
      if (name.size() != symbol.name_len) return Malformed(path, record, "kernel symbol");
      char offset[24];
      snprintf(offset, sizeof(offset), "+0x%x", symbol.offset);
      session_->kernel_symbols[symbol.address] = std::string(name) + offset;
      return;
    }
    case GPROF_REC_LOST: {
      gprof_lost lost;
      if (!ReadRecord(record.bytes, &lost)) return Malformed(path, record, "lost-events");
      session_->lost.push_back(LostEvents{std::string("kernel ") +
                                              KernelRecordName(lost.record_type) + ": " +
                                              LostKindName(lost.kind),
                                          lost.count});
      return;
    }
    default:
      return;
  }
}

void SessionBuilder::Finish() {
  auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
  std::sort(session_->api_calls.begin(), session_->api_calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.enter_ns < b.enter_ns; });
  std::sort(session_->off_cpu.begin(), session_->off_cpu.end(), by_start);
  std::sort(session_->futex_calls.begin(), session_->futex_calls.end(), by_start);
  std::sort(session_->task_starts.begin(), session_->task_starts.end(),
            [](const TaskStart& a, const TaskStart& b) { return a.time_ns < b.time_ns; });
  std::sort(session_->gpu_activities.begin(), session_->gpu_activities.end(), by_start);

  for (const auto& [tid, pid] : thread_pid_) {
    Thread& thread = session_->threads[tid];
    thread.tid = tid;
    if (thread.pid == 0) thread.pid = pid;
  }
  for (auto& [tid, thread] : session_->threads) {
    auto name = names_.find(tid);
    if (name != names_.end()) thread.name = name->second.name;
    Process& process = session_->processes[thread.pid];
    process.pid = thread.pid;
  }
  for (const auto& [pid, process] : session_->processes) {
    if (process.dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"CUDA call records of pid " + std::to_string(pid) + " (thread buffer full)",
                     process.dropped_records});
    }
    if (process.gpu_dropped_records > 0) {
      session_->lost.push_back(
          LostEvents{"GPU activity records of pid " + std::to_string(pid) + " (CUPTI buffers full)",
                     process.gpu_dropped_records});
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
  } else {
    if (it->is_number_integer()) return it->get<T>();
  }
  return std::nullopt;
}

Status ReadSessionMeta(const std::string& path, Session* session) {
  std::ifstream in(path);
  if (!in) {
    session->diagnostics.push_back(
        {path, 0, "missing: the run's command and exit status are unknown"});
    return {};
  }
  std::stringstream text;
  text << in.rdbuf();
  json meta = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) {
    session->diagnostics.push_back(
        {path, 0, "not valid JSON: the run's command and exit status are unknown"});
    return {};
  }
  int version = Field<int>(meta, "version").value_or(0);
  if (version > kSessionMetaVersion) {
    return Status::Error(path + ": session written by a newer gprof-run (session version " +
                         std::to_string(version) + ", this build reads up to " +
                         std::to_string(kSessionMetaVersion) + ")");
  }
  SessionMeta& out = session->meta;
  out.tool_version = Field<std::string>(meta, "tool_version").value_or("");
  if (auto command = meta.find("command"); command != meta.end() && command->is_array()) {
    for (const auto& arg : *command) {
      if (arg.is_string()) out.command.push_back(arg.get<std::string>());
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
  json kernel = meta.value("kernel_recording", json::object());
  out.kernel_recording = Field<bool>(kernel, "enabled").value_or(false);
  out.kernel_recording_note = Field<std::string>(kernel, "note").value_or("");
  return {};
}

}  // namespace

Expected<Session> ReadSession(const std::string& directory) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    return Status::Error(directory + ": no such session directory");
  }
  Session session;
  session.directory = directory;

  std::vector<std::string> inject_files;
  bool has_meta = false, has_kernel = false;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    std::string name = entry.path().filename().string();
    if (name == kSessionMetaFile) has_meta = true;
    if (name == kKernelFile) has_kernel = true;
    if (name.starts_with(kInjectFilePrefix) && name.ends_with(kRecordingFileSuffix)) {
      inject_files.push_back(entry.path().string());
    }
  }
  if (error) return Status::Error(directory + ": cannot list: " + error.message());
  if (!has_meta && !has_kernel && inject_files.empty()) {
    return Status::Error(directory + ": not a gprof-run session (no " + kSessionMetaFile + ", " +
                         kKernelFile + " or " + kInjectFilePrefix + "*" + kRecordingFileSuffix +
                         ")");
  }
  std::sort(inject_files.begin(), inject_files.end());

  Status meta = ReadSessionMeta((fs::path(directory) / kSessionMetaFile).string(), &session);
  if (!meta.ok()) return meta;

  SessionBuilder builder(&session);
  if (has_kernel) builder.ReadKernelFile((fs::path(directory) / kKernelFile).string());
  for (const auto& path : inject_files) builder.ReadInjectFile(path);
  builder.Finish();
  return session;
}

}  // namespace gprof::collector
