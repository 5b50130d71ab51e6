// The GPU lane in numbers: what ran, how long per kernel, how long each GPU ran nothing, and
// whether every kernel launch the process made has the kernel it launched (a check on the capture
// as much as a figure).
#pragma once

#include <cstdint>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct KernelTotal {
  uint32_t name_index = 0;  // into Session::kernel_names
  uint64_t count = 0;
  uint64_t total_ns = 0;
};

struct GpuSummary {
  uint64_t kernels = 0;
  uint64_t copies = 0;
  uint64_t memsets = 0;
  uint64_t synchronizations = 0;
  uint64_t launch_calls = 0;  // API calls that launch a kernel, seen through CUPTI
  uint64_t launch_calls_with_kernel = 0;
  // Launches without a kernel made while their thread was capturing a stream into a CUDA graph:
  // they record a node of the graph, and run only when the graph is launched.
  uint64_t launch_calls_captured = 0;
  uint64_t graph_launches = 0;  // cudaGraphLaunch and cuGraphLaunch calls, seen through CUPTI
  uint64_t graph_kernels = 0;   // the kernels they ran (by correlation id, as CUPTI gives them)
  std::vector<KernelTotal> kernels_by_time;  // longest total first
  std::vector<GpuDevice> devices;            // each GPU's busy and idle time
};

GpuSummary SummarizeGpu(const Session& session, const GpuCorrelation& correlation);

}  // namespace gprof::collector
