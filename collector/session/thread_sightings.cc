#include "collector/session/thread_sightings.h"

#include <algorithm>

namespace gprof::collector {

void ThreadSightings::SeeName(uint32_t tid, uint64_t time_ns, std::string_view name) {
  NameSighting& seen = names_[tid];
  if (name.empty() || time_ns < seen.time_ns) return;
  seen = NameSighting{time_ns, PrintableName(name)};
}

void ThreadSightings::SeeKernelName(uint32_t tid, uint64_t time_ns, std::string_view comm) {
  SeeName(tid, time_ns, comm);
  if (comm.empty()) return;
  kernel_names_[tid].push_back(KernelName{time_ns, PrintableName(comm)});
}

void ThreadSightings::NameWakersInTree(Session* session) {
  for (auto& [tid, names] : kernel_names_) {
    std::stable_sort(names.begin(), names.end(), [](const KernelName& a, const KernelName& b) {
      return a.time_ns < b.time_ns;
    });
  }
  for (OffCpuInterval& interval : session->off_cpu) {
    if (interval.waker_tid == 0 || interval.waker_comm != 0) continue;
    auto found = kernel_names_.find(interval.waker_tid);
    if (found == kernel_names_.end()) continue;
    std::vector<KernelName>& names = found->second;
    // The name it had by then; the first, if the wakeup predates every record of it (a thread
    // that was running when the recording started is named only by its next rename).
    auto by_then = std::upper_bound(
        names.begin(), names.end(), interval.wake_ns,
        [](uint64_t time_ns, const KernelName& name) { return time_ns < name.time_ns; });
    KernelName& name = by_then == names.begin() ? names.front() : *std::prev(by_then);
    if (name.comm_index == UINT32_MAX) name.comm_index = session->CommIndex(name.comm);
    interval.waker_comm = name.comm_index;
  }
}

void ThreadSightings::ApplyTo(Session* session) const {
  for (const auto& [tid, pid] : pids_) {
    Thread& thread = session->threads[tid];
    thread.tid = tid;
    if (thread.pid == 0) thread.pid = pid;
  }
  for (auto& [tid, thread] : session->threads) {
    auto name = names_.find(tid);
    if (name != names_.end()) thread.name = name->second.name;
    session->processes[thread.pid].pid = thread.pid;
  }
}

}  // namespace gprof::collector
