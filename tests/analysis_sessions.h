// Hand-built sessions whose right answer is known, shared by the analysis's tests and the
// writers' tests on them: a builder of the model's records, and the scenarios several tests use (a
// lock convoy behind a holder that sleeps, a freeze behind a munmap, mutex convoys and chains, GPU
// streams, a late launch).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnosis.h"
#include "collector/analysis/gpu_timeline.h"
#include "collector/writers/report.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector {

// The freezes slow calls were blocked in, in the order of their calls (report.json's top level).
inline std::vector<CallsInFreeze> CallFreezes(const Analysis& analysis) {
  std::vector<CallsInFreeze> freezes;
  for (const Freeze& freeze : analysis.freezes) {
    if (freeze.calls) freezes.push_back(*freeze.calls);
  }
  std::stable_sort(freezes.begin(), freezes.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return freezes;
}

constexpr uint32_t kPid = 100;
constexpr uint32_t kHolder = 10;
constexpr uint32_t kGpu = 20;
constexpr uint64_t kLock = 0x7f0000001000;
constexpr uint64_t kCondvar = 0x7f0000002000;
constexpr int32_t kFutexStack = 1;
constexpr int32_t kRwsemStack = 2;
constexpr uint64_t kMs = 1'000'000;

// The text report of `session` with `diagnosis`: what it says of the diagnosis.
inline std::string RenderDiagnosisText(const Session& session, const Analysis& diagnosis, size_t) {
  return RenderTextReport(session, diagnosis);
}

class SessionBuilder {
 public:
  SessionBuilder() {
    session_.directory = "/tmp/session";
    session_.meta.start_monotonic_ns = 0;
    session_.kernel_stacks[kFutexStack] = {1, 2, 3, 4};
    session_.kernel_stacks[kRwsemStack] = {1, 2, 5};
    session_.kernel_symbols = {{1, "__schedule+0x1"},
                               {2, "schedule+0x2"},
                               {3, "futex_wait_queue+0x3"},
                               {4, "futex_wait+0x4"},
                               {5, "rwsem_down_read_slowpath+0x5"}};
    Thread(kHolder, "holder");
    Thread(kGpu, "fake-gpu");
  }
  void Thread(uint32_t tid, const std::string& name) {
    session_.threads[tid] = {kPid, tid, name, 0};
  }
  void Call(uint32_t tid, const std::string& api, uint64_t enter, uint64_t exit,
            uint64_t correlation_id = 0, uint32_t pid = kPid) {
    uint32_t index = 0;
    while (index < session_.api_names.size() && session_.api_names[index] != api) ++index;
    if (index == session_.api_names.size()) session_.api_names.push_back(api);
    session_.api_calls.push_back({enter, exit, 0, correlation_id, pid, tid, index, 0, 0});
  }
  // The process's CUDA calls and GPU work recorded through CUPTI.
  void Cupti() {
    session_.processes[kPid].pid = kPid;
    session_.processes[kPid].capture = {CaptureMode::kCupti, 130001, "/usr/lib/libcupti.so.13"};
  }
  void Kernel(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
              const std::string& name = "Spin(long long)", uint32_t device = 0,
              uint32_t pid = kPid) {
    uint32_t index = 0;
    while (index < session_.kernel_names.size() && session_.kernel_names[index] != name) ++index;
    if (index == session_.kernel_names.size()) session_.kernel_names.push_back(name);
    GpuKernel kernel;
    kernel.name_index = index;
    Gpu(stream, start, end, correlation_id, kernel, device, pid);
  }
  void Memcpy(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
              uint64_t bytes) {
    Gpu(stream, start, end, correlation_id, GpuMemcpy{bytes, 1, 1, 3, false});  // HtoD, pageable
  }
  void Gpu(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
           decltype(GpuActivity::detail) detail, uint32_t device = 0, uint32_t pid = kPid) {
    GpuActivity activity;
    activity.pid = pid;
    activity.device_id = device;
    activity.stream_id = stream;
    activity.start_ns = start;
    activity.end_ns = end;
    activity.correlation_id = correlation_id;
    activity.detail = std::move(detail);
    session_.gpu_activities.push_back(activity);
  }
  void Stack(uint32_t tid, uint64_t enter, std::vector<std::string> symbols) {
    NativeStack& stack = session_.call_stacks[{tid, enter}];
    stack.pid = kPid;
    for (size_t i = 0; i < symbols.size(); ++i) stack.ips.push_back(0x7f0000400000 + i * 0x10);
    stack.symbols = std::move(symbols);
  }
  // A futex wait on `address` from `start` to `end`, woken at `wake` by `waker`.
  void FutexSleep(uint32_t tid, uint64_t address, uint64_t start, uint64_t wake, uint64_t end,
                  uint32_t waker) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.wake_ns = wake;
    interval.end_ns = end;
    interval.waker_pid = kPid;
    interval.waker_tid = waker;
    interval.waker_comm =
        session_.CommIndex(session_.threads.count(waker) ? session_.threads[waker].name : "");
    interval.kstack_id = kFutexStack;
    interval.raw_state = 1;
    session_.off_cpu.push_back(interval);
    FutexCall futex;
    futex.pid = kPid;
    futex.tid = tid;
    futex.start_ns = start - 1000;
    futex.end_ns = end + 1000;
    futex.uaddr = address;
    futex.op = 0x80;  // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
    session_.futex_calls.push_back(futex);
  }
  // Asleep in `state` from `start` to `end`, woken at `wake` by `waker` (0: an interrupt).
  OffCpuInterval& Sleep(uint32_t tid, uint64_t start, uint64_t wake, uint64_t end, uint32_t waker,
                        uint32_t state = 2, int32_t stack = kRwsemStack) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.wake_ns = wake;
    interval.end_ns = end;
    interval.waker_pid = waker != 0 ? kPid : 0;
    interval.waker_tid = waker;
    interval.waker_comm =
        session_.CommIndex(session_.threads.count(waker) ? session_.threads[waker].name : "");
    interval.kstack_id = stack;
    interval.raw_state = state;
    session_.off_cpu.push_back(interval);
    return session_.off_cpu.back();
  }
  // For what the builder has no helper for: the kernel recorder's other records, maps.
  Session& session() { return session_; }
  void Preempted(uint32_t tid, uint64_t start, uint64_t end) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.end_ns = end;
    session_.off_cpu.push_back(interval);
  }
  Session Build() {
    auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
    std::sort(session_.api_calls.begin(), session_.api_calls.end(),
              [](const ApiCall& a, const ApiCall& b) { return a.enter_ns < b.enter_ns; });
    std::sort(session_.off_cpu.begin(), session_.off_cpu.end(), by_start);
    std::sort(session_.futex_calls.begin(), session_.futex_calls.end(), by_start);
    std::sort(session_.gpu_activities.begin(), session_.gpu_activities.end(), by_start);
    std::sort(session_.futex_waitv_calls.begin(), session_.futex_waitv_calls.end(), by_start);
    std::sort(session_.lock_waits.begin(), session_.lock_waits.end(), by_start);
    std::sort(session_.device_waits.begin(), session_.device_waits.end(), by_start);
    std::sort(session_.page_faults.begin(), session_.page_faults.end(), by_start);
    std::sort(session_.memory_map_calls.begin(), session_.memory_map_calls.end(), by_start);
    return session_;
  }

 private:
  Session session_;
};

