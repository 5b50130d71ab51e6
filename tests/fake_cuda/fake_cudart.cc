// The CUDA runtime API of the fake libcudart.so.13: handles, error state and the driver lock. The
// GPU itself is FakeGpu; the rules this file implements are documented in fake_cuda.h.
//
// Built with __CUDA_API_VERSION_INTERNAL, as NVIDIA builds the real library: cuda_runtime_api.h
// then declares both the plain entry points and their _ptsz/_ptds variants, so every definition
// below is checked against the real declaration.
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fake_cuda.h"
#include "fake_gpu.h"

using fake_cuda::FakeGpu;

// The runtime's opaque handle types, completed here: a handle is the address of its object.
struct CUstream_st {
  FakeGpu::Seq last_seq = 0;                     // the last item queued on this stream
  std::optional<std::vector<uint64_t>> capture;  // item durations recorded while capturing
};
struct CUevent_st {
  FakeGpu::Seq seq = 0;  // the last item of its stream when recorded; 0 (never recorded) is done
};
struct CUgraph_st {
  std::vector<uint64_t> durations_ns;
};
struct CUgraphExec_st {
  std::vector<uint64_t> durations_ns;
};

namespace fake_cuda {
namespace {

using Seq = FakeGpu::Seq;

// What the null stream handle names: the legacy default stream for the plain entry points, the
// per-thread default stream for the _ptsz/_ptds variants.
enum class NullStream { kLegacy, kPerThread };

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

// Everything the driver lock guards (FakeGpu has its own lock).
struct Driver {
  FakeGpu gpu;
  CUstream_st legacy_stream;
  // One object for every thread's per-thread stream: with a single in-order queue, keeping them
  // apart would only make their synchronisation wait for less (and capture one thread's work only).
  CUstream_st per_thread_stream;
  HandleTable<CUstream_st> streams;
  HandleTable<CUevent_st> events;
  HandleTable<CUgraph_st> graphs;
  HandleTable<CUgraphExec_st> graph_execs;
  std::unordered_map<void*, size_t> device_allocations;  // address -> size
  std::unordered_map<void*, size_t> host_allocations;
  std::unordered_set<void*> registered_host_memory;
};

// The driver lock, in this library's .bss as the real one is in libcuda's data: the futex address a
// profiler sees blocked launches wait on. Plain pthread mutex, so contention is a real futex wait.
pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;

// Never destroyed, so exiting while threads are inside calls is safe. Replaced in a forked child.
Driver* driver = nullptr;

class DriverLock {
 public:
  DriverLock() { pthread_mutex_lock(&driver_lock); }
  ~DriverLock() { pthread_mutex_unlock(&driver_lock); }
  DriverLock(const DriverLock&) = delete;
  DriverLock& operator=(const DriverLock&) = delete;
};

// The parent's other threads do not exist in the child, and may have held the driver lock or been
// inside the queue or a handle table at fork time: start afresh rather than repair, and abandon the
// old state.
void ResetInForkedChild() {
  pthread_mutex_init(&driver_lock, nullptr);
  driver = new Driver;
}

__attribute__((constructor)) void Initialize() {
  driver = new Driver;
  pthread_atfork(nullptr, nullptr, &ResetInForkedChild);
}

thread_local cudaError_t last_error = cudaSuccess;

// Every exported call that can fail returns through here: each failure becomes the last error.
cudaError_t Record(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
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

// Queues an item on `stream`, or records it into the stream's capture. Caller holds the lock.
cudaError_t Enqueue(CUstream_st& stream, uint64_t duration_ns) {
  if (stream.capture) {
    stream.capture->push_back(duration_ns);
    return cudaSuccess;
  }
  const std::optional<Seq> seq = driver->gpu.Submit(duration_ns);
  if (!seq) return cudaErrorInitializationError;
  stream.last_seq = *seq;
  return cudaSuccess;
}

// Queues an item on `stream_handle` under the driver lock, held only for that.
cudaError_t EnqueueOn(cudaStream_t stream_handle, NullStream null_stream, uint64_t duration_ns) {
  DriverLock lock;
  CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  return Enqueue(*stream, duration_ns);
}

// Queues an item on a default stream, then waits for it without the driver lock (cudaMemcpy).
cudaError_t RunSynchronously(NullStream null_stream, uint64_t duration_ns) {
  Seq seq;
  {
    DriverLock lock;
    CUstream_st& stream = DefaultStream(null_stream);
    if (stream.capture) return cudaErrorStreamCaptureUnsupported;
    if (const cudaError_t error = Enqueue(stream, duration_ns); error != cudaSuccess) return error;
    seq = stream.last_seq;
  }
  driver->gpu.WaitSleeping(seq);
  return cudaSuccess;
}

// Holds the caller's driver lock until the GPU is idle, spinning on-CPU as the real driver does in
// cudaFree, cudaFreeHost and cudaHostAlloc (design.md section 6).
void DrainSpinning() { driver->gpu.WaitSpinning(driver->gpu.LastSubmitted()); }

uint64_t CopyDurationNs(size_t bytes) {
  return std::max<uint64_t>(kMinCopyNs, bytes / kCopyBytesPerNs);
}

cudaError_t CheckCopy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  if (count > 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t CheckMemset(void* ptr, size_t count) {
  return count > 0 && ptr == nullptr ? cudaErrorInvalidValue : cudaSuccess;
}

cudaError_t QueueKernel(const void* func, dim3 grid, dim3 block, void** args, cudaStream_t stream,
                        NullStream null_stream) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return cudaErrorInvalidConfiguration;
  }
  if (args == nullptr || args[0] == nullptr) return cudaErrorInvalidValue;
  uint32_t duration_us;
  std::memcpy(&duration_us, args[0], sizeof duration_us);  // the arguments are read at launch time
  return EnqueueOn(stream, null_stream, uint64_t(duration_us) * 1000);
}

cudaError_t MemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                        cudaStream_t stream, NullStream null_stream) {
  if (const cudaError_t error = CheckCopy(dst, src, count, kind); error != cudaSuccess)
    return error;
  return EnqueueOn(stream, null_stream, CopyDurationNs(count));
}

cudaError_t MemcpySync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                       NullStream null_stream) {
  if (const cudaError_t error = CheckCopy(dst, src, count, kind); error != cudaSuccess)
    return error;
  return RunSynchronously(null_stream, CopyDurationNs(count));
}

