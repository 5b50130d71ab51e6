// The CUDA runtime API of the fake libcudart.so.13: handles, error state and the driver lock. The
// GPU itself is FakeGpu; what a profiler sees of the driver (injection, CUPTI) is fake_driver.h.
// The rules this file implements are documented in fake_cuda.h.
//
// Built with __CUDA_API_VERSION_INTERNAL, as NVIDIA builds the real library: cuda_runtime_api.h
// then declares both the plain entry points and their _ptsz/_ptds variants, so every definition
// below is checked against the real declaration.
#include <cuda_profiler_api.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_driver.h"
#include "tests/fake_cuda/fake_gpu.h"

namespace fake_cuda {

// A CUPTI activity record of GPU work, in the real layouts.
union GpuRecord {
  CUpti_Activity header;
  CUpti_ActivityKernel10 kernel;
  CUpti_ActivityMemcpy6 memcpy;
  CUpti_ActivityMemset4 memset;
};

// An item of GPU work: how long it keeps the GPU busy, and its record when CUPTI is reported to.
struct GpuWork {
  uint64_t duration_ns;
  std::optional<GpuRecord> record = std::nullopt;
  uint64_t graph_node_id = 0;  // set when captured into a graph
  FakeGpu::Gate gate = {};     // kUntilGateOpens: what else it runs until
};

}  // namespace fake_cuda

// The runtime's opaque handle types, completed here: a handle is the address of its object.
struct CUstream_st {
  uint32_t id = 0;                       // CUPTI's stream id
  fake_cuda::FakeGpu::Seq last_seq = 0;  // the last item queued on this stream
  std::optional<std::vector<fake_cuda::GpuWork>> capture = {};  // items recorded while capturing
};
struct CUevent_st {
  uint32_t id = 0;                  // CUPTI's event id
  fake_cuda::FakeGpu::Seq seq = 0;  // the last item of its stream when recorded; 0 (never) is done
  uint64_t sync_id = 0;             // CUPTI's id of its latest record (cudaEventSyncId)
};
struct CUgraph_st {
  uint32_t id = 0;  // CUPTI's graph id
  std::vector<fake_cuda::GpuWork> nodes = {};
};
struct CUgraphExec_st {
  uint32_t graph_id = 0;
  std::vector<fake_cuda::GpuWork> nodes = {};
};

namespace fake_cuda {
namespace {

using Seq = FakeGpu::Seq;

// What the null stream handle names: the legacy default stream for the plain entry points, the
// per-thread default stream for the _ptsz/_ptds variants.
enum class NullStream { kLegacy, kPerThread };

// CUPTI's stream ids: real GPUs give the legacy default stream 7, created streams count from 13.
constexpr uint32_t kLegacyStreamId = 7;
constexpr uint32_t kPerThreadStreamId = 12;
constexpr uint32_t kFirstCreatedStreamId = 13;

// What CUPTI reports of every fake kernel: plausible values for a small kernel.
constexpr uint16_t kKernelRegistersPerThread = 16;
constexpr uint32_t kComputeChannel = 1;
constexpr uint32_t kCopyChannel = 2;

// The live handles of one kind; unknown or destroyed handles are never dereferenced.
template <typename T>
class HandleTable {
 public:
  T* Create(T initial = {}) {
    auto object = std::make_unique<T>(std::move(initial));
    T* handle = object.get();
    objects_.emplace(handle, std::move(object));
    return handle;
  }
  T* Find(T* handle) const {
    const auto it = objects_.find(handle);
    return it == objects_.end() ? nullptr : it->second.get();
  }
  bool Destroy(T* handle) { return objects_.erase(handle) == 1; }

