// The GPU's timeline (gpu_timeline.h): calls joined with their GPU work, and each device's idle
// time and gaps.
#include "collector/analysis/gpu_timeline.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(GpuCorrelation, JoinsCallsAndWorkOfOneProcessBothWays) {
  Session session;
  session.api_names = {"cudaLaunchKernel", "cuLaunchKernel", "cudaFree"};
  session.kernel_names = {"k"};
  session.api_calls = {
      {0, 100, 0, 7, 100, 1, 0, 0, 0},    // the runtime call
      {10, 90, 0, 7, 100, 1, 1, 0, 0},    // the driver call inside it, same correlation id
      {20, 80, 0, 7, 200, 2, 0, 0, 0},    // another process, same correlation id
      {200, 300, 0, 0, 100, 1, 2, 0, 0},  // seen by interposition
  };
  auto kernel = [](uint32_t pid, uint64_t start, uint64_t correlation_id) {
    GpuActivity activity;
    activity.pid = pid;
    activity.start_ns = start;
    activity.end_ns = start + 10;
    activity.correlation_id = correlation_id;
    activity.detail = GpuKernel{};
    return activity;
  };
  session.gpu_activities = {kernel(100, 110, 7), kernel(200, 120, 7), kernel(100, 130, 7),
                            kernel(100, 140, 8)};
  GpuCorrelation correlation(session);

  auto of_runtime = correlation.ActivitiesOf(session.api_calls[0]);
  ASSERT_EQ(of_runtime.size(), 2u);
  EXPECT_EQ(of_runtime[0], &session.gpu_activities[0]);
  EXPECT_EQ(of_runtime[1], &session.gpu_activities[2]);
  EXPECT_EQ(correlation.ActivitiesOf(session.api_calls[1]).size(), 2u);
  auto of_other = correlation.ActivitiesOf(session.api_calls[2]);
  ASSERT_EQ(of_other.size(), 1u);
  EXPECT_EQ(of_other[0], &session.gpu_activities[1]);
  EXPECT_TRUE(correlation.ActivitiesOf(session.api_calls[3]).empty());

  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[0]), &session.api_calls[0])
      << "the outermost call";
  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[1]), &session.api_calls[2]);
  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[3]), nullptr);
}

TEST(GpuIdle, IsTheTimeTheDeviceRanNothingCountedOnceAndExplainedAtMostOnce) {
  SessionBuilder builder;
  builder.Cupti();
  std::vector<std::pair<uint64_t, uint64_t>> work;
  DecodingStreams(&builder, 0, 30, &work);
  Session session = builder.Build();
  const IdleByMicrosecond expected = IdleOf(work);
  ASSERT_GT(expected.runs.size(), 5u) << "the pattern has gaps of the whole GPU";

  Analysis diagnosis = Analyze(session, {});
  uint64_t gap_ns = 0;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  for (const GpuGap& gap : diagnosis.gaps) {
    gap_ns += gap.duration();
    gaps.emplace_back(gap.start_ns, gap.end_ns);
  }
  EXPECT_EQ(gaps, expected.runs) << "a gap is an interval in which no stream ran anything";
  uint64_t explained_ns = 0;
  for (const Cause& cause : diagnosis.causes) explained_ns += cause.gpu_idle_ns;
  EXPECT_EQ(explained_ns, gap_ns) << "every gap explained once";
  EXPECT_LE(explained_ns, expected.idle_ns) << "never more GPU idle explained than there was";
  for (const GpuGap& gap : diagnosis.gaps) {
    // The stream that ended the gap is the one whose launch the GPU waited for.
    ASSERT_NE(gap.after_call, nullptr);
    EXPECT_EQ(gap.after->start_ns, gap.end_ns);
    EXPECT_EQ(gap.stream_id, gap.after->stream_id);
    EXPECT_EQ(gap.after_call->tid, 30 + (gap.stream_id - 13));
  }
}