cudaError_t MemsetAsync(void* ptr, size_t count, cudaStream_t stream, NullStream null_stream) {
  if (const cudaError_t error = CheckMemset(ptr, count); error != cudaSuccess) return error;
  return EnqueueOn(stream, null_stream, CopyDurationNs(count));
}

cudaError_t MemsetSync(void* ptr, size_t count, NullStream null_stream) {
  if (const cudaError_t error = CheckMemset(ptr, count); error != cudaSuccess) return error;
  return RunSynchronously(null_stream, CopyDurationNs(count));
}

cudaError_t StreamSynchronize(cudaStream_t stream_handle, NullStream null_stream) {
  Seq seq;
  {
    DriverLock lock;
    const CUstream_st* stream = FindStream(stream_handle, null_stream);
    if (stream == nullptr) return cudaErrorInvalidResourceHandle;
    if (stream->capture) return cudaErrorStreamCaptureUnsupported;
    seq = stream->last_seq;
  }
  driver->gpu.WaitSleeping(seq);
  return cudaSuccess;
}

cudaError_t StreamQuery(cudaStream_t stream_handle, NullStream null_stream) {
  DriverLock lock;
  const CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  if (stream->capture) return cudaErrorStreamCaptureUnsupported;
  return driver->gpu.IsDone(stream->last_seq) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t StreamWaitEvent(cudaStream_t stream_handle, cudaEvent_t event, unsigned int flags,
                            NullStream null_stream) {
  if ((flags & ~cudaEventWaitExternal) != 0) return cudaErrorInvalidValue;
  DriverLock lock;
  if (FindStream(stream_handle, null_stream) == nullptr || driver->events.Find(event) == nullptr) {
    return cudaErrorInvalidResourceHandle;
  }
  return cudaSuccess;  // the single in-order queue already runs the event's work first
}

cudaError_t EventRecord(cudaEvent_t event_handle, cudaStream_t stream_handle,
                        NullStream null_stream) {
  DriverLock lock;
  CUevent_st* event = driver->events.Find(event_handle);
  const CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (event == nullptr || stream == nullptr) return cudaErrorInvalidResourceHandle;
  if (!stream->capture) event->seq = stream->last_seq;
  return cudaSuccess;
}

cudaError_t BeginCapture(cudaStream_t stream_handle, NullStream null_stream) {
  DriverLock lock;
  CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  if (stream == &driver->legacy_stream) return cudaErrorStreamCaptureUnsupported;
  if (stream->capture) return cudaErrorIllegalState;
  stream->capture.emplace();
  return cudaSuccess;
}

cudaError_t EndCapture(cudaStream_t stream_handle, cudaGraph_t* graph, NullStream null_stream) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  DriverLock lock;
  CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  if (!stream->capture) return cudaErrorIllegalState;
  *graph = driver->graphs.Create({std::move(*stream->capture)});
  stream->capture.reset();
  return cudaSuccess;
}

