// The injected library's ids inside a PID namespace of their own (a container the command
// started: `unshare -p`, bwrap, apptainer), made the kernel's. getpid() and gettid() there answer
// the namespace's numbers ("pid 1"), which the library writes, while the kernel recorder writes
// the initial namespace's. The kernel recorder records, for each task the tree starts, its ids in
// its own namespace and that namespace's inode (gprof_task_new); the library names its namespace
// first in its file (format::NamespacesRecord). The reader rewrites every pid and tid of such a
// file with the kernel's before it decodes the file's records, so two containers' "pid 1" are two
// processes, and CUDA calls land on the threads whose kernel waits the kernel recorded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"

namespace gprof::collector {

// One inject file's translation: the process's tids in its namespace -> the kernel's.
class NamespaceTranslation {
 public:
  // From the NamespacesRecord in `bytes` and the kernel's task starts: nothing (no translation)
  // when the process shares gprof-run's PID namespace or the record does not read; `*unmatched`
  // is set when it does not, and the kernel recorded no such process (no kernel recording).
  static std::optional<NamespaceTranslation> For(std::span<const uint8_t> bytes,
                                                 const RecordVector<TaskStart>& task_starts,
                                                 bool* unmatched);

  uint32_t host_pid() const { return host_pid_; }
  uint32_t namespace_pid() const { return namespace_pid_; }
  // `record` with its pids and tids the kernel's: its bytes copied into `scratch` when changed.
  RecordView Translate(const RecordView& record, std::vector<uint8_t>* scratch) const;

 private:
  uint32_t HostTid(uint32_t namespace_tid) const;

  uint32_t namespace_pid_ = 0;
  uint32_t host_pid_ = 0;
  uint32_t host_ppid_ = 0;
  std::unordered_map<uint32_t, uint32_t> host_tids_;  // namespace tid -> kernel tid
};

}  // namespace gprof::collector
