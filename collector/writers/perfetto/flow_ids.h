// The numbering of the trace's flow arrows, shared by the writers that draw them: the time-ordered
// merge (timeline_writer.h: wakes and launches) and the diagnosis (diagnosis_tracks.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collector/model/model.h"

namespace gprof::collector::perfetto {

// Flow ids, small so that their varints are short, in three ranges that never meet: wake arrows by
// off-CPU interval from 1, then launch arrows (an API call to the GPU work it caused) by GPU
// activity, then the diagnosis's arrows (a waiter to what let it go).
struct FlowIds {
  explicit FlowIds(const Session& session)
      : first_launch(session.off_cpu.size() + 1),
        first_diagnosis(first_launch + session.gpu_activities.size()) {}
  static uint64_t Wake(size_t off_cpu_index) { return off_cpu_index + 1; }
  uint64_t Launch(size_t gpu_index) const { return first_launch + gpu_index; }
  uint64_t first_launch;
  uint64_t first_diagnosis;
};

}  // namespace gprof::collector::perfetto