// Three launchers queue on the driver lock while the holder sleeps in cudaDeviceSynchronize
// waiting for the GPU; the holder wakes the first, each wakes the next (a glibc mutex convoy).
inline void AddConvoy(SessionBuilder* b, uint64_t at) {
  b->Call(kHolder, "cudaDeviceSynchronize", at, at + 40 * kMs);
  b->FutexSleep(kHolder, kCondvar, at + 1 * kMs / 10, at + 39 * kMs, at + 39 * kMs + 20000, kGpu);
  for (uint32_t i = 0; i < 3; ++i) {
    uint32_t tid = 11 + i;
    b->Thread(tid, "launcher-" + std::to_string(i));
    uint64_t enter = at + (2 + i) * kMs;
    uint64_t wake = at + 40 * kMs - 50000 + i * 20000;  // the holder releases just before returning
    b->Call(tid, "cudaLaunchKernel", enter, wake + 30000);
    b->FutexSleep(tid, kLock, enter + 5000, wake, wake + 10000, i == 0 ? kHolder : tid - 1);
  }
}

// The slow call of `tid` that is the only one of its thread.
inline const BlockedCall& SlowCallOf(const Analysis& analysis, uint32_t tid) {
  for (const BlockedCall& blocked : analysis.blocked_calls) {
    if (blocked.call->tid == tid) return blocked;
  }
  ADD_FAILURE() << "no slow call of " << tid;
  return analysis.blocked_calls.front();
}

