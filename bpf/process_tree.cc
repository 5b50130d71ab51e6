// The processes of the tree, as the kernel recorder follows them: tracking a process and its
// threads, and the /proc/PID/maps snapshots that name their user addresses.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "bpf/recorder_state.h"
#include "inject/format/rank_variables.h"
#include "inject/shared/clock.h"

namespace gprof::bpf {
namespace {

// A process's start time (clock ticks after boot, /proc/PID/stat field 22): tells a process from
// a later one that reused its pid. 0 when it is gone.
uint64_t ProcessStartTime(uint32_t pid) {
  std::string stat;
  if (!ReadProcFile("/proc/" + std::to_string(pid) + "/stat", 4096, &stat)) return 0;
  size_t field = stat.rfind(')');  // the name may hold spaces and parentheses
  if (field == std::string::npos) return 0;
  // Fields from 3 (state) on; the start time is the 20th of them.
  const char* cursor = stat.c_str() + field + 1;
  for (int skip = 0; skip < 19; ++skip) {
    cursor = strchr(cursor + 1, ' ');
    if (cursor == nullptr) return 0;
  }
  return strtoull(cursor + 1, nullptr, 10);
}

}  // namespace

// Up to `limit` bytes of a /proc file, cut after the last whole line; false when unreadable.
bool ReadProcFile(const std::string& path, size_t limit, std::string* text) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char buffer[65536];
  bool ok = true;
  while (text->size() < limit) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    text->append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  if (text->size() > limit) {
    size_t last_line = text->rfind('\n', limit - 1);
    text->resize(last_line == std::string::npos ? 0 : last_line + 1);
  }
  return ok;
}

void KernelRecorder::State::NoteProcess(uint32_t pid) {
  if (processes[pid].alive && !processes[pid].hidden) maps_due.insert(pid);
}

bool KernelRecorder::State::StartThreads(uint32_t pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) return false;
  int fd = bpf_map__fd(skel->maps.threads);
  while (const dirent* task = readdir(tasks)) {
    char* end = nullptr;
    unsigned long tid = strtoul(task->d_name, &end, 10);
    if (end == task->d_name || *end != '\0' || tid == 0) continue;
    uint32_t key = static_cast<uint32_t>(tid);
    gprof_thread_state fresh{};
    fresh.offcpu.pid = fresh.syscall.pid = pid;
    if (bpf_map_update_elem(fd, &key, &fresh, BPF_NOEXIST) != 0 && errno != EEXIST) {
      int error = errno;
      closedir(tasks);
      errno = error;
      return false;
    }
  }
  closedir(tasks);
  return true;
}

void KernelRecorder::State::SnapshotMaps(uint32_t pid) {
  std::string text;
  if (!WriteMaps(pid, &text, false)) return;
  maps_followups[pid] = {MonotonicNs() + kMapsFollowupNs[0], std::size(kMapsFollowupNs)};
  if (python) python->OnMaps(pid, text);
  if (cuda) cuda->OnMaps(pid, text);
}

void KernelRecorder::State::FollowUpMaps(uint64_t now) {
  for (auto it = maps_followups.begin(); it != maps_followups.end();) {
    auto& [pid, due] = *it;
    if (now < due.first) {
      ++it;
      continue;
    }
    std::string text;
    uint64_t hash = processes[pid].maps_hash;
    bool read = WriteMaps(pid, &text, true);
    if (read && python && processes[pid].maps_hash != hash) python->OnMaps(pid, text);
    if (read && cuda && processes[pid].maps_hash != hash) cuda->OnMaps(pid, text);
    size_t done = std::size(kMapsFollowupNs) - static_cast<size_t>(due.second) + 1;
    if (!read || --due.second <= 0) {
      it = maps_followups.erase(it);
      continue;
    }
    due.first = now + kMapsFollowupNs[done] - kMapsFollowupNs[done - 1];
    ++it;
  }
}

uint64_t KernelRecorder::State::NextFollowUpNs() const {
  uint64_t next = UINT64_MAX;
  for (const auto& [pid, due] : maps_followups) next = std::min(next, due.first);
  return next;
}

