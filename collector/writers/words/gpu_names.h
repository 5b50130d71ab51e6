// Names of the GPU timeline's CUPTI values, shared by the trace and the report so that both call
// a thing the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/model/model.h"

namespace gprof::collector {

// CUpti_ActivityMemcpyKind: "HtoD", "DtoH", "DtoD", ...; "unknown" for anything else.
const char* MemcpyKindName(uint8_t copy_kind);
// CUpti_ActivityMemoryKind: "pageable", "pinned", "device", ...
const char* MemoryKindName(uint8_t memory_kind);
// CUpti_ActivitySynchronizationType: "stream synchronize", "event synchronize", ...
const char* SyncTypeName(uint32_t type);

// What the activity is called on its slice: the kernel's demangled name, "Memcpy HtoD",
// "Memset", or the host's wait ("cudaStreamSynchronize wait").
std::string GpuActivityName(const Session& session, const GpuActivity& activity);

// "CUPTI 13.0 (API version 130001)"; before CUDA 13, "CUPTI API version 28".
std::string CuptiVersionText(uint32_t cupti_version);

// "GPU 0"; with its UUID when processes share it ("GPU 0 (GPU-5c1f..., pids 10, 11)"); with its
// process when another process's GPU has the same ordinal and no UUID tells them apart
// ("GPU 0 of pid 10").
std::string GpuDeviceName(const GpuDevice& device, const std::vector<GpuDevice>& all);

}  // namespace gprof::collector
