// The text and JSON reports of analysed sessions (report.h): stacks, captures, freezes, what is
// missing, and the JSON as it is streamed.
#include "collector/writers/report.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(Report, ShowsTheFirstFramesOfASlowCallsStackAndJsonAll) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMalloc", 0, 5 * kMs);
  std::vector<std::string> frames;
  for (int i = 0; i < 10; ++i) frames.push_back("f" + std::to_string(i) + "()+0x1");
  frames[9] = "";  // no symbol: named by its mapping
  builder.Stack(kHolder, 0, frames);
  Session session = builder.Build();
  session.processes[kPid].maps = {
      {0, {{0x7f0000400000, 0x7f0000500000, 0x1000, "r-xp", "/lib/libapp.so"}}}};
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\n      at f0+0x1\n         f1+0x1\n         f2+0x1\n         f3+0x1\n"
                      "         f4+0x1\n         f5+0x1\n         f6+0x1\n         f7+0x1\n"
                      "         ... 2 more (report.json has every frame)\n"),
            std::string::npos)
      << text;
  nlohmann::json stack = RenderJsonReport(session, analysis)["slow_calls"][0]["native_stack"];
  ASSERT_EQ(stack.size(), 10u);
  EXPECT_EQ(stack[9], "libapp.so+0x1090");
}

TEST(Report, NamesEachProcesssCaptureAndTheClockCorrected) {
  SessionBuilder builder;
  builder.Cupti();
  Session session = builder.Build();
  // Within its uncertainty, and within a microsecond: the clocks agreed, nothing to say.
  session.processes[kPid].clock_offsets = {
      {1000, 1'200'000, 1000}, {2000, 50, 100}, {3000, 500, 100}};
  Process interposed;
  interposed.pid = 200;
  interposed.capture = {CaptureMode::kInterposition, 0, "CUPTI subscriber taken by another tool"};
  session.processes[200] = interposed;
  Process also_cupti;
  also_cupti.pid = 300;
  also_cupti.capture = session.processes[kPid].capture;
  session.processes[300] = also_cupti;
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("  capture   CUPTI 13.0 (API version 130001), /usr/lib/libcupti.so.13: "
                      "pids 100, 300\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  capture   interposition, no GPU timeline (CUPTI subscriber taken by "
                      "another tool): pid 200\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  clock     pid 100: CUPTI's clock was 1.2 ms ahead of CLOCK_MONOTONIC "
                      "(+-1.0 us); GPU times corrected\n"),
            std::string::npos)
      << text;
  nlohmann::json processes = RenderJsonReport(session, analysis)["session"]["processes"];
  ASSERT_EQ(processes.size(), 3u);
  EXPECT_EQ(processes[0]["capture"]["mode"], "cupti");
  EXPECT_EQ(processes[0]["clock_offsets"][0]["offset_ns"], 1'200'000);
  EXPECT_EQ(processes[1]["capture"]["mode"], "interposition");
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
  EXPECT_NE(text.find("\nfreeze 1 at "), std::string::npos) << text;
  EXPECT_NE(text.find("3 threads blocked on one lock"), std::string::npos) << text;
  EXPECT_NE(text.find("holder   \"holder\" (10) held it"), std::string::npos) << text;
  EXPECT_NE(text.find("inside cudaDeviceSynchronize"), std::string::npos) << text;
  for (const char* name : {"\"launcher-0\" (11)", "\"launcher-1\" (12)", "\"launcher-2\" (13)"}) {
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
  session.lost.push_back({"kernel off-CPU intervals: ring buffer full", 42, {{0, 40}, {3, 2}}});
  session.diagnostics.push_back({"/s/inject-1.gpr", 4096, "payload checksum mismatch"});
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("NOT recorded: permission denied"), std::string::npos) << text;
  // The text sums a kind over CPUs; the JSON keeps each CPU's count.
  EXPECT_NE(
      text.find("LOST      42 kernel off-CPU intervals: ring buffer full (cpu 0: 40, cpu 3: 2)\n"),
      std::string::npos)
      << text;
  nlohmann::json lost = RenderJsonReport(session, Analyze(session, {}))["session"]["lost"];
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["count"], 42);
  EXPECT_EQ(lost[0]["by_cpu"],
            nlohmann::json::parse(R"([{"cpu": 0, "count": 40}, {"cpu": 3, "count": 2}])"));
  EXPECT_NE(text.find("/s/inject-1.gpr at offset 4096: payload checksum mismatch"),
            std::string::npos)
      << text;
}

// report.json is written a slow call and a stall at a time; the text is the whole tree's dump.
TEST(Report, TheWrittenJsonIsTheReportTreeDumped) {
  SessionBuilder builder;
  // Names that need escaping, each in one way the writer's fast path leaves to nlohmann's: a quote,
  // a backslash, control characters; and the holder's: UTF-8, invalid UTF-8 (replaced), DEL.
  const std::array<std::string, 3> names = {"wait\"er-11", "waiter\\-12", "waiter-13\t\x01"};
  builder.Thread(kHolder, "hölder\xff\xc3\x7f");
  for (uint32_t tid : {11u, 12u, 13u}) {
    builder.Thread(tid, names[tid - 11]);
    builder.Call(tid, "cudaFree", tid * kMs - kMs / 2, (tid + 50) * kMs);
  }
  MutexConvoy(&builder);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.stalls.size(), 3u);
  for (uint64_t threshold_ns : {uint64_t{1'000'000}, UINT64_MAX}) {
    Analysis analysis = Analyze(session, {threshold_ns});
    EXPECT_EQ(analysis.blocked_calls.size(), threshold_ns == UINT64_MAX ? 0u : 3u);
    std::string written;
    WriteJsonReport(session, analysis, [&](std::string_view block) { written.append(block); });
    EXPECT_EQ(written, RenderJsonReport(session, analysis)
                           .dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

}  // namespace
}  // namespace gprof::collector