bool KernelRecorder::State::WriteMaps(uint32_t pid, std::string* text, bool if_changed) {
  TreeProcess& process = processes[pid];
  if (!process.alive || process.hidden) return false;
  uint64_t start_time = ProcessStartTime(pid);
  if (start_time == 0) return false;
  if (process.start_time == 0) process.start_time = start_time;
  if (process.start_time != start_time) {
    process.alive = false;
    return false;
  }
  uint64_t now = MonotonicNs();
  if (!ReadProcFile("/proc/" + std::to_string(pid) + "/maps", kMaxMapsBytes, text)) return false;
  uint64_t hash = std::hash<std::string>{}(*text);
  if (if_changed && hash == process.maps_hash) return true;
  process.maps_hash = hash;
  gprof_process_maps record{};
  record.hdr.size = static_cast<uint32_t>(sizeof(record) + text->size());
  record.hdr.type = GPROF_REC_PROCESS_MAPS;
  record.pid = pid;
  record.text_len = static_cast<uint32_t>(text->size());
  record.time_ns = now;
  AppendWithTail(record, text->data(), text->size());
  return true;
}

void KernelRecorder::State::SnapshotDueMaps() {
  for (uint32_t pid : maps_due) {
    SnapshotMaps(pid);
    if (launch_variables_due.contains(pid)) WriteLaunchVariables(pid);
  }
  maps_due.clear();
  launch_variables_due.clear();
}

void KernelRecorder::State::WriteLaunchVariables(uint32_t pid) {
  TreeProcess& process = processes[pid];
  if (!process.alive || process.hidden) return;
  uint64_t start_time = ProcessStartTime(pid);
  if (start_time == 0 || (process.start_time != 0 && process.start_time != start_time)) return;
  uint64_t now = MonotonicNs();
  int fd = open(("/proc/" + std::to_string(pid) + "/environ").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  // Strings are looked at one by one as they come; the buffer holds at most one unfinished one.
  std::string kept;
  std::string pending;
  char buffer[65536];
  uint64_t total = 0;
  auto keep = [&](const std::string& entry) {
    size_t equals = entry.find('=');
    if (equals == std::string::npos || entry.size() - equals - 1 > format::kMaxRankValueBytes)
      return;
    std::string_view name(entry.data(), equals);
    for (const format::RankVariables& launcher : format::kRankVariables) {
      for (const char* variable : {launcher.rank, launcher.local_rank, launcher.world_size}) {
        if (variable != nullptr && name == variable) kept.append(entry).push_back('\0');
      }
    }
  };
  // An environment is at most a quarter of the stack limit; past 16 MiB nothing more is read.
  while (total < (16u << 20)) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    total += static_cast<uint64_t>(got);
    for (ssize_t i = 0; i < got; ++i) {
      if (buffer[i] != '\0') {
        if (pending.size() < 256) pending.push_back(buffer[i]);  // longer: no variable of ours
        continue;
      }
      keep(pending);
      pending.clear();
    }
  }
  close(fd);
  // Read after the process was found: the pid must still name it.
  if (ProcessStartTime(pid) != start_time) return;
  gprof_launch_variables record{};
  record.hdr.size = static_cast<uint32_t>(sizeof(record) + kept.size());
  record.hdr.type = GPROF_REC_LAUNCH_VARIABLES;
  record.pid = pid;
  record.text_len = static_cast<uint32_t>(kept.size());
  record.time_ns = now;
  AppendWithTail(record, kept.data(), kept.size());
}

Status KernelRecorder::Track(int pid) try {
  const std::string what = "track pid " + std::to_string(pid) + ": ";
  if (state_->finished)
    return Status::Error(StatusCode::kInvalid, what + "the recorder is finished");
  if (pid <= 0 || pid == getpid()) {
    return Status::Error(StatusCode::kInvalid, what + "not a process the recorder can follow");
  }
  uint32_t key = static_cast<uint32_t>(pid);
  uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(state_->skel->maps.tracked), &key, &one, BPF_ANY) != 0) {
    return Status::FromErrno(errno, what + strerror(errno));
  }
  // Its threads running now; those it starts from here on get their entry at their start.
  if (!state_->StartThreads(key)) return Status::FromErrno(errno, what + strerror(errno));
  state_->SnapshotMaps(key);
  return {};
} catch (...) {
  return Status::Error(StatusCode::kOutOfMemory, "track: out of memory");
}

std::vector<uint32_t> KernelRecorder::RunningProcesses() const {
  std::vector<uint32_t> running;
  for (const auto& [pid, process] : state_->processes) {
    if (!process.alive) continue;
    uint64_t start_time = ProcessStartTime(pid);
    if (start_time != 0 && (process.start_time == 0 || process.start_time == start_time)) {
      running.push_back(pid);
    }
  }
  return running;
}

}  // namespace gprof::bpf