 private:
  std::unordered_map<T*, std::unique_ptr<T>> objects_;
};

// Address ranges: start -> size.
using Ranges = std::map<const void*, size_t>;

bool Contains(const Ranges& ranges, const void* address) {
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return false;
  --it;
  return static_cast<const char*>(address) < static_cast<const char*>(it->first) + it->second;
}

// Everything the driver lock guards (FakeGpu has its own lock).
struct Driver {
  FakeGpu gpu;
  CUstream_st legacy_stream{.id = kLegacyStreamId};
  // One object for every thread's per-thread stream: with a single in-order queue, keeping them
  // apart would only make their synchronisation wait for less (and capture one thread's work only).
  CUstream_st per_thread_stream{.id = kPerThreadStreamId};
  HandleTable<CUstream_st> streams;
  HandleTable<CUevent_st> events;
  HandleTable<CUgraph_st> graphs;
  HandleTable<CUgraphExec_st> graph_execs;
  Ranges device_allocations;
  Ranges host_allocations;
  Ranges registered_host_memory;
  // CUPTI's ids, unique in the process.
  uint32_t next_stream_id = kFirstCreatedStreamId;
  uint32_t last_event_id = 0;
  uint64_t last_event_sync_id = 0;
  uint32_t last_graph_id = 0;
  uint64_t last_graph_node_id = 0;
  int64_t last_grid_id = 0;
  bool module_loaded = false;  // kModuleKernels' module
};

// The driver lock, in this library's .bss as the real one is in libcuda's data: the futex address a
// profiler sees blocked launches wait on. Plain pthread mutex, so contention is a real futex wait.
pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
// FAKE_CUDA_OWNERLESS_DRIVER_LOCK=1 (read at load): the driver lock is this semaphore, which keeps
// no owner, and cudaDeviceSynchronize spins while the GPU drains (the real driver's default
// schedule): a lock of the real libcuda as `gprof-run dump` sees it, whose holder nothing names.
bool ownerless_driver_lock = false;
sem_t driver_semaphore;

// Never destroyed, so exiting while threads are inside calls is safe. Replaced in a forked child.
Driver* driver = nullptr;

class DriverLock {
 public:
  DriverLock() {
    if (!ownerless_driver_lock)
      pthread_mutex_lock(&driver_lock);
    else
      while (sem_wait(&driver_semaphore) != 0) {
      }
  }
  ~DriverLock() {
    if (!ownerless_driver_lock)
      pthread_mutex_unlock(&driver_lock);
    else
      sem_post(&driver_semaphore);
  }
  DriverLock(const DriverLock&) = delete;
  DriverLock& operator=(const DriverLock&) = delete;
};

// The parent's other threads do not exist in the child, and may have held the driver lock or been
// inside the queue or a handle table at fork time: start afresh rather than repair, and abandon the
// old state.
void ResetInForkedChild() {
  pthread_mutex_init(&driver_lock, nullptr);
  sem_init(&driver_semaphore, 0, 1);
  driver = new Driver;
}

__attribute__((constructor)) void Initialize() {
  const char* ownerless = getenv("FAKE_CUDA_OWNERLESS_DRIVER_LOCK");
  ownerless_driver_lock = ownerless != nullptr && strcmp(ownerless, "1") == 0;
  sem_init(&driver_semaphore, 0, 1);
  driver = new Driver;
  pthread_atfork(nullptr, nullptr, &ResetInForkedChild);
}

thread_local cudaError_t last_error = cudaSuccess;

// Every exported call that can fail returns through here: each failure becomes the last error.
cudaError_t Record(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

// The driver function the runtime calls: the per-thread-stream variant from the runtime's
// _ptsz/_ptds entry points. The variants' params structs have the plain ones' fields.
ApiFunction ForStream(NullStream null_stream, ApiFunction legacy, ApiFunction per_thread) {
  return null_stream == NullStream::kPerThread ? per_thread : legacy;
}

CUdeviceptr DevicePointer(const void* address) { return CUdeviceptr(uintptr_t(address)); }

// The memory kinds CUPTI reports. Callers of all three hold the driver lock.
CUpti_ActivityMemoryKind HostMemoryKind(const void* address) {
  return Contains(driver->host_allocations, address) ||
                 Contains(driver->registered_host_memory, address)
             ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED
             : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
}
CUpti_ActivityMemoryKind MemoryKind(const void* address) {
  return Contains(driver->device_allocations, address) ? CUPTI_ACTIVITY_MEMORY_KIND_DEVICE
                                                       : HostMemoryKind(address);
}
// A memset's target is device memory unless it is pinned host memory.
CUpti_ActivityMemoryKind MemsetMemoryKind(const void* address) {
  return HostMemoryKind(address) == CUPTI_ACTIVITY_MEMORY_KIND_PINNED
             ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED
             : CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
}

GpuRecord EmptyRecord() {
  GpuRecord record;
  std::memset(&record, 0, sizeof record);
  return record;
}

// The records of GPU work, every field but the stream, correlation, graph and timestamps (Place
// and the mock fill those). Callers hold the driver lock.
GpuRecord KernelRecord(dim3 grid, dim3 block, size_t shared_mem_bytes,
                       const char* name = kKernelName) {
  GpuRecord record = EmptyRecord();
  CUpti_ActivityKernel10& kernel = record.kernel;
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.sharedMemoryConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  kernel.registersPerThread = kKernelRegistersPerThread;
  kernel.partitionedGlobalCacheRequested =
      CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED;
  kernel.partitionedGlobalCacheExecuted =
      CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED;
  kernel.deviceId = kDeviceId;
  kernel.contextId = kContextId;
  kernel.gridX = int32_t(grid.x);
  kernel.gridY = int32_t(grid.y);
  kernel.gridZ = int32_t(grid.z);
  kernel.blockX = int32_t(block.x);
  kernel.blockY = int32_t(block.y);
  kernel.blockZ = int32_t(block.z);
  kernel.dynamicSharedMemory = int32_t(shared_mem_bytes);
  kernel.name = name;
  kernel.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  kernel.sharedMemoryExecuted = uint32_t(shared_mem_bytes);
  kernel.shmemLimitConfig = CUPTI_FUNC_SHMEM_LIMIT_DEFAULT;
  kernel.channelID = kComputeChannel;
  kernel.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
  return record;
}

GpuRecord MemcpyRecord(void* dst, const void* src, size_t count, cudaMemcpyKind kind, bool async) {
  GpuRecord record = EmptyRecord();
  CUpti_ActivityMemcpy6& copy = record.memcpy;
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  // The device side of an explicit direction is device memory; host sides are pinned or pageable.
  CUpti_ActivityMemoryKind src_kind = HostMemoryKind(src), dst_kind = HostMemoryKind(dst);
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) {
    src_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  }
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
    dst_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  }
  if (kind == cudaMemcpyDefault) {
    src_kind = MemoryKind(src);
    dst_kind = MemoryKind(dst);
  }
  const bool from_device = src_kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  const bool to_device = dst_kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  const CUpti_ActivityMemcpyKind copy_kind =
      from_device ? (to_device ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD : CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)
                  : (to_device ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH);
  copy.copyKind = uint8_t(copy_kind);
  copy.srcKind = uint8_t(src_kind);
  copy.dstKind = uint8_t(dst_kind);
  copy.flags = async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : CUPTI_ACTIVITY_FLAG_NONE;
  copy.bytes = count;
  copy.deviceId = kDeviceId;
  copy.contextId = kContextId;
  copy.channelID = kCopyChannel;
  copy.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
  copy.copyCount = 1;
  return record;
}

GpuRecord MemsetRecord(void* ptr, int value, size_t count, bool async) {
  GpuRecord record = EmptyRecord();
  CUpti_ActivityMemset4& set = record.memset;
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.value = uint32_t(value);
  set.bytes = count;
  set.deviceId = kDeviceId;
  set.contextId = kContextId;
  set.flags = async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : CUPTI_ACTIVITY_FLAG_NONE;
  set.memoryKind = uint16_t(MemsetMemoryKind(ptr));
  set.channelID = kComputeChannel;
  set.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
  return record;
}

uint64_t CopyDurationNs(size_t bytes) {
  return std::max<uint64_t>(kMinCopyNs, bytes / kCopyBytesPerNs);
}

// GPU work with its record when CUPTI is reported to. Callers hold the driver lock.
template <typename MakeRecord>
GpuWork Work(uint64_t duration_ns, MakeRecord&& make_record) {
  GpuWork work{duration_ns};
  if (Cupti() != nullptr) work.record = make_record();
  return work;
}

template <typename Record>
void PlaceRecord(Record& record, uint32_t stream_id, uint32_t graph_id, uint64_t graph_node_id) {
  record.streamId = stream_id;
  record.correlationId = ActivityCorrelationId();
  record.graphId = graph_id;
  record.graphNodeId = graph_node_id;
}

// Where and for which call the work runs. The caller holds the driver lock.
void Place(GpuRecord& record, uint32_t stream_id, uint32_t graph_id, uint64_t graph_node_id) {
  switch (record.header.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      PlaceRecord(record.kernel, stream_id, graph_id, graph_node_id);
      record.kernel.gridId = ++driver->last_grid_id;
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      PlaceRecord(record.memcpy, stream_id, graph_id, graph_node_id);
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      PlaceRecord(record.memset, stream_id, graph_id, graph_node_id);
      break;
    default:
      break;
  }
}

// Queues `work` on the GPU, reporting it to CUPTI. Caller holds the driver lock.
cudaError_t Submit(CUstream_st& stream, GpuWork work, uint32_t graph_id) {
  FakeGpu::OnRun on_run;
  const CuptiHooks* cupti = Cupti();
  if (work.record && cupti != nullptr) {
    Place(*work.record, stream.id, graph_id, work.graph_node_id);
    if (const uint64_t handle = cupti->gpu_activity_queued(&work.record->header, Context())) {
      on_run = [handle, completed = cupti->gpu_activity_completed](uint64_t start, uint64_t end) {
        completed(handle, start, end);
      };
    }
  }
  const std::optional<Seq> seq =
      driver->gpu.Submit(work.duration_ns, std::move(on_run), work.gate);
  if (!seq) return cudaErrorInitializationError;
  stream.last_seq = *seq;
  return cudaSuccess;
}

// Queues `work` on `stream`, or records it into the stream's capture. Caller holds the lock.
cudaError_t Enqueue(CUstream_st& stream, GpuWork work, uint32_t graph_id = 0) {
  if (stream.capture) {
    work.graph_node_id = ++driver->last_graph_node_id;
    stream.capture->push_back(std::move(work));
    return cudaSuccess;
  }
  return Submit(stream, std::move(work), graph_id);
}

// Callers of both hold the driver lock.
CUstream_st& DefaultStream(NullStream null_stream) {
  return null_stream == NullStream::kLegacy ? driver->legacy_stream : driver->per_thread_stream;
}

CUstream_st* FindStream(cudaStream_t stream, NullStream null_stream) {
  if (stream == nullptr) return &DefaultStream(null_stream);
  if (stream == cudaStreamLegacy) return &driver->legacy_stream;
  if (stream == cudaStreamPerThread) return &driver->per_thread_stream;
  return driver->streams.Find(stream);
}

// Queues the work `make_work` makes (under the driver lock, held only for that) on `stream_handle`.
template <typename MakeWork>
cudaError_t EnqueueOn(cudaStream_t stream_handle, NullStream null_stream, MakeWork&& make_work) {
  DriverLock lock;
  CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  return Enqueue(*stream, make_work());
}

// Queues work on a default stream, then waits for it without the driver lock (cudaMemcpy).
template <typename MakeWork>
cudaError_t RunSynchronously(NullStream null_stream, MakeWork&& make_work) {
  Seq seq;
  {
    DriverLock lock;
    CUstream_st& stream = DefaultStream(null_stream);
    if (stream.capture) return cudaErrorStreamCaptureUnsupported;
    if (const cudaError_t error = Enqueue(stream, make_work()); error != cudaSuccess) return error;
    seq = stream.last_seq;
  }
  driver->gpu.WaitSleeping(seq);
  return cudaSuccess;
}

// A host wait that began at `start_ns` and ends now, reported to CUPTI as a synchronization
// record. Stream and event are those waited for, if any.
void ReportHostWait(CUpti_ActivitySynchronizationType type, uint64_t start_ns,
                    const CUstream_st* stream, const CUevent_st* event) {
  const CuptiHooks* cupti = Cupti();
  if (cupti == nullptr) return;
  CUpti_ActivitySynchronization2 record = {};
  record.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  record.type = type;
  record.start = start_ns;
  record.end = MonotonicNs();
  record.correlationId = ActivityCorrelationId();
  record.contextId = kContextId;
  record.streamId = stream != nullptr ? stream->id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  record.cudaEventId = event != nullptr ? event->id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  record.cudaEventSyncId = event != nullptr ? event->sync_id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  record.returnValue = CUDA_SUCCESS;
  cupti->synchronization(&record, Context());
}

// Holds the caller's driver lock until the GPU is idle, spinning on-CPU as the real driver does in
// cudaFree, cudaFreeHost and cudaHostAlloc (design.md section 6).
void DrainSpinning() { driver->gpu.WaitSpinning(driver->gpu.LastSubmitted()); }

cudaError_t CheckCopy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  if (count > 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t CheckMemset(void* ptr, size_t count) {
  return count > 0 && ptr == nullptr ? cudaErrorInvalidValue : cudaSuccess;
}

// Spins on CPU while the first launch of a kInLazyModule kernel loads its module, as CUDA's lazy
// loading does, and reports it to CUPTI as driver overhead. Other threads go on meanwhile.
void LoadModuleOf(uint32_t duration_word) {
  if ((duration_word & kInLazyModule) == 0) return;
  {
    DriverLock lock;
    if (std::exchange(driver->module_loaded, true)) return;
  }
  const uint64_t start_ns = MonotonicNs();
  while (MonotonicNs() - start_ns < kModuleLoadNs) {
  }
  if (const CuptiHooks* cupti = Cupti()) {
    cupti->overhead(CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING, start_ns, MonotonicNs(),
                    ActivityCorrelationId());
  }
}

cudaError_t QueueKernel(const void* func, dim3 grid, dim3 block, void** args,
                        size_t shared_mem_bytes, cudaStream_t stream, NullStream null_stream) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return cudaErrorInvalidConfiguration;
  }
  if (args == nullptr || args[0] == nullptr) return cudaErrorInvalidValue;
  uint32_t duration_word;
  std::memcpy(&duration_word, args[0], sizeof duration_word);  // read at launch time, as CUDA does
  const uint32_t duration_us = duration_word & ~(kInLazyModule | kUntilGateOpens);
  KernelGate gate{nullptr, 0, nullptr};
  if (duration_word & kUntilGateOpens) {
    if (args[1] == nullptr) return cudaErrorInvalidValue;
    std::memcpy(&gate, args[1], sizeof gate);
  }
  const char* name = gate.name != nullptr ? gate.name : kKernelName;
  const cuLaunchKernel_params params{.f = reinterpret_cast<CUfunction>(const_cast<void*>(func)),
                                     .gridDimX = grid.x,
                                     .gridDimY = grid.y,
                                     .gridDimZ = grid.z,
                                     .blockDimX = block.x,
                                     .blockDimY = block.y,
                                     .blockDimZ = block.z,
                                     .sharedMemBytes = unsigned(shared_mem_bytes),
                                     .hStream = stream,
                                     .kernelParams = args,
                                     .extra = nullptr};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuLaunchKernel),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuLaunchKernel_ptsz));
  return DriverApi(
      function, &params,
      [&] {
        LoadModuleOf(duration_word);
        return EnqueueOn(stream, null_stream, [&] {
          GpuWork work = Work(uint64_t(duration_us) * 1000,
                              [&] { return KernelRecord(grid, block, shared_mem_bytes, name); });
          work.gate = {gate.word, gate.open, gate.arrivals, gate.parties};
          return work;
        });
      },
      kKernelName);
}