TEST(GpuIdle, EachDeviceHasItsOwnAndTheHeaderSaysIt) {
  SessionBuilder builder;
  builder.Cupti();
  std::vector<std::pair<uint64_t, uint64_t>> work0, work1;
  DecodingStreams(&builder, 0, 30, &work0);
  DecodingStreams(&builder, 1, 40, &work1);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.gpu.devices.size(), 2u);
  const IdleByMicrosecond expected[2] = {IdleOf(work0), IdleOf(work1)};
  for (uint32_t d = 0; d < 2; ++d) {
    const GpuDevice& device = analysis.gpu.devices[d];
    EXPECT_EQ(device.ordinal, d);
    EXPECT_EQ(device.idle_ns(), expected[d].idle_ns) << "GPU " << d;
  }
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.devices.size(), 2u);
  std::vector<uint64_t> explained(2, 0), gap_ns(2, 0);
  for (const GpuGap& gap : diagnosis.gaps) {
    gap_ns[gap.device] += gap.duration();
    EXPECT_EQ(diagnosis.devices[gap.device].ordinal, gap.device_id);
    if (gap.cause >= 0) explained[gap.device] += gap.duration();
  }
  uint64_t causes_ns = 0;
  for (const Cause& cause : diagnosis.causes) causes_ns += cause.gpu_idle_ns;
  EXPECT_EQ(causes_ns, explained[0] + explained[1]);
  for (uint32_t d = 0; d < 2; ++d) {
    uint64_t runs_ns = 0;
    for (const auto& [start, end] : expected[d].runs) runs_ns += end - start;
    EXPECT_EQ(gap_ns[d], runs_ns) << "GPU " << d;
    EXPECT_LE(explained[d], expected[d].idle_ns) << "GPU " << d;
  }
  std::string text = RenderTextReport(session, analysis);
  for (uint32_t d = 0; d < 2; ++d) {
    const GpuDevice& device = analysis.gpu.devices[d];
    std::string line =
        "  GPU " + std::to_string(d) + " ran nothing " + FormatDuration(expected[d].idle_ns) +
        " (" + std::to_string(expected[d].idle_ns * 100 / (device.last_ns - device.first_ns)) +
        "%) of the " + FormatDuration(device.last_ns - device.first_ns) +
        " from its first work to its last";
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  nlohmann::json json = RenderJsonReport(session, analysis);
  EXPECT_EQ(json["gpu"]["devices"][1]["idle_ns"], expected[1].idle_ns)
      << json["gpu"]["devices"].dump();
  EXPECT_EQ(json["diagnosis"]["devices"][0]["gap_idle_ns"], gap_ns[0]);
}

// A stream idle while another ran is no GPU idle time: its thread is no cause, however late.
TEST(GpuIdle, AStreamIdleWhileAnotherRanIsNoCause) {
  Session session = StreamIdleWhileAnotherRan();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.gaps.size(), 1u);
  EXPECT_EQ(diagnosis.gaps[0].start_ns, 40 * kMs);
  EXPECT_EQ(diagnosis.gaps[0].end_ns, 50 * kMs);
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].gpu_idle_ns, 10 * kMs);
  EXPECT_EQ(diagnosis.causes[0].kind, CauseKind::kLateHost);
  EXPECT_EQ(diagnosis.causes[0].thread_tid, 12u);
}

// Processes share a GPU CUPTI named (its UUID): one device, its idle time their union's
// complement; a GPU it did not name is each process's own.
TEST(GpuIdle, ProcessesShareAGpuOnlyWhenCuptiNamedIt) {
  for (bool named : {true, false}) {
    SCOPED_TRACE(named);
    SessionBuilder builder;
    builder.Cupti();
    Session& raw = builder.session();
    for (uint32_t pid : {kPid, kPid + 1}) {
      raw.processes[pid].pid = pid;
      raw.processes[pid].capture = {CaptureMode::kCupti, 130001, ""};
      if (named) raw.processes[pid].device_uuids[0] = "GPU-0b1c2d3e-0000-1111-2222-333344445555";
    }
    builder.Kernel(7, 0, 10 * kMs, 0, "a", 0, kPid);
    builder.Kernel(7, 20 * kMs, 30 * kMs, 0, "a", 0, kPid);
    builder.Kernel(7, 5 * kMs, 25 * kMs, 0, "b", 0, kPid + 1);
    Session session = builder.Build();
    GpuSummary gpu = Analyze(session, {}).gpu;
    Analysis diagnosis = Analyze(session, {});
    if (named) {
      ASSERT_EQ(gpu.devices.size(), 1u);
      EXPECT_EQ(gpu.devices[0].idle_ns(), 0u) << "the other process ran in pid 100's gap";
      EXPECT_EQ(gpu.devices[0].pids, (std::vector<uint32_t>{kPid, kPid + 1}));
      EXPECT_TRUE(diagnosis.gaps.empty());
      EXPECT_EQ(GpuDeviceName(gpu.devices[0], gpu.devices),
                "GPU 0 (GPU-0b1c2d3e-0000-1111-2222-333344445555, pids 100, 101)");
    } else {
      ASSERT_EQ(gpu.devices.size(), 2u);
      EXPECT_EQ(gpu.devices[0].idle_ns(), 10 * kMs);
      EXPECT_EQ(gpu.devices[1].idle_ns(), 0u);
      ASSERT_EQ(diagnosis.gaps.size(), 1u);
      EXPECT_EQ(GpuDeviceName(gpu.devices[0], gpu.devices), "GPU 0 of pid 100");
    }
  }
}

}  // namespace
}  // namespace gprof::collector
