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

// A socket's reader that polls with a timeout, then is woken by data another thread wrote: it
// waited for that data all through its window, not only in its last poll. The writer was late
// because it waited for thread 33 until 50 ms; in the last poll's window (55-59.5 ms) it was only
// on CPU, which named the wrong root.
TEST(HandoffCauses, APollingReaderIsFollowedToWhyItsWriterWasLate) {
  constexpr uint32_t kRelay = 31, kWriter = 32, kWorker = 33;
  constexpr int32_t kPollStack = 7;
  constexpr uint64_t kOtherCondvar = kCondvar + 0x100;
  SessionBuilder builder;
  builder.session().kernel_stacks[kPollStack] = {1, 2, 6};
  builder.session().kernel_symbols[6] = "ep_poll+0x6";
  builder.Thread(kMain, "main");
  builder.Thread(kRelay, "relay");
  builder.Thread(kWriter, "writer");
  builder.Thread(kWorker, "worker");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = 100 * kMs;
  builder.FutexSleep(kMain, kCondvar, 10 * kMs, 60 * kMs, 60 * kMs + 1000, kRelay);
  builder.Sleep(kRelay, 5 * kMs, 55 * kMs, 55 * kMs + 1000, 0, 1, kPollStack);  // a timeout
  OffCpuInterval& poll = builder.Sleep(kRelay, 55 * kMs + 2000, 59 * kMs + 600 * kUs,
                                       59 * kMs + 700 * kUs, 0, 1, kPollStack);
  StreamRead read;
  read.pid = kPid;
  read.tid = kRelay;
  read.start_ns = poll.start_ns - 1000;
  read.end_ns = poll.end_ns + 1000;
  read.wait_start_ns = poll.start_ns;
  read.wake_ns = poll.wake_ns;
  read.kind = 2;  // a Unix socket
  read.writers[0] = {59 * kMs + 500 * kUs, kPid, kWriter};
  builder.session().stream_reads[{kRelay, poll.start_ns}] = read;
  builder.FutexSleep(kWriter, kOtherCondvar, 11 * kMs, 50 * kMs, 50 * kMs + 1000, kWorker);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  const std::string text = RenderDiagnosisText(session, diagnosis, 0);
  const Stall* waited = nullptr;
  for (const Stall& stall : diagnosis.stalls)
    if (stall.tid == kMain) waited = &stall;
  ASSERT_NE(waited, nullptr) << text;
  ASSERT_GE(waited->chain.size(), 3u) << text;
  EXPECT_EQ(waited->chain[0].tid, kRelay) << text;
  EXPECT_EQ(waited->chain[1].tid, kWriter) << text;
  EXPECT_EQ(waited->chain.back().tid, kWorker) << text;
}

// What OTHER LONG WAITS lists when the program's critical path is known: the waits on it first,
// then those off it, five in all; the join through which the path went into the thread it joined
// counted, not listed, and so are the waits off the path past the five.
TEST(HandoffCauses, OtherLongWaitsListsTheWaitsOnTheCriticalPath) {
  constexpr uint32_t kWorker = 32, kIdle = 33;
  constexpr int32_t kExitStack = 7;
  SessionBuilder builder;
  builder.session().kernel_stacks[kExitStack] = {8, 9};
  builder.session().kernel_symbols[8] = "futex_wake+0x8";
  builder.session().kernel_symbols[9] = "do_exit+0x9";
  builder.Thread(kMain, "main");
  builder.Thread(kWorker, "worker");
  builder.Thread(kIdle, "idle-pool");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = 1000 * kMs;
  builder.session().threads[kWorker].start_ns = 100 * kMs;
  builder.session().threads[kWorker].exit_ns = 900 * kMs;
  // The main thread joins the worker all its life; the worker waits 2 ms for the idle thread's
  // signal (a handoff on the path, below a hundredth of the run: no cause), and the idle thread
  // waits for work nobody on the path waited for.
  builder.FutexSleep(kMain, kCondvar, 110 * kMs, 900 * kMs, 900 * kMs + 1000, kWorker);
  builder.session().off_cpu.back().waker_kstack_id = kExitStack;
  builder.FutexSleep(kWorker, kCondvar + 0x40, 200 * kMs, 202 * kMs, 202 * kMs + 1000, kIdle);
  for (uint64_t k = 0; k < 6; ++k)
    builder.FutexSleep(kIdle, kCondvar + 0x80, (300 + 100 * k) * kMs, (350 + 100 * k + k) * kMs,
                       (350 + 100 * k + k) * kMs + 1000, kMain);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  const std::string text = RenderDiagnosisText(session, diagnosis, 0);
  EXPECT_FALSE(HasHandoffCause(diagnosis)) << text;
  EXPECT_NE(text.find("OTHER LONG WAITS: 8 handoffs (a thread waiting for another's signal, not "
                      "contention), 1 of them on the program's critical path; the longest, those "
                      "on it first:\n"
                      "  \"worker\" (32) at +0.090 s asleep 2.0 ms"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  1 join through which the program's end waited for the thread joined, "
                      "790.0 ms in all"),
            std::string::npos)
      << text;
  // The idle thread's four longest waits are shown after the worker's; its two shortest counted.
  EXPECT_NE(text.find("\"idle-pool\" (33) at +0.690 s asleep 55.0 ms"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"idle-pool\" (33) at +0.190 s"), std::string::npos) << text;
  EXPECT_NE(text.find("  2 more waits of 1 thread off the program's critical path (idle pool "
                      "threads, threads waiting for work), 101.0 ms in all"),
            std::string::npos)
      << text;
}

// What each cause held up of the program's critical path, beside the thread time it blocked: a
// lock two threads off the path fought over blocked them longer than the handoff the main thread
// waited for, but held up nothing the program's end waited for.
TEST(HandoffCauses, EachCauseSaysWhatOfItTheCriticalPathWaited) {
  constexpr uint32_t kProducer = 40, kFirst = 41, kSecond = 42;
  SessionBuilder builder;
  builder.Thread(kMain, "main");
  builder.Thread(kProducer, "producer");
  builder.Thread(kFirst, "first");
  builder.Thread(kSecond, "second");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = 1000 * kMs;
  builder.FutexSleep(kMain, kCondvar, 100 * kMs, 160 * kMs, 160 * kMs + 1000, kProducer);
  MutexSleep(&builder, kFirst, 200 * kMs, 300 * kMs, kSecond);
  MutexSleep(&builder, kSecond, 310 * kMs, 420 * kMs, kFirst);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  const std::string text = RenderDiagnosisText(session, diagnosis, 0);
  ASSERT_EQ(diagnosis.causes.size(), 2u) << text;
  EXPECT_EQ(diagnosis.causes[0].kind, CauseKind::kObject) << text;
  EXPECT_EQ(diagnosis.causes[0].held_up_ns, 0u) << text;
  EXPECT_EQ(diagnosis.causes[1].kind, CauseKind::kHandoff) << text;
  EXPECT_EQ(diagnosis.causes[1].held_up_ns, 60 * kMs + 1000) << text;
  EXPECT_EQ(diagnosis.causes[1].blocked_ns, diagnosis.causes[1].held_up_ns) << text;
}

}  // namespace
}  // namespace gprof::collector