cudaError_t MemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                        cudaStream_t stream, NullStream null_stream) {
  if (const cudaError_t error = CheckCopy(dst, src, count, kind); error != cudaSuccess)
    return error;
  const cuMemcpyAsync_params params{DevicePointer(dst), DevicePointer(src), count, stream};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuMemcpyAsync),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuMemcpyAsync_ptsz));
  return DriverApi(function, &params, [&] {
    return EnqueueOn(stream, null_stream, [&] {
      return Work(CopyDurationNs(count), [&] { return MemcpyRecord(dst, src, count, kind, true); });
    });
  });
}

cudaError_t MemcpySync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                       NullStream null_stream) {
  if (const cudaError_t error = CheckCopy(dst, src, count, kind); error != cudaSuccess)
    return error;
  const cuMemcpy_params params{DevicePointer(dst), DevicePointer(src), count};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuMemcpy),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuMemcpy_ptds));
  return DriverApi(function, &params, [&] {
    return RunSynchronously(null_stream, [&] {
      return Work(CopyDurationNs(count),
                  [&] { return MemcpyRecord(dst, src, count, kind, false); });
    });
  });
}

cudaError_t MemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream,
                        NullStream null_stream) {
  if (const cudaError_t error = CheckMemset(ptr, count); error != cudaSuccess) return error;
  const cuMemsetD8Async_params params{DevicePointer(ptr), static_cast<unsigned char>(value), count,
                                      stream};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuMemsetD8Async),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuMemsetD8Async_ptsz));
  return DriverApi(function, &params, [&] {
    return EnqueueOn(stream, null_stream, [&] {
      return Work(CopyDurationNs(count), [&] { return MemsetRecord(ptr, value, count, true); });
    });
  });
}