cudaError_t GraphLaunch(cudaGraphExec_t exec_handle, cudaStream_t stream_handle,
                        NullStream null_stream) {
  DriverLock lock;
  const CUgraphExec_st* exec = driver->graph_execs.Find(exec_handle);
  CUstream_st* stream = FindStream(stream_handle, null_stream);
  if (exec == nullptr || stream == nullptr) return cudaErrorInvalidResourceHandle;
  for (const uint64_t duration_ns : exec->durations_ns) {
    if (const cudaError_t error = Enqueue(*stream, duration_ns); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t DeviceSynchronize() {
  // Holds the driver lock while the GPU drains, asleep until the fake-gpu thread wakes it.
  DriverLock lock;
  driver->gpu.WaitSleeping(driver->gpu.LastSubmitted());
  return cudaSuccess;
}

cudaError_t StreamCreate(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return cudaErrorInvalidValue;
  DriverLock lock;
  *stream = driver->streams.Create();
  return cudaSuccess;
}

cudaError_t StreamDestroy(cudaStream_t stream) {
  DriverLock lock;
  return driver->streams.Destroy(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t EventCreate(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr ||
      (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)) != 0) {
    return cudaErrorInvalidValue;
  }
  DriverLock lock;
  *event = driver->events.Create();
  return cudaSuccess;
}

cudaError_t EventDestroy(cudaEvent_t event) {
  DriverLock lock;
  return driver->events.Destroy(event) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t EventQuery(cudaEvent_t event_handle) {
  DriverLock lock;
  const CUevent_st* event = driver->events.Find(event_handle);
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  return driver->gpu.IsDone(event->seq) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t EventSynchronize(cudaEvent_t event_handle) {
  Seq seq;
  {
    DriverLock lock;
    const CUevent_st* event = driver->events.Find(event_handle);
    if (event == nullptr) return cudaErrorInvalidResourceHandle;
    seq = event->seq;
  }
  driver->gpu.WaitSleeping(seq);
  return cudaSuccess;
}

cudaError_t GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph_handle) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  DriverLock lock;
  const CUgraph_st* graph = driver->graphs.Find(graph_handle);
  if (graph == nullptr) return cudaErrorInvalidResourceHandle;
  *exec = driver->graph_execs.Create({graph->durations_ns});
  return cudaSuccess;
}

cudaError_t GraphDestroy(cudaGraph_t graph) {
  DriverLock lock;
  return driver->graphs.Destroy(graph) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t GraphExecDestroy(cudaGraphExec_t exec) {
  DriverLock lock;
  return driver->graph_execs.Destroy(exec) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t DeviceMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  DriverLock lock;
  // Address space only: the host cannot touch device memory.
  void* memory = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return cudaErrorMemoryAllocation;
  driver->device_allocations.emplace(memory, size);
  *ptr = memory;
  return cudaSuccess;
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
  DriverLock lock;
  DrainSpinning();
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return cudaErrorMemoryAllocation;
  driver->host_allocations.emplace(memory, size);
  *ptr = memory;
  return cudaSuccess;
}

// cudaFree and cudaFreeHost: hold the driver lock while the GPU drains, then release the memory.
cudaError_t FreeAfterDrain(std::unordered_map<void*, size_t> Driver::*allocations_of, void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  DriverLock lock;
  std::unordered_map<void*, size_t>& allocations = driver->*allocations_of;
  const auto it = allocations.find(ptr);
  if (it == allocations.end()) return cudaErrorInvalidValue;
  DrainSpinning();
  munmap(it->first, it->second);
  allocations.erase(it);
  return cudaSuccess;
}

cudaError_t HostRegister(void* ptr, size_t size) {
  if (ptr == nullptr || size == 0) return cudaErrorInvalidValue;
  DriverLock lock;
  const bool inserted = driver->registered_host_memory.insert(ptr).second;
  return inserted ? cudaSuccess : cudaErrorHostMemoryAlreadyRegistered;
}

cudaError_t HostUnregister(void* ptr) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  DriverLock lock;
  return driver->registered_host_memory.erase(ptr) == 1 ? cudaSuccess
                                                        : cudaErrorHostMemoryNotRegistered;
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

}  // namespace
}  // namespace fake_cuda

using fake_cuda::NullStream;
using fake_cuda::Record;

// The exported entry points: each forwards to its implementation above, and never to another entry
// point, which a preloaded interposer would then record as a second call.
extern "C" {

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t,
                             cudaStream_t stream) {
  return Record(fake_cuda::QueueKernel(func, grid, block, args, stream, NullStream::kLegacy));
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t,
                                  cudaStream_t stream) {
  return Record(fake_cuda::QueueKernel(func, grid, block, args, stream, NullStream::kPerThread));
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Record(fake_cuda::MemcpySync(dst, src, count, kind, NullStream::kLegacy));
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Record(fake_cuda::MemcpySync(dst, src, count, kind, NullStream::kPerThread));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return Record(fake_cuda::MemcpyAsync(dst, src, count, kind, stream, NullStream::kLegacy));
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return Record(fake_cuda::MemcpyAsync(dst, src, count, kind, stream, NullStream::kPerThread));
}
cudaError_t cudaMemset(void* ptr, int, size_t count) {
  return Record(fake_cuda::MemsetSync(ptr, count, NullStream::kLegacy));
}
cudaError_t cudaMemset_ptds(void* ptr, int, size_t count) {
  return Record(fake_cuda::MemsetSync(ptr, count, NullStream::kPerThread));
}
cudaError_t cudaMemsetAsync(void* ptr, int, size_t count, cudaStream_t stream) {
  return Record(fake_cuda::MemsetAsync(ptr, count, stream, NullStream::kLegacy));
}
cudaError_t cudaMemsetAsync_ptsz(void* ptr, int, size_t count, cudaStream_t stream) {
  return Record(fake_cuda::MemsetAsync(ptr, count, stream, NullStream::kPerThread));
}

cudaError_t cudaDeviceSynchronize(void) { return Record(fake_cuda::DeviceSynchronize()); }
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return Record(fake_cuda::StreamSynchronize(stream, NullStream::kLegacy));
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return Record(fake_cuda::StreamSynchronize(stream, NullStream::kPerThread));
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return Record(fake_cuda::StreamQuery(stream, NullStream::kLegacy));
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  return Record(fake_cuda::StreamQuery(stream, NullStream::kPerThread));
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Record(fake_cuda::StreamWaitEvent(stream, event, flags, NullStream::kLegacy));
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Record(fake_cuda::StreamWaitEvent(stream, event, flags, NullStream::kPerThread));
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return Record(fake_cuda::StreamCreate(stream, cudaStreamDefault));
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return Record(fake_cuda::StreamCreate(stream, flags));
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return Record(fake_cuda::StreamDestroy(stream));
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return Record(fake_cuda::EventCreate(event, cudaEventDefault));
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return Record(fake_cuda::EventCreate(event, flags));
}
cudaError_t cudaEventDestroy(cudaEvent_t event) { return Record(fake_cuda::EventDestroy(event)); }
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return Record(fake_cuda::EventRecord(event, stream, NullStream::kLegacy));
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return Record(fake_cuda::EventRecord(event, stream, NullStream::kPerThread));
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return Record(fake_cuda::EventQuery(event)); }
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return Record(fake_cuda::EventSynchronize(event));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  return Record(fake_cuda::BeginCapture(stream, NullStream::kLegacy));
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode) {
  return Record(fake_cuda::BeginCapture(stream, NullStream::kPerThread));
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return Record(fake_cuda::EndCapture(stream, graph, NullStream::kLegacy));
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return Record(fake_cuda::EndCapture(stream, graph, NullStream::kPerThread));
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  return Record(fake_cuda::GraphInstantiate(exec, graph));
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return Record(fake_cuda::GraphLaunch(exec, stream, NullStream::kLegacy));
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return Record(fake_cuda::GraphLaunch(exec, stream, NullStream::kPerThread));
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return Record(fake_cuda::GraphExecDestroy(exec));
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return Record(fake_cuda::GraphDestroy(graph)); }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  return Record(fake_cuda::DeviceMalloc(ptr, size));
}
cudaError_t cudaFree(void* ptr) {
  return Record(fake_cuda::FreeAfterDrain(&fake_cuda::Driver::device_allocations, ptr));
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return Record(fake_cuda::HostAlloc(ptr, size, flags));
}
// Through the exported cudaHostAlloc, as a runtime that builds one entry point on another does: an
// interposer sees the inner call nested in the outer one and must record only the outer.
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}
cudaError_t cudaFreeHost(void* ptr) {
  return Record(fake_cuda::FreeAfterDrain(&fake_cuda::Driver::host_allocations, ptr));
}
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
  return Record(fake_cuda::HostRegister(ptr, size));
}
cudaError_t cudaHostUnregister(void* ptr) { return Record(fake_cuda::HostUnregister(ptr)); }

// One device, ordinal 0.
cudaError_t cudaGetDeviceCount(int* count) { return Record(fake_cuda::SetOutput(count, 1)); }
cudaError_t cudaGetDevice(int* device) { return Record(fake_cuda::SetOutput(device, 0)); }
cudaError_t cudaSetDevice(int device) {
  return Record(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetLastError(void) { return std::exchange(fake_cuda::last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError(void) { return fake_cuda::last_error; }
const char* cudaGetErrorString(cudaError_t error) {
  const fake_cuda::ErrorText* text = fake_cuda::FindErrorText(error);
  return text != nullptr ? text->description : fake_cuda::kUnrecognizedError;
}
const char* cudaGetErrorName(cudaError_t error) {
  const fake_cuda::ErrorText* text = fake_cuda::FindErrorText(error);
  return text != nullptr ? text->name : fake_cuda::kUnrecognizedError;
}

}  // extern "C"
