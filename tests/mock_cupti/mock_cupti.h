// The mock libcupti (libcupti.so.13 built from tests/mock_cupti, next to the fake libcudart.so.13
// in <build>/tests/fake_cuda): CUPTI's callback and activity APIs, with the real headers' types,
// result codes and rules, fed by the fake CUDA runtime (tests/fake_cuda) through the hooks below.
// CI has no GPU and no libcuda: this is how the injected library's CUPTI path runs there for real.
//
// Finding it
//   A program on the fake runtime has no libcupti of its own. An injected library finds this one
//   next to the process's libcudart.so.13, or at GPROF_CUPTI_LIB=<path> (libgprof_inject.so honours
//   it): programs that link the runtime statically (tests/apps/static_runtime_app) have no
//   libcudart to look beside, so their tests set it. The fake driver reports to it only if it is
//   loaded by the time the driver initialises (the injected library's InitializeInjection is the
//   place).
//
// What it implements, as cupti.h documents it
//   Callbacks: one subscriber (cuptiSubscribe, cuptiSubscribe_v2); a second is refused with
//   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED. Callbacks of the RUNTIME_API and DRIVER_API
//   domains fire, with a CUpti_CallbackData filled as CUPTI fills it; the other domains can be
//   enabled but never fire. cuptiGetCallbackName answers from the real cbid headers
//   ("cudaLaunchKernel_v7000", "cuLaunchKernel").
//   Correlation ids: every runtime and every driver API call gets its own, unique in the process
//   (so cuLaunchKernel inside cudaLaunchKernel has another id than its caller), shared by its
//   enter and exit callbacks and its CUpti_ActivityAPI record. GPU activity (kernels, copies,
//   memsets) and synchronization records carry the id of the outermost API call that caused them:
//   the runtime call for work queued through the runtime, as CUPTI's activity_trace_async sample
//   shows (a kernel with the correlationId of its cudaLaunchKernel record).
//   CUpti_ActivityMemcpy6::runtimeCorrelationId is 0: NVIDIA documents it as no longer used.
//   Activity: records of the real layouts (CUpti_ActivityKernel10 for CONCURRENT_KERNEL or KERNEL,
//   CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivitySynchronization2,
//   CUpti_ActivityAPI for RUNTIME and DRIVER), packed one after another in 8-byte-aligned slots.
//   CUpti_ActivityOverhead3 for OVERHEAD, from mock_cupti_overhead. CUpti_ActivityDevice5 for
//   DEVICE: the fake's one device (ordinal 0, visible, no MIG), written by
//   cuptiActivityEnableAndDump, which dumps the devices initialised before; cuptiActivityEnable
//   alone writes none, as when CUDA was initialised before CUPTI attached. Its UUID is
//   MOCK_CUPTI_DEVICE_UUID, else one of the process's own (each process of the fake has a GPU of
//   its own).
//   Other valid kinds can be enabled and produce nothing; the legacy profiler kinds are refused
//   with CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED, as in CUDA 13.
//   Buffers come from the client's bufferRequested callback, called on the thread whose record
//   needs the room (inside the CUDA call). A record of GPU work is written into the buffer when the
//   work is queued, with zero timestamps, and completed when the GPU has run it. A buffer is full
//   when the next record does not fit or it holds the requested maxNumRecords. bufferCompleted
//   gets a buffer back
//     - from the CUPTI worker thread ("mock-cupti", started when first needed), once it is full
//       and all its records are complete: at once by default, or at the next tick of the period
//       set by cuptiActivityFlushPeriod (a periodic flush returns full buffers only);
//     - on the caller's thread in cuptiActivityFlushAll(0): every buffer holding records, full or
//       not, whose records are all complete (so a plain flush returns nothing while a kernel of the
//       buffer still runs);
//     - on the caller's thread in cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED): every
//       buffer holding records. Records still incomplete keep zero timestamps (CUPTI documents
//       such records); their GPU work completes unrecorded, the buffer being the client's.
//   A buffer returned too small for the record that needed it is handed back empty (validSize 0).
//   Drops: a record that finds no room (no buffer callbacks registered, bufferRequested returned
//   none, a buffer too small or not 8-byte aligned, or MOCK_CUPTI_MAX_BUFFERS reached) is dropped
//   and counted: GPU and synchronization records under their context, API records under the
//   global queue (context NULL). cuptiActivityGetNumDroppedRecords returns one queue's count and
//   resets it, so a client must ask both.
//   Clock: activity timestamps and cuptiGetTimestamp come from the registered timestamp callback,
//   else from CLOCK_REALTIME (CUPTI's documented default on Linux). GPU times, which the fake
//   measures on CLOCK_MONOTONIC, are converted to that clock when their record completes, as CUPTI
//   converts GPU timestamps at post-processing; API records read the clock at the call.
//   Thread ids in API records: pthread_self() truncated to 32 bits by default, the kernel tid with
//   CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM.
//   cuptiFinalize detaches: no subscriber, nothing enabled, buffers forgotten (flush first), the
//   environment knobs read again. A forked child starts with a fresh, uninitialised CUPTI, as a
//   child that initialises CUDA loads one, and correlation ids go on counting.
//
// Environment knobs, read when CUPTI initialises (the first CUPTI call, and after cuptiFinalize)
//   MOCK_CUPTI_TAKEN=1
//     Every subscribe fails with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, as when
//     torch.profiler or Nsight Systems holds CUPTI (cuptiSubscribe_v2 names the holder
//     "CUPTI for MOCK_CUPTI_TAKEN").
//   MOCK_CUPTI_CLOCK_OFFSET_NS=N
//     Activity timestamps and cuptiGetTimestamp are CLOCK_MONOTONIC + N (N may be negative),
//     whatever timestamp callback is registered: what another library (Kineto) registering its
//     own clock with CUPTI does to ours.
//   MOCK_CUPTI_MAX_BUFFERS=N
//     After N bufferRequested calls, act as if the client gave no buffer: further records are
//     dropped and counted.
//   MOCK_CUPTI_DEVICE_UUID=<32 hex digits>
//     The device record's UUID: processes given the same one share a GPU, as far as a profiler
//     can tell.
#pragma once

