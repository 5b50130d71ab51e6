// Proves the fake CUDA runtime behaves like the real one where gprof-run depends on it: one driver
// lock that blocks other threads' launches behind a holder that sleeps (cudaDeviceSynchronize) or
// spins (cudaFree, cudaFreeHost, cudaHostAlloc), waits that do not hold it, per-stream order,
// events, graphs, real error codes, and fork.
//
// CI machines are small and shared, so the assertions avoid wall-clock upper bounds: whether a call
// blocked is judged by the time its thread spent asleep, which a loaded machine does not inflate,
// and lower bounds come from the GPU's virtual clock, which it cannot shorten.
#include "tests/fake_cuda/fake_cuda.h"

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>

namespace {

using fake_cuda::LaunchKernel;

constexpr uint32_t kLongKernelUs = 100'000;
constexpr uint32_t kShortKernelUs = 20;

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}
uint64_t MonotonicNs() { return ClockNs(CLOCK_MONOTONIC); }

double MsBetween(uint64_t start_ns, uint64_t end_ns) { return double(end_ns - start_ns) / 1e6; }

// Time the calling thread has been runnable: on a CPU, or waiting in a run queue for one.
uint64_t RunnableNs() {
  // The first field, on-CPU time, is only updated at ticks: the thread CPU clock is exact.
  std::ifstream schedstat("/proc/thread-self/schedstat");
  uint64_t on_cpu_ns = 0, run_queue_ns = 0;
  schedstat >> on_cpu_ns >> run_queue_ns;
  return ClockNs(CLOCK_THREAD_CPUTIME_ID) + run_queue_ns;
}

struct CallTiming {
  uint64_t end_ns;
  double wall_ms;
  double asleep_ms;  // off-CPU and not waiting for a CPU: blocked
};

// Times `call` on the calling thread.
CallTiming TimeCall(const std::function<void()>& call) {
  const uint64_t start_ns = MonotonicNs(), runnable_start_ns = RunnableNs();
  call();
  const uint64_t end_ns = MonotonicNs(), runnable_end_ns = RunnableNs();
  const double wall_ms = MsBetween(start_ns, end_ns);
  return {end_ns, wall_ms, std::max(0.0, wall_ms - MsBetween(runnable_start_ns, runnable_end_ns))};
}

// Runs `body` in a forked child and returns its exit status, or -1 if it did not exit within
// `timeout_ms` (the child is then killed).
int RunInChild(const std::function<int()>& body, int timeout_ms) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  const uint64_t deadline = MonotonicNs() + uint64_t(timeout_ms) * 1'000'000;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (MonotonicNs() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each test starts with an idle GPU and no pending error.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaGetLastError();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other_stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(other_stream_), cudaSuccess);
  }

  cudaStream_t stream_ = nullptr;
  cudaStream_t other_stream_ = nullptr;
};

// A call that holds the driver lock until the GPU drains, with what it needs before and after.
struct HoldingCall {
  const char* name;
  bool spins;  // on-CPU while holding, or asleep
  std::function<void(void** buffer)> prepare;
  std::function<cudaError_t(void** buffer)> hold;
  std::function<void(void* buffer)> clean_up;
};

const HoldingCall kHoldingCalls[] = {
    {"cudaDeviceSynchronize", false, [](void**) {}, [](void**) { return cudaDeviceSynchronize(); },
     [](void*) {}},
    {"cudaFree", true, [](void** buffer) { ASSERT_EQ(cudaMalloc(buffer, 1 << 20), cudaSuccess); },
     [](void** buffer) { return cudaFree(*buffer); }, [](void*) {}},
    {"cudaFreeHost", true,
     [](void** buffer) { ASSERT_EQ(cudaMallocHost(buffer, 4096), cudaSuccess); },
     [](void** buffer) { return cudaFreeHost(*buffer); }, [](void*) {}},
    {"cudaHostAlloc", true, [](void**) {},
     [](void** buffer) { return cudaHostAlloc(buffer, 4096, cudaHostAllocDefault); },
     [](void* buffer) { EXPECT_EQ(cudaFreeHost(buffer), cudaSuccess); }},
};

void PrintTo(const HoldingCall& call, std::ostream* out) { *out << call.name; }

class HoldingCallTest : public FakeCudaTest, public ::testing::WithParamInterface<HoldingCall> {};