cudaError_t MemsetSync(void* ptr, int value, size_t count, NullStream null_stream) {
  if (const cudaError_t error = CheckMemset(ptr, count); error != cudaSuccess) return error;
  const cuMemsetD8_v2_params params{DevicePointer(ptr), static_cast<unsigned char>(value), count};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuMemsetD8_v2),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuMemsetD8_v2_ptds));
  return DriverApi(function, &params, [&] {
    return RunSynchronously(null_stream, [&] {
      return Work(CopyDurationNs(count), [&] { return MemsetRecord(ptr, value, count, false); });
    });
  });
}

cudaError_t StreamSynchronize(cudaStream_t stream_handle, NullStream null_stream) {
  const cuStreamSynchronize_params params{stream_handle};
  const ApiFunction function =
      ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuStreamSynchronize),
                FAKE_CUDA_DRIVER_FUNCTION(cuStreamSynchronize_ptsz));
  return DriverApi(function, &params, [&] {
    Seq seq;
    CUstream_st waited;  // what the record names, copied under the lock
    {
      DriverLock lock;
      const CUstream_st* stream = FindStream(stream_handle, null_stream);
      if (stream == nullptr) return cudaErrorInvalidResourceHandle;
      if (stream->capture) return cudaErrorStreamCaptureUnsupported;
      seq = stream->last_seq;
      waited.id = stream->id;
    }
    const uint64_t start_ns = MonotonicNs();
    driver->gpu.WaitSleeping(seq);
    ReportHostWait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, start_ns, &waited,
                   nullptr);
    return cudaSuccess;
  });
}

