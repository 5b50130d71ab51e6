#include "collector/session/thread_sightings.h"

namespace gprof::collector {

void ThreadSightings::SeeName(uint32_t tid, uint64_t time_ns, std::string_view name) {
  NameSighting& seen = names_[tid];
  if (name.empty() || time_ns < seen.time_ns) return;
  seen = NameSighting{time_ns, PrintableName(name)};
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
