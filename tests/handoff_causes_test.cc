// Which handoffs are causes (issue 35's follow-ups): a wait inside a CUDA call that the thread
// completing the GPU's work ended is the GPU's, not a handoff; a handoff too small to matter is
// no cause.
#include <gtest/gtest.h>

#include "collector/analysis/diagnosis.h"
#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kMain = kPid;  // the command's main thread

// The command's main thread, in `api` from 1 ms to 21 ms, asleep on a condition from 2 ms to
// 20 ms, woken by `waker`; the GPU ran a kernel before and after (the GPU idle between).
Session WaitInsideACudaCall(uint32_t waker, bool waker_calls_cuda) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(kMain, "main");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = 30 * kMs;
  builder.Call(kMain, "cudaLaunchKernel", 0, 1 * kMs / 2, 1);
  builder.Kernel(7, 1 * kMs / 2, 1 * kMs, 1);
  builder.Call(kMain, "cudaMemcpy", 1 * kMs, 21 * kMs, 2);
  builder.FutexSleep(kMain, kCondvar, 2 * kMs, 20 * kMs, 20 * kMs + 1000, waker);
  builder.Memcpy(7, 21 * kMs, 22 * kMs, 2, 4096);
  // The waker lacked a CPU most of the wait (the GPU's thread preempted on a loaded machine).
  builder.Preempted(waker, 3 * kMs, 19 * kMs);
  if (waker_calls_cuda) builder.Call(waker, "cudaLaunchKernel", 25 * kMs, 26 * kMs, 3);
  return builder.Build();
}

bool HasHandoffCause(const Analysis& diagnosis) {
  for (const Cause& cause : diagnosis.causes)
    if (cause.kind == CauseKind::kHandoff) return true;
  return false;
}

// The fake CUDA runtime's "fake-gpu" thread (a thread of the program that makes no CUDA call)
// ended a wait inside cudaMemcpy: the GPU side was late, the host waited for it; no handoff.
TEST(HandoffCauses, AWaitInsideACudaCallEndedByTheGpusThreadIsNoHandoff) {
  Session session = WaitInsideACudaCall(kGpu, false);
  Analysis diagnosis = Analyze(session, {});
  EXPECT_FALSE(HasHandoffCause(diagnosis)) << RenderDiagnosisText(session, diagnosis, 0);
}

// The same wait ended by a thread that makes CUDA calls of its own (a producer of the
// program's): a handoff.
TEST(HandoffCauses, AWaitInsideACudaCallEndedByAThreadThatCallsCudaIsAHandoff) {
  Session session = WaitInsideACudaCall(kHolder, true);
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(HasHandoffCause(diagnosis)) << RenderDiagnosisText(session, diagnosis, 0);
}

// The main thread waits 2 ms on a condition that another thread of the program signals (a start
// handshake), in a run of `run_ms`.
Session AHandoffOf2MsInARunOf(uint64_t run_ms) {
  SessionBuilder builder;
  builder.Thread(kMain, "main");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = run_ms * kMs;
  builder.FutexSleep(kMain, kCondvar, 1 * kMs, 3 * kMs, 3 * kMs + 1000, kHolder);
  return builder.Build();
}

// Below 1% of the program's run, a handoff is no cause: it stays a wait, listed.
TEST(HandoffCauses, AHandoffBelowAHundredthOfTheRunIsNoCause) {
  Session session = AHandoffOf2MsInARunOf(1000);
  Analysis diagnosis = Analyze(session, {});
  const std::string text = RenderDiagnosisText(session, diagnosis, 0);
  EXPECT_FALSE(HasHandoffCause(diagnosis)) << text;
  ASSERT_EQ(diagnosis.stalls.size(), 1u);
  EXPECT_TRUE(diagnosis.stalls[0].on_critical_path);
  EXPECT_NE(text.find("OTHER LONG WAITS: 1 handoffs"), std::string::npos) << text;
}

TEST(HandoffCauses, TheSameHandoffInAShortRunIsACause) {
  Session session = AHandoffOf2MsInARunOf(100);
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(HasHandoffCause(diagnosis)) << RenderDiagnosisText(session, diagnosis, 0);
}

}  // namespace
}  // namespace gprof::collector