cudaError_t StreamQuery(cudaStream_t stream_handle, NullStream null_stream) {
  const cuStreamQuery_params params{stream_handle};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuStreamQuery),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuStreamQuery_ptsz));
  return DriverApi(function, &params, [&] {
    DriverLock lock;
    const CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (stream == nullptr) return cudaErrorInvalidResourceHandle;
    if (stream->capture) return cudaErrorStreamCaptureUnsupported;
    return driver->gpu.IsDone(stream->last_seq) ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t StreamWaitEvent(cudaStream_t stream_handle, cudaEvent_t event_handle,
                            unsigned int flags, NullStream null_stream) {
  if ((flags & ~cudaEventWaitExternal) != 0) return cudaErrorInvalidValue;
  const cuStreamWaitEvent_params params{stream_handle, event_handle, flags};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuStreamWaitEvent),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuStreamWaitEvent_ptsz));
  return DriverApi(function, &params, [&] {
    const uint64_t start_ns = MonotonicNs();
    DriverLock lock;
    const CUstream_st* stream = FindStream(stream_handle, null_stream);
    const CUevent_st* event = driver->events.Find(event_handle);
    if (stream == nullptr || event == nullptr) {
      return cudaErrorInvalidResourceHandle;
    }
    // The single in-order queue already runs the event's work first.
    ReportHostWait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, start_ns, stream, event);
    return cudaSuccess;
  });
}

cudaError_t EventRecord(cudaEvent_t event_handle, cudaStream_t stream_handle,
                        NullStream null_stream) {
  const cuEventRecord_params params{event_handle, stream_handle};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuEventRecord),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuEventRecord_ptsz));
  return DriverApi(function, &params, [&] {
    DriverLock lock;
    CUevent_st* event = driver->events.Find(event_handle);
    const CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (event == nullptr || stream == nullptr) {
      return cudaErrorInvalidResourceHandle;
    }
    if (!stream->capture) {
      event->seq = stream->last_seq;
      event->sync_id = ++driver->last_event_sync_id;
    }
    return cudaSuccess;
  });
}

cudaError_t BeginCapture(cudaStream_t stream_handle, cudaStreamCaptureMode mode,
                         NullStream null_stream) {
  const cuStreamBeginCapture_v2_params params{stream_handle, CUstreamCaptureMode(mode)};
  const ApiFunction function =
      ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuStreamBeginCapture_v2),
                FAKE_CUDA_DRIVER_FUNCTION(cuStreamBeginCapture_v2_ptsz));
  return DriverApi(function, &params, [&] {
    DriverLock lock;
    CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (stream == nullptr) return cudaErrorInvalidResourceHandle;
    if (stream == &driver->legacy_stream) return cudaErrorStreamCaptureUnsupported;
    if (stream->capture) return cudaErrorIllegalState;
    stream->capture.emplace();
    return cudaSuccess;
  });
}

cudaError_t EndCapture(cudaStream_t stream_handle, cudaGraph_t* graph, NullStream null_stream) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  const cuStreamEndCapture_params params{stream_handle, graph};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuStreamEndCapture),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuStreamEndCapture_ptsz));
  return DriverApi(function, &params, [&] {
    DriverLock lock;
    CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (stream == nullptr) return cudaErrorInvalidResourceHandle;
    if (!stream->capture) return cudaErrorIllegalState;
    *graph = driver->graphs.Create({++driver->last_graph_id, std::move(*stream->capture)});
    stream->capture.reset();
    return cudaSuccess;
  });
}

cudaError_t GraphLaunch(cudaGraphExec_t exec_handle, cudaStream_t stream_handle,
                        NullStream null_stream) {
  const cuGraphLaunch_params params{exec_handle, stream_handle};
  const ApiFunction function = ForStream(null_stream, FAKE_CUDA_DRIVER_FUNCTION(cuGraphLaunch),
                                         FAKE_CUDA_DRIVER_FUNCTION(cuGraphLaunch_ptsz));
  return DriverApi(function, &params, [&] {
    DriverLock lock;
    const CUgraphExec_st* exec = driver->graph_execs.Find(exec_handle);
    CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (exec == nullptr || stream == nullptr) {
      return cudaErrorInvalidResourceHandle;
    }
    for (const GpuWork& node : exec->nodes) {
      if (const cudaError_t error = Enqueue(*stream, node, exec->graph_id); error != cudaSuccess) {
        return error;
      }
    }
    return cudaSuccess;
  });
}

cudaError_t DeviceSynchronize() {
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuCtxSynchronize), nullptr, [] {
    // Holds the driver lock while the GPU drains, asleep until the fake-gpu thread wakes it.
    DriverLock lock;
    const uint64_t start_ns = MonotonicNs();
    if (ownerless_driver_lock)
      driver->gpu.WaitSpinning(driver->gpu.LastSubmitted());
    else
      driver->gpu.WaitSleeping(driver->gpu.LastSubmitted());
    ReportHostWait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, start_ns, nullptr,
                   nullptr);
    return cudaSuccess;
  });
}

cudaError_t StreamCreate(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return cudaErrorInvalidValue;
  const cuStreamCreate_params params{stream, flags};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuStreamCreate), &params, [&] {
    DriverLock lock;
    *stream = driver->streams.Create({.id = driver->next_stream_id++});
    return cudaSuccess;
  });
}

cudaError_t StreamDestroy(cudaStream_t stream) {
  const cuStreamDestroy_v2_params params{stream};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuStreamDestroy_v2), &params, [&] {
    DriverLock lock;
    return driver->streams.Destroy(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

cudaError_t EventCreate(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr ||
      (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)) != 0) {
    return cudaErrorInvalidValue;
  }
  const cuEventCreate_params params{event, flags};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuEventCreate), &params, [&] {
    DriverLock lock;
    *event = driver->events.Create({.id = ++driver->last_event_id});
    return cudaSuccess;
  });
}

