// The summary tables users of `nsys stats` expect: CUDA API calls by name (count, total, median,
// max, and the time their threads were blocked inside them) and GPU kernels by name (count, total,
// median, max), longest total first. The text shows the first ten, report.json all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

struct ApiCallRow {
  std::string name;
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t median_ns = 0;  // of an even count, the lower of the two middle calls
  uint64_t max_ns = 0;
  // Asleep inside the calls (off CPU and not runnable): what the calls cost their threads beyond
  // the CPU. A call nested in another (cudaLaunchKernel's cuLaunchKernel) counts in both rows.
  uint64_t blocked_ns = 0;
};

struct KernelRow {
  std::string name;  // demangled, in full
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t median_ns = 0;
  uint64_t max_ns = 0;
};

std::vector<ApiCallRow> ApiCallTable(const Session& session);
std::vector<KernelRow> KernelTable(const Session& session);

}  // namespace gprof::collector