TEST_P(HoldingCallTest, BlocksOtherThreadsLaunchesUntilTheGpuDrains) {
  const HoldingCall& holding = GetParam();
  std::promise<uint64_t> long_kernel_launched_ns;
  CallTiming hold{};
  std::thread holder([&] {
    void* buffer = nullptr;
    holding.prepare(&buffer);
    const uint64_t launch_ns = MonotonicNs();
    EXPECT_EQ(LaunchKernel(kLongKernelUs, stream_), cudaSuccess);
    long_kernel_launched_ns.set_value(launch_ns);
    hold = TimeCall([&] { EXPECT_EQ(holding.hold(&buffer), cudaSuccess); });
    holding.clean_up(buffer);
  });
  const uint64_t gpu_idle_ns =
      long_kernel_launched_ns.get_future().get() + uint64_t(kLongKernelUs) * 1000;
  usleep(10'000);  // the holder only has an uncontended lock to take: it is inside its call by now
  const CallTiming launch =
      TimeCall([&] { EXPECT_EQ(LaunchKernel(kShortKernelUs, other_stream_), cudaSuccess); });
  holder.join();

  EXPECT_GE(launch.asleep_ms, 30.0) << "the launch did not wait for " << holding.name;
  EXPECT_GE(launch.end_ns, gpu_idle_ns) << "the launch returned before the GPU drained";
  EXPECT_GE(hold.end_ns, gpu_idle_ns) << holding.name << " returned before the GPU drained";
  if (holding.spins) {
    EXPECT_LT(hold.asleep_ms, 0.2 * hold.wall_ms) << holding.name << " should spin on-CPU";
  } else {
    EXPECT_GT(hold.asleep_ms, 0.5 * hold.wall_ms) << holding.name << " should sleep";
  }
}

INSTANTIATE_TEST_SUITE_P(, HoldingCallTest, ::testing::ValuesIn(kHoldingCalls),
                         [](const auto& info) { return std::string(info.param.name); });

// "Returns at once" is judged by sleep time: on a loaded machine a launch can wait for a CPU.
TEST_F(FakeCudaTest, LaunchWithNoHolderReturnsAtOnceEvenWithWorkQueued) {
  const CallTiming long_launch =
      TimeCall([&] { EXPECT_EQ(LaunchKernel(kLongKernelUs, stream_), cudaSuccess); });
  const CallTiming next_launch =
      TimeCall([&] { EXPECT_EQ(LaunchKernel(kShortKernelUs, other_stream_), cudaSuccess); });
  EXPECT_LT(long_launch.asleep_ms, 5.0);
  EXPECT_LT(next_launch.asleep_ms, 5.0);
}

// A call that waits for the GPU without holding the driver lock. (Copies and memsets move no bytes:
// any pointers serve.)
struct WaitingCall {
  const char* name;
  std::function<cudaError_t(cudaStream_t stream)> wait;  // waits for kLongKernelUs of GPU work
};

const WaitingCall kWaitingCalls[] = {
    {"cudaStreamSynchronize",
     [](cudaStream_t stream) {
       EXPECT_EQ(LaunchKernel(kLongKernelUs, stream), cudaSuccess);
       return cudaStreamSynchronize(stream);
     }},
    {"cudaEventSynchronize",
     [](cudaStream_t stream) {
       cudaEvent_t event;
       EXPECT_EQ(cudaEventCreate(&event), cudaSuccess);
       EXPECT_EQ(LaunchKernel(kLongKernelUs, stream), cudaSuccess);
       EXPECT_EQ(cudaEventRecord(event, stream), cudaSuccess);
       const cudaError_t result = cudaEventSynchronize(event);
       EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
       return result;
     }},
    {"cudaMemcpy",
     [](cudaStream_t) {
       static char host_byte;
       const size_t bytes = kLongKernelUs * 1000 * fake_cuda::kCopyBytesPerNs;
       return cudaMemcpy(&host_byte, &host_byte, bytes, cudaMemcpyDeviceToHost);
     }},
    {"cudaMemset",
     [](cudaStream_t) {
       static char host_byte;
       return cudaMemset(&host_byte, 0, kLongKernelUs * 1000 * fake_cuda::kCopyBytesPerNs);
     }},
};

void PrintTo(const WaitingCall& call, std::ostream* out) { *out << call.name; }

class WaitingCallTest : public FakeCudaTest, public ::testing::WithParamInterface<WaitingCall> {};

TEST_P(WaitingCallTest, WaitsForTheGpuWithoutBlockingOtherThreads) {
  const WaitingCall& waiting = GetParam();
  CallTiming wait{};
  std::thread waiter(
      [&] { wait = TimeCall([&] { EXPECT_EQ(waiting.wait(stream_), cudaSuccess); }); });
  usleep(10'000);
  const CallTiming launch =
      TimeCall([&] { EXPECT_EQ(LaunchKernel(kShortKernelUs, other_stream_), cudaSuccess); });
  waiter.join();
  EXPECT_LT(launch.asleep_ms, 5.0) << waiting.name << " blocked another thread's launch";
  EXPECT_LT(launch.end_ns, wait.end_ns);
  EXPECT_GE(wait.wall_ms, 0.9 * kLongKernelUs / 1000)
      << waiting.name << " returned before the GPU finished";
}

INSTANTIATE_TEST_SUITE_P(, WaitingCallTest, ::testing::ValuesIn(kWaitingCalls),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(FakeCudaTest, EventsCompleteWhenTheGpuReachesThem) {
  cudaEvent_t never_recorded, event;
  ASSERT_EQ(cudaEventCreate(&never_recorded), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(never_recorded), cudaSuccess);

  const uint64_t start = MonotonicNs();
  ASSERT_EQ(LaunchKernel(20'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaErrorNotReady);
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_GE(MsBetween(start, MonotonicNs()), 15.0);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(never_recorded), cudaSuccess);
}

TEST_F(FakeCudaTest, WorkRunsInStreamOrderAndAcrossEventWaits) {
  cudaEvent_t after_long, after_short, on_other;
  for (cudaEvent_t* event : {&after_long, &after_short, &on_other})
    ASSERT_EQ(cudaEventCreate(event), cudaSuccess);
  const uint64_t start = MonotonicNs();
  ASSERT_EQ(LaunchKernel(20'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(after_long, stream_), cudaSuccess);
  ASSERT_EQ(LaunchKernel(kShortKernelUs, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(after_short, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other_stream_, after_short, 0), cudaSuccess);
  ASSERT_EQ(LaunchKernel(kShortKernelUs, other_stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(on_other, other_stream_), cudaSuccess);

  // The work after the wait finishes only after everything it waited for.
  ASSERT_EQ(cudaEventSynchronize(on_other), cudaSuccess);
  EXPECT_GE(MsBetween(start, MonotonicNs()), 15.0);
  EXPECT_EQ(cudaEventQuery(after_long), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(after_short), cudaSuccess);
  for (cudaEvent_t event : {after_long, after_short, on_other})
    EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

TEST_F(FakeCudaTest, CopiesTakeTimeProportionalToTheirSize) {
  static char host_byte;
  const size_t ten_ms_of_bytes = 10'000'000 * fake_cuda::kCopyBytesPerNs;
  const CallTiming copies = TimeCall([&] {
    EXPECT_EQ(
        cudaMemcpyAsync(&host_byte, &host_byte, ten_ms_of_bytes, cudaMemcpyHostToDevice, stream_),
        cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(&host_byte, 0, ten_ms_of_bytes, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  });
  EXPECT_GE(copies.wall_ms, 19.0);
  EXPECT_LT(copies.wall_ms, 200.0);
}

TEST_F(FakeCudaTest, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  static char host_byte;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(LaunchKernel(10'000, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(&host_byte, 0, 1, stream_), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorIllegalState);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess) << "captured work was queued";

  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int launch = 0; launch < 2; ++launch) {
    const CallTiming run = TimeCall([&] {
      EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    });
    EXPECT_GE(run.wall_ms, 28.0);
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
}

TEST_F(FakeCudaTest, MisuseReturnsTheRealErrorCodes) {
  const auto bogus_stream = reinterpret_cast<cudaStream_t>(0x1234);
  const auto bogus_event = reinterpret_cast<cudaEvent_t>(0x1234);
  cudaStream_t destroyed_stream;
  cudaEvent_t destroyed_event, event;
  ASSERT_EQ(cudaStreamCreate(&destroyed_stream), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&destroyed_event), cudaSuccess);
  // Created before the destroys, or it could reuse a destroyed handle's address.
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(destroyed_stream), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(destroyed_event), cudaSuccess);

  EXPECT_EQ(LaunchKernel(1, bogus_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(LaunchKernel(1, destroyed_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(bogus_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(destroyed_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(bogus_event, stream_), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(event, bogus_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(destroyed_event), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(bogus_event), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(stream_, destroyed_event, 0), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(0x1234), stream_),
            cudaErrorInvalidResourceHandle);

  EXPECT_EQ(cudaStreamCreate(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreate(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(0x1234)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(reinterpret_cast<void*>(0x1234)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(nullptr, nullptr, 16, cudaMemcpyHostToDevice, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetDeviceCount(nullptr), cudaErrorInvalidValue);
  void* no_args[] = {nullptr};
  EXPECT_EQ(cudaLaunchKernel(&fake_cuda::kKernel, dim3(1), dim3(1), no_args, 0, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaLaunchKernel(nullptr, dim3(1), dim3(1), no_args, 0, stream_),
            cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaHostUnregister(&event), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaHostRegister(&event, sizeof event, 0), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(&event, sizeof event, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostUnregister(&event), cudaSuccess);

  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  cudaGetLastError();
}

TEST_F(FakeCudaTest, LastErrorIsPerThreadAndClearedOnlyByGetLastError) {
  EXPECT_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x1234)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(LaunchKernel(kShortKernelUs, stream_), cudaSuccess);  // success does not clear it
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  std::thread([] { EXPECT_EQ(cudaGetLastError(), cudaSuccess); }).join();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(7), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST_F(FakeCudaTest, ErrorTextsMatchTheRealRuntime) {
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidResourceHandle), "invalid resource handle");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNotReady), "device not ready");
  EXPECT_STREQ(cudaGetErrorString(static_cast<cudaError_t>(12345)), "unrecognized error code");
}

TEST_F(FakeCudaTest, DeviceQueries) {
  int count = 0, device = -1;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);
}

TEST_F(FakeCudaTest, PerThreadStreamVariantsAreExportedAndWork) {
  for (const char* name :
       {"cudaLaunchKernel_ptsz", "cudaMemcpyAsync_ptsz", "cudaMemsetAsync_ptsz",
        "cudaStreamSynchronize_ptsz", "cudaEventRecord_ptsz", "cudaStreamWaitEvent_ptsz",
        "cudaGraphLaunch_ptsz", "cudaMemcpy_ptds", "cudaMemset_ptds"}) {
    EXPECT_NE(dlsym(RTLD_DEFAULT, name), nullptr) << name;
  }
  // Under the real library's symbol version, as programs linked against the real one expect.
  EXPECT_NE(dlvsym(RTLD_DEFAULT, "cudaLaunchKernel", "libcudart.so.13"), nullptr);

  const auto launch_ptsz =
      reinterpret_cast<decltype(&cudaLaunchKernel)>(dlsym(RTLD_DEFAULT, "cudaLaunchKernel_ptsz"));
  const auto sync_ptsz = reinterpret_cast<decltype(&cudaStreamSynchronize)>(
      dlsym(RTLD_DEFAULT, "cudaStreamSynchronize_ptsz"));
  uint32_t duration_us = 10'000;
  void* args[] = {&duration_us};
  const CallTiming run = TimeCall([&] {
    EXPECT_EQ(launch_ptsz(&fake_cuda::kKernel, dim3(1), dim3(1), args, 0, nullptr), cudaSuccess);
    EXPECT_EQ(sync_ptsz(cudaStreamPerThread), cudaSuccess);
  });
  EXPECT_GE(run.wall_ms, 8.0);
}

TEST_F(FakeCudaTest, GpuThreadIsNamedFakeGpu) {
  ASSERT_EQ(LaunchKernel(kShortKernelUs, stream_), cudaSuccess);
  bool found = false;
  DIR* tasks = opendir("/proc/self/task");
  ASSERT_NE(tasks, nullptr);
  while (const dirent* task = readdir(tasks)) {
    std::ifstream comm(std::string("/proc/self/task/") + task->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "fake-gpu") found = true;
  }
  closedir(tasks);
  EXPECT_TRUE(found);
}

TEST_F(FakeCudaTest, ForkedChildCanLaunchAndSynchronizeWhileTheParentHoldsTheLock) {
  // The parent's holder is inside cudaDeviceSynchronize, holding the driver lock, when it forks.
  ASSERT_EQ(LaunchKernel(300'000, stream_), cudaSuccess);
  std::thread holder([] { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); });
  usleep(20'000);
  const cudaStream_t parent_stream = stream_;
  const int status = RunInChild(
      [parent_stream] {
        if (cudaStreamSynchronize(parent_stream) != cudaErrorInvalidResourceHandle) return 10;
        cudaStream_t stream;
        if (cudaStreamCreate(&stream) != cudaSuccess) return 11;
        const uint64_t start = MonotonicNs();
        if (LaunchKernel(1'000, stream) != cudaSuccess) return 12;
        if (cudaStreamSynchronize(stream) != cudaSuccess) return 13;
        if (cudaDeviceSynchronize() != cudaSuccess) return 14;
        // A fresh device: the parent's 300 ms kernel is not the child's to wait for.
        if (MsBetween(start, MonotonicNs()) > 150) return 15;
        return 0;
      },
      5'000);
  holder.join();
  EXPECT_EQ(status, 0);
}

TEST_F(FakeCudaTest, ExitWhileThreadsAreBlockedInCallsIsClean) {
  const int status = RunInChild(
      [] {
        cudaStream_t stream;
        if (cudaStreamCreate(&stream) != cudaSuccess) return 10;
        if (LaunchKernel(10'000'000, stream) != cudaSuccess) return 11;
        std::thread([] { cudaDeviceSynchronize(); }).detach();
        std::thread([stream] { LaunchKernel(kShortKernelUs, stream); }).detach();
        usleep(20'000);
        exit(0);  // with work queued, one thread holding the lock and one waiting for it
      },
      3'000);
  EXPECT_EQ(status, 0);
}

}  // namespace