constexpr uint64_t kMmapLock = 0xffff888100a0c1e8;
constexpr uint32_t kTrainer = 13;

// `tid` waits from `start` to `end` for the process's mmap_lock, held by `owner`.
inline void AddMmapLockWait(SessionBuilder* b, uint32_t tid, uint64_t start, uint64_t end,
                            uint32_t owner) {
  LockWait lock;
  lock.pid = kPid;
  lock.tid = tid;
  lock.start_ns = start;
  lock.end_ns = end;
  lock.lock_address = kMmapLock;
  lock.flags = GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK;
  lock.owner_pid = kPid;
  lock.owner_tid = owner;
  lock.owner_comm = "trainer";
  b->session().lock_waits.push_back(lock);
}

// The trainer unmaps 512 MiB, holding the mmap_lock for writing throughout; two launchers fault
// meanwhile and sleep on the lock until the munmap releases it.
inline Session MunmapFreeze() {
  SessionBuilder b;
  b.Thread(kTrainer, "trainer");
  MemoryMapCall munmap;
  munmap.pid = kPid;
  munmap.tid = kTrainer;
  munmap.start_ns = 5 * kMs;
  munmap.end_ns = 40 * kMs + 5000;
  munmap.syscall = MemorySyscall::kMunmap;
  munmap.address = 0x7e0000000000;
  munmap.length = 512ull << 20;
  b.session().memory_map_calls.push_back(munmap);
  for (uint32_t i = 0; i < 2; ++i) {
    uint32_t tid = 11 + i;
    uint64_t enter = (10 + 2 * i) * kMs;
    b.Thread(tid, "launcher-" + std::to_string(i));
    b.Call(tid, i == 0 ? "cudaLaunchKernel" : "cudaMemcpyAsync", enter, 41 * kMs);
    AddMmapLockWait(&b, tid, enter + 5000, 40 * kMs + 2000, kTrainer);
    b.Sleep(tid, enter + 10000, 40 * kMs, 40 * kMs + 10000, kTrainer);
  }
  return b.Build();
}

// A futex wait on a contended mutex word (glibc sleeps on the value 2).
inline void MutexSleep(SessionBuilder* b, uint32_t tid, uint64_t start, uint64_t wake,
                       uint32_t waker) {
  b->FutexSleep(tid, kLock, start, wake, wake + 10000, waker);
  b->session().futex_calls.back().val = 2;
}

// Threads 11, 12 and 13 sleep on kLock; the holder runs 50 ms holding it, then each waiter passes
// it on to the next.
inline void MutexConvoy(SessionBuilder* b) {
  MutexSleep(b, 11, 1 * kMs, 50 * kMs, kHolder);
  MutexSleep(b, 12, 2 * kMs, 55 * kMs, 11);
  MutexSleep(b, 13, 3 * kMs, 60 * kMs, 12);
}

