#include "inject/gpu_record_encoder.h"

#include <cstdlib>
#include <cstring>

#include "inject/cupti_tracer.h"
#include "inject/format/session_format.h"

namespace gprof::inject {
namespace {

template <typename Activity>
format::GpuPlacement Placement(const Activity& activity) {
  format::GpuPlacement placement{};
  placement.start_ns = activity.start;
  placement.end_ns = activity.end;
  placement.correlation_id = activity.correlationId;
  placement.graph_node_id = activity.graphNodeId;
  placement.device_id = activity.deviceId;
  placement.context_id = activity.contextId;
  placement.stream_id = activity.streamId;
  placement.graph_id = activity.graphId;
  return placement;
}

format::GpuKernelRecord KernelRecord(const CUpti_ActivityKernel10& kernel, uint32_t name_id) {
  auto record = format::MakeRecord<format::GpuKernelRecord>(format::kGpuKernel);
  record.placement = Placement(kernel);
  record.grid[0] = kernel.gridX;
  record.grid[1] = kernel.gridY;
  record.grid[2] = kernel.gridZ;
  record.block[0] = kernel.blockX;
  record.block[1] = kernel.blockY;
  record.block[2] = kernel.blockZ;
  record.name_id = name_id;
  record.shared_memory_bytes =
      static_cast<uint32_t>(kernel.staticSharedMemory + kernel.dynamicSharedMemory);
  record.registers_per_thread = kernel.registersPerThread;
  return record;
}

format::GpuMemcpyRecord MemcpyRecord(const CUpti_ActivityMemcpy6& copy) {
  auto record = format::MakeRecord<format::GpuMemcpyRecord>(format::kGpuMemcpy);
  record.placement = Placement(copy);
  record.bytes = copy.bytes;
  record.copy_kind = copy.copyKind;
  record.src_kind = copy.srcKind;
  record.dst_kind = copy.dstKind;
  record.async = (copy.flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0;
  return record;
}

format::GpuMemsetRecord MemsetRecord(const CUpti_ActivityMemset4& set) {
  auto record = format::MakeRecord<format::GpuMemsetRecord>(format::kGpuMemset);
  record.placement = Placement(set);
  record.bytes = set.bytes;
  record.value = set.value;
  record.memory_kind = static_cast<uint8_t>(set.memoryKind);
  record.async = (set.flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC) != 0;
  return record;
}

format::GpuSyncRecord SyncRecord(const CUpti_ActivitySynchronization2& sync) {
  auto record = format::MakeRecord<format::GpuSyncRecord>(format::kGpuSync);
  record.start_ns = sync.start;
  record.end_ns = sync.end;
  record.correlation_id = sync.correlationId;
  record.context_id = sync.contextId;
  record.stream_id = sync.streamId;
  record.type = static_cast<uint32_t>(sync.type);
  record.event_id = sync.cudaEventId;
  return record;
}

format::GpuOverheadRecord OverheadRecord(const CUpti_ActivityOverhead3& overhead) {
  auto record = format::MakeRecord<format::GpuOverheadRecord>(format::kGpuOverhead);
  record.start_ns = overhead.start;
  record.end_ns = overhead.end;
  record.correlation_id = overhead.correlationId;
  record.overhead_kind = static_cast<uint32_t>(overhead.overheadKind);
  // A thread's id is the kernel's: the tracer sets CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM.
  if (overhead.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) {
    record.tid = overhead.objectId.pt.threadId;
  }
  return record;
}

format::GpuDeviceRecord DeviceRecord(const CUpti_ActivityDevice5& device) {
  auto record = format::MakeRecord<format::GpuDeviceRecord>(format::kGpuDevice);
  record.device_id = device.id;
  // A MIG instance is a GPU of its own: its work never shares time with another's.
  const CUuuid& uuid = device.isMigEnabled != 0 ? device.migUuid : device.uuid;
  memcpy(record.uuid, uuid.bytes, sizeof(record.uuid));
  return record;
}

// A runtime or driver call CUPTI timed itself, on our clock.
format::ApiCallRecord ApiCallRecord(CUpti_ActivityKind kind, const CUpti_ActivityAPI& api,
                                    int64_t clock_offset_ns) {
  auto record = format::MakeRecord<format::ApiCallRecord>(format::kApiCall);
  record.api_id =
      format::CuptiApiId(kind == CUPTI_ACTIVITY_KIND_RUNTIME ? format::ApiDomain::kRuntime
                                                             : format::ApiDomain::kDriver,
                         api.cbid);
  record.enter_ns = api.start - clock_offset_ns;
  record.exit_ns = api.end - clock_offset_ns;
  record.correlation_id = api.correlationId;
  record.tid = api.threadId;
  record.return_code = static_cast<int32_t>(api.returnValue);
  return record;
}

}  // namespace

uint32_t GpuRecordEncoder::KernelNameId(const char* name) {
  if (name == nullptr) name = "";
  if (auto found = name_by_pointer_.find(name); found != name_by_pointer_.end()) {
    return found->second;
  }
  auto [entry, inserted] =
      name_by_text_.try_emplace(name, static_cast<uint32_t>(name_by_text_.size() + 1));
  if (inserted) {
    size_t length = strlen(name);
    auto record = format::MakeRecord<format::GpuNameRecord>(format::kGpuName, length);
    record.name_id = entry->second;
    record.name_len = static_cast<uint32_t>(length);
    sink_->Append(&record, sizeof(record), name, length);
  }
  name_by_pointer_.emplace(name, entry->second);
  return entry->second;
}

bool GpuRecordEncoder::NameApi(uint32_t api_id) {
  if (named_apis_.contains(api_id)) return true;
  char name[128];
  if (!CuptiApiName(api_id, name, sizeof(name))) return false;
  size_t length = strlen(name);
  auto record = format::MakeRecord<format::ApiNameRecord>(format::kApiName, length);
  record.api_id = api_id;
  record.domain = api_id >> 16;
  record.name_len = static_cast<uint32_t>(length);
  sink_->Append(&record, sizeof(record), name, length);
  named_apis_.insert(api_id);
  return true;
}

void GpuRecordEncoder::Encode(const CuptiLibrary& cupti, uint8_t* buffer, size_t valid_size,
                              int64_t clock_offset_ns, const RecordingWindow& window,
                              const CaptureWindowsState* capture) {
  // Every kind recorded starts its timed part with `start`, on CUPTI's clock.
  auto outside = [&](uint64_t cupti_start) {
    uint64_t start = cupti_start - static_cast<uint64_t>(clock_offset_ns);
    return !window.Contains(start) || (capture != nullptr && !CaptureAdmits(capture, start));
  };
  CUpti_Activity* activity = nullptr;
  while (cupti.ActivityGetNextRecord(buffer, valid_size, &activity) == CUPTI_SUCCESS) {
    switch (activity->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto& kernel = *reinterpret_cast<const CUpti_ActivityKernel10*>(activity);
        if (outside(kernel.start)) break;
        auto record = KernelRecord(kernel, KernelNameId(kernel.name));
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto& copy = *reinterpret_cast<const CUpti_ActivityMemcpy6*>(activity);
        if (outside(copy.start)) break;
        auto record = MemcpyRecord(copy);
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto& set = *reinterpret_cast<const CUpti_ActivityMemset4*>(activity);
        if (outside(set.start)) break;
        auto record = MemsetRecord(set);
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto& sync = *reinterpret_cast<const CUpti_ActivitySynchronization2*>(activity);
        if (outside(sync.start)) break;
        auto record = SyncRecord(sync);
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const auto& overhead = *reinterpret_cast<const CUpti_ActivityOverhead3*>(activity);
        // CUPTI hands the record's details over to us to free (none for the kinds kept).
        free(overhead.overheadData);
        // Only what the driver does in a call that the report can name; CUPTI's own overhead
        // (its buffers, its instrumentation) is gprof-run's cost, not the program's.
        if (overhead.overheadKind != CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING &&
            overhead.overheadKind != CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING) {
          break;
        }
        if (overhead.start == 0 || outside(overhead.start)) break;
        auto record = OverheadRecord(overhead);
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_DEVICE: {
        const auto& device = *reinterpret_cast<const CUpti_ActivityDevice5*>(activity);
        // A device hidden by CUDA_VISIBLE_DEVICES has no ordinal in this process.
        if (device.isCudaVisible == 0) break;
        auto record = DeviceRecord(device);
        sink_->Append(&record, sizeof(record));
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        // Only with GPROF_CUPTI_API_RECORDS=activity: CUPTI timed the call itself. A runtime
        // call's nested driver calls come as records of their own and are kept as they are.
        const auto& api = *reinterpret_cast<const CUpti_ActivityAPI*>(activity);
        if (outside(api.start)) break;
        auto record = ApiCallRecord(activity->kind, api, clock_offset_ns);
        NameApi(record.api_id);
        sink_->Append(&record, sizeof(record));
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace gprof::inject
