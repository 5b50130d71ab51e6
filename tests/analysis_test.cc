// The analysis and the reports on hand-built sessions whose right answer is known: a lock convoy
// behind a holder that sleeps, a holder that spins, preemption, separate freezes on one lock.
#include "analysis.h"

#include <gtest/gtest.h>

#include "report.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kPid = 100;
constexpr uint32_t kHolder = 10;
constexpr uint32_t kGpu = 20;
constexpr uint64_t kLock = 0x7f0000001000;
constexpr uint64_t kCondvar = 0x7f0000002000;
constexpr int32_t kFutexStack = 1;
constexpr uint64_t kMs = 1'000'000;

class SessionBuilder {
 public:
  SessionBuilder() {
    session_.directory = "/tmp/session";
    session_.meta.start_monotonic_ns = 0;
    session_.kernel_stacks[kFutexStack] = {1, 2, 3, 4};
    session_.kernel_symbols = {{1, "__schedule+0x1"},
                               {2, "schedule+0x2"},
                               {3, "futex_wait_queue+0x3"},
                               {4, "futex_wait+0x4"}};
    Thread(kHolder, "holder");
    Thread(kGpu, "fake-gpu");
  }
  void Thread(uint32_t tid, const std::string& name) {
    session_.threads[tid] = {kPid, tid, name, 0};
  }
  void Call(uint32_t tid, const std::string& api, uint64_t enter, uint64_t exit) {
    uint32_t index = 0;
    while (index < session_.api_names.size() && session_.api_names[index] != api) ++index;
    if (index == session_.api_names.size()) session_.api_names.push_back(api);
    session_.api_calls.push_back({enter, exit, 0, 0, kPid, tid, index, 0, 0});
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
    interval.waker_comm = session_.threads.count(waker) ? session_.threads[waker].name : "";
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
    return session_;
  }

 private:
  Session session_;
};

// Three launchers queue on the driver lock while the holder sleeps in cudaDeviceSynchronize
// waiting for the GPU; the holder wakes the first, each wakes the next (a glibc mutex convoy).
void AddConvoy(SessionBuilder* b, uint64_t at) {
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

TEST(Analysis, ConvoyBehindASleepingHolderIsOneFreezeWithOneCause) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});

  ASSERT_EQ(analysis.blocked_calls.size(), 4u);
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const Freeze& freeze = analysis.freezes[0];
  EXPECT_EQ(freeze.thread_count, 3u);
  EXPECT_EQ(freeze.object.futex_address, kLock);
  EXPECT_EQ(freeze.object.kernel_function, "futex_wait_queue");
  ASSERT_TRUE(freeze.holder.has_value());
  EXPECT_EQ(freeze.holder->tid, kHolder);
  ASSERT_NE(freeze.holder->call, nullptr);
  EXPECT_EQ(session.ApiName(*freeze.holder->call), "cudaDeviceSynchronize");
  // The holder slept (on its own condition variable) while holding the lock, woken by the GPU.
  ASSERT_TRUE(freeze.holder->own_wait.has_value());
  EXPECT_EQ(freeze.holder->own_wait->futex_address, kCondvar);
  EXPECT_EQ(freeze.holder->own_waker_tid, kGpu);
  EXPECT_GT(freeze.holder->asleep_ns, 35 * kMs);

  ASSERT_EQ(freeze.members.size(), 3u);
  EXPECT_FALSE(freeze.members[0].passed_on);
  EXPECT_EQ(freeze.members[0].woken_by_tid, kHolder);
  EXPECT_TRUE(freeze.members[1].passed_on);
  EXPECT_TRUE(freeze.members[2].passed_on);
  for (const FreezeMember& member : freeze.members) {
    const BlockedCall& blocked = analysis.blocked_calls[member.blocked_call];
    EXPECT_EQ(session.ApiName(*blocked.call), "cudaLaunchKernel");
    EXPECT_EQ(blocked.freeze, 0);
    // Asleep from the wait's start to its wake, runnable from the wake to the switch-in.
    EXPECT_EQ(blocked.runnable_ns, 10000u);
    EXPECT_EQ(blocked.asleep_ns + blocked.runnable_ns + blocked.on_cpu_ns,
              blocked.call->duration());
  }
  // The holder's own slow call is explained, not a member of the freeze it caused.
  EXPECT_EQ(analysis.blocked_calls[freeze.holder->blocked_call].freeze, -1);
}