cudaError_t EventDestroy(cudaEvent_t event) {
  const cuEventDestroy_v2_params params{event};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuEventDestroy_v2), &params, [&] {
    DriverLock lock;
    return driver->events.Destroy(event) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

cudaError_t EventQuery(cudaEvent_t event_handle) {
  const cuEventQuery_params params{event_handle};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuEventQuery), &params, [&] {
    DriverLock lock;
    const CUevent_st* event = driver->events.Find(event_handle);
    if (event == nullptr) return cudaErrorInvalidResourceHandle;
    return driver->gpu.IsDone(event->seq) ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t EventSynchronize(cudaEvent_t event_handle) {
  const cuEventSynchronize_params params{event_handle};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuEventSynchronize), &params, [&] {
    CUevent_st waited;  // what the record names, copied under the lock
    {
      DriverLock lock;
      const CUevent_st* event = driver->events.Find(event_handle);
      if (event == nullptr) return cudaErrorInvalidResourceHandle;
      waited = *event;
    }
    const uint64_t start_ns = MonotonicNs();
    driver->gpu.WaitSleeping(waited.seq);
    ReportHostWait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, start_ns, nullptr,
                   &waited);
    return cudaSuccess;
  });
}

cudaError_t GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph_handle,
                             unsigned long long flags) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  const cuGraphInstantiateWithFlags_params params{exec, graph_handle, flags};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuGraphInstantiateWithFlags), &params, [&] {
    DriverLock lock;
    const CUgraph_st* graph = driver->graphs.Find(graph_handle);
    if (graph == nullptr) return cudaErrorInvalidResourceHandle;
    *exec = driver->graph_execs.Create({graph->id, graph->nodes});
    return cudaSuccess;
  });
}

cudaError_t GraphDestroy(cudaGraph_t graph) {
  const cuGraphDestroy_params params{graph};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuGraphDestroy), &params, [&] {
    DriverLock lock;
    return driver->graphs.Destroy(graph) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

cudaError_t GraphExecDestroy(cudaGraphExec_t exec) {
  const cuGraphExecDestroy_params params{exec};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuGraphExecDestroy), &params, [&] {
    DriverLock lock;
    return driver->graph_execs.Destroy(exec) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

cudaError_t DeviceMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const cuMemAlloc_v2_params params{reinterpret_cast<CUdeviceptr*>(ptr), size};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemAlloc_v2), &params, [&] {
    DriverLock lock;
    // Address space only: the host cannot touch device memory.
    void* memory =
        mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return cudaErrorMemoryAllocation;
    driver->device_allocations.emplace(memory, size);
    *ptr = memory;
    return cudaSuccess;
  });
}

cudaError_t HostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) != 0) {
    return cudaErrorInvalidValue;
  }
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const cuMemHostAlloc_params params{ptr, size, flags};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemHostAlloc), &params, [&] {
    DriverLock lock;
    DrainSpinning();
    void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return cudaErrorMemoryAllocation;
    driver->host_allocations.emplace(memory, size);
    *ptr = memory;
    return cudaSuccess;
  });
}

// cudaFree and cudaFreeHost: hold the driver lock while the GPU drains, then release the memory.
cudaError_t FreeAfterDrain(Ranges Driver::*allocations_of, void* ptr) {
  DriverLock lock;
  Ranges& allocations = driver->*allocations_of;
  const auto it = allocations.find(ptr);
  if (it == allocations.end()) return cudaErrorInvalidValue;
  DrainSpinning();
  munmap(const_cast<void*>(it->first), it->second);
  allocations.erase(it);
  return cudaSuccess;
}

cudaError_t DeviceFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  const cuMemFree_v2_params params{DevicePointer(ptr)};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemFree_v2), &params,
                   [&] { return FreeAfterDrain(&Driver::device_allocations, ptr); });
}

cudaError_t HostFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  const cuMemFreeHost_params params{ptr};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemFreeHost), &params,
                   [&] { return FreeAfterDrain(&Driver::host_allocations, ptr); });
}

cudaError_t HostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr || size == 0) return cudaErrorInvalidValue;
  const cuMemHostRegister_v2_params params{ptr, size, flags};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemHostRegister_v2), &params, [&] {
    DriverLock lock;
    const bool inserted = driver->registered_host_memory.emplace(ptr, size).second;
    return inserted ? cudaSuccess : cudaErrorHostMemoryAlreadyRegistered;
  });
}

cudaError_t HostUnregister(void* ptr) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const cuMemHostUnregister_params params{ptr};
  return DriverApi(FAKE_CUDA_DRIVER_FUNCTION(cuMemHostUnregister), &params, [&] {
    DriverLock lock;
    return driver->registered_host_memory.erase(ptr) == 1 ? cudaSuccess
                                                          : cudaErrorHostMemoryNotRegistered;
  });
}

cudaError_t SetOutput(int* out, int value) {
  if (out == nullptr) return cudaErrorInvalidValue;
  *out = value;
  return cudaSuccess;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* description;  // the real runtime's wording
};

// Every code this library returns.
constexpr ErrorText kErrorTexts[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
};

constexpr const char* kUnrecognizedError = "unrecognized error code";

const ErrorText* FindErrorText(cudaError_t code) {
  const auto it = std::find_if(std::begin(kErrorTexts), std::end(kErrorTexts),
                               [&](const ErrorText& text) { return text.code == code; });
  return it == std::end(kErrorTexts) ? nullptr : it;
}

// An exported entry point: the runtime API `function` called with `params`, running `body`.
template <typename Params, typename Body>
cudaError_t Entry(ApiFunction function, const Params& params, Body&& body,
                  const char* symbol_name = nullptr) {
  return Record(RuntimeApi(function, &params, body, symbol_name));
}
// One without parameters.
template <typename Body>
cudaError_t Entry(ApiFunction function, Body&& body) {
  return Record(RuntimeApi(function, nullptr, body));
}

}  // namespace
}  // namespace fake_cuda