constexpr uint64_t kUs = 1'000;

// A futex wait on the lock word `lock` (glibc's "locked, with waiters": 2) whose holder field named
// `owner` when the call began; woken at `wake` by `waker` (0, 0: it timed out).
inline void LockSleep(SessionBuilder* b, uint32_t tid, uint64_t lock, uint64_t start, uint64_t wake,
                      uint64_t end, uint32_t waker, uint32_t owner) {
  b->FutexSleep(tid, lock, start, wake, end, waker);
  b->session().futex_calls.back().val = 2;
  b->session().futex_calls.back().owner_tid = owner;
}

// `tid` unlocks `lock` at `at`: a FUTEX_WAKE of the word.
inline void Unlock(SessionBuilder* b, uint32_t tid, uint64_t lock, uint64_t at) {
  FutexCall wake;
  wake.pid = kPid;
  wake.tid = tid;
  wake.start_ns = at;
  wake.end_ns = at + 2 * kUs;
  wake.uaddr = lock;
  wake.op = 0x81;  // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
  wake.val = 1;
  wake.ret = 1;
  b->session().futex_calls.push_back(wake);
}

inline std::string DeadlocksIn(const Session& session, const Analysis& diagnosis) {
  std::string found;
  for (const Stall& stall : diagnosis.stalls) {
    if (stall.deadlock_tid != 0) found += DescribeDeadlock(session, stall) + "\n";
  }
  return found;
}

// GPU idle is the device's: time in which none of its streams (nor processes) ran anything.

// Idle time of a device, computed apart from the collector: every microsecond between the first
// work's start and the last's end that no work covers. Times here are whole microseconds.
struct IdleByMicrosecond {
  uint64_t idle_ns = 0;
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // idle runs of at least 1 ms, [start, end)
};
inline IdleByMicrosecond IdleOf(const std::vector<std::pair<uint64_t, uint64_t>>& work) {
  constexpr uint64_t kUs = 1000;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& [start, end] : work) first = std::min(first, start), last = std::max(last, end);
  std::vector<bool> busy((last - first) / kUs, false);
  for (const auto& [start, end] : work) {
    for (uint64_t t = start; t < end; t += kUs) busy[(t - first) / kUs] = true;
  }
  IdleByMicrosecond idle;
  for (size_t i = 0; i < busy.size();) {
    if (busy[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < busy.size() && !busy[j]) ++j;
    idle.idle_ns += (j - i) * kUs;
    if ((j - i) * kUs >= kMs) idle.runs.emplace_back(first + i * kUs, first + j * kUs);
    i = j;
  }
  return idle;
}

// Four decoding threads, each launching on its own stream with CPU work in between, on one GPU
// whose work the streams interleave: a stream is idle most of the time the GPU runs the others.
// `device_work` gets each device's work intervals.
inline void DecodingStreams(SessionBuilder* b, uint32_t device, uint32_t first_tid,
                            std::vector<std::pair<uint64_t, uint64_t>>* device_work) {
  uint64_t random = 12345 + device;
  auto next = [&](uint64_t bound) {
    random = random * 6364136223846793005ull + 1442695040888963407ull;
    return (random >> 33) % bound;
  };
  static uint64_t correlation = 1000;
  uint64_t gpu_free = 0;  // one engine: work queued on any stream runs after the work before it
  std::vector<uint64_t> ready(4, 0);
  for (int round = 0; round < 40; ++round) {
    for (uint32_t s = 0; s < 4; ++s) {
      const uint32_t tid = first_tid + s;
      b->Thread(tid, "decode-" + std::to_string(s));
      const uint64_t launch = ready[s] + (1000 + next(7000)) * 1000;  // CPU work, then a launch
      b->Call(tid, "cudaLaunchKernel", launch, launch + 10000, ++correlation);
      // Overlapping work on two streams happens: a kernel may start while another runs.
      const uint64_t start = std::max(launch + 20000, next(2) == 0 ? gpu_free : 0);
      const uint64_t end = start + (100 + next(900)) * 1000;
      b->Kernel(13 + s + 10 * device, start, end, correlation, "decode", device);
      device_work->emplace_back(start, end);
      gpu_free = std::max(gpu_free, end);
      ready[s] = launch + 10000;
    }
  }
}

