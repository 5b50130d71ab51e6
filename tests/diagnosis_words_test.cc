// The analysis's results in words (diagnosis_words.h): causes as the report names them, and the
// links of chains, on the analysis tests' sessions.
#include "collector/writers/words/diagnosis_sentences.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(DiagnosisWords, AFileLockIsNamedByWhatItIs) {
  Session session = FileLockOfTwoProcesses();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(CauseIdentity(session, diagnosis.causes[0]),
            "a file lock (flock, fcntl) in locks_lock_inode_wait");
}

TEST(DiagnosisWords, ALinkSaysHowLongItsThreadWaitedForACpu) {
  Session session = PreemptedProducer();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_GE(diagnosis.stalls.size(), kProducerDelays.size());
  for (size_t i = 0; i < kProducerDelays.size(); ++i) {
    const Stall& handoff = diagnosis.stalls[i];
    ASSERT_EQ(handoff.chain.size(), 1u);
    EXPECT_NE(DescribeLink(session, handoff.chain[0])
                  .find(", waiting for a CPU " + FormatDuration(kProducerDelays[i])),
              std::string::npos)
        << DescribeLink(session, handoff.chain[0]);
  }
}

TEST(DiagnosisWords, ALateThreadsCauseIsNamedByTheThread) {
  Session session = StreamIdleWhileAnotherRan();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_NE(CauseIdentity(session, diagnosis.causes[0]).find("slow (12)"), std::string::npos)
      << CauseIdentity(session, diagnosis.causes[0]);
}

TEST(DiagnosisWords, OnCpuBetweenTwoLaunchesIsOutsideCudaCalls) {
  SessionBuilder builder;
  // Computing on the CPU from 1 ms to 60 ms, then 20 us in the copy that queues the next work.
  Session session = LateLaunch(builder, "cudaMemcpyAsync", 60 * kMs, 60 * kMs + 20000);
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "\"python3\" (11) on CPU 50.0 ms (50.0 ms outside CUDA calls, then 20.0 us in "
            "cudaMemcpyAsync)");
}

TEST(DiagnosisWords, BlockedInsideTheCallIsInIt) {
  SessionBuilder builder;
  // The call that queues the next work began before the GPU went idle and held the thread 50 ms.
  Session session = LateLaunch(builder, "cudaLaunchKernel", 5 * kMs, 60 * kMs);
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "\"python3\" (11) on CPU 50.0 ms in "
            "cudaLaunchKernel");
}

TEST(DiagnosisWords, TimeInOtherCallsIsSaidApartFromTheCallThatEndedTheGap) {
  Session session = LateAfterOtherCalls();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "\"python3\" (11) on CPU 50.0 ms (26.0 ms outside CUDA calls, 4.0 ms in 2 other CUDA "
            "calls (longest cudaEventQuery), then 20.0 ms in cudaMemcpyAsync)");
}

TEST(DiagnosisWords, AFirstLaunchThatLoadsAModuleIsNamedSo) {
  for (bool thread_named : {true, false}) {
    SCOPED_TRACE(thread_named);
    Session session = FirstLaunchLoadingAModule(thread_named);
    Analysis diagnosis = Analyze(session, {});
    const GpuGap& gap = OnlyGap(diagnosis);
    ASSERT_GE(gap.cause, 0);
    EXPECT_EQ(
        CauseIdentity(session, diagnosis.causes[gap.cause]),
        "python3 (11) loading a CUDA module in cuLaunchKernel (the driver loads a module's code "
        "at its first use)");
  }
}

TEST(DiagnosisWords, LoadsInDriverCallsBeforeTheLaunchAreNamedSo) {
  Session session = ModulesLoadedBeforeTheLaunch();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_GE(gap.cause, 0);
  EXPECT_EQ(CauseIdentity(session, diagnosis.causes[gap.cause]),
            "python3 (11) loading a CUDA module before cudaLaunchKernel (the driver loads a "
            "module's code at its first use)");
}

TEST(DiagnosisWords, AShortLoadInALongGapLeavesTheThreadLate) {
  Session session = ShortLoadInALongGap();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_GE(gap.cause, 0);
  EXPECT_NE(CauseIdentity(session, diagnosis.causes[gap.cause]).find("late to launch"),
            std::string::npos)
      << CauseIdentity(session, diagnosis.causes[gap.cause]);
}

}  // namespace
}  // namespace gprof::collector