using fake_cuda::Entry;
using fake_cuda::NullStream;

// The exported entry points: each reports itself to CUPTI and forwards to its implementation
// above, never to another entry point, which a preloaded interposer would then record as a second
// call. FAKE_CUDA_RUNTIME_FUNCTION names the cbid, whose version suffix the params struct shares.
extern "C" {

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                             size_t shared_mem, cudaStream_t stream) {
  return Entry(
      FAKE_CUDA_RUNTIME_FUNCTION(cudaLaunchKernel, v7000),
      cudaLaunchKernel_v7000_params{func, grid, block, args, shared_mem, stream},
      [&] {
        return fake_cuda::QueueKernel(func, grid, block, args, shared_mem, stream,
                                      NullStream::kLegacy);
      },
      fake_cuda::kKernelName);
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shared_mem, cudaStream_t stream) {
  return Entry(
      FAKE_CUDA_RUNTIME_FUNCTION(cudaLaunchKernel_ptsz, v7000),
      cudaLaunchKernel_ptsz_v7000_params{func, grid, block, args, shared_mem, stream},
      [&] {
        return fake_cuda::QueueKernel(func, grid, block, args, shared_mem, stream,
                                      NullStream::kPerThread);
      },
      fake_cuda::kKernelName);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemcpy, v3020),
               cudaMemcpy_v3020_params{dst, src, count, kind},
               [&] { return fake_cuda::MemcpySync(dst, src, count, kind, NullStream::kLegacy); });
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemcpy_ptds, v7000),
               cudaMemcpy_ptds_v7000_params{dst, src, count, kind}, [&] {
                 return fake_cuda::MemcpySync(dst, src, count, kind, NullStream::kPerThread);
               });
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemcpyAsync, v3020),
               cudaMemcpyAsync_v3020_params{dst, src, count, kind, stream}, [&] {
                 return fake_cuda::MemcpyAsync(dst, src, count, kind, stream, NullStream::kLegacy);
               });
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemcpyAsync_ptsz, v7000),
               cudaMemcpyAsync_ptsz_v7000_params{dst, src, count, kind, stream}, [&] {
                 return fake_cuda::MemcpyAsync(dst, src, count, kind, stream,
                                               NullStream::kPerThread);
               });
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemset, v3020),
               cudaMemset_v3020_params{ptr, value, count},
               [&] { return fake_cuda::MemsetSync(ptr, value, count, NullStream::kLegacy); });
}
cudaError_t cudaMemset_ptds(void* ptr, int value, size_t count) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemset_ptds, v7000),
               cudaMemset_ptds_v7000_params{ptr, value, count},
               [&] { return fake_cuda::MemsetSync(ptr, value, count, NullStream::kPerThread); });
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemsetAsync, v3020),
               cudaMemsetAsync_v3020_params{ptr, value, count, stream}, [&] {
                 return fake_cuda::MemsetAsync(ptr, value, count, stream, NullStream::kLegacy);
               });
}
cudaError_t cudaMemsetAsync_ptsz(void* ptr, int value, size_t count, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMemsetAsync_ptsz, v7000),
               cudaMemsetAsync_ptsz_v7000_params{ptr, value, count, stream}, [&] {
                 return fake_cuda::MemsetAsync(ptr, value, count, stream, NullStream::kPerThread);
               });
}

