#include "collector/session/pid_namespaces.h"

#include <cstddef>
#include <cstring>

#include "inject/format/session_format.h"

namespace gprof::collector {
namespace {

// Where each inject record that names a pid or a tid holds it.
std::optional<size_t> TidOffset(uint16_t type) {
  using namespace format;
  switch (type) {
    case kApiCall:
      return offsetof(ApiCallRecord, tid);
    case kThreadName:
      return offsetof(ThreadNameRecord, tid);
    case kDropped:
      return offsetof(DroppedRecord, tid);
    case kCallStack:
      return offsetof(CallStackRecord, tid);
    case kStackCopy:
      return offsetof(StackCopyRecord, tid);
    case kGpuOverhead:
      return offsetof(GpuOverheadRecord, tid);
    case kProfilerThread:
      return offsetof(ProfilerThreadRecord, tid);
    case kNvtxEvent:
      return offsetof(NvtxEventRecord, tid);
    case kNcclEvent:
      return offsetof(NcclEventRecord, tid);
  }
  return std::nullopt;
}

void Store(std::vector<uint8_t>* bytes, size_t offset, uint32_t value) {
  if (offset + sizeof(value) <= bytes->size()) memcpy(bytes->data() + offset, &value, sizeof(value));
}

uint32_t Load(std::span<const uint8_t> bytes, size_t offset) {
  uint32_t value = 0;
  if (offset + sizeof(value) <= bytes.size()) memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

}  // namespace

std::optional<NamespaceTranslation> NamespaceTranslation::For(
    std::span<const uint8_t> bytes, const RecordVector<TaskStart>& task_starts, bool* unmatched) {
  *unmatched = false;
  format::NamespacesRecord record;
  if (!ReadRecord(bytes, &record)) return std::nullopt;
  if (record.pid_namespace == 0 || record.profiler_pid_namespace == 0 ||
      record.pid_namespace == record.profiler_pid_namespace) {
    return std::nullopt;
  }
  NamespaceTranslation translation;
  translation.namespace_pid_ = record.pid;
  // The process: the latest start of a process with that id in that namespace at or before the
  // library wrote this (a namespace's inode and its pids are given again only once they are
  // gone), else the earliest after. Task starts are not sorted yet.
  const TaskStart* process = nullptr;
  auto better = [&](const TaskStart& start) {
    if (process == nullptr) return true;
    bool before = start.time_ns <= record.time_ns, best_before = process->time_ns <= record.time_ns;
    if (before != best_before) return before;
    return before ? start.time_ns > process->time_ns : start.time_ns < process->time_ns;
  };
  for (const TaskStart& start : task_starts) {
    if (!start.is_thread && start.pid_namespace == record.pid_namespace &&
        start.ns_pid == record.pid && better(start)) {
      process = &start;
    }
  }
  if (process == nullptr) {
    *unmatched = true;
    return std::nullopt;
  }
  translation.host_pid_ = process->pid;
  translation.host_ppid_ = process->parent_pid;
  translation.host_tids_[record.pid] = process->pid;
  for (const TaskStart& start : task_starts) {
    // Its threads; a tid given again later (the latest start wins) is rare enough for a process.
    if (start.pid == process->pid && start.pid_namespace == record.pid_namespace &&
        start.ns_tid != 0) {
      translation.host_tids_[start.ns_tid] = start.tid;
    }
  }
  return translation;
}

uint32_t NamespaceTranslation::HostTid(uint32_t namespace_tid) const {
  auto found = host_tids_.find(namespace_tid);
  return found != host_tids_.end() ? found->second : namespace_tid;
}

RecordView NamespaceTranslation::Translate(const RecordView& record,
                                           std::vector<uint8_t>* scratch) const {
  RecordView translated = record;
  translated.writer_pid = host_pid_;
  std::optional<size_t> offset = TidOffset(record.type);
  if (!offset && record.type != format::kProcessInfo) return translated;
  scratch->assign(record.bytes.begin(), record.bytes.end());
  if (record.type == format::kProcessInfo) {
    Store(scratch, offsetof(format::ProcessInfoRecord, pid), host_pid_);
    Store(scratch, offsetof(format::ProcessInfoRecord, ppid), host_ppid_);
  } else {
    Store(scratch, *offset, HostTid(Load(record.bytes, *offset)));
  }
  translated.bytes = std::span<const uint8_t>(scratch->data(), scratch->size());
  return translated;
}

}  // namespace gprof::collector
