#include "collector/analysis/gpu_summary.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "inject/format/cuda_api_roles.h"

namespace gprof::collector {
namespace {

// cudaLaunchKernel, __cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel,
// cuLaunchKernel, cuLaunchKernelEx and their _ptsz forms; not cudaLaunchHostFunc, which runs on
// the host, nor graph launches, whose kernels are many.
bool LaunchesAKernel(std::string_view api) {
  return format::HasCudaApiRole(api, format::kCudaLaunchesKernel);
}

// cudaGraphLaunch, cuGraphLaunch and their _ptsz forms.
bool LaunchesAGraph(std::string_view api) {
  return format::HasCudaApiRole(api, format::kCudaLaunchesGraph);
}

// The runtime's and the driver's calls that begin and end a stream capture (cudaStreamBegin-
// CaptureToGraph too; CUPTI's version suffixes are gone from recorded names, _ptsz is kept).
bool BeginsCapture(std::string_view api) {
  return format::HasCudaApiRole(api, format::kCudaBeginsCapture);
}
bool EndsCapture(std::string_view api) {
  return format::HasCudaApiRole(api, format::kCudaEndsCapture);
}

bool RanAKernel(const GpuCorrelation& correlation, const ApiCall& call) {
  for (const GpuActivity* activity : correlation.ActivitiesOf(call)) {
    if (std::holds_alternative<GpuKernel>(activity->detail)) return true;
  }
  return false;
}

}  // namespace

GpuSummary SummarizeGpu(const Session& session, const GpuCorrelation& correlation) {
  GpuSummary summary;
  std::unordered_map<uint32_t, KernelTotal> by_name;
  for (const GpuActivity& activity : session.gpu_activities) {
    if (const auto* kernel = std::get_if<GpuKernel>(&activity.detail)) {
      ++summary.kernels;
      KernelTotal& total = by_name[kernel->name_index];
      total.name_index = kernel->name_index;
      ++total.count;
      total.total_ns += activity.duration();
    } else if (std::holds_alternative<GpuMemcpy>(activity.detail)) {
      ++summary.copies;
    } else if (std::holds_alternative<GpuMemset>(activity.detail)) {
      ++summary.memsets;
    } else {
      ++summary.synchronizations;
    }
  }
  // A thread's calls come one after another, so in order of entry each capture it began is open
  // until it enters the call that ends it. The record has no stream for CUPTI's calls: a launch
  // without a kernel while its thread captures is taken for a captured one (torch.cuda.graph and
  // torch.compile capture on the launching thread).
  std::unordered_map<uint32_t, uint32_t> captures_open;  // by tid
  for (const ApiCall& call : session.api_calls) {
    const std::string_view api = session.ApiName(call);
    if (BeginsCapture(api)) {
      if (call.return_code == 0) ++captures_open[call.tid];
      continue;
    }
    if (EndsCapture(api)) {
      if (auto open = captures_open.find(call.tid); open != captures_open.end() && open->second > 0)
        --open->second;
      continue;
    }
    if (call.correlation_id == 0) continue;
    if (LaunchesAGraph(api)) {
      ++summary.graph_launches;
      for (const GpuActivity* activity : correlation.ActivitiesOf(call))
        summary.graph_kernels += std::holds_alternative<GpuKernel>(activity->detail);
      continue;
    }
    if (!LaunchesAKernel(api)) continue;
    ++summary.launch_calls;
    if (RanAKernel(correlation, call)) {
      ++summary.launch_calls_with_kernel;
    } else if (auto open = captures_open.find(call.tid);
               open != captures_open.end() && open->second > 0) {
      ++summary.launch_calls_captured;
    }
  }
  for (const auto& [name, total] : by_name) summary.kernels_by_time.push_back(total);
  std::sort(summary.kernels_by_time.begin(), summary.kernels_by_time.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.total_ns > b.total_ns; });
  summary.devices = FindGpuIdle(session, UINT64_MAX).devices;
  return summary;
}

}  // namespace gprof::collector
