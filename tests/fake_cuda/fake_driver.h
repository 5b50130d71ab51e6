// The fake runtime's driver side, as a profiler sees the real libcuda:
//
// Injection. At the first API call of a process (cuInit, in the real driver), the fake dlopens the
// library CUDA_INJECTION64_PATH names, if any, and calls its InitializeInjection(). Once per
// process, and again in a forked child when it makes calls, as the real driver initialises anew
// there. Calls the injection library makes into the runtime meanwhile run untraced.
//
// CUPTI. Right after that, the fake looks for a libcupti loaded in the process (an object whose
// file name starts with "libcupti") and resolves the mock's hooks (tests/mock_cupti/mock_cupti.h)
// from it. Without one, or with one that lacks the hooks (the real one), or with one loaded later,
// nothing is reported and the fake behaves exactly as without profiling. Otherwise it reports:
//   - every runtime API call (RuntimeApi) and, nested inside, the driver API calls the real
//     runtime makes for it (DriverApi: cuLaunchKernel in cudaLaunchKernel, cuMemcpyAsync in
//     cudaMemcpyAsync, ...), with the real cbids and parameter structs. A runtime function the
//     runtime calls through another exported one (cudaMallocHost through cudaHostAlloc) is one
//     runtime call, as in the real runtime, whatever an interposer sees;
//   - the GPU work those calls queue, when it is queued and when the fake-gpu thread has run it;
//   - each host wait, as a synchronization record;
//   - loading a module on the first launch of one of its kernels, as driver overhead.
#pragma once

#include <cuda_runtime_api.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_meta.h>
#include <generated_cuda_runtime_api_meta.h>

#include <cstdint>

#include "tests/fake_cuda/fake_libcuda.h"
#include "tests/mock_cupti/mock_cupti.h"

namespace fake_cuda {

// The one device's one context, as CUPTI names it.
inline constexpr uint32_t kDeviceId = 0;
inline constexpr uint32_t kContextId = 1;
CUcontext Context();

// What the GPU runs for a kernel launch, as CUPTI names it (mangled): fakeKernel(unsigned int).
inline constexpr const char* kKernelName = "_Z10fakeKernelj";

// The mock libcupti's hooks, resolved at driver initialisation.
struct CuptiHooks {
  decltype(&mock_cupti_api_enter) api_enter;
  decltype(&mock_cupti_api_exit) api_exit;
  decltype(&mock_cupti_gpu_activity_queued) gpu_activity_queued;
  decltype(&mock_cupti_gpu_activity_completed) gpu_activity_completed;
  decltype(&mock_cupti_synchronization) synchronization;
  decltype(&mock_cupti_overhead) overhead;
};

// Initialises the driver once per process (see the top of this file).
void InitializeDriver();
// The hooks, or nullptr when nothing is reported to CUPTI.
const CuptiHooks* Cupti();

// The correlation id GPU work and host waits of the calling thread's current API call report: the
// outermost reported call's; 0 outside reported calls.
uint32_t ActivityCorrelationId();

// An API function as CUPTI names it: its callback id, and its exported name.
struct ApiFunction {
  CUpti_CallbackId cbid;
  const char* name;
};
// `function` with the cbid suffix `version` (cupti_runtime_cbid.h), e.g. (cudaMemcpy, v3020).
#define FAKE_CUDA_RUNTIME_FUNCTION(function, version) \
  ::fake_cuda::ApiFunction { CUPTI_RUNTIME_TRACE_CBID_##function##_##version, #function }
#define FAKE_CUDA_DRIVER_FUNCTION(function) \
  ::fake_cuda::ApiFunction { CUPTI_DRIVER_TRACE_CBID_##function, #function }

// One API call as CUPTI sees it: enter hooks when constructed, exit hooks at Exit.
class ApiScope {
 public:
  ApiScope(CUpti_CallbackDomain domain, ApiFunction function, const void* params,
           const char* symbol_name);
  void Exit(const void* return_value);
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  const CuptiHooks* hooks_;  // nullptr: not reported
  MockCuptiApiCall call_;
  uint32_t outer_correlation_id_;
};

// Runs `body` as the runtime API `function` called with `params` (its struct from
// generated_cuda_runtime_api_meta.h, nullptr if it has none).
template <typename Body>
cudaError_t RuntimeApi(ApiFunction function, const void* params, Body&& body,
                       const char* symbol_name = nullptr) {
  InitializeDriver();
  ApiScope scope(CUPTI_CB_DOMAIN_RUNTIME_API, function, params, symbol_name);
  const cudaError_t result = body();
  scope.Exit(&result);
  return result;
}

// The driver's result for a runtime error: every code the fake's driver calls fail with has the
// same number in both enums.
CUresult DriverResult(cudaError_t error);

// The fake libcuda.so.1's entry point `function` (fake_libcuda.cc), or nullptr where the runtime
// found no libcuda.so.1 next to itself (the static runtime): the runtime then runs the work itself.
fake_cuda_driver_entry_point DriverEntryPoint(ApiFunction function);

// Runs `body` as the driver API `function` (params from generated_cuda_meta.h): through the
// driver library's entry point of that name, as the real runtime calls the real driver.
template <typename Body>
cudaError_t DriverApi(ApiFunction function, const void* params, Body&& body,
                      const char* symbol_name = nullptr) {
  ApiScope scope(CUPTI_CB_DOMAIN_DRIVER_API, function, params, symbol_name);
  cudaError_t result;
  if (const fake_cuda_driver_entry_point entry = DriverEntryPoint(function)) {
    struct Call {
      Body* body;
      cudaError_t result;
    } call{&body, cudaSuccess};
    entry(
        [](void* context) {
          Call* the_call = static_cast<Call*>(context);
          the_call->result = (*the_call->body)();
          return static_cast<int>(the_call->result);
        },
        &call);
    result = call.result;
  } else {
    result = body();
  }
  const CUresult driver_result = DriverResult(result);
  scope.Exit(&driver_result);
  return result;
}

}  // namespace fake_cuda