TEST(Analysis, HolderSpinningOnCpuIsSaidSo) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaFree", 0, 30 * kMs);  // spins in the driver: never off-CPU
  for (uint32_t tid : {11u, 12u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 1 * kMs, 30 * kMs);
    builder.FutexSleep(tid, kLock, 1 * kMs + 100, 30 * kMs - 20000, 30 * kMs - 10000, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const auto& holder = *analysis.freezes[0].holder;
  EXPECT_EQ(holder.tid, kHolder);
  EXPECT_EQ(session.ApiName(*holder.call), "cudaFree");
  EXPECT_EQ(holder.asleep_ns, 0u);
  EXPECT_GT(holder.on_cpu_ns, 28 * kMs);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("on CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("working or spinning while holding it"), std::string::npos) << text;
}

TEST(Analysis, TheLongSleepNamesTheHolderNotAnEarlierShortOne) {
  // The holder takes the lock briefly (cudaMalloc), wakes a waiter that then loses the lock to the
  // holder's next call (cudaFree, held 30 ms): the waiter sleeps twice in one launch.
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMalloc", 0, 100000);
  builder.Call(kHolder, "cudaFree", 200000, 30 * kMs);
  for (uint32_t tid : {11u, 12u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 50000, 30 * kMs + 50000);
    builder.FutexSleep(tid, kLock, 60000, 90000, 95000, kHolder);  // woken by cudaMalloc's unlock
    builder.FutexSleep(tid, kLock, 210000, 30 * kMs - 10000, 30 * kMs, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.freezes.size(), 1u);
  ASSERT_TRUE(analysis.freezes[0].holder.has_value());
  EXPECT_EQ(session.ApiName(*analysis.freezes[0].holder->call), "cudaFree");
  EXPECT_EQ(analysis.freezes[0].holder->release_ns, 30 * kMs - 10000);
}

TEST(Analysis, AHolderThatWaitedForTheLockFirstIsStillTheHolder) {
  // Seen on the H200: the freeing thread waited a few microseconds for a launcher to drop the
  // driver lock, then held it 30 ms spinning in cudaFree while every launcher queued behind it.
  SessionBuilder builder;
  builder.Thread(11, "launcher-0");
  builder.Call(11, "cudaLaunchKernel", 0, 200000);
  builder.Call(kHolder, "cudaFree", 100000, 30 * kMs);
  builder.FutexSleep(kHolder, kLock, 110000, 190000, 195000, 11);  // waits for launcher-0's launch
  for (uint32_t tid : {12u, 13u, 14u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 300000 + tid, 30 * kMs + 50000);
    builder.FutexSleep(tid, kLock, 310000 + tid, 30 * kMs - 10000, 30 * kMs, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const Freeze& freeze = analysis.freezes[0];
  ASSERT_TRUE(freeze.holder.has_value());
  EXPECT_EQ(freeze.holder->tid, kHolder);
  EXPECT_EQ(session.ApiName(*freeze.holder->call), "cudaFree");
  EXPECT_EQ(freeze.holder->hold_start_ns, 195000u);
  EXPECT_EQ(freeze.thread_count, 3u);
  for (const FreezeMember& member : freeze.members) {
    EXPECT_NE(analysis.blocked_calls[member.blocked_call].call->tid, kHolder);
    EXPECT_FALSE(member.passed_on);
  }
}

TEST(Analysis, SeparateEpisodesOnOneLockAreSeparateFreezes) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  AddConvoy(&builder, 200 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.freezes.size(), 2u);
  EXPECT_LT(analysis.freezes[0].end_ns, analysis.freezes[1].start_ns);
  EXPECT_EQ(analysis.freezes[1].holder->tid, kHolder);
}

TEST(Analysis, PreemptionIsWaitingForACpuNotSleeping) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMemcpy", 0, 5 * kMs);
  builder.Preempted(kHolder, 1 * kMs, 3 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  const BlockedCall& blocked = analysis.blocked_calls[0];
  EXPECT_EQ(blocked.runnable_ns, 2 * kMs);
  EXPECT_EQ(blocked.asleep_ns, 0u);
  EXPECT_EQ(blocked.on_cpu_ns, 3 * kMs);
  EXPECT_FALSE(blocked.main_object.has_value());
  EXPECT_TRUE(analysis.freezes.empty());
}

TEST(Analysis, ThresholdSelectsTheCallsToExplain) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaEventQuery", 0, kMs / 2);
  builder.Call(kHolder, "cudaEventSynchronize", kMs, 3 * kMs);
  Session session = builder.Build();
  EXPECT_EQ(Analyze(session, {}).blocked_calls.size(), 1u);
  EXPECT_EQ(Analyze(session, {.threshold_ns = kMs / 4}).blocked_calls.size(), 2u);
}

TEST(Analysis, SingleBlockedCallNamesItsWakerAndWhatItWasDoing) {
  SessionBuilder builder;
  builder.Thread(11, "launcher");
  builder.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  builder.Call(11, "cudaLaunchKernel", 1 * kMs, 20 * kMs);
  builder.FutexSleep(11, kLock, 1 * kMs + 100, 20 * kMs - 5000, 20 * kMs - 1000, kHolder);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_TRUE(analysis.freezes.empty());
  const BlockedCall& launch = analysis.blocked_calls[1];
  ASSERT_EQ(launch.waits.size(), 1u);
  EXPECT_EQ(launch.waits[0].waker_tid, kHolder);
  ASSERT_NE(launch.waits[0].waker_call, nullptr);
  EXPECT_EQ(session.ApiName(*launch.waits[0].waker_call), "cudaDeviceSynchronize");
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("woken by holder (10), inside cudaDeviceSynchronize"), std::string::npos)
      << text;
}

TEST(Report, TextAndJsonNameTheFreeze) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  Session session = builder.Build();
  session.meta.command = {"./app"};
  session.meta.exit_code = 0;
  session.meta.kernel_recording = true;
  Analysis analysis = Analyze(session, {});

  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("FREEZE 1"), std::string::npos) << text;
  EXPECT_NE(text.find("3 threads blocked on one lock"), std::string::npos) << text;
  EXPECT_NE(text.find("holder   holder (10) held it"), std::string::npos) << text;
  EXPECT_NE(text.find("inside cudaDeviceSynchronize"), std::string::npos) << text;
  for (const char* name : {"launcher-0 (11)", "launcher-1 (12)", "launcher-2 (13)"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  EXPECT_NE(text.find("passed it on"), std::string::npos) << text;

  nlohmann::json json = RenderJsonReport(session, analysis);
  ASSERT_EQ(json["freezes"].size(), 1u);
  const auto& freeze = json["freezes"][0];
  EXPECT_EQ(freeze["thread_count"], 3);
  EXPECT_EQ(freeze["holder"]["tid"], kHolder);
  EXPECT_EQ(freeze["holder"]["call"]["api"], "cudaDeviceSynchronize");
  EXPECT_EQ(freeze["object"]["futex_address"], "0x7f0000001000");
  EXPECT_EQ(json["slow_calls"].size(), 4u);
}

TEST(Report, SaysWhatIsMissing) {
  SessionBuilder builder;
  Session session = builder.Build();
  session.meta.kernel_recording = false;
  session.meta.kernel_recording_note = "permission denied";
  session.lost.push_back({"kernel off-CPU intervals: ring buffer full", 42});
  session.diagnostics.push_back({"/s/inject-1.gpr", 4096, "payload checksum mismatch"});
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("NOT recorded: permission denied"), std::string::npos) << text;
  EXPECT_NE(text.find("LOST      42 kernel off-CPU intervals"), std::string::npos) << text;
  EXPECT_NE(text.find("/s/inject-1.gpr at offset 4096: payload checksum mismatch"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace gprof::collector
