// Issue 35, item 3: what a native thread was doing. tests/apps/native_holder_app, built without
// frame pointers, holds a lock while busy on CPU in known code, under gprof-run with real BPF:
// the report names what the holder ran from the on-CPU samples' native stacks, unwound with the
// files' call-frame information (a frame-pointer walk stops in glibc), and a waker's stack at its
// release reaches through glibc's __lll_lock_wake_private to the program's frame.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/analysis/on_cpu_samples.h"
#include "collector/model/model.h"
#include "collector/session/session_reader.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using json = nlohmann::json;

struct Recorded {
  std::vector<Fact> facts;
  std::string text;  // report.txt
  json report;       // report.json
  collector::Session session;
};

// native_holder_app SHAPE under gprof-run (`options` first); false, with a failure, when any
// step fails.
bool RunShape(const std::string& shape, const std::vector<std::string>& options,
              const TempDir& dir, Recorded* run) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q", "-o", dir.Sub("session")};
  spec.argv.insert(spec.argv.end(), options.begin(), options.end());
  spec.argv.insert(spec.argv.end(), {"--", AppPath("native_holder_app"), shape});
  spec.timeout_s = 90;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.err;
  EXPECT_EQ(result.err.find("kernel recording off"), std::string::npos) << result.err;
  if (result.exit_code() != 0) return false;
  run->facts = ParseFacts(result.out);
  run->text = ReadFile(dir.Sub("session/report.txt"));
  run->report = json::parse(ReadFile(dir.Sub("session/report.json")), nullptr, false);
  EXPECT_FALSE(run->report.is_discarded());
  auto session = collector::ReadSession(dir.Sub("session"));
  EXPECT_TRUE(session.ok()) << (session.ok() ? "" : session.status().message());
  if (!session.ok() || run->report.is_discarded()) return false;
  run->session = std::move(*session);
  return true;
}

const Fact* FactOf(const Recorded& run, const std::string& kind, const std::string& key = "",
                   const std::string& value = "") {
  for (const Fact& fact : run.facts) {
    if (fact.kind == kind && (key.empty() || fact[key] == value)) return &fact;
  }
  return nullptr;
}

uint32_t Tid(const Recorded& run, const std::string& name) {
  const Fact* thread = FactOf(run, "thread", "name", name);
  EXPECT_NE(thread, nullptr) << "no thread " << name;
  return thread ? static_cast<uint32_t>(thread->Number("tid")) : 0;
}

std::vector<std::string> FunctionsOf(const collector::OnCpuActivity& ran) {
  std::vector<std::string> functions;
  for (const collector::NativeFrame& frame : ran.frames) functions.push_back(frame.function);
  return functions;
}

// The chain links of report.json's stalls that are `tid` on CPU.
std::vector<json> OnCpuLinks(const json& report, uint32_t tid) {
  std::vector<json> links;
  for (const json& stall : report["diagnosis"]["stalls"]) {
    for (const json& link : stall["chain"]) {
      if (link["thread"]["tid"] == tid && link["state"] == "on_cpu") links.push_back(link);
    }
  }
  return links;
}

class NativeSamples : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  TempDir dir_;
  Recorded run_;
};

// The holder sorts with qsort: the samples are in the program's comparator, which libc called
// back; the program's frame that called qsort comes after it, with its line.
TEST_F(NativeSamples, AHolderInQsortIsNamedByTheComparatorAndTheFrameThatCalledQsort) {
  ASSERT_TRUE(RunShape("qsort", {}, dir_, &run_));
  const Fact* held = FactOf(run_, "held");
  ASSERT_NE(held, nullptr);
  collector::OnCpuActivity ran = collector::WhatRanOnCpu(
      run_.session, Tid(run_, "holder"), held->Number("start_ns"), held->Number("end_ns"));
  ASSERT_GT(ran.native_total, 0u) << "no native samples of the holder";
  EXPECT_GE(ran.native_samples * 2, ran.native_total);
  ASSERT_EQ(ran.frames.size(), 3u);
  EXPECT_EQ(ran.frames[0].function, "compare_slowly");
  EXPECT_TRUE(ran.frames[0].program);
  EXPECT_TRUE(ran.frames[1].function.starts_with("qsort")) << ran.frames[1].function;
  EXPECT_EQ(ran.frames[2].function, "sort_under_lock");
  EXPECT_TRUE(ran.frames[2].source.starts_with("native_holder_app.cc:")) << ran.frames[2].source;
  // The report's root says it.
  EXPECT_NE(run_.text.find("on CPU"), std::string::npos);
  EXPECT_NE(run_.text.find(" in compare_slowly (native_holder_app.cc:"), std::string::npos)
      << run_.text;
  EXPECT_NE(run_.text.find("<- sort_under_lock (native_holder_app.cc:"), std::string::npos)
      << run_.text;
  std::vector<json> links = OnCpuLinks(run_.report, Tid(run_, "holder"));
  ASSERT_FALSE(links.empty()) << run_.report["diagnosis"].dump(1).substr(0, 4000);
  EXPECT_EQ(links.front()["on_cpu"]["native_frames"][0]["function"], "compare_slowly");
}