// Not cupti.h: the fake runtime includes this, and cupti.h cannot follow cuda.h there (built with
// __CUDA_API_VERSION_INTERNAL, cuda.h defines the _v1 types cupti.h stubs).
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The hooks: how the fake driver (tests/fake_cuda/fake_driver.h) reports to CUPTI what the real
// driver reports to the real one. Exported, and resolved by the fake with dlsym.
#define MOCK_CUPTI_HOOK __attribute__((visibility("default")))

// One runtime or driver API call, as the driver reports it to CUPTI. The caller fills the first
// part, calls mock_cupti_api_enter before the call's work and mock_cupti_api_exit after it, on the
// calling thread, and keeps the struct alive in between.
typedef struct MockCuptiApiCall {
  CUpti_CallbackDomain domain;  // CUPTI_CB_DOMAIN_RUNTIME_API or CUPTI_CB_DOMAIN_DRIVER_API
  CUpti_CallbackId cbid;        // from cupti_runtime_cbid.h or cupti_driver_cbid.h
  const char* function_name;    // the function's name, e.g. "cudaLaunchKernel"; a global constant
  const void* params;           // its parameters struct (generated_*_meta.h), NULL if it has none
  const char* symbol_name;      // the kernel's name for launches, else NULL
  CUcontext context;
  uint32_t context_uid;
  // Set by mock_cupti_api_enter:
  uint32_t correlation_id;    // the call's correlation id, for the caller's activity records
  uint64_t correlation_data;  // what CUpti_CallbackData::correlationData points to
  uint64_t start_timestamp;   // activity clock; 0 when no API record is being collected
} MockCuptiApiCall;

// Assigns the call's correlation id and fires the enter callback if it is enabled.
MOCK_CUPTI_HOOK void mock_cupti_api_enter(MockCuptiApiCall* call);
// Fires the exit callback if enabled, then writes the call's CUpti_ActivityAPI record if its kind
// (RUNTIME or DRIVER) was enabled at the enter. `return_value` points to the call's cudaError_t or
// CUresult.
MOCK_CUPTI_HOOK void mock_cupti_api_exit(MockCuptiApiCall* call, const void* return_value);

// GPU work queued in `context`: a CUpti_ActivityKernel10 (kind CONCURRENT_KERNEL; filed under
// KERNEL when only that kind is enabled), CUpti_ActivityMemcpy6 or CUpti_ActivityMemset4, every
// field but the timestamps filled. Writes it, incomplete, if its kind is enabled. Returns the
// handle to complete it with, 0 if it was not written (kind off, or dropped).
MOCK_CUPTI_HOOK uint64_t mock_cupti_gpu_activity_queued(const CUpti_Activity* record,
                                                        CUcontext context);
// The work of `handle` ran from `start_ns` to `end_ns` (CLOCK_MONOTONIC): completes its record,
// unless a forced flush has already handed it over.
MOCK_CUPTI_HOOK void mock_cupti_gpu_activity_completed(uint64_t handle, uint64_t start_ns,
                                                       uint64_t end_ns);

// A complete CUpti_ActivitySynchronization2 in `context`, its timestamps on CLOCK_MONOTONIC:
// written if SYNCHRONIZATION is enabled.
MOCK_CUPTI_HOOK void mock_cupti_synchronization(const CUpti_ActivitySynchronization2* record,
                                                CUcontext context);

// Driver overhead on the calling thread from `start_ns` to `end_ns` (CLOCK_MONOTONIC), inside the
// API call with `correlation_id` (loading a module on a kernel's first launch, say): written as a
// CUpti_ActivityOverhead3 naming the thread (objectKind THREAD) if OVERHEAD is enabled.
MOCK_CUPTI_HOOK void mock_cupti_overhead(CUpti_ActivityOverheadKind kind, uint64_t start_ns,
                                         uint64_t end_ns, uint32_t correlation_id);

#ifdef __cplusplus
}  // extern "C"
#endif
