#include "collector/writers/words/gpu_names.h"

#include <algorithm>
#include <iterator>

namespace gprof::collector {

const char* MemcpyKindName(uint8_t copy_kind) {
  static constexpr const char* kNames[] = {"unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                           "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return copy_kind < std::size(kNames) ? kNames[copy_kind] : "unknown";
}

const char* MemoryKindName(uint8_t memory_kind) {
  static constexpr const char* kNames[] = {"unknown",       "pageable",      "pinned",
                                           "device",        "array",         "managed",
                                           "device static", "managed static"};
  return memory_kind < std::size(kNames) ? kNames[memory_kind] : "unknown";
}

const char* SyncTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {"unknown", "event synchronize", "stream wait event",
                                           "stream synchronize", "context synchronize"};
  return type < std::size(kNames) ? kNames[type] : "unknown";
}

namespace {

// The runtime call that makes the host wait this way.
const char* SyncWaitName(uint32_t type) {
  static constexpr const char* kNames[] = {"GPU synchronization wait", "cudaEventSynchronize wait",
                                           "cudaStreamWaitEvent wait", "cudaStreamSynchronize wait",
                                           "cudaDeviceSynchronize wait"};
  return type < std::size(kNames) ? kNames[type] : kNames[0];
}

struct NameOf {
  const Session& session;
  std::string operator()(const GpuKernel& kernel) const { return session.KernelName(kernel); }
  std::string operator()(const GpuMemcpy& copy) const {
    return std::string("Memcpy ") + MemcpyKindName(copy.copy_kind);
  }
  std::string operator()(const GpuMemset&) const { return "Memset"; }
  std::string operator()(const GpuSync& sync) const { return SyncWaitName(sync.type); }
};

}  // namespace

std::string GpuActivityName(const Session& session, const GpuActivity& activity) {
  return std::visit(NameOf{session}, activity.detail);
}

std::string CuptiVersionText(uint32_t cupti_version) {
  // From CUDA 13 on, the API version reads xxyyzz: toolkit major, minor, CUPTI update.
  if (cupti_version >= 100000) {
    return "CUPTI " + std::to_string(cupti_version / 10000) + "." +
           std::to_string(cupti_version / 100 % 100) + " (API version " +
           std::to_string(cupti_version) + ")";
  }
  return "CUPTI API version " + std::to_string(cupti_version);
}

std::string GpuDeviceName(const GpuDevice& device, const std::vector<GpuDevice>& all) {
  std::string name = "GPU " + std::to_string(device.ordinal);
  auto pid_list = [&] {
    std::string text;
    for (uint32_t pid : device.pids) text += (text.empty() ? "" : ", ") + std::to_string(pid);
    return text;
  };
  if (!device.uuid.empty()) {
    if (device.pids.size() > 1) name += " (" + device.uuid + ", pids " + pid_list() + ")";
    return name;
  }
  const bool ordinal_shared = std::any_of(all.begin(), all.end(), [&](const GpuDevice& other) {
    return &other != &device && other.ordinal == device.ordinal;
  });
  if (ordinal_shared) name += " of pid " + pid_list();
  return name;
}

}  // namespace gprof::collector
