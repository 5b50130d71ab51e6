// The fake CUDA runtime (libcudart.so.13 built from tests/fake_cuda): its conventions, for the test
// programs that run on it. CI has no GPU, so the whole profiler is tested against this library,
// which reproduces on a CPU what matters to gprof-run: real futex contention on one driver lock,
// holders that sleep or spin while the GPU drains, and per-stream ordering.
//
// The simulated GPU
//   One device (ordinal 0). A worker thread named "fake-gpu", started on the first submitted work,
//   runs all work in submission order (hence in order within each stream; streams never overlap).
//   An item runs by sleeping until its end on a virtual GPU clock: it starts when submitted or when
//   the previous item ends, whichever is later. No bytes are ever moved or written.
//   - A kernel: `func` may be any address; `args[0]` must point to a uint32_t, the kernel's
//     duration in microseconds, read at launch time (real CUDA copies the arguments at launch too).
//   - Lazy module loading, as CUDA does by default: a kernel whose duration word has
//     kInLazyModule set is in a module loaded on the first launch of one of its kernels in a
//     process, which spends kModuleLoadNs on CPU inside the launch's cuLaunchKernel (outside the
//     driver lock) before queuing the kernel.
//   - A copy or memset: count / kCopyBytesPerNs nanoseconds (10 GB/s), at least kMinCopyNs.
//   - An event completes when the GPU has finished everything its stream held when it was recorded.
//     cudaStreamWaitEvent queues nothing: in a single in-order queue the wait is already satisfied.
//   - Stream capture records launches, copies and memsets (and graph launches) into a graph instead
//     of running them; cudaGraphLaunch queues the recorded items on its stream. Event records and
//     waits on a capturing stream are accepted and record nothing.
//   - cudaMalloc returns inaccessible address space (a host dereference faults, as on a GPU);
//     cudaMallocHost/cudaHostAlloc return readable, writable host memory.
//
// The driver lock: one process-wide pthread mutex in this library's data, as the real driver's
// lock is in libcuda's data; contended, it is a futex wait.
//   - Held briefly: every call that queues work or touches a handle (launches, async copies and
//     memsets, event record/query/create/destroy, stream create/destroy/query/wait, capture, graph
//     calls, cudaMalloc, cudaHostRegister/Unregister). cudaStreamSynchronize, cudaEventSynchronize
//     and the synchronous cudaMemcpy/cudaMemset take it only to queue or look up, then wait for the
//     GPU without it.
//   - Held while the GPU drains, sleeping on a condition variable that the fake-gpu thread signals
//     (the holder is off-CPU, woken by fake-gpu): cudaDeviceSynchronize.
//   - Held while the GPU drains, spinning on-CPU (as the real driver does, design.md section 6):
//     cudaFree, cudaFreeHost, cudaHostAlloc and cudaMallocHost (the latter is cudaHostAlloc with
//     default flags in the real runtime too). Null or zero-size requests return at once.
//   So a launch from another thread blocks behind any of these until the GPU is idle.
//   - Not taken: device queries (cudaGetDevice, cudaSetDevice, cudaGetDeviceCount) and error calls.
//
// Errors: misuse returns the real codes (null output pointers and unknown allocations:
// cudaErrorInvalidValue; unknown or destroyed streams, events and graphs:
// cudaErrorInvalidResourceHandle). Every failing call sets the calling thread's last error, which
// cudaGetLastError returns and resets and cudaPeekAtLastError returns. Nothing is ever printed.
//
// Process lifetime: the state is never torn down, so exiting with work queued or threads blocked in
// calls is safe. After fork() the child starts with a fresh device (no queued work, the parent's
// handles and allocations unknown) and an unlocked driver lock, so it can make calls again.
//
// Profiling, as the real driver allows it (details in fake_driver.h): at the first call of a
// process (and of a forked child) the fake loads CUDA_INJECTION64_PATH and calls its
// InitializeInjection(); if a libcupti with the mock's hooks (tests/mock_cupti) is loaded by then,
// every runtime call, the driver calls the runtime makes for it, the GPU work it queues and each
// host wait are reported to CUPTI. Without both, nothing else changes. The same runtime is built as
// a static archive, libcudart_static.a, for programs that link the runtime statically
// (apps/static_runtime_app.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace fake_cuda {

inline constexpr uint64_t kCopyBytesPerNs = 10;  // 10 GB/s
inline constexpr uint64_t kMinCopyNs = 3'000;

// Any address serves as a kernel; test programs launch this one.
inline constexpr char kKernel = 0;

// Set in a kernel's duration word: the kernel is in the module the driver loads on first use.
inline constexpr uint32_t kInLazyModule = 1u << 31;
inline constexpr uint64_t kModuleLoadNs = 40'000'000;

// Set in a kernel's duration word: `args[1]` points to a KernelGate. The kernel runs its duration,
// then until the gate's word (in memory other processes may share) holds `open`, as NCCL's kernels
// wait for the other ranks; its activity record is named `name` (null: the usual name). With
// `arrivals`, the kernel counts itself there as it starts on the GPU (an NCCL kernel takes part
// once it runs, not when it is launched), and the last of `parties` opens the gate.
inline constexpr uint32_t kUntilGateOpens = 1u << 30;
struct KernelGate {
  std::atomic<uint32_t>* word;
  uint32_t open;
  const char* name;
  std::atomic<uint32_t>* arrivals = nullptr;
  uint32_t parties = 0;
};

// The longest kernel the duration word holds below its flags: about 17.9 minutes.
inline constexpr uint32_t kMaxKernelUs = kUntilGateOpens - 1;

// Launches a kernel that keeps the GPU busy for `duration_us` microseconds, at most kMaxKernelUs
// (with kInLazyModule: a kernel of the lazily loaded module).
inline cudaError_t LaunchKernel(uint32_t duration_us, cudaStream_t stream) {
  duration_us = (duration_us & kInLazyModule) | std::min(duration_us & ~kInLazyModule, kMaxKernelUs);
  void* args[] = {&duration_us};
  return cudaLaunchKernel(&kKernel, dim3(1), dim3(1), args, 0, stream);
}

}  // namespace fake_cuda