cudaError_t cudaDeviceSynchronize(void) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaDeviceSynchronize, v3020),
               [] { return fake_cuda::DeviceSynchronize(); });
}
// A profiler's switch: nothing to do on a fake GPU, but seen by CUPTI and an interposer.
cudaError_t cudaProfilerStart(void) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaProfilerStart, v4000), [] { return cudaSuccess; });
}
cudaError_t cudaProfilerStop(void) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaProfilerStop, v4000), [] { return cudaSuccess; });
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamSynchronize, v3020),
               cudaStreamSynchronize_v3020_params{stream},
               [&] { return fake_cuda::StreamSynchronize(stream, NullStream::kLegacy); });
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamSynchronize_ptsz, v7000),
               cudaStreamSynchronize_ptsz_v7000_params{stream},
               [&] { return fake_cuda::StreamSynchronize(stream, NullStream::kPerThread); });
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamQuery, v3020),
               cudaStreamQuery_v3020_params{stream},
               [&] { return fake_cuda::StreamQuery(stream, NullStream::kLegacy); });
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamQuery_ptsz, v7000),
               cudaStreamQuery_ptsz_v7000_params{stream},
               [&] { return fake_cuda::StreamQuery(stream, NullStream::kPerThread); });
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamWaitEvent, v3020),
               cudaStreamWaitEvent_v3020_params{stream, event, flags}, [&] {
                 return fake_cuda::StreamWaitEvent(stream, event, flags, NullStream::kLegacy);
               });
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamWaitEvent_ptsz, v7000),
               cudaStreamWaitEvent_ptsz_v7000_params{stream, event, flags}, [&] {
                 return fake_cuda::StreamWaitEvent(stream, event, flags, NullStream::kPerThread);
               });
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamCreate, v3020),
               cudaStreamCreate_v3020_params{stream},
               [&] { return fake_cuda::StreamCreate(stream, cudaStreamDefault); });
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamCreateWithFlags, v5000),
               cudaStreamCreateWithFlags_v5000_params{stream, flags},
               [&] { return fake_cuda::StreamCreate(stream, flags); });
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamDestroy, v5050),
               cudaStreamDestroy_v5050_params{stream},
               [&] { return fake_cuda::StreamDestroy(stream); });
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventCreate, v3020),
               cudaEventCreate_v3020_params{event},
               [&] { return fake_cuda::EventCreate(event, cudaEventDefault); });
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventCreateWithFlags, v3020),
               cudaEventCreateWithFlags_v3020_params{event, flags},
               [&] { return fake_cuda::EventCreate(event, flags); });
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventDestroy, v3020),
               cudaEventDestroy_v3020_params{event},
               [&] { return fake_cuda::EventDestroy(event); });
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventRecord, v3020),
               cudaEventRecord_v3020_params{event, stream},
               [&] { return fake_cuda::EventRecord(event, stream, NullStream::kLegacy); });
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventRecord_ptsz, v7000),
               cudaEventRecord_ptsz_v7000_params{event, stream},
               [&] { return fake_cuda::EventRecord(event, stream, NullStream::kPerThread); });
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventQuery, v3020),
               cudaEventQuery_v3020_params{event}, [&] { return fake_cuda::EventQuery(event); });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaEventSynchronize, v3020),
               cudaEventSynchronize_v3020_params{event},
               [&] { return fake_cuda::EventSynchronize(event); });
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamBeginCapture, v10000),
               cudaStreamBeginCapture_v10000_params{stream, mode},
               [&] { return fake_cuda::BeginCapture(stream, mode, NullStream::kLegacy); });
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamBeginCapture_ptsz, v10000),
               cudaStreamBeginCapture_ptsz_v10000_params{stream, mode},
               [&] { return fake_cuda::BeginCapture(stream, mode, NullStream::kPerThread); });
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamEndCapture, v10000),
               cudaStreamEndCapture_v10000_params{stream, graph},
               [&] { return fake_cuda::EndCapture(stream, graph, NullStream::kLegacy); });
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaStreamEndCapture_ptsz, v10000),
               cudaStreamEndCapture_ptsz_v10000_params{stream, graph},
               [&] { return fake_cuda::EndCapture(stream, graph, NullStream::kPerThread); });
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGraphInstantiate, v12000),
               cudaGraphInstantiate_v12000_params{exec, graph, flags},
               [&] { return fake_cuda::GraphInstantiate(exec, graph, flags); });
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGraphLaunch, v10000),
               cudaGraphLaunch_v10000_params{exec, stream},
               [&] { return fake_cuda::GraphLaunch(exec, stream, NullStream::kLegacy); });
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGraphLaunch_ptsz, v10000),
               cudaGraphLaunch_ptsz_v10000_params{exec, stream},
               [&] { return fake_cuda::GraphLaunch(exec, stream, NullStream::kPerThread); });
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGraphExecDestroy, v10000),
               cudaGraphExecDestroy_v10000_params{exec},
               [&] { return fake_cuda::GraphExecDestroy(exec); });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGraphDestroy, v10000),
               cudaGraphDestroy_v10000_params{graph},
               [&] { return fake_cuda::GraphDestroy(graph); });
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMalloc, v3020), cudaMalloc_v3020_params{ptr, size},
               [&] { return fake_cuda::DeviceMalloc(ptr, size); });
}
cudaError_t cudaFree(void* ptr) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaFree, v3020), cudaFree_v3020_params{ptr},
               [&] { return fake_cuda::DeviceFree(ptr); });
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaHostAlloc, v3020),
               cudaHostAlloc_v3020_params{ptr, size, flags},
               [&] { return fake_cuda::HostAlloc(ptr, size, flags); });
}
// Through the exported cudaHostAlloc, as a runtime that builds one entry point on another does: an
// interposer sees the inner call nested in the outer one and must record only the outer. CUPTI
// sees one runtime call, cudaMallocHost, as the real runtime makes the inner one internally.
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaMallocHost, v3020),
               cudaMallocHost_v3020_params{ptr, size},
               [&] { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); });
}
cudaError_t cudaFreeHost(void* ptr) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaFreeHost, v3020), cudaFreeHost_v3020_params{ptr},
               [&] { return fake_cuda::HostFree(ptr); });
}
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaHostRegister, v4000),
               cudaHostRegister_v4000_params{ptr, size, flags},
               [&] { return fake_cuda::HostRegister(ptr, size, flags); });
}
cudaError_t cudaHostUnregister(void* ptr) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaHostUnregister, v4000),
               cudaHostUnregister_v4000_params{ptr},
               [&] { return fake_cuda::HostUnregister(ptr); });
}

// One device, ordinal 0.
cudaError_t cudaGetDeviceCount(int* count) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGetDeviceCount, v3020),
               cudaGetDeviceCount_v3020_params{count},
               [&] { return fake_cuda::SetOutput(count, 1); });
}
cudaError_t cudaGetDevice(int* device) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaGetDevice, v3020), cudaGetDevice_v3020_params{device},
               [&] { return fake_cuda::SetOutput(device, 0); });
}
cudaError_t cudaSetDevice(int device) {
  return Entry(FAKE_CUDA_RUNTIME_FUNCTION(cudaSetDevice, v3020), cudaSetDevice_v3020_params{device},
               [&] { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; });
}

cudaError_t cudaGetLastError(void) {
  return fake_cuda::RuntimeApi(FAKE_CUDA_RUNTIME_FUNCTION(cudaGetLastError, v3020), nullptr,
                               [] { return std::exchange(fake_cuda::last_error, cudaSuccess); });
}
cudaError_t cudaPeekAtLastError(void) {
  return fake_cuda::RuntimeApi(FAKE_CUDA_RUNTIME_FUNCTION(cudaPeekAtLastError, v3020), nullptr,
                               [] { return fake_cuda::last_error; });
}
// Not reported to CUPTI: their return value is no cudaError_t.
const char* cudaGetErrorString(cudaError_t error) {
  const fake_cuda::ErrorText* text = fake_cuda::FindErrorText(error);
  return text != nullptr ? text->description : fake_cuda::kUnrecognizedError;
}
const char* cudaGetErrorName(cudaError_t error) {
  const fake_cuda::ErrorText* text = fake_cuda::FindErrorText(error);
  return text != nullptr ? text->name : fake_cuda::kUnrecognizedError;
}

}  // extern "C"
