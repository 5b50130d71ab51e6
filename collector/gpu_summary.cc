#include "gpu_summary.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace gprof::collector {
namespace {

// cudaLaunchKernel, __cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel,
// cuLaunchKernel, cuLaunchKernelEx and their _ptsz forms; not cudaLaunchHostFunc, which runs on
// the host, nor graph launches, whose kernels are many.
bool LaunchesAKernel(std::string_view api) {
  return (api.find("LaunchKernel") != std::string_view::npos ||
          api.find("LaunchCooperativeKernel") != std::string_view::npos);
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
  for (const ApiCall& call : session.api_calls) {
    if (call.correlation_id == 0 || !LaunchesAKernel(session.ApiName(call))) continue;
    ++summary.launch_calls;
    for (const GpuActivity* activity : correlation.ActivitiesOf(call)) {
      if (std::holds_alternative<GpuKernel>(activity->detail)) {
        ++summary.launch_calls_with_kernel;
        break;
      }
    }
  }
  for (const auto& [name, total] : by_name) summary.kernels_by_time.push_back(total);
  std::sort(summary.kernels_by_time.begin(), summary.kernels_by_time.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.total_ns > b.total_ns; });
  return summary;
}

}  // namespace gprof::collector
