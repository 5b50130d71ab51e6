// Proves that the mock libcupti and the fake driver behave as CUPTI and the real driver do where
// the injected library depends on them (mock_cupti.h, fake_driver.h): callbacks and their data,
// correlation ids, activity records and their fields, buffers, flushes, drops, clocks, and the
// injection itself. Two halves:
//   - in process: this binary is the CUPTI client, as Kineto is inside PyTorch. It links the mock,
//     which the fake driver finds loaded at its first call;
//   - through injection: the test programs run with CUDA_INJECTION64_PATH naming
//     libmock_cupti_client.so, which writes what it saw to a log per process
//     (mock_cupti_client.cc).
//
// GPU times are converted from CLOCK_MONOTONIC through a measured offset, so comparisons with API
// times allow kClockSlackNs.
#include <cupti.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fake_cuda/fake_cuda.h"
#include "tests/test_support.h"

namespace {

using gprof::test::AppPath;
using gprof::test::BuildDir;
using gprof::test::Command;
using gprof::test::ProcessResult;
using gprof::test::ProcessSpec;
using gprof::test::ReadFile;
using gprof::test::RunProcess;
using gprof::test::TempDir;

constexpr uint64_t kClockSlackNs = 1'000;
constexpr const char* kKernelName = "_Z10fakeKernelj";  // what the fake driver calls every kernel
constexpr size_t kDefaultBufferBytes = 1 << 20;
constexpr const char* kKnobs[] = {"MOCK_CUPTI_TAKEN", "MOCK_CUPTI_CLOCK_OFFSET_NS",
                                  "MOCK_CUPTI_MAX_BUFFERS", "MOCK_CUPTI_DEVICE_UUID"};

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}
uint64_t CUPTIAPI MonotonicNs() { return ClockNs(CLOCK_MONOTONIC); }
pid_t Tid() { return pid_t(syscall(SYS_gettid)); }

// Polls `done` until it holds or `timeout_ms` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
  const uint64_t deadline = MonotonicNs() + uint64_t(timeout_ms) * 1'000'000;
  while (!done()) {
    if (MonotonicNs() > deadline) return false;
    usleep(2'000);
  }
  return true;
}

// Runs `body` in a forked child; its exit status, or -1 if it did not exit within `timeout_ms`.
int RunInChild(const std::function<int()>& body, int timeout_ms) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  if (!WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout_ms)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

cudaError_t Launch(uint32_t duration_us, cudaStream_t stream, dim3 grid = dim3(1),
                   dim3 block = dim3(1), size_t shared_mem_bytes = 0) {
  void* args[] = {&duration_us};
  return cudaLaunchKernel(&fake_cuda::kKernel, grid, block, args, shared_mem_bytes, stream);
}

// What this process, as a CUPTI client, received. Written by the CUPTI callbacks below.
struct Callback {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  CUpti_ApiCallbackSite site;
  std::string function_name;
  std::string symbol_name;
  uint32_t correlation_id;
  CUcontext context;
  uint32_t context_uid;
  pid_t tid;
};

struct Delivery {
  pid_t tid;
  size_t size;
  size_t valid_size;
  uint64_t time_ns;  // CLOCK_MONOTONIC
};

class Received {
 public:
  void Reset() {
    std::lock_guard lock(mutex_);
    callbacks_.clear();
    records_.clear();
    deliveries_.clear();
    buffers_requested_ = 0;
    buffer_bytes = kDefaultBufferBytes;
    give_buffers = true;
    inspect = nullptr;
  }

  void AddCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                   const CUpti_CallbackData& data) {
    if (inspect) inspect(domain, cbid, data);
    std::lock_guard lock(mutex_);
    callbacks_.push_back({domain, cbid, data.callbackSite, data.functionName,
                          data.symbolName != nullptr ? data.symbolName : "", data.correlationId,
                          data.context, data.contextUid, Tid()});
  }
  uint8_t* RequestBuffer(size_t* size) {
    std::lock_guard lock(mutex_);
    ++buffers_requested_;
    *size = buffer_bytes;
    return give_buffers ? static_cast<uint8_t*>(std::aligned_alloc(8, buffer_bytes)) : nullptr;
  }
  void AddBuffer(uint8_t* buffer, size_t size, size_t valid_size) {
    std::lock_guard lock(mutex_);
    deliveries_.push_back({Tid(), size, valid_size, MonotonicNs()});
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(record);
      size_t record_size = 0;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          record_size = sizeof(CUpti_ActivityKernel10);
          break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
          record_size = sizeof(CUpti_ActivityMemcpy6);
          break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
          record_size = sizeof(CUpti_ActivityMemset4);
          break;
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
          record_size = sizeof(CUpti_ActivitySynchronization2);
          break;
        case CUPTI_ACTIVITY_KIND_OVERHEAD:
          record_size = sizeof(CUpti_ActivityOverhead3);
          break;
        case CUPTI_ACTIVITY_KIND_DEVICE:
          record_size = sizeof(CUpti_ActivityDevice5);
          break;
        default:
          record_size = sizeof(CUpti_ActivityAPI);
          break;
      }
      records_.emplace_back(bytes, bytes + record_size);
    }
    std::free(buffer);
  }

  std::vector<Callback> Callbacks() {
    std::lock_guard lock(mutex_);
    return callbacks_;
  }
  std::vector<Delivery> Deliveries() {
    std::lock_guard lock(mutex_);
    return deliveries_;
  }
  size_t BuffersRequested() {
    std::lock_guard lock(mutex_);
    return buffers_requested_;
  }
  // The records of `kind`, in buffer order, as `Record`.
  template <typename Record>
  std::vector<Record> RecordsOf(CUpti_ActivityKind kind) {
    std::lock_guard lock(mutex_);
    std::vector<Record> found;
    for (const std::vector<uint8_t>& bytes : records_) {
      Record record;
      std::memcpy(&record, bytes.data(), std::min(sizeof record, bytes.size()));
      if (record.kind == kind) found.push_back(record);
    }
    return found;
  }
  // The API records of `kind` (RUNTIME or DRIVER) for `cbid`.
  std::vector<CUpti_ActivityAPI> ApiRecords(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
    std::vector<CUpti_ActivityAPI> found = RecordsOf<CUpti_ActivityAPI>(kind);
    std::erase_if(found, [&](const CUpti_ActivityAPI& record) { return record.cbid != cbid; });
    return found;
  }

  // Set by a test before the calls it makes; read by the CUPTI callbacks.
  size_t buffer_bytes = kDefaultBufferBytes;
  bool give_buffers = true;
  std::function<void(CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData&)> inspect;

 private:
  std::mutex mutex_;
  std::vector<Callback> callbacks_;
  std::vector<std::vector<uint8_t>> records_;
  std::vector<Delivery> deliveries_;
  size_t buffers_requested_ = 0;
};

Received& received = *new Received;  // never destroyed: the CUPTI worker may deliver at exit

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  received.AddCallback(domain, cbid, *static_cast<const CUpti_CallbackData*>(data));
}
void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = received.RequestBuffer(size);
  *max_records = 0;
}
void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t size,
                                size_t valid_size) {
  received.AddBuffer(buffer, size, valid_size);
}

class MockCuptiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // An idle GPU and a fresh CUPTI (knobs read again) for each test. The first call of the
    // process initialises the fake driver, which finds the mock this binary links.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
    received.Reset();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    cudaGetLastError();
    for (const char* knob : kKnobs) unsetenv(knob);
    EXPECT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  }

  // Subscribes to every runtime and driver callback.
  void Subscribe() {
    ASSERT_EQ(cuptiSubscribe(&subscriber_, OnCallback, nullptr), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiEnableDomain(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiEnableDomain(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API), CUPTI_SUCCESS);
  }

  // Collects `kinds` on CLOCK_MONOTONIC, with kernel thread ids, as the injected library does.
  void CollectActivity(std::initializer_list<CUpti_ActivityKind> kinds) {
    ASSERT_EQ(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiActivityRegisterTimestampCallback(MonotonicNs), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), CUPTI_SUCCESS);
    for (const CUpti_ActivityKind kind : kinds) ASSERT_EQ(cuptiActivityEnable(kind), CUPTI_SUCCESS);
  }

  cudaStream_t stream_ = nullptr;
  CUpti_SubscriberHandle subscriber_ = nullptr;
};

TEST_F(MockCuptiTest, VersionAndResultNamesAreCuptis) {
  uint32_t version = 0;
  EXPECT_EQ(cuptiGetVersion(&version), CUPTI_SUCCESS);
  EXPECT_EQ(version, uint32_t(CUPTI_API_VERSION));
  EXPECT_EQ(cuptiGetVersion(nullptr), CUPTI_ERROR_INVALID_PARAMETER);
  const char* name = nullptr;
  EXPECT_EQ(cuptiGetResultString(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &name),
            CUPTI_SUCCESS);
  EXPECT_STREQ(name, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED");
  EXPECT_EQ(cuptiGetResultString(CUPTI_ERROR_UNKNOWN, &name), CUPTI_SUCCESS);
  EXPECT_STREQ(name, "CUPTI_ERROR_UNKNOWN");
  EXPECT_EQ(cuptiGetResultString(CUptiResult(12345), &name), CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(MockCuptiTest, CallbackNamesComeFromTheRealHeaders) {
  const char* name = nullptr;
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API,
                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &name),
            CUPTI_SUCCESS);
  EXPECT_STREQ(name, "cudaLaunchKernel_v7000");
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API,
                                 CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000, &name),
            CUPTI_SUCCESS);
  EXPECT_STREQ(name, "cudaMemcpyAsync_ptsz_v7000");
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                 &name),
            CUPTI_SUCCESS);
  EXPECT_STREQ(name, "cuLaunchKernel");
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, 0, &name),
            CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RESOURCE, 1, &name),
            CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, 1, nullptr),
            CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(MockCuptiTest, OneSubscriberAtATime) {
  CUpti_SubscriberParams params = {};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "gprof-test";
  CUpti_SubscriberHandle first, second;
  ASSERT_EQ(cuptiSubscribe_v2(&first, OnCallback, nullptr, &params), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiSubscribe(&second, OnCallback, nullptr),
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  params.subscriberName = "another";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof holder;
  EXPECT_EQ(cuptiSubscribe_v2(&second, OnCallback, nullptr, &params),
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_STREQ(holder, "CUPTI for gprof-test");

  ASSERT_EQ(cuptiUnsubscribe(first), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiUnsubscribe(first), CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(cuptiSubscribe(&second, OnCallback, nullptr), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiSubscribe(nullptr, OnCallback, nullptr), CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(MockCuptiTest, TakenKnobRefusesEverySubscriberAsAnotherToolWould) {
  setenv("MOCK_CUPTI_TAKEN", "1", 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  CUpti_SubscriberHandle subscriber;
  EXPECT_EQ(cuptiSubscribe(&subscriber, OnCallback, nullptr),
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUpti_SubscriberParams params = {};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof holder;
  EXPECT_EQ(cuptiSubscribe_v2(&subscriber, OnCallback, nullptr, &params),
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_NE(std::string(holder).find("MOCK_CUPTI_TAKEN"), std::string::npos) << holder;
  // The program's calls are unaffected.
  EXPECT_EQ(Launch(10, stream_), cudaSuccess);
}

TEST_F(MockCuptiTest, ALaunchIsARuntimeCallAroundItsDriverCall) {
  Subscribe();
  cudaLaunchKernel_v7000_params runtime_params = {};
  cuLaunchKernel_params driver_params = {};
  uint64_t correlation_data_at_exit = 0;
  const void* return_value_at_enter = &runtime_params;
  cudaError_t runtime_result = cudaErrorUnknown;
  CUresult driver_result = CUDA_ERROR_UNKNOWN;
  received.inspect = [&](CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const CUpti_CallbackData& data) {
    const bool enter = data.callbackSite == CUPTI_API_ENTER;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
        cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
      if (enter) {
        runtime_params = *static_cast<const cudaLaunchKernel_v7000_params*>(data.functionParams);
        return_value_at_enter = data.functionReturnValue;
        *data.correlationData = 42;  // carried to the exit, as CUPTI documents
      } else {
        correlation_data_at_exit = *data.correlationData;
        runtime_result = *static_cast<const cudaError_t*>(data.functionReturnValue);
      }
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API &&
               cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
      if (enter) {
        driver_params = *static_cast<const cuLaunchKernel_params*>(data.functionParams);
      } else {
        driver_result = *static_cast<const CUresult*>(data.functionReturnValue);
      }
    }
  };
  uint32_t duration_us = 100;
  void* args[] = {&duration_us};
  ASSERT_EQ(
      cudaLaunchKernel(&fake_cuda::kKernel, dim3(2, 3, 4), dim3(32, 1, 1), args, 128, stream_),
      cudaSuccess);
  received.inspect = nullptr;

  const std::vector<Callback> calls = received.Callbacks();
  ASSERT_EQ(calls.size(), 4u);
  const CUpti_CallbackDomain kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;
  const CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
  const struct {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    CUpti_ApiCallbackSite site;
    const char* name;
  } kExpected[] = {
      {kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER,
       "cudaLaunchKernel"},
      {kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, "cuLaunchKernel"},
      {kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, "cuLaunchKernel"},
      {kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT,
       "cudaLaunchKernel"},
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(calls[i].domain, kExpected[i].domain);
    EXPECT_EQ(calls[i].cbid, kExpected[i].cbid);
    EXPECT_EQ(calls[i].site, kExpected[i].site);
    EXPECT_EQ(calls[i].function_name, kExpected[i].name);
    EXPECT_EQ(calls[i].symbol_name, kKernelName) << "launches name their kernel";
    EXPECT_EQ(calls[i].tid, Tid());
    EXPECT_NE(calls[i].context, nullptr);
    EXPECT_EQ(calls[i].context, calls[0].context);
    EXPECT_EQ(calls[i].context_uid, 1u);
  }
  // Each API call has its own correlation id, shared by its enter and exit.
  EXPECT_NE(calls[0].correlation_id, 0u);
  EXPECT_EQ(calls[0].correlation_id, calls[3].correlation_id);
  EXPECT_EQ(calls[1].correlation_id, calls[2].correlation_id);
  EXPECT_NE(calls[0].correlation_id, calls[1].correlation_id);

  EXPECT_EQ(runtime_params.func, &fake_cuda::kKernel);
  EXPECT_EQ(runtime_params.gridDim.x, 2u);
  EXPECT_EQ(runtime_params.gridDim.y, 3u);
  EXPECT_EQ(runtime_params.gridDim.z, 4u);
  EXPECT_EQ(runtime_params.blockDim.x, 32u);
  EXPECT_EQ(runtime_params.args, args);
  EXPECT_EQ(runtime_params.sharedMem, 128u);
  EXPECT_EQ(runtime_params.stream, stream_);
  EXPECT_EQ(driver_params.gridDimZ, 4u);
  EXPECT_EQ(driver_params.blockDimX, 32u);
  EXPECT_EQ(driver_params.sharedMemBytes, 128u);
  EXPECT_EQ(driver_params.hStream, stream_);
  EXPECT_EQ(driver_params.kernelParams, args);
  EXPECT_EQ(return_value_at_enter, nullptr) << "the return value exists only at the exit";
  EXPECT_EQ(correlation_data_at_exit, 42u);
  EXPECT_EQ(runtime_result, cudaSuccess);
  EXPECT_EQ(driver_result, CUDA_SUCCESS);
}

TEST_F(MockCuptiTest, FailuresReachTheExitCallbacksAndRuntimeErrorsNeverReachTheDriver) {
  Subscribe();
  std::vector<int> results;  // each exit's return value, in order
  received.inspect = [&](CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData& data) {
    if (data.callbackSite == CUPTI_API_EXIT) {
      results.push_back(*static_cast<const int*>(data.functionReturnValue));
    }
  };
  EXPECT_EQ(Launch(10, reinterpret_cast<cudaStream_t>(0x1234)), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(Launch(10, stream_, dim3(0)), cudaErrorInvalidConfiguration);
  received.inspect = nullptr;

  const std::vector<Callback> calls = received.Callbacks();
  cudaGetLastError();
  ASSERT_EQ(calls.size(), 6u);
  EXPECT_EQ(calls[1].domain, CUPTI_CB_DOMAIN_DRIVER_API);
  EXPECT_EQ(calls[5].domain, CUPTI_CB_DOMAIN_RUNTIME_API);
  EXPECT_EQ(calls[4].site, CUPTI_API_ENTER) << "the runtime rejects a bad configuration itself";
  EXPECT_EQ(results, (std::vector<int>{CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle,
                                       cudaErrorInvalidConfiguration}));
}

// Resources the calls below use.
struct Resources {
  cudaStream_t stream;
  cudaEvent_t event;
  void* device;
  void* pinned;
  void* scratch;
};

struct ReportedCall {
  const char* name;
  std::function<cudaError_t(Resources&)> call;
  CUpti_CallbackId runtime_cbid;
  const char* driver_name;  // nullptr: the runtime answers alone
  CUpti_CallbackId driver_cbid;
};

template <typename Function>
Function Exported(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

TEST_F(MockCuptiTest, EachRuntimeCallReportsItsCbidAndTheDriverCallTheRuntimeMakes) {
  Resources resources{stream_, nullptr, nullptr, nullptr, nullptr};
  ASSERT_EQ(cudaEventCreate(&resources.event), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&resources.device, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&resources.pinned, 4096), cudaSuccess);
  const auto launch_ptsz = Exported<decltype(&cudaLaunchKernel)>("cudaLaunchKernel_ptsz");
  const auto memcpy_async_ptsz = Exported<decltype(&cudaMemcpyAsync)>("cudaMemcpyAsync_ptsz");
  ASSERT_NE(launch_ptsz, nullptr);
  ASSERT_NE(memcpy_async_ptsz, nullptr);
  const ReportedCall kCalls[] = {
      {"cudaMemcpy",
       [](Resources& r) { return cudaMemcpy(r.device, r.pinned, 64, cudaMemcpyHostToDevice); },
       CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, "cuMemcpy", CUPTI_DRIVER_TRACE_CBID_cuMemcpy},
      {"cudaMemcpyAsync",
       [](Resources& r) {
         return cudaMemcpyAsync(r.pinned, r.device, 64, cudaMemcpyDeviceToHost, r.stream);
       },
       CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cuMemcpyAsync",
       CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync},
      {"cudaMemset", [](Resources& r) { return cudaMemset(r.device, 0, 64); },
       CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, "cuMemsetD8_v2",
       CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2},
      {"cudaMemsetAsync", [](Resources& r) { return cudaMemsetAsync(r.device, 0, 64, r.stream); },
       CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, "cuMemsetD8Async",
       CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async},
      {"cudaEventRecord", [](Resources& r) { return cudaEventRecord(r.event, r.stream); },
       CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, "cuEventRecord",
       CUPTI_DRIVER_TRACE_CBID_cuEventRecord},
      {"cudaStreamWaitEvent",
       [](Resources& r) { return cudaStreamWaitEvent(r.stream, r.event, 0); },
       CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, "cuStreamWaitEvent",
       CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent},
      {"cudaEventSynchronize", [](Resources& r) { return cudaEventSynchronize(r.event); },
       CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, "cuEventSynchronize",
       CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize},
      {"cudaStreamSynchronize", [](Resources& r) { return cudaStreamSynchronize(r.stream); },
       CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cuStreamSynchronize",
       CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize},
      {"cudaDeviceSynchronize", [](Resources&) { return cudaDeviceSynchronize(); },
       CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cuCtxSynchronize",
       CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize},
      {"cudaMalloc", [](Resources& r) { return cudaMalloc(&r.scratch, 64); },
       CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cuMemAlloc_v2",
       CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2},
      {"cudaFree", [](Resources& r) { return cudaFree(r.scratch); },
       CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cuMemFree_v2",
       CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2},
      // One runtime call, though the fake makes it through the exported cudaHostAlloc.
      {"cudaMallocHost", [](Resources& r) { return cudaMallocHost(&r.scratch, 64); },
       CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, "cuMemHostAlloc",
       CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc},
      {"cudaFreeHost", [](Resources& r) { return cudaFreeHost(r.scratch); },
       CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, "cuMemFreeHost",
       CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost},
      {"cudaLaunchKernel_ptsz",
       [&](Resources&) {
         uint32_t duration_us = 10;
         void* args[] = {&duration_us};
         return launch_ptsz(&fake_cuda::kKernel, dim3(1), dim3(1), args, 0, nullptr);
       },
       CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cuLaunchKernel_ptsz",
       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
      {"cudaMemcpyAsync_ptsz",
       [&](Resources& r) {
         return memcpy_async_ptsz(r.device, r.pinned, 64, cudaMemcpyHostToDevice, nullptr);
       },
       CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000, "cuMemcpyAsync_ptsz",
       CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz},
      {"cudaGetDevice",
       [](Resources&) {
         int device;
         return cudaGetDevice(&device);
       },
       CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, nullptr, 0},
  };
  Subscribe();
  for (const ReportedCall& call : kCalls) {
    SCOPED_TRACE(call.name);
    received.Reset();
    ASSERT_EQ(call.call(resources), cudaSuccess);
    const std::vector<Callback> seen = received.Callbacks();
    ASSERT_EQ(seen.size(), call.driver_name != nullptr ? 4u : 2u);
    EXPECT_EQ(seen.front().cbid, call.runtime_cbid);
    EXPECT_EQ(seen.front().function_name, call.name);
    EXPECT_EQ(seen.back().cbid, call.runtime_cbid);
    EXPECT_EQ(seen.back().site, CUPTI_API_EXIT);
    if (call.driver_name == nullptr) continue;
    EXPECT_EQ(seen[1].domain, CUPTI_CB_DOMAIN_DRIVER_API);
    EXPECT_EQ(seen[1].cbid, call.driver_cbid);
    EXPECT_EQ(seen[1].function_name, call.driver_name);
    EXPECT_EQ(seen[2].cbid, call.driver_cbid);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(resources.pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(resources.device), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(resources.event), cudaSuccess);
}

TEST_F(MockCuptiTest, EnableCallbackReportsOnlyThatFunction) {
  ASSERT_EQ(cuptiSubscribe(&subscriber_, OnCallback, nullptr), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API,
                                CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020),
            CUPTI_SUCCESS);
  uint32_t enabled = 0;
  EXPECT_EQ(cuptiGetCallbackState(&enabled, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020),
            CUPTI_SUCCESS);
  EXPECT_EQ(enabled, 1u);
  EXPECT_EQ(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API,
                                CUPTI_RUNTIME_TRACE_CBID_SIZE),
            CUPTI_ERROR_INVALID_PARAMETER);
  ASSERT_EQ(Launch(10, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const std::vector<Callback> seen = received.Callbacks();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020);
  EXPECT_EQ(seen[1].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020);
}

TEST_F(MockCuptiTest, KernelRecordsDescribeTheLaunchAndCorrelateWithTheRuntimeCall) {
  CollectActivity({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                   CUPTI_ACTIVITY_KIND_DRIVER});
  ASSERT_EQ(Launch(2'000, stream_, dim3(2, 3, 4), dim3(32, 1, 1), 128), cudaSuccess);
  ASSERT_EQ(Launch(100, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  const auto kernels =
      received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const auto launches = received.ApiRecords(CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  const auto driver_launches =
      received.ApiRecords(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  ASSERT_EQ(kernels.size(), 2u);
  ASSERT_EQ(launches.size(), 2u);
  ASSERT_EQ(driver_launches.size(), 2u);
  const CUpti_ActivityKernel10& kernel = kernels[0];
  EXPECT_STREQ(kernel.name, kKernelName);
  EXPECT_EQ(kernel.gridX, 2);
  EXPECT_EQ(kernel.gridY, 3);
  EXPECT_EQ(kernel.gridZ, 4);
  EXPECT_EQ(kernel.blockX, 32);
  EXPECT_EQ(kernel.blockY, 1);
  EXPECT_EQ(kernel.blockZ, 1);
  EXPECT_EQ(kernel.dynamicSharedMemory, 128);
  EXPECT_EQ(kernel.staticSharedMemory, 0);
  EXPECT_GT(kernel.registersPerThread, 0);
  EXPECT_EQ(kernel.deviceId, 0u);
  EXPECT_EQ(kernel.contextId, 1u);
  EXPECT_EQ(kernel.launchType, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR);
  EXPECT_EQ(kernel.channelType, CUPTI_CHANNEL_TYPE_COMPUTE);
  EXPECT_EQ(kernel.graphId, 0u);
  EXPECT_EQ(kernel.graphNodeId, 0u);
  // A runtime launch's kernel carries the runtime call's correlation id, not its driver call's.
  EXPECT_EQ(kernel.correlationId, launches[0].correlationId);
  EXPECT_NE(kernel.correlationId, driver_launches[0].correlationId);
  EXPECT_EQ(kernels[1].correlationId, launches[1].correlationId);
  // Created streams are not the legacy default stream, CUPTI's 7.
  EXPECT_NE(kernel.streamId, 7u);
  EXPECT_EQ(kernels[1].streamId, 7u);
  EXPECT_NE(kernel.gridId, kernels[1].gridId);
  // On the GPU after the launch began, for as long as it was asked to run, one after the other.
  EXPECT_GE(kernel.start + kClockSlackNs, launches[0].start);
  EXPECT_GE(kernel.end - kernel.start + kClockSlackNs, 2'000'000u);
  EXPECT_EQ(kernel.completed, kernel.end);
  EXPECT_GE(kernels[1].start + kClockSlackNs, kernel.end);

  // With only KERNEL enabled, kernels come under that kind.
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(Launch(10, stream_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_EQ(received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_KERNEL).size(), 1u);
}

TEST_F(MockCuptiTest, CopyAndMemsetRecordsDescribeTheirMemory) {
  void* device = nullptr;
  void* pinned = nullptr;
  static char pageable[4096];
  ASSERT_EQ(cudaMalloc(&device, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);
  CollectActivity({CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET});
  char* device_bytes = static_cast<char*>(device);
  ASSERT_EQ(cudaMemcpyAsync(device, pinned, 4096, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pageable, device, 1000, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_bytes + 4096, static_cast<char*>(pinned) + 16, 64, cudaMemcpyDefault),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_bytes + 8192, device, 512, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 7, 2048, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemset(device, 0, 128), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  const auto copies = received.RecordsOf<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  ASSERT_EQ(copies.size(), 4u);
  const struct {
    CUpti_ActivityMemcpyKind kind;
    CUpti_ActivityMemoryKind src, dst;
    uint64_t bytes;
    bool async;
  } kExpected[] = {
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 4096, true},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, 1000, false},
      // cudaMemcpyDefault: the kinds come from the pointers, inside allocations too.
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 64, false},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 512, false},
  };
  for (size_t i = 0; i < copies.size(); ++i) {
    SCOPED_TRACE(i);
    const CUpti_ActivityMemcpy6& copy = copies[i];
    EXPECT_EQ(copy.copyKind, kExpected[i].kind);
    EXPECT_EQ(copy.srcKind, kExpected[i].src);
    EXPECT_EQ(copy.dstKind, kExpected[i].dst);
    EXPECT_EQ(copy.bytes, kExpected[i].bytes);
    EXPECT_EQ((copy.flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0, kExpected[i].async);
    EXPECT_EQ(copy.streamId == 7u, !kExpected[i].async) << "synchronous copies: legacy stream";
    EXPECT_EQ(copy.deviceId, 0u);
    EXPECT_EQ(copy.contextId, 1u);
    EXPECT_NE(copy.correlationId, 0u);
    EXPECT_EQ(copy.runtimeCorrelationId, 0u) << "documented as no longer used";
    EXPECT_EQ(copy.copyCount, 1u);
    EXPECT_GT(copy.end, copy.start);
    if (i > 0) {
      EXPECT_NE(copy.correlationId, copies[i - 1].correlationId);
    }
  }

  const auto sets = received.RecordsOf<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_EQ(sets[0].value, 7u);
  EXPECT_EQ(sets[0].bytes, 2048u);
  EXPECT_EQ(sets[0].flags, CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC);
  EXPECT_EQ(sets[0].memoryKind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  EXPECT_EQ(sets[0].streamId, copies[0].streamId);
  EXPECT_EQ(sets[1].value, 0u);
  EXPECT_EQ(sets[1].bytes, 128u);
  EXPECT_EQ(sets[1].flags, 0u);
  EXPECT_EQ(sets[1].streamId, 7u);
  EXPECT_GT(sets[1].end, sets[1].start);

  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

TEST_F(MockCuptiTest, HostWaitsAreSynchronizationRecordsInsideTheirCalls) {
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  CollectActivity({CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                   CUPTI_ACTIVITY_KIND_RUNTIME});
  ASSERT_EQ(Launch(5'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(Launch(1'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(stream_, event, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  const uint32_t stream_id =
      received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
          .at(0)
          .streamId;
  const auto syncs =
      received.RecordsOf<CUpti_ActivitySynchronization2>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  ASSERT_EQ(syncs.size(), 4u);
  const uint32_t kInvalid = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  const struct {
    CUpti_ActivitySynchronizationType type;
    CUpti_CallbackId cbid;
    bool has_stream;
    bool has_event;
  } kExpected[] = {
      {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE,
       CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, true, false},
      {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE,
       CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, false, true},
      {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT,
       CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, true, true},
      {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE,
       CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, false, false},
  };
  for (size_t i = 0; i < syncs.size(); ++i) {
    SCOPED_TRACE(i);
    const CUpti_ActivitySynchronization2& sync = syncs[i];
    const auto calls = received.ApiRecords(CUPTI_ACTIVITY_KIND_RUNTIME, kExpected[i].cbid);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(sync.type, kExpected[i].type);
    EXPECT_EQ(sync.correlationId, calls[0].correlationId);
    EXPECT_EQ(sync.contextId, 1u);
    EXPECT_EQ(sync.streamId, kExpected[i].has_stream ? stream_id : kInvalid);
    EXPECT_EQ(sync.cudaEventId != kInvalid, kExpected[i].has_event);
    EXPECT_EQ(sync.cudaEventSyncId != kInvalid, kExpected[i].has_event);
    EXPECT_EQ(sync.returnValue, uint32_t(CUDA_SUCCESS));
    EXPECT_LE(sync.start, sync.end);
    EXPECT_GE(sync.start + kClockSlackNs, calls[0].start);
    EXPECT_LE(sync.end, calls[0].end + kClockSlackNs);
  }
  EXPECT_GE(syncs[0].end - syncs[0].start, 3'000'000u) << "waited for the 5 ms kernel";
  EXPECT_EQ(syncs[2].cudaEventId, syncs[1].cudaEventId);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

TEST_F(MockCuptiTest, ApiRecordsCarryTheCallItsResultAndItsThread) {
  CollectActivity({CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER});
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x1234)),
            cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  const auto runtime = received.RecordsOf<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  const auto driver = received.RecordsOf<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_DRIVER);
  ASSERT_EQ(runtime.size(), 3u);
  ASSERT_EQ(driver.size(), 1u);
  EXPECT_EQ(runtime[0].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020);
  EXPECT_EQ(runtime[0].returnValue, uint32_t(cudaSuccess));
  EXPECT_EQ(runtime[1].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020);
  EXPECT_EQ(runtime[1].returnValue, uint32_t(cudaErrorInvalidResourceHandle));
  EXPECT_EQ(runtime[2].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020);
  EXPECT_EQ(runtime[2].returnValue, uint32_t(cudaErrorInvalidResourceHandle));
  EXPECT_EQ(driver[0].cbid, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize);
  EXPECT_EQ(driver[0].returnValue, uint32_t(CUDA_ERROR_INVALID_HANDLE));
  EXPECT_NE(driver[0].correlationId, runtime[1].correlationId);
  EXPECT_LE(runtime[1].start, driver[0].start);
  EXPECT_LE(driver[0].end, runtime[1].end);
  for (const CUpti_ActivityAPI& record : runtime) {
    EXPECT_EQ(record.processId, uint32_t(getpid()));
    EXPECT_EQ(record.threadId, uint32_t(Tid()));
    EXPECT_LE(record.start, record.end);
  }
}

TEST_F(MockCuptiTest, ThreadIdsArePthreadSelfUnlessSystemIdsAreAsked) {
  CUpti_ActivityThreadIdType type = CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE;
  ASSERT_EQ(cuptiGetThreadIdType(&type), CUPTI_SUCCESS);
  EXPECT_EQ(type, CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT);
  ASSERT_EQ(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
  int device;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiGetThreadIdType(&type), CUPTI_SUCCESS);
  EXPECT_EQ(type, CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cuptiSetThreadIdType(CUpti_ActivityThreadIdType(7)), CUPTI_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  const auto records = received.RecordsOf<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].threadId, uint32_t(pthread_self()));
  EXPECT_EQ(records[1].threadId, uint32_t(Tid()));
}

TEST_F(MockCuptiTest, APlainFlushWaitsForRunningWorkAForcedOneHandsItOverIncomplete) {
  CollectActivity({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  ASSERT_EQ(Launch(200'000, stream_), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_TRUE(received.Deliveries().empty()) << "the buffer holds a kernel still running";

  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  ASSERT_EQ(received.Deliveries().size(), 1u);
  EXPECT_EQ(received.Deliveries()[0].tid, Tid()) << "a flush delivers on the caller's thread";
  auto kernels = received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].start, 0u);
  EXPECT_EQ(kernels[0].end, 0u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(received.Deliveries().size(), 1u) << "the kernel completed unrecorded";

  // Complete records go with a plain flush, in a partly filled buffer.
  ASSERT_EQ(Launch(100, stream_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  const std::vector<Delivery> deliveries = received.Deliveries();
  ASSERT_EQ(deliveries.size(), 2u);
  EXPECT_EQ(deliveries[1].size, kDefaultBufferBytes);
  EXPECT_EQ(deliveries[1].valid_size, sizeof(CUpti_ActivityKernel10));
  kernels = received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_GT(kernels[1].start, 0u);
  EXPECT_GT(kernels[1].end, kernels[1].start);
  EXPECT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_EQ(received.Deliveries().size(), 2u) << "an empty buffer is not handed back";
}

TEST_F(MockCuptiTest, FullBuffersComeBackFromTheWorkerThreadWithoutAFlush) {
  received.buffer_bytes = 3 * sizeof(CUpti_ActivityAPI);
  CollectActivity({CUPTI_ACTIVITY_KIND_RUNTIME});
  int device;
  for (int i = 0; i < 7; ++i) ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_TRUE(WaitFor([] { return received.Deliveries().size() >= 2; }, 10'000));
  std::vector<Delivery> deliveries = received.Deliveries();
  ASSERT_EQ(deliveries.size(), 2u) << "the partly filled third buffer waits for a flush";
  for (const Delivery& delivery : deliveries) {
    EXPECT_NE(delivery.tid, Tid());
    EXPECT_EQ(delivery.valid_size, 3 * sizeof(CUpti_ActivityAPI));
  }
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  deliveries = received.Deliveries();
  ASSERT_EQ(deliveries.size(), 3u);
  EXPECT_EQ(deliveries[2].tid, Tid());
  EXPECT_EQ(deliveries[2].valid_size, sizeof(CUpti_ActivityAPI));
  EXPECT_EQ(received.RecordsOf<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME).size(), 7u);
  EXPECT_EQ(received.BuffersRequested(), 3u);
}

TEST_F(MockCuptiTest, AFlushPeriodDeliversFullBuffersOnItsTicks) {
  constexpr uint32_t kPeriodMs = 300;
  received.buffer_bytes = 3 * sizeof(CUpti_ActivityAPI);
  CollectActivity({CUPTI_ACTIVITY_KIND_RUNTIME});
  const uint64_t period_set_ns = MonotonicNs();
  ASSERT_EQ(cuptiActivityFlushPeriod(kPeriodMs), CUPTI_SUCCESS);
  int device;
  for (int i = 0; i < 7; ++i) ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_TRUE(WaitFor([] { return received.Deliveries().size() >= 2; }, 10'000));
  const std::vector<Delivery> deliveries = received.Deliveries();
  ASSERT_EQ(deliveries.size(), 2u) << "a periodic flush returns full buffers only";
  for (const Delivery& delivery : deliveries) {
    EXPECT_NE(delivery.tid, Tid());
    EXPECT_GE(delivery.time_ns - period_set_ns, uint64_t(kPeriodMs) * 1'000'000)
        << "delivered on a tick, not when the buffer filled";
  }
  ASSERT_EQ(cuptiActivityFlushPeriod(0), CUPTI_SUCCESS);
}

TEST_F(MockCuptiTest, RecordsWithoutABufferAreDroppedAndCountedPerQueue) {
  Subscribe();
  received.give_buffers = false;
  CollectActivity({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                   CUPTI_ACTIVITY_KIND_RUNTIME});
  ASSERT_EQ(Launch(100, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const CUcontext context = received.Callbacks().at(0).context;

  size_t in_context = 0, global = 0;
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(context, 0, &in_context), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &global), CUPTI_SUCCESS);
  EXPECT_EQ(in_context, 2u) << "the kernel and the synchronization";
  EXPECT_EQ(global, 2u) << "the two runtime calls";
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(context, 0, &in_context), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &global), CUPTI_SUCCESS);
  EXPECT_EQ(in_context, 0u) << "reading resets the count";
  EXPECT_EQ(global, 0u);
  EXPECT_EQ(received.BuffersRequested(), 4u) << "each record asked for a buffer";
  EXPECT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, nullptr), CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(MockCuptiTest, MaxBuffersKnobStarvesTheRecordsAfterThatManyBuffers) {
  setenv("MOCK_CUPTI_MAX_BUFFERS", "1", 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  received.buffer_bytes = 3 * sizeof(CUpti_ActivityAPI);
  CollectActivity({CUPTI_ACTIVITY_KIND_RUNTIME});
  int device;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  // The full buffer comes back from the worker thread.
  EXPECT_TRUE(WaitFor(
      [] { return received.RecordsOf<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME).size() == 3; },
      10'000));
  size_t dropped = 0;
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  EXPECT_EQ(dropped, 2u);
  EXPECT_EQ(received.BuffersRequested(), 1u);
}

uint64_t CUPTIAPI AnHourAhead() { return MonotonicNs() + 3'600'000'000'000; }

TEST_F(MockCuptiTest, TimestampsFollowTheRegisteredClockElseRealtime) {
  uint64_t timestamp = 0;
  ASSERT_EQ(cuptiGetTimestamp(&timestamp), CUPTI_SUCCESS);
  const uint64_t realtime = ClockNs(CLOCK_REALTIME);
  EXPECT_LT(std::max(timestamp, realtime) - std::min(timestamp, realtime), 1'000'000'000u)
      << "CUPTI's own clock on Linux is CLOCK_REALTIME";

  ASSERT_EQ(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityRegisterTimestampCallback(AnHourAhead), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
  const uint64_t before = AnHourAhead();
  ASSERT_EQ(cuptiGetTimestamp(&timestamp), CUPTI_SUCCESS);
  ASSERT_EQ(Launch(1'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const uint64_t after = AnHourAhead();
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_GE(timestamp, before);
  EXPECT_LE(timestamp, after);
  const auto kernels =
      received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const auto launches = received.ApiRecords(CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_GE(launches[0].start, before);
  EXPECT_GE(kernels[0].start + kClockSlackNs, launches[0].start);
  EXPECT_LE(kernels[0].end, after + kClockSlackNs);
}

TEST_F(MockCuptiTest, ClockOffsetKnobOverridesTheRegisteredClock) {
  constexpr int64_t kOffsetNs = 7'000'000'000;
  setenv("MOCK_CUPTI_CLOCK_OFFSET_NS", std::to_string(kOffsetNs).c_str(), 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  CollectActivity({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME});
  const uint64_t before = MonotonicNs();
  uint64_t timestamp = 0;
  ASSERT_EQ(cuptiGetTimestamp(&timestamp), CUPTI_SUCCESS);
  ASSERT_EQ(Launch(1'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const uint64_t after = MonotonicNs();
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_GE(timestamp, before + kOffsetNs);
  EXPECT_LE(timestamp, after + kOffsetNs);
  const auto kernels =
      received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const auto launches = received.ApiRecords(CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_EQ(launches.size(), 1u);
  for (const uint64_t time :
       {launches[0].start, launches[0].end, kernels[0].start, kernels[0].end}) {
    EXPECT_GE(time, before + kOffsetNs);
    EXPECT_LE(time, after + kOffsetNs);
  }
}

TEST_F(MockCuptiTest, GetNextRecordWalksABufferAndStopsAtItsEnd) {
  alignas(8) uint8_t buffer[sizeof(CUpti_ActivityAPI) + sizeof(CUpti_ActivityKernel10)] = {};
  CUpti_ActivityAPI api = {};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  CUpti_ActivityKernel10 kernel = {};
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  std::memcpy(buffer, &api, sizeof api);
  std::memcpy(buffer + sizeof api, &kernel, sizeof kernel);

  CUpti_Activity* record = nullptr;
  ASSERT_EQ(cuptiActivityGetNextRecord(buffer, sizeof buffer, &record), CUPTI_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(record), buffer);
  ASSERT_EQ(cuptiActivityGetNextRecord(buffer, sizeof buffer, &record), CUPTI_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(record), buffer + sizeof api);
  EXPECT_EQ(cuptiActivityGetNextRecord(buffer, sizeof buffer, &record),
            CUPTI_ERROR_MAX_LIMIT_REACHED);

  record = nullptr;
  const size_t cut_short = sizeof api + 16;
  ASSERT_EQ(cuptiActivityGetNextRecord(buffer, cut_short, &record), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiActivityGetNextRecord(buffer, cut_short, &record), CUPTI_ERROR_INVALID_KIND);
  record = nullptr;
  const auto unknown_kind = CUpti_ActivityKind(9999);
  std::memcpy(buffer, &unknown_kind, sizeof unknown_kind);
  EXPECT_EQ(cuptiActivityGetNextRecord(buffer, sizeof buffer, &record), CUPTI_ERROR_INVALID_KIND);
  EXPECT_EQ(cuptiActivityGetNextRecord(nullptr, sizeof buffer, &record),
            CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(MockCuptiTest, GraphWorkCarriesItsGraphNodeAndTheLaunchingCall) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), cudaSuccess);
  CollectActivity({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                   CUPTI_ACTIVITY_KIND_RUNTIME});
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(Launch(100, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 1, 64, stream_), cudaSuccess);
  ASSERT_EQ(Launch(200, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  const auto kernels =
      received.RecordsOf<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const auto sets = received.RecordsOf<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  const auto launches = received.ApiRecords(CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
  ASSERT_EQ(kernels.size(), 4u) << "captured work runs only when the graph is launched";
  ASSERT_EQ(sets.size(), 2u);
  ASSERT_EQ(launches.size(), 2u);
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    const CUpti_ActivityKernel10& first = kernels[2 * run];
    const CUpti_ActivityKernel10& second = kernels[2 * run + 1];
    const CUpti_ActivityMemset4& set = sets[run];
    EXPECT_EQ(first.correlationId, launches[run].correlationId);
    EXPECT_EQ(second.correlationId, launches[run].correlationId);
    EXPECT_EQ(set.correlationId, launches[run].correlationId);
    EXPECT_NE(first.graphId, 0u);
    EXPECT_EQ(second.graphId, first.graphId);
    EXPECT_EQ(set.graphId, first.graphId);
    EXPECT_NE(first.graphNodeId, 0u);
    EXPECT_NE(first.graphNodeId, second.graphNodeId);
    EXPECT_NE(set.graphNodeId, first.graphNodeId);
    EXPECT_EQ(first.graphNodeId, kernels[0].graphNodeId) << "the same node in each launch";
    EXPECT_EQ(set.graphNodeId, sets[0].graphNodeId);
    EXPECT_EQ(first.streamId, kernels[0].streamId);
  }
  EXPECT_NE(launches[0].correlationId, launches[1].correlationId);
  EXPECT_NE(kernels[0].gridId, kernels[2].gridId) << "each execution is its own grid";
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

// CUDA's lazy loading: the first launch of a module's kernel loads the module on the CPU, inside
// the launch, and CUPTI says so with an overhead record naming the thread and the call.
TEST_F(MockCuptiTest, AModulesFirstLaunchReportsItsLoadingAsOverhead) {
  // In a child: the module is loaded once per process.
  EXPECT_EQ(
      RunInChild(
          [&] {
            CollectActivity({CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_RUNTIME});
            const uint64_t before = MonotonicNs();
            if (fake_cuda::LaunchKernel(10 | fake_cuda::kInLazyModule, nullptr) != cudaSuccess ||
                MonotonicNs() - before < fake_cuda::kModuleLoadNs)
              return 1;
            if (fake_cuda::LaunchKernel(10 | fake_cuda::kInLazyModule, nullptr) != cudaSuccess ||
                fake_cuda::LaunchKernel(10, nullptr) != cudaSuccess ||
                cudaDeviceSynchronize() != cudaSuccess || cuptiActivityFlushAll(0) != CUPTI_SUCCESS)
              return 2;
            const auto loads =
                received.RecordsOf<CUpti_ActivityOverhead3>(CUPTI_ACTIVITY_KIND_OVERHEAD);
            const auto launches = received.ApiRecords(
                CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
            if (loads.size() != 1 || launches.size() != 3) return 3;  // once per process
            const CUpti_ActivityOverhead3& load = loads[0];
            if (load.overheadKind != CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING ||
                load.objectKind != CUPTI_ACTIVITY_OBJECT_THREAD ||
                load.objectId.pt.threadId != uint32_t(Tid()) ||
                load.objectId.pt.processId != uint32_t(getpid()) || load.overheadData != nullptr)
              return 4;
            if (load.correlationId != launches[0].correlationId || load.start < launches[0].start ||
                load.end > launches[0].end || load.end - load.start < fake_cuda::kModuleLoadNs)
              return 5;
            return 0;
          },
          10'000),
      0);
}

// The one device's record, with its UUID, comes from cuptiActivityEnableAndDump.
TEST_F(MockCuptiTest, EnableAndDumpWritesTheDeviceRecord) {
  CollectActivity({});
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_TRUE(received.RecordsOf<CUpti_ActivityDevice5>(CUPTI_ACTIVITY_KIND_DEVICE).empty())
      << "the driver was initialised before: only the dump has it";
  setenv("MOCK_CUPTI_DEVICE_UUID", "00112233445566778899aabbccddeeff", 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  CollectActivity({});
  ASSERT_EQ(cuptiActivityEnableAndDump(CUPTI_ACTIVITY_KIND_DEVICE), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  const auto devices = received.RecordsOf<CUpti_ActivityDevice5>(CUPTI_ACTIVITY_KIND_DEVICE);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, 0u);
  EXPECT_EQ(devices[0].isCudaVisible, 1);
  EXPECT_EQ(devices[0].isMigEnabled, 0);
  EXPECT_EQ(std::memcmp(devices[0].uuid.bytes,
                        "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff", 16),
            0);
}

TEST_F(MockCuptiTest, FinalizeDetachesUntilTheNextSubscriber) {
  Subscribe();
  ASSERT_EQ(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), CUPTI_SUCCESS);
  int device;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(received.Callbacks().size(), 2u);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(received.Callbacks().size(), 2u);
  EXPECT_EQ(cuptiEnableDomain(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API),
            CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(cuptiActivityFlushAll(0), CUPTI_ERROR_INVALID_OPERATION)
      << "the buffer callbacks are gone too";
  Subscribe();
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(received.Callbacks().size(), 4u);
}

std::atomic<int> child_callbacks{0};

TEST_F(MockCuptiTest, AForkedChildStartsWithAFreshCupti) {
  Subscribe();
  const int status = RunInChild(
      [] {
        CUpti_SubscriberHandle subscriber;
        const CUpti_CallbackFunc count = [](void*, CUpti_CallbackDomain, CUpti_CallbackId,
                                            const void*) { ++child_callbacks; };
        if (cuptiSubscribe(&subscriber, count, nullptr) != CUPTI_SUCCESS) return 10;
        if (cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS) {
          return 11;
        }
        int device;
        if (cudaGetDevice(&device) != cudaSuccess) return 12;
        return child_callbacks == 2 ? 0 : 13;
      },
      10'000);
  EXPECT_EQ(status, 0);
}

// The injection half: test programs under CUDA_INJECTION64_PATH = libmock_cupti_client.so.

std::string ClientLibraryPath() { return BuildDir() + "/tests/mock_cupti/libmock_cupti_client.so"; }
std::string MockCuptiPath() { return BuildDir() + "/tests/fake_cuda/libcupti.so.13"; }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

std::string Word(const std::string& line, size_t index) {
  std::istringstream stream(line);
  std::string word;
  for (size_t i = 0; i <= index && (stream >> word); ++i) {
  }
  return word;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// One process's log (mock_cupti_client.cc), by pid.
struct ClientLog {
  std::string pid;
  std::vector<std::string> lines;

  size_t Count(const std::string& prefix) const {
    return size_t(std::count_if(lines.begin(), lines.end(),
                                [&](const std::string& line) { return StartsWith(line, prefix); }));
  }
  // The runtime functions whose calls returned, in order.
  std::vector<std::string> RuntimeCalls() const {
    std::vector<std::string> names;
    for (const std::string& line : lines) {
      if (StartsWith(line, "exit runtime ")) names.push_back(Word(line, 2));
    }
    return names;
  }
  // Whether every exit closes the innermost open enter of its thread: same function and id.
  bool CallbacksPaired() const {
    std::map<std::string, std::vector<std::string>> open;  // tid -> "function corr"
    for (const std::string& line : lines) {
      const bool enter = StartsWith(line, "enter ");
      if (!enter && !StartsWith(line, "exit ")) continue;
      const std::string call = Word(line, 1) + " " + Word(line, 2) + " " + Word(line, 4);
      std::vector<std::string>& stack = open[Word(line, 5)];
      if (enter) {
        stack.push_back(call);
      } else if (stack.empty() || stack.back() != call) {
        return false;
      } else {
        stack.pop_back();
      }
    }
    return std::all_of(open.begin(), open.end(),
                       [](const auto& entry) { return entry.second.empty(); });
  }
};

std::vector<ClientLog> ReadClientLogs(const std::string& directory) {
  std::vector<ClientLog> logs;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return logs;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() <= 4 || name.substr(name.size() - 4) != ".log") continue;
    logs.push_back({name.substr(0, name.size() - 4), Lines(ReadFile(directory + "/" + name))});
  }
  closedir(dir);
  return logs;
}

// The functions a test program says it called (`api=<function> ...` lines), in order.
std::vector<std::string> PrintedCalls(const std::string& out) {
  std::vector<std::string> names;
  for (const std::string& line : Lines(out)) {
    if (StartsWith(line, "api=")) names.push_back(Word(line.substr(4), 0));
  }
  return names;
}

bool IsSubsequence(const std::vector<std::string>& part, const std::vector<std::string>& whole) {
  auto it = whole.begin();
  for (const std::string& name : part) {
    it = std::find(it, whole.end(), name);
    if (it == whole.end()) return false;
    ++it;
  }
  return true;
}

ProcessSpec Injected(std::vector<std::string> argv, const TempDir& logs) {
  ProcessSpec spec = Command(std::move(argv));
  spec.set_env = {"CUDA_INJECTION64_PATH=" + ClientLibraryPath(),
                  "MOCK_CUPTI_TEST_OUT=" + logs.path()};
  spec.unset_env = {"GPROF_CUPTI_LIB", "MOCK_CUPTI_TAKEN", "MOCK_CUPTI_CLOCK_OFFSET_NS",
                    "MOCK_CUPTI_MAX_BUFFERS"};
  spec.timeout_s = 60;
  return spec;
}

TEST(MockCuptiInjection, EveryCallOfTheTourIsReportedThroughTheInjectedClient) {
  TempDir logs;
  const ProcessResult result = RunProcess(Injected({AppPath("api_tour_app")}, logs));
  ASSERT_EQ(result.exit_code(), 0) << result.err;
  const std::vector<ClientLog> client = ReadClientLogs(logs.path());
  ASSERT_EQ(client.size(), 1u);
  const ClientLog& log = client[0];
  EXPECT_EQ(log.Count("init "), 1u);
  EXPECT_EQ(log.Count("subscribe CUPTI_SUCCESS"), 1u);
  const std::vector<std::string> printed = PrintedCalls(result.out);
  ASSERT_FALSE(printed.empty());
  EXPECT_TRUE(IsSubsequence(printed, log.RuntimeCalls()))
      << testing::PrintToString(printed) << "\nnot in\n"
      << testing::PrintToString(log.RuntimeCalls());
  EXPECT_TRUE(log.CallbacksPaired());
  EXPECT_EQ(log.Count("exit runtime cudaHostAlloc"), 1u)
      << "cudaMallocHost's inner cudaHostAlloc is not a runtime call of its own";
  EXPECT_EQ(log.Count("record 10 "), 2u) << "the launched kernel and the graph's";
  EXPECT_EQ(log.Count("record 1 "), 2u);
  EXPECT_EQ(log.Count("record 2 "), 2u);
  EXPECT_EQ(log.Count("record 38 "), 4u);
  EXPECT_EQ(log.Count("dropped 0"), 1u);
}

TEST(MockCuptiInjection, InjectionRunsOncePerProcessAndAgainInForkedChildren) {
  TempDir logs;
  const ProcessResult result =
      RunProcess(Injected({AppPath("fork_app"), "--children", "2", "--calls", "12"}, logs));
  ASSERT_EQ(result.exit_code(), 0) << result.err;
  std::vector<std::string> children;
  std::string parent;
  for (const std::string& line : Lines(result.out)) {
    const std::string pid = Word(line, 1).substr(std::strlen("pid="));
    if (StartsWith(line, "child ")) children.push_back(pid);
    if (StartsWith(line, "parent ")) parent = pid;
  }
  ASSERT_EQ(children.size(), 2u) << result.out;
  const std::vector<ClientLog> client = ReadClientLogs(logs.path());
  ASSERT_EQ(client.size(), 3u);
  for (const ClientLog& log : client) {
    SCOPED_TRACE(log.pid);
    EXPECT_TRUE(log.pid == parent || std::count(children.begin(), children.end(), log.pid) == 1);
    ASSERT_EQ(log.Count("init "), 1u);
    EXPECT_EQ(log.Count("init pid=" + log.pid), 1u);
    EXPECT_EQ(log.Count("subscribe CUPTI_SUCCESS"), 1u);
    EXPECT_TRUE(log.CallbacksPaired());
    if (log.pid == parent) continue;
    // RunChild's 12 calls: 4 launches, 2 stream syncs, 2 mallocs and frees, 2 device syncs.
    EXPECT_EQ(log.RuntimeCalls().size(), 12u);
    EXPECT_EQ(log.Count("exit runtime cudaLaunchKernel"), 4u);
    EXPECT_EQ(log.Count("record 10 "), 4u);
    EXPECT_EQ(log.Count("record 38 "), 4u);
  }
}

TEST(MockCuptiInjection, AStaticallyLinkedRuntimeIsSeenThroughCupti) {
  TempDir logs;
  ProcessSpec spec = Injected({AppPath("static_runtime_app")}, logs);
  spec.set_env.push_back("GPROF_CUPTI_LIB=" + MockCuptiPath());
  const ProcessResult result = RunProcess(spec);
  ASSERT_EQ(result.exit_code(), 0) << result.err;
  std::vector<ClientLog> client = ReadClientLogs(logs.path());
  ASSERT_EQ(client.size(), 1u);
  const std::vector<std::string> printed = PrintedCalls(result.out);
  ASSERT_EQ(printed.size(), 16u);
  EXPECT_EQ(client[0].RuntimeCalls(), printed);
  EXPECT_TRUE(client[0].CallbacksPaired());
  EXPECT_EQ(client[0].Count("record 10 "), 1u);
  EXPECT_EQ(client[0].Count("record 1 "), 2u);
  EXPECT_EQ(client[0].Count("record 2 "), 1u);
  EXPECT_EQ(client[0].Count("record 38 "), 3u);

  // Without GPROF_CUPTI_LIB there is no libcudart to find libcupti beside.
  TempDir unaided_logs;
  const ProcessResult unaided = RunProcess(Injected({AppPath("static_runtime_app")}, unaided_logs));
  ASSERT_EQ(unaided.exit_code(), 0) << unaided.err;
  client = ReadClientLogs(unaided_logs.path());
  ASSERT_EQ(client.size(), 1u);
  EXPECT_EQ(client[0].Count("cupti-missing"), 1u);
  EXPECT_TRUE(client[0].RuntimeCalls().empty());
  EXPECT_EQ(PrintedCalls(unaided.out), printed);
}

TEST(MockCuptiInjection, WithoutInjectionNoClientIsLoaded) {
  TempDir logs;
  ProcessSpec spec = Injected({AppPath("api_tour_app")}, logs);
  spec.set_env = {"MOCK_CUPTI_TEST_OUT=" + logs.path()};
  spec.unset_env.push_back("CUDA_INJECTION64_PATH");
  const ProcessResult result = RunProcess(spec);
  ASSERT_EQ(result.exit_code(), 0) << result.err;
  EXPECT_TRUE(ReadClientLogs(logs.path()).empty());
}

TEST(MockCuptiInjection, ATakenCuptiLeavesTheProgramRunningUnobserved) {
  TempDir logs;
  ProcessSpec spec = Injected({AppPath("static_runtime_app")}, logs);
  spec.set_env.push_back("GPROF_CUPTI_LIB=" + MockCuptiPath());
  spec.set_env.push_back("MOCK_CUPTI_TAKEN=1");
  const ProcessResult result = RunProcess(spec);
  ASSERT_EQ(result.exit_code(), 0) << result.err;
  EXPECT_EQ(PrintedCalls(result.out).size(), 16u);
  const std::vector<ClientLog> client = ReadClientLogs(logs.path());
  ASSERT_EQ(client.size(), 1u);
  EXPECT_EQ(client[0].Count("subscribe CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"), 1u);
  EXPECT_TRUE(client[0].RuntimeCalls().empty());
  EXPECT_EQ(client[0].Count("record "), 0u);
}

}  // namespace