// The GPU runs a kernel to 10 ms, then nothing until the late thread's next work, queued at
// `queued_ns` by `api` (entered at `enter_ns`) and started 1 ms later.
inline Session LateLaunch(SessionBuilder& builder, const std::string& api, uint64_t enter_ns,
                          uint64_t queued_ns) {
  builder.Cupti();
  builder.Thread(11, "python3");
  builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  builder.Call(11, api, enter_ns, queued_ns, 2);
  builder.Memcpy(7, queued_ns + 1 * kMs, queued_ns + 2 * kMs, 2, 4096);
  return builder.Build();
}

inline const GpuGap& OnlyGap(const Analysis& diagnosis) {
  EXPECT_EQ(diagnosis.gaps.size(), 1u);
  return diagnosis.gaps.front();
}

// Two processes wait in turn on a file lock (flock) a thread of the tree holds.
inline Session FileLockOfTwoProcesses() {
  constexpr int32_t kFlockStack = 7;
  SessionBuilder builder;
  Session& session = builder.session();
  session.kernel_stacks[kFlockStack] = {1, 2, 6};
  session.kernel_symbols[6] = "locks_lock_inode_wait+0x6";
  for (uint32_t i = 0; i < 2; ++i) {
    const uint32_t pid = kPid + 1 + i;
    session.threads[pid] = {pid, pid, "locker", 0};
    OffCpuInterval& sleep = builder.Sleep(pid, (1 + i) * kMs, 40 * kMs + i * kMs / 10,
                                          40 * kMs + i * kMs / 10 + 5000, kHolder, 1, kFlockStack);
    sleep.pid = pid;
  }
  return builder.Build();
}

// A consumer waits on a condition for a producer that is preempted `kProducerDelays` while it
// works, one delay per handoff.
constexpr uint32_t kConsumer = 21, kProducer = 22;
constexpr std::array<uint64_t, 6> kProducerDelays = {16 * kMs, 23 * kMs, 19 * kMs,
                                                     21 * kMs, 17 * kMs, 22 * kMs};
inline Session PreemptedProducer() {
  constexpr int32_t kSleepStack = 8;
  SessionBuilder builder;
  builder.session().kernel_stacks[kSleepStack] = {1, 2, 9};
  builder.session().kernel_symbols[9] = "do_nanosleep+0x9";
  builder.Thread(kConsumer, "consumer");
  builder.Thread(kProducer, "producer");
  // Its life is long, 10 s: the time it was preempted is a small share of it.
  builder.Sleep(kProducer, 0, 0, 10 * kUs, 0, 1, kSleepStack);
  builder.Sleep(kProducer, 9 * 1000 * kMs, 0, 10 * 1000 * kMs, 0, 1, kSleepStack);
  uint64_t at = 100 * kMs;
  for (uint64_t delay : kProducerDelays) {
    const uint64_t work = 25 * kMs + delay / 2;
    builder.Preempted(kProducer, at + 2 * kMs, at + 2 * kMs + delay);
    const uint64_t wake = at + work + delay;
    builder.FutexSleep(kConsumer, kCondvar, at, wake, wake + 10 * kUs, kProducer);
    at = wake + 5 * kMs;
  }
  return builder.Build();
}

