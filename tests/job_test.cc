// The job's views over its ranks (issue 37): which rank waited for which and why the last to
// arrive was late (rank_waits.h), and one clock for sessions of several hosts (clock_alignment.h).
#include <gtest/gtest.h>

#include "collector/analysis/rank_waits.h"
#include "collector/job/clock_alignment.h"
#include "collector/writers/report_ranks.h"
#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kRank0 = 200, kRank1 = 300, kRank2 = 400;

// Three ranks in one session (a launcher recorded whole): at each of `steps` steps ranks 0 and 2
// wait on a condition that rank 1's main thread signals after working `late_ms[step]`.
Session ThreeRanks(const std::vector<uint64_t>& late_ms) {
  SessionBuilder builder;
  Session& session = builder.session();
  for (uint32_t pid : {kRank0, kRank1, kRank2}) {
    session.processes[pid].pid = pid;
    session.processes[pid].rank = RankIdentity{pid / 100 - 2, pid / 100 - 2, 3, "RANK"};
    session.threads[pid] = {pid, pid, "python3", 0};
  }
  uint64_t at = 10 * kMs;
  for (uint64_t late : late_ms) {
    for (uint32_t waiter : {kRank0, kRank2}) {
      OffCpuInterval& wait =
          builder.Sleep(waiter, at, at + late * kMs, at + late * kMs + 10000, kRank1);
      wait.pid = waiter;
      wait.waker_pid = kRank1;
    }
    at += (late + 20) * kMs;
  }
  return builder.Build();
}