// The holder runs a loop of the program's own: its function first, then its caller.
TEST_F(NativeSamples, AHolderInItsOwnLoopIsNamedByTheLoopAndItsCaller) {
  ASSERT_TRUE(RunShape("spin", {}, dir_, &run_));
  const Fact* held = FactOf(run_, "held");
  ASSERT_NE(held, nullptr);
  collector::OnCpuActivity ran = collector::WhatRanOnCpu(
      run_.session, Tid(run_, "holder"), held->Number("start_ns"), held->Number("end_ns"));
  ASSERT_GT(ran.native_total, 0u);
  EXPECT_EQ(FunctionsOf(ran), (std::vector<std::string>{"checksum_rounds", "spin_under_lock"}));
  EXPECT_NE(run_.text.find(" in checksum_rounds (native_holder_app.cc:"), std::string::npos)
      << run_.text;
  EXPECT_NE(run_.text.find("<- spin_under_lock (native_holder_app.cc:"), std::string::npos);
}

// glibc's own stdio lock: its unlock wakes a waiter through __lll_lock_wake_private, in code
// without frame pointers; the waker's stack at the wakeup reaches the program's frame.
TEST_F(NativeSamples, AWakerThroughLllLockWakePrivateReachesTheProgramsFrame) {
  ASSERT_TRUE(RunShape("stdio", {}, dir_, &run_));
  const uint32_t holder = Tid(run_, "holder");
  const uint32_t waiters[] = {Tid(run_, "waiter-0"), Tid(run_, "waiter-1")};
  bool found = false;
  for (const json& stall : run_.report["diagnosis"]["stalls"]) {
    const json& wait = stall["wait"];
    if (stall["thread"]["tid"] != waiters[0] && stall["thread"]["tid"] != waiters[1]) continue;
    if (wait["waker_tid"] != holder || !wait["waker_user_stack"].is_array()) continue;
    std::vector<std::string> frames = wait["waker_user_stack"].get<std::vector<std::string>>();
    ASSERT_FALSE(frames.empty());
    EXPECT_TRUE(frames[0].starts_with("__lll_lock_wake_private")) << frames[0];
    size_t release = 0;
    while (release < frames.size() && !frames[release].starts_with("release_stream")) ++release;
    EXPECT_LT(release, frames.size()) << wait["waker_user_stack"].dump();
    found = true;
  }
  EXPECT_TRUE(found) << "no wait ended by the holder with a stack";
  EXPECT_NE(run_.text.find("released at __lll_lock_wake_private"), std::string::npos) << run_.text;
}

// --sample-hz 0: no samples, and the report says only how long the holder was on CPU.
TEST_F(NativeSamples, WithoutSamplesTheHolderIsOnlyOnCpu) {
  ASSERT_TRUE(RunShape("spin", {"--sample-hz", "0"}, dir_, &run_));
  EXPECT_TRUE(run_.session.native.samples.empty());
  EXPECT_EQ(run_.report["session"]["native_stacks"]["samples"], 0);
  EXPECT_EQ(run_.text.find(" in checksum_rounds"), std::string::npos) << run_.text;
}

// The older option still sets the one rate, of native samples too.
TEST_F(NativeSamples, TheDeprecatedPythonSampleRateSetsTheOneRate) {
  ASSERT_TRUE(RunShape("spin", {"--python-sample-hz", "50"}, dir_, &run_));
  EXPECT_FALSE(run_.session.native.samples.empty());
  EXPECT_NE(run_.text.find(" in checksum_rounds (native_holder_app.cc:"), std::string::npos)
      << run_.text;
}

}  // namespace
}  // namespace gprof::test
