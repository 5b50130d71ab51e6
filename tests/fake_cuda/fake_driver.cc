#include "tests/fake_cuda/fake_driver.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The driver's opaque context type, completed here: the one context is this object.
struct CUctx_st {};

namespace fake_cuda {
namespace {

CUctx_st the_context;

// Guards the driver's initialisation. A fresh one in a forked child, which initialises again.
pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> initialized{false};
thread_local bool initializing = false;  // inside the injection library's InitializeInjection

CuptiHooks mock_cupti_hooks;
std::atomic<const CuptiHooks*> cupti{nullptr};

thread_local int runtime_call_depth = 0;
thread_local uint32_t activity_correlation_id = 0;

// libcuda.so.1 beside this library (the fake's driver, fake_libcuda.cc), loaded when this library
// is (the real runtime loads the driver at its first call, which would take the dynamic loader's
// lock there: tests that hold that lock meanwhile expect the first call not to); null where there
// is none.
std::atomic<void*> driver_library{nullptr};
// Its entry points by cbid, all looked up when it is loaded: dlsym takes the dynamic loader's lock,
// which a first call must not (as for the load itself).
constexpr size_t kMaxCbid = 4096;
void* entry_points[kMaxCbid];

__attribute__((constructor)) void LoadDriverLibrary() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&LoadDriverLibrary), &self) == 0 || self.dli_fname == nullptr)
    return;
  std::string path = self.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libcuda.so.1";
  // Only beside a shared runtime: the static one is in the program's own file.
  if (std::strstr(self.dli_fname, "libcudart") == nullptr) return;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return;
#define FAKE_CUDA_RESOLVE_ENTRY_POINT(name)                 \
  static_assert(CUPTI_DRIVER_TRACE_CBID_##name < kMaxCbid); \
  entry_points[CUPTI_DRIVER_TRACE_CBID_##name] = dlsym(library, #name);
  FAKE_CUDA_DRIVER_ENTRY_POINTS(FAKE_CUDA_RESOLVE_ENTRY_POINT)
#undef FAKE_CUDA_RESOLVE_ENTRY_POINT
  driver_library.store(library, std::memory_order_release);
}

void LoadInjectionLibrary() {
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  if (path == nullptr || *path == '\0') return;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return;
  using InitializeInjection = int (*)();
  const auto initialize =
      reinterpret_cast<InitializeInjection>(dlsym(library, "InitializeInjection"));
  if (initialize != nullptr) initialize();
}

// The paths of the loaded objects named libcupti*.
std::vector<std::string> LoadedCuptiPaths() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* found) {
        const char* slash = std::strrchr(info->dlpi_name, '/');
        const char* name = slash != nullptr ? slash + 1 : info->dlpi_name;
        if (std::strncmp(name, "libcupti", std::strlen("libcupti")) == 0) {
          static_cast<std::vector<std::string>*>(found)->push_back(info->dlpi_name);
        }
        return 0;
      },
      &paths);
  return paths;
}

template <typename Function>
bool Resolve(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  return function != nullptr;
}

bool ResolveHooks(void* library, CuptiHooks& hooks) {
  return Resolve(library, "mock_cupti_api_enter", hooks.api_enter) &&
         Resolve(library, "mock_cupti_api_exit", hooks.api_exit) &&
         Resolve(library, "mock_cupti_gpu_activity_queued", hooks.gpu_activity_queued) &&
         Resolve(library, "mock_cupti_gpu_activity_completed", hooks.gpu_activity_completed) &&
         Resolve(library, "mock_cupti_synchronization", hooks.synchronization) &&
         Resolve(library, "mock_cupti_overhead", hooks.overhead);
}

const CuptiHooks* FindMockCupti() {
  for (const std::string& path : LoadedCuptiPaths()) {
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (library != nullptr && ResolveHooks(library, mock_cupti_hooks)) return &mock_cupti_hooks;
  }
  return nullptr;
}

__attribute__((constructor)) void InitializeAgainInForkedChildren() {
  pthread_atfork(nullptr, nullptr, [] {
    pthread_mutex_init(&init_lock, nullptr);
    initialized.store(false);
    cupti.store(nullptr);
  });
}

}  // namespace

CUcontext Context() { return &the_context; }

void InitializeDriver() {
  if (initialized.load(std::memory_order_acquire) || initializing) return;
  // Held throughout, as cuInit holds the real driver: other threads' first calls wait for it.
  pthread_mutex_lock(&init_lock);
  if (!initialized.load(std::memory_order_relaxed)) {
    initializing = true;
    LoadInjectionLibrary();
    cupti.store(FindMockCupti(), std::memory_order_release);
    initializing = false;
    initialized.store(true, std::memory_order_release);
  }
  pthread_mutex_unlock(&init_lock);
}

fake_cuda_driver_entry_point DriverEntryPoint(ApiFunction function) {
  if (driver_library.load(std::memory_order_acquire) == nullptr || function.cbid >= kMaxCbid)
    return nullptr;
  return reinterpret_cast<fake_cuda_driver_entry_point>(entry_points[function.cbid]);
}

const CuptiHooks* Cupti() { return cupti.load(std::memory_order_acquire); }

uint32_t ActivityCorrelationId() { return activity_correlation_id; }

ApiScope::ApiScope(CUpti_CallbackDomain domain, ApiFunction function, const void* params,
                   const char* symbol_name)
    : hooks_(Cupti()), call_{}, outer_correlation_id_(activity_correlation_id) {
  // A runtime function called by another one is part of that call, as inside the real runtime.
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && runtime_call_depth++ > 0) hooks_ = nullptr;
  call_.domain = domain;
  if (hooks_ == nullptr) return;
  call_.cbid = function.cbid;
  call_.function_name = function.name;
  call_.params = params;
  call_.symbol_name = symbol_name;
  call_.context = Context();
  call_.context_uid = kContextId;
  hooks_->api_enter(&call_);
  if (activity_correlation_id == 0) activity_correlation_id = call_.correlation_id;
}

void ApiScope::Exit(const void* return_value) {
  if (call_.domain == CUPTI_CB_DOMAIN_RUNTIME_API) --runtime_call_depth;
  if (hooks_ == nullptr) return;
  hooks_->api_exit(&call_, return_value);
  activity_correlation_id = outer_correlation_id_;
}

CUresult DriverResult(cudaError_t error) {
  static_assert(int(cudaSuccess) == int(CUDA_SUCCESS));
  static_assert(int(cudaErrorInvalidValue) == int(CUDA_ERROR_INVALID_VALUE));
  static_assert(int(cudaErrorMemoryAllocation) == int(CUDA_ERROR_OUT_OF_MEMORY));
  static_assert(int(cudaErrorInitializationError) == int(CUDA_ERROR_NOT_INITIALIZED));
  static_assert(int(cudaErrorInvalidResourceHandle) == int(CUDA_ERROR_INVALID_HANDLE));
  static_assert(int(cudaErrorIllegalState) == int(CUDA_ERROR_ILLEGAL_STATE));
  static_assert(int(cudaErrorNotReady) == int(CUDA_ERROR_NOT_READY));
  static_assert(int(cudaErrorHostMemoryAlreadyRegistered) ==
                int(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED));
  static_assert(int(cudaErrorHostMemoryNotRegistered) ==
                int(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED));
  static_assert(int(cudaErrorStreamCaptureUnsupported) ==
                int(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
  return static_cast<CUresult>(error);
}

}  // namespace fake_cuda