TEST(RankWaits, TheLateRankIsNamedWithHowLateAndWhy) {
  Session session = ThreeRanks({30, 80, 50});
  Analysis analysis = Analyze(session, {});
  const RankWaits& waits = analysis.rank_waits;
  ASSERT_EQ(waits.waits.size(), 6u) << RenderDiagnosisText(session, analysis, 0);
  ASSERT_EQ(waits.collectives.size(), 3u);
  EXPECT_EQ(waits.world_size, 3);
  // The longest first: rank 1 was 80 ms late, ranks 0 and 2 waited for it.
  const Collective& worst = waits.collectives.front();
  EXPECT_EQ(worst.late_rank, 1);
  EXPECT_NEAR(static_cast<double>(worst.late_ns), 80e6, 1e5);
  ASSERT_EQ(worst.waits.size(), 2u);
  for (int w : worst.waits) {
    const RankWait& wait = waits.waits[w];
    EXPECT_EQ(wait.late_rank, 1);
    ASSERT_TRUE(wait.root);
    EXPECT_EQ(wait.root->link.pid, kRank1);
    EXPECT_EQ(wait.root->link.state, ChainLink::State::kOnCpu);
  }
  // Rank 1 made the others wait 2 x 160 ms; ranks 0 and 2 waited 160 ms each.
  ASSERT_EQ(waits.ranks.size(), 3u);
  EXPECT_EQ(waits.ranks.front().rank, 1);
  EXPECT_NEAR(static_cast<double>(waits.ranks.front().made_wait_ns), 320e6, 1e6);
  EXPECT_EQ(waits.ranks.front().waited_ns, 0u);
  const std::string text = RankWaitsText({{&session, &analysis, 0}}, waits);
  EXPECT_NE(text.find("RANKS: 3 ranks; rank 1 made the others wait most: 320.0 ms in 6 waits"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("rank 1 arrived last, 80.0 ms late; rank 0 waited 80.0 ms, rank 2 waited 80.0 ms"),
      std::string::npos)
      << text;
}

// Waits inside one rank (its DataLoader worker) are no rank's waits for another.
TEST(RankWaits, WaitsWithinARankAreNotAmongThem) {
  SessionBuilder builder;
  Session& session = builder.session();
  session.processes[kRank0].pid = kRank0;
  session.processes[kRank0].rank = RankIdentity{0, 0, 2, "RANK"};
  session.processes[kRank0 + 1].pid = kRank0 + 1;  // its worker: no rank of its own
  session.threads[kRank0] = {kRank0, kRank0, "python3", 0};
  session.threads[kRank0 + 1] = {kRank0 + 1, kRank0 + 1, "worker", 0};
  OffCpuInterval& wait = builder.Sleep(kRank0, 10 * kMs, 60 * kMs, 60 * kMs + 1000, kRank0 + 1);
  wait.pid = kRank0;
  wait.waker_pid = kRank0 + 1;
  session = builder.Build();
  Analysis analysis = Analyze(session, {});
  EXPECT_TRUE(analysis.rank_waits.waits.empty());
  EXPECT_EQ(RankWaitsText({{&session, &analysis, 0}}, analysis.rank_waits), "");
}

SessionMeta Host(const std::string& boot, uint64_t realtime_minus_monotonic) {
  SessionMeta meta;
  meta.boot_id = boot;
  meta.start_anchor = ClockAnchor{1'000'000'000, 1'000'000'000 + realtime_minus_monotonic, 0, 2000};
  return meta;
}

TEST(ClockAlignment, SessionsOfOneBootShareTheClock) {
  SessionMeta a = Host("boot-a", 5), b = Host("boot-a", 999'999);
  std::vector<SessionClock> clocks = AlignClocks({&a, &b}, {});
  EXPECT_EQ(clocks[1].offset_ns, 0);
  EXPECT_TRUE(clocks[1].same_boot);
  EXPECT_EQ(clocks[1].how, "same boot");
}

TEST(ClockAlignment, AnotherHostIsPlacedByItsAnchorsThenByItsMessages) {
  // Host b's monotonic clock is 7 s ahead of a's (another boot); its wall clock is 30 ms fast.
  constexpr int64_t kTrueOffset = -7'000'000'000;  // b's time + offset = a's time
  constexpr int64_t kWallSkew = 30'000'000;
  const uint64_t a_wall = 1'700'000'000'000'000'000;
  SessionMeta a = Host("boot-a", a_wall);
  SessionMeta b = Host("boot-b", a_wall - static_cast<uint64_t>(-kTrueOffset) + kWallSkew);
  // Without messages: the anchors' placement, off by the wall clocks' skew.
  std::vector<SessionClock> placed = AlignClocks({&a, &b}, {});
  EXPECT_EQ(placed[1].offset_ns, kTrueOffset + kWallSkew);
  EXPECT_EQ(placed[1].how, "REALTIME anchors");
  // The anchors recorded no wall-clock error bound: how far off that is, is not known.
  EXPECT_FALSE(placed[1].uncertainty_known);
  // Messages both ways, each 50 us in flight: a -> b bounds b's offset from below, b -> a from
  // above; the middle is within the flight time of the truth.
  std::vector<SessionMessage> messages;
  for (uint64_t t = 2'000'000'000; t < 3'000'000'000; t += 100'000'000) {
    messages.push_back(
        {0, 1, t, static_cast<uint64_t>(static_cast<int64_t>(t) + 50'000 - kTrueOffset)});
    messages.push_back(
        {1, 0, static_cast<uint64_t>(static_cast<int64_t>(t) - kTrueOffset), t + 50'000});
  }
  std::vector<SessionClock> clocks = AlignClocks({&a, &b}, messages);
  EXPECT_NEAR(static_cast<double>(clocks[1].offset_ns), static_cast<double>(kTrueOffset), 50'000);
  EXPECT_LE(clocks[1].uncertainty_ns, 50'000u);
  EXPECT_TRUE(clocks[1].uncertainty_known);
  EXPECT_NEAR(static_cast<double>(clocks[1].correction_ns), static_cast<double>(-kWallSkew),
              50'000);
  EXPECT_EQ(clocks[1].messages, messages.size());
  EXPECT_FALSE(clocks[1].same_boot);
}

TEST(ClockAlignment, ASessionWithoutAnchorsIsTakenAsItIs) {
  SessionMeta a = Host("boot-a", 5), old;
  std::vector<SessionClock> clocks = AlignClocks({&a, &old}, {});
  EXPECT_EQ(clocks[1].offset_ns, 0);
  EXPECT_NE(clocks[1].how.find("no clock anchors"), std::string::npos);
}

}  // namespace
}  // namespace gprof::collector
