// A job of several gloo ranks, one late before each all_reduce for a known reason (issue 37):
// recorded as one session, or one session per rank merged, or per rank as hosts of their own
// (network namespaces joined by a veth pair, boot ids of their own, wall clocks skewed). The
// report names the late rank, each waiting rank's waits within 5% of what the program measured,
// and the cause on the late rank; the merge's clock correction removes the skew.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/scenario_facts.h"
#include "tests/straggler_support.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

std::string Script() { return SourceDir() + "/tests/apps/ranks/straggler_ranks.py"; }

JobRun Launch(const std::vector<std::string>& argv, const std::string& shell_prefix = "") {
  JobRun run;
  std::string command = shell_prefix;
  for (const std::string& part : argv) command += " '" + part + "'";
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.timeout_s = 180;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << command << "\n" << result.out << result.err;
  run.out = result.out + result.err;
  for (const Fact& fact : ParseFacts(result.out)) {
    if (fact.kind == "logger") run.loggers.insert(static_cast<uint32_t>(fact.Number("tid")));
    if (fact.kind != "wait") continue;
    run.waits.push_back(
        {static_cast<int>(fact.Number("rank")), fact.Number("start_ns"), fact.Number("end_ns")});
  }
  return run;
}

json ReadJson(const std::string& path) {
  json report = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(report.is_discarded()) << path;
  return report;
}

class Ranks : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  TempDir dir_;
};

// One session for the whole job: the launcher and both ranks; rank 1 sleeps before each step.
TEST_F(Ranks, OneSessionForTheJobNamesTheSleepingRank) {
  JobRun run = Launch({GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", "/usr/bin/python3",
                       Script(), "launch", "--world", "2", "--late", "1", "--mode", "sleep"});
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "nanosleep"});
  EXPECT_EQ(report["ranks"]["ranks"][0]["rank"], 1) << report["ranks"].dump(1);
  const std::string text = ReadFile(dir_.Sub("job/report.txt"));
  EXPECT_NE(text.find("RANKS: 2 ranks; rank 1 made the others wait most"), std::string::npos)
      << text;
}

// Three ranks in one session: rank 2's main thread waits for a lock its own logging thread holds
// while it works: the root is that logging thread (on CPU in spin, or short of a CPU on a loaded
// machine).
TEST_F(Ranks, ALockHeldByTheLateRanksOwnLoggingThread) {
  JobRun run = Launch({GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", "/usr/bin/python3",
                       Script(), "launch", "--world", "3", "--late", "2", "--mode", "lock"});
  ASSERT_FALSE(run.loggers.empty()) << run.out;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run, {.late = 2, .root_tids = run.loggers});
}

// One session per rank, merged: rank 1's DataLoader worker is slow.
TEST_F(Ranks, SessionsPerRankMergedNameTheRankWithTheSlowWorker) {
  JobRun run =
      Launch({"/usr/bin/python3", Script(), "launch", "--world", "2", "--late", "1", "--mode",
              "dataloader", "--prefix", GprofRunPath(), "-q", "-o", dir_.Sub("r%q{RANK}"), "--"});
  ProcessResult merged = RunProcess(
      Command({GprofRunPath(), "merge", "-o", dir_.Sub("job"), dir_.Sub("r0"), dir_.Sub("r1")}));
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ASSERT_EQ(report["sessions"].size(), 2u);
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "DataLoader worker"});
  EXPECT_NE(merged.out.find("RANKS: 2 ranks"), std::string::npos) << merged.out;
  // The job's page links each session's own page, which is report.html as `report` writes it.
  const std::string page = ReadFile(dir_.Sub("job/report.html"));
  for (const char* name : {"session-1.html", "session-2.html"}) {
    EXPECT_NE(page.find(std::string("href=\"") + name + "\""), std::string::npos) << page;
    EXPECT_NE(ReadFile(dir_.Sub(std::string("job/") + name)).find("<h2 id=\"text\">"),
              std::string::npos)
        << name;
  }
}

// torch.multiprocessing.spawn: no rank variable anywhere, each rank told its rank by an argument.
// The three children that exchange gloo's data are numbered by the order they were started, so
// the middle one, whose DataLoader worker is slow, is rank 1, and the report says the numbers were
// inferred.
TEST_F(Ranks, RanksStartedByTorchMultiprocessingSpawnAreNumberedByStartOrder) {
  JobRun run = Launch({GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", "/usr/bin/python3",
                       Script(), "spawn", "--world", "3", "--late", "1", "--mode", "dataloader"});
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "DataLoader worker 0 of rank 1"});
  EXPECT_EQ(report["ranks"]["ranks_inferred"], true) << report["ranks"].dump(1);
  EXPECT_EQ(report["ranks"]["world_size"], 3) << report["ranks"].dump(1);
  EXPECT_NE(ReadFile(dir_.Sub("job/report.txt")).find("no launcher variable named the ranks"),
            std::string::npos);
}