// Thread "slow" (12) launches late on its stream while "busy" (11) keeps the GPU busy on another,
// then late again once the GPU has nothing else: a gap of 10 ms from 40 ms.
inline Session StreamIdleWhileAnotherRan() {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "busy");
  builder.Thread(12, "slow");
  builder.Call(12, "cudaLaunchKernel", 0, 100000, 1);
  builder.Kernel(14, 200000, 1 * kMs, 1);
  // Stream 13 keeps the GPU busy from 1 ms to 40 ms while thread 12 takes 30 ms to launch more.
  for (uint64_t i = 0; i < 13; ++i) {
    builder.Call(11, "cudaLaunchKernel", i * 3 * kMs, i * 3 * kMs + 100000, 10 + i);
    builder.Kernel(13, 1 * kMs + i * 3 * kMs, 4 * kMs + i * 3 * kMs, 10 + i);
  }
  builder.Call(12, "cudaLaunchKernel", 30 * kMs, 30 * kMs + 100000, 2);
  builder.Kernel(14, 31 * kMs, 32 * kMs, 2);
  // Then the GPU runs nothing for 10 ms before thread 12's next launch.
  builder.Call(12, "cudaLaunchKernel", 49 * kMs, 49 * kMs + 100000, 3);
  builder.Kernel(14, 50 * kMs, 51 * kMs, 3);
  return builder.Build();
}

// LateLaunch's thread, 4 ms in two other calls and 26 ms outside any after the GPU went idle,
// then 20 ms in the call that queues the next work.
inline Session LateAfterOtherCalls() {
  SessionBuilder builder;
  builder.Call(11, "cudaEventQuery", 20 * kMs, 21 * kMs, 10);
  builder.Call(11, "cudaEventQuery", 30 * kMs, 33 * kMs, 11);
  // 10 ms outside calls after the GPU went idle, then 20 ms in the call itself.
  return LateLaunch(builder, "cudaMemcpyAsync", 40 * kMs, 60 * kMs);
}

// A first launch that spends 45 ms of its 51 ms loading its kernel's module, the GPU idle.
// `thread_named`: CUPTI named the load's thread (else it is the call's).
inline Session FirstLaunchLoadingAModule(bool thread_named) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "python3");
  builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  builder.Call(11, "cuLaunchKernel", 9 * kMs, 60 * kMs, 2);
  builder.Kernel(7, 61 * kMs, 62 * kMs, 2);
  // 45 ms of the launch: the driver loading the module (CUPTI may name no thread: the call's).
  builder.session().module_loads.push_back(
      {10 * kMs, 55 * kMs, 2, kPid, thread_named ? 11u : 0u, 5u << 16});
  return builder.Build();
}

// Modules loaded in driver calls before the launch (cuLibraryLoadData, also inside
// cudaFuncGetAttributes), partly covered by CUPTI's load record: 36 ms in all.
inline Session ModulesLoadedBeforeTheLaunch() {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "python3");
  builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  builder.Call(11, "cuLibraryLoadData", 12 * kMs, 30 * kMs, 3);
  builder.Call(11, "cudaFuncGetAttributes", 31 * kMs, 52 * kMs, 4);
  builder.Call(11, "cuLibraryLoadData", 32 * kMs, 50 * kMs, 5);
  builder.session().module_loads.push_back({40 * kMs, 45 * kMs, 5, kPid, 11, 5u << 16});
  builder.Call(11, "cudaLaunchKernel", 55 * kMs, 60 * kMs, 2);
  builder.Kernel(7, 61 * kMs, 62 * kMs, 2);
  return builder.Build();
}

// A 4 ms module load in LateLaunch's 50 ms gap.
inline Session ShortLoadInALongGap() {
  SessionBuilder builder;
  builder.Thread(11, "python3");
  builder.session().module_loads.push_back({55 * kMs, 59 * kMs, 2, kPid, 11, 5u << 16});
  return LateLaunch(builder, "cuLaunchKernel", 54 * kMs, 60 * kMs);
}

}  // namespace gprof::collector
