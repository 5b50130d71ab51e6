// The GPU summary (gpu_summary.h): kernels by name, launches, captured launches and graph
// launches.
#include "collector/analysis/gpu_summary.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(GpuSummary, CountsKernelsByNameAndLaunchesWithoutTheirKernel) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Call(kHolder, "cudaLaunchKernel", 0, 1000, 1);
  builder.Kernel(13, 2000, 5000, 1, "A()");
  builder.Call(kHolder, "cudaLaunchKernel", 10000, 11000, 2);
  builder.Kernel(13, 12000, 13000, 2, "B()");
  builder.Call(kHolder, "__cudaLaunchKernel", 20000, 21000, 3);
  builder.Kernel(13, 22000, 30000, 3, "A()");
  builder.Call(kHolder, "cuLaunchKernel", 40000, 41000, 4);  // its kernel was not recorded
  builder.Call(kHolder, "cudaMemcpyAsync", 50000, 51000, 5);
  builder.Memcpy(13, 52000, 53000, 5, 4096);
  builder.Call(kHolder, "cudaLaunchHostFunc", 60000, 61000, 6);  // runs no kernel: not counted
  Session session = builder.Build();
  GpuSummary gpu = Analyze(session, {}).gpu;
  EXPECT_EQ(gpu.kernels, 3u);
  EXPECT_EQ(gpu.copies, 1u);
  EXPECT_EQ(gpu.launch_calls, 4u);
  EXPECT_EQ(gpu.launch_calls_with_kernel, 3u);
  ASSERT_EQ(gpu.kernels_by_time.size(), 2u);
  EXPECT_EQ(session.kernel_names[gpu.kernels_by_time[0].name_index], "A()");
  EXPECT_EQ(gpu.kernels_by_time[0].count, 2u);
  EXPECT_EQ(gpu.kernels_by_time[0].total_ns, 3000u + 8000u);
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("gpu       3 kernels, 1 copies, 0 memsets; 1 of 4 kernel launches have no "
                      "kernel recorded"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, Analyze(session, {}));
  EXPECT_EQ(json["gpu"]["launch_calls_with_kernel"], 3);
  EXPECT_EQ(json["gpu"]["kernels"][0]["name"], "A()");
}

// Launches made while a stream is captured into a CUDA graph run no kernel: they are counted as
// captured, and the graph launches' kernels as theirs.
TEST(GpuSummary, CapturedLaunchesAreCapturedAndGraphKernelsTheirGraphLaunchs) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "capturer");
  builder.Call(kHolder, "cudaLaunchKernel", 0, 1000, 1);
  builder.Kernel(13, 2000, 5000, 1, "A()");
  builder.Call(11, "cudaStreamBeginCapture", 10000, 11000, 2);
  // Another thread's launch meanwhile runs its kernel; one of its launches has none recorded.
  builder.Call(kHolder, "cudaLaunchKernel", 11500, 11600, 3);
  builder.Kernel(13, 11700, 11800, 3, "A()");
  builder.Call(kHolder, "cudaLaunchKernel", 11900, 11950, 4);
  for (uint64_t i = 0; i < 3; ++i)
    builder.Call(11, "cudaLaunchKernel", 12000 + i * 1000, 12500 + i * 1000, 5 + i);
  builder.Call(11, "cudaStreamEndCapture", 20000, 21000, 8);
  builder.Call(11, "cudaGraphInstantiate", 22000, 23000, 9);
  // A failed begin opens no capture: the launch after it has no kernel, and was not captured.
  builder.Call(11, "cudaStreamBeginCapture", 24000, 24100, 10);
  builder.session().api_calls.back().return_code = 900;  // cudaErrorStreamCaptureUnsupported
  builder.Call(11, "cudaLaunchKernel", 24200, 24300, 11);
  for (uint64_t run = 0; run < 2; ++run) {
    const uint64_t at = 30000 + run * 20000;
    builder.Call(11, "cudaGraphLaunch", at, at + 1000, 20 + run);
    for (uint64_t node = 0; node < 3; ++node) {
      builder.Kernel(14, at + 2000 + node * 1000, at + 2500 + node * 1000, 20 + run, "B()");
      GpuActivity& kernel = builder.session().gpu_activities.back();
      kernel.graph_id = 1;
      kernel.graph_node_id = node + 1;
    }
  }
  Session session = builder.Build();
  GpuCorrelation correlation(session);
  GpuSummary gpu = SummarizeGpu(session, correlation);
  EXPECT_EQ(gpu.launch_calls, 7u);
  EXPECT_EQ(gpu.launch_calls_with_kernel, 2u);
  EXPECT_EQ(gpu.launch_calls_captured, 3u);
  EXPECT_EQ(gpu.graph_launches, 2u);
  EXPECT_EQ(gpu.graph_kernels, 6u);
  for (const GpuActivity& activity : session.gpu_activities) {
    if (activity.graph_id == 0) continue;
    const ApiCall* launcher = correlation.LauncherOf(activity);
    ASSERT_NE(launcher, nullptr);
    EXPECT_EQ(session.ApiName(*launcher), "cudaGraphLaunch");
  }
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("gpu       8 kernels, 0 copies, 0 memsets; 2 of 7 kernel launches have no "
                      "kernel recorded; 3 kernel launches captured into CUDA graphs;\n"
                      "      2 graph launches ran 6 kernels\n"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, Analyze(session, {}))["gpu"];
  EXPECT_EQ(json["launch_calls_captured"], 3);
  EXPECT_EQ(json["graph_kernels"], 6);
}

}  // namespace
}  // namespace gprof::collector