// A rank short of CPU: pinned to one CPU that two busy processes share.
TEST_F(Ranks, ACpuStarvedRank) {
  JobRun run = Launch({GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", "/usr/bin/python3",
                       Script(), "launch", "--world", "2", "--late", "1", "--mode", "cpu"});
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "waiting for a CPU"});
}

// Two "hosts": each rank in a network namespace of its own joined by a veth pair and in a time
// namespace of its own (CLOCK_MONOTONIC and BOOTTIME 7 s ahead for rank 0, 17 s for rank 1),
// recorded by its own gprof-run, told a boot id of its own, rank 1's wall clock 40 ms ahead. The
// merge places rank 1's session by its anchors (40 ms off), then corrects it by their TCP
// messages: the same machine's clock, so the corrected offset is 0 within the uncertainty it
// states.
TEST_F(Ranks, HostsOfTheirOwnAreAlignedByTheirMessages) {
  if (getuid() != 0) GPROF_SKIP_OR_FAIL("network namespaces need root");
  const std::string id = std::to_string(getpid() % 100000);
  const std::string ns = "gprof-rk" + id + "-", link = "grk" + id + "v";
  const std::string make = "set -e; ip netns add " + ns + "0; ip netns add " + ns +
                           "1; ip link add " + link + "0 type veth peer name " + link +
                           "1; ip link set " + link + "0 netns " + ns + "0; ip link set " + link +
                           "1 netns " + ns + "1; ip -n " + ns + "0 addr add 10.78.0.1/24 dev " +
                           link + "0; ip -n " + ns + "1 addr add 10.78.0.2/24 dev " + link +
                           "1; for n in 0 1; do ip -n " + ns + "$n link set " + link +
                           "$n up; ip -n " + ns + "$n link set lo up; done";
  ProcessResult made = RunProcess(Command({"/bin/sh", "-c", make}));
  struct Cleanup {
    std::string ns;
    ~Cleanup() {
      RunProcess(Command({"/bin/sh", "-c", "ip netns del " + ns + "0; ip netns del " + ns + "1"}));
    }
  } cleanup{ns};
  ASSERT_EQ(made.exit_code(), 0) << made.err;
  JobRun run = Launch({"/usr/bin/python3",
                       Script(),
                       "launch",
                       "--world",
                       "2",
                       "--late",
                       "1",
                       "--mode",
                       "sleep",
                       "--hosts",
                       "--skew-ns",
                       "40000000",
                       "--prefix",
                       "ip",
                       "netns",
                       "exec",
                       ns + "{rank}",
                       "/usr/bin/unshare",
                       "-T",
                       "--monotonic",
                       "{rank}7",
                       "--boottime",
                       "{rank}7",
                       "-f",
                       GprofRunPath(),
                       "-q",
                       "-o",
                       dir_.Sub("r%q{RANK}"),
                       "--"},
                      "MASTER_ADDR=10.78.0.1 GLOO_IFNAME_TEMPLATE=" + link + "{rank}");
  ProcessResult merged = RunProcess(
      Command({GprofRunPath(), "merge", "-o", dir_.Sub("job"), dir_.Sub("r0"), dir_.Sub("r1")}));
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ASSERT_EQ(report["sessions"].size(), 2u) << merged.out;
  const json& clock = report["sessions"][1]["clock"];
  EXPECT_FALSE(clock["same_boot"].get<bool>()) << clock.dump();
  EXPECT_GT(clock["messages"].get<uint64_t>(), 10u) << clock.dump();
  const int64_t offset = clock["offset_ns"], correction = clock["correction_ns"];
  const uint64_t uncertainty = clock["uncertainty_ns"];
  EXPECT_LE(std::abs(offset), std::max<int64_t>(static_cast<int64_t>(uncertainty), 100'000))
      << clock.dump();
  EXPECT_LT(uncertainty, 2'000'000u) << clock.dump();
  EXPECT_NEAR(static_cast<double>(correction), -40e6, 2e6) << clock.dump();
  // The waiting rank 0 measured its waits on its namespace's clock, 7 s ahead of the kernel's,
  // which rank 0's gprof-run wrote and the job's clock is.
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "nanosleep", .shift_ns = 7'000'000'000});
  EXPECT_NE(merged.out.find("corrected by"), std::string::npos) << merged.out;
}

}  // namespace
}  // namespace gprof::test
