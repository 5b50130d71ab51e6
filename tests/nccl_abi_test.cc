// The NCCL profiler plugin against what real NCCL (2.23 to 2.30) does, as the fake NCCL
// (tests/fake_nccl) now follows it (docs/distributed.md, "NCCL"):
//   - seqNumber counts each function's collectives apart (comm->seqNumber[func]): AllReduce #0 and
//     Broadcast #0 of one communicator are two collectives;
//   - a plan's kernel is launched before its events start, on the same thread, and one plan's
//     sends and receives share that kernel;
//   - a communicator of one rank runs its collectives without a kernel or an event
//     (ncclLaunchOneRank); its sends and receives to itself are P2p events of one
//     ncclDevKernel_SendRecv kernel (torch's all_to_all of one rank);
//   - v5/v6's p2p.parentGroup is at offset 40 of the union (after peer and nChannels), where a
//     chained plugin must find its own group;
//   - with NCCL_PROFILER_PLUGIN unset, NCCL loads libnccl-profiler.so from the library path: the
//     user's plugin installed so keeps its events under gprof-run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collector/analysis/nccl_collectives.h"
#include "collector/writers/report_ranks.h"
#include "inject/format/session_format.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

collector::NcclEvent Record(uint32_t tid, uint16_t kind, uint32_t func, uint64_t start_ns,
                            uint64_t stop_ns, std::optional<uint64_t> seq) {
  collector::NcclEvent event;
  event.pid = 100;
  event.tid = tid;
  event.rank = 0;
  event.kind = kind;
  event.func = func;
  event.comm_hash = 0xc0;
  event.flags = format::kNcclHasCommHash;
  if (seq) {
    event.seq_number = *seq;
    event.flags |= format::kNcclHasSeqNumber;
  }
  event.start_ns = start_ns;
  event.stop_ns = stop_ns;
  return event;
}

constexpr uint16_t kCollective = static_cast<uint16_t>(format::NcclEventKind::kCollective);
constexpr uint16_t kP2p = static_cast<uint16_t>(format::NcclEventKind::kP2p);

TEST(NcclAbi, CollectivesOfTwoFunctionsNumberedApartAreMatchedApart) {
  collector::Session one, two;
  one.nccl_names = two.nccl_names = {"", "AllReduce", "Broadcast"};
  // Each rank: AllReduce #0, Broadcast #0, AllReduce #1 (rank 1 later each time).
  one.nccl_events = {Record(10, kCollective, 1, 100, 110, 0),
                     Record(10, kCollective, 2, 200, 210, 0),
                     Record(10, kCollective, 1, 300, 310, 1)};
  two.nccl_events = {Record(20, kCollective, 1, 150, 160, 0),
                     Record(20, kCollective, 2, 250, 260, 0),
                     Record(20, kCollective, 1, 350, 360, 1)};
  for (auto& event : two.nccl_events) event.rank = 1;
  std::vector<collector::JobSession> sessions = {{&one, nullptr, 0}, {&two, nullptr, 0}};
  auto matched =
      collector::MatchNcclCollectives(sessions, [](int, uint32_t) { return std::optional<int>(); });
  ASSERT_EQ(matched.size(), 3u);
  const std::vector<std::string> funcs = {"AllReduce", "Broadcast", "AllReduce"};
  const std::vector<uint64_t> seqs = {0, 0, 1};
  for (size_t i = 0; i < matched.size(); ++i) {
    EXPECT_EQ(matched[i].func, funcs[i]) << i;
    EXPECT_EQ(matched[i].seq_number, seqs[i]) << i;
    ASSERT_EQ(matched[i].arrivals.size(), 2u) << i;
    EXPECT_EQ(matched[i].arrivals[0].start_ns, 100 + 100 * i);
    EXPECT_EQ(matched[i].arrivals[1].start_ns, 150 + 100 * i);
  }
}

// The kernel a record is given: the one its thread launched since the previous record started;
// a record started while the previous ran, with no launch since, shares the previous's kernel.
TEST(NcclAbi, ARecordIsGivenTheKernelItsThreadLaunchedJustBefore) {
  collector::Session session;
  session.nccl_names = {"", "Send", "Recv", "AllReduce"};
  session.kernel_names = {"ncclDevKernel_SendRecv", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                          "vectorAdd"};
  auto launch = [&](uint64_t enter_ns, uint64_t correlation_id, uint32_t kernel) {
    collector::ApiCall call;
    call.pid = 100;
    call.tid = 7;
    call.enter_ns = enter_ns;
    call.exit_ns = enter_ns + 20;
    call.correlation_id = correlation_id;
    session.api_calls.push_back(call);
    collector::GpuActivity activity;
    activity.pid = 100;
    activity.correlation_id = correlation_id;
    activity.start_ns = enter_ns + 30;
    activity.end_ns = enter_ns + 500;
    collector::GpuKernel detail;
    detail.name_index = kernel;
    activity.detail = detail;
    session.gpu_activities.push_back(activity);
  };
  launch(1000, 1, 0);  // one plan: a send and a receive to itself
  launch(1900, 2, 2);  // the program's own kernel, not NCCL's
  launch(2000, 3, 1);  // a collective
  session.nccl_events = {
      Record(7, kP2p, 1, 1100, 1400, std::nullopt),  // the plan's events, started after its launch
      Record(7, kP2p, 2, 1150, 1450, std::nullopt), Record(7, kCollective, 3, 2100, 2300, 0),
      Record(7, kCollective, 3, 3000, 3100, 1),  // no kernel launched since the last record
  };
  json records = collector::NcclRecordsJson(session)["records"];
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_FALSE(records[i]["kernel"].is_null()) << records[i].dump(1);
    EXPECT_EQ(records[i]["kernel"]["name"], "ncclDevKernel_SendRecv");
    EXPECT_EQ(records[i]["kernel"]["launch_ns"], 1000);
  }
  ASSERT_FALSE(records[2]["kernel"].is_null()) << records[2].dump(1);
  EXPECT_EQ(records[2]["kernel"]["name"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(records[2]["kernel"]["launch_ns"], 2000);
  EXPECT_TRUE(records[3]["kernel"].is_null()) << records[3].dump(1);
}

// Where the plugin told nothing, the NCCL kernels stand for the collectives, named as CUPTI
// names them on a real GPU (demangled, with their arguments); sends and receives, which pair two
// ranks, stand for none.
TEST(NcclAbi, KernelsOfARealGpuStandForCollectivesButSendsDoNot) {
  collector::Session session;
  session.kernel_names = {"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                          "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"};
  for (uint32_t i = 0; i < 4; ++i) {
    collector::ApiCall call;
    call.pid = call.tid = 100;
    call.enter_ns = 1000 + i * 1000;
    call.exit_ns = call.enter_ns + 20;
    call.correlation_id = i + 1;
    session.api_calls.push_back(call);
    collector::GpuActivity activity;
    activity.pid = 100;
    activity.correlation_id = i + 1;
    activity.start_ns = call.enter_ns + 30;
    activity.end_ns = call.enter_ns + 500;
    collector::GpuKernel detail;
    detail.name_index = i % 2;
    activity.detail = detail;
    session.gpu_activities.push_back(activity);
  }
  std::vector<std::string> names;
  std::vector<collector::NcclEvent> events = collector::NcclEventsOf(session, &names);
  ASSERT_EQ(events.size(), 2u);
  for (const collector::NcclEvent& event : events) {
    EXPECT_EQ(names.at(event.func), "AllReduce");
    EXPECT_EQ(event.gpu_start_ns, event.launch_ns + 30);
  }
}

struct OneRankRun {
  json report;
  std::string out;
};

OneRankRun RunOneRank(const std::string& session, int iters,
                      const std::vector<std::string>& environment, int more_comms = 0) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(),
               "-q",
               "-o",
               session,
               "--",
               AppPath("nccl_one_rank_app"),
               std::to_string(iters),
               std::to_string(more_comms)};
  spec.set_env = environment;
  spec.timeout_s = 120;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.out << result.err;
  EXPECT_NE(result.out.find("done iters=" + std::to_string(iters)), std::string::npos)
      << result.out;
  OneRankRun run;
  run.out = result.out + result.err;
  run.report = json::parse(ReadFile(session + "/report.json"), nullptr, false);
  EXPECT_FALSE(run.report.is_discarded()) << run.out;
  return run;
}

class NcclOneRankJob : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  TempDir dir_;
};
class NcclOneRank : public NcclOneRankJob, public ::testing::WithParamInterface<int> {};

// A one-rank job: its all_reduces give no record and no kernel; each send/receive pair to itself
// gives two P2p records (a Send and a Recv of peer 0) sharing their ncclDevKernel_SendRecv
// kernel, launched just before they started; an in-place pair gives nothing.
TEST_P(NcclOneRank, SendsToItselfAreP2pRecordsOfTheirSendRecvKernel) {
  const int iters = 3;
  OneRankRun run =
      RunOneRank(dir_.Sub("s"), iters, {"FAKE_NCCL_PROFILER_MAX=" + std::to_string(GetParam())});
  const json& nccl = run.report["nccl"];
  ASSERT_TRUE(nccl.is_object()) << run.out;
  EXPECT_EQ(nccl["interface"], GetParam());
  const json& records = nccl["records"];
  ASSERT_EQ(records.size(), 2u * iters) << nccl.dump(1);
  std::set<uint64_t> launches;
  for (size_t i = 0; i < records.size(); ++i) {
    const json& record = records[i];
    EXPECT_EQ(record["kind"], "p2p") << record.dump(1);
    EXPECT_EQ(record["func"], i % 2 == 0 ? "Send" : "Recv") << record.dump(1);
    EXPECT_EQ(record["rank"], 0);
    ASSERT_FALSE(record["kernel"].is_null()) << record.dump(1);
    EXPECT_EQ(record["kernel"]["name"], "ncclDevKernel_SendRecv");
    EXPECT_LE(record["kernel"]["launch_ns"].get<uint64_t>(), record["start_ns"].get<uint64_t>());
    launches.insert(record["kernel"]["launch_ns"].get<uint64_t>());
  }
  EXPECT_EQ(launches.size(), static_cast<size_t>(iters));  // one kernel for each pair
  uint64_t nccl_kernels = 0;
  for (const json& kernel : run.report["tables"]["gpu_kernels"]) {
    const std::string name = kernel["name"];
    if (name.find("nccl") == std::string::npos) continue;
    EXPECT_EQ(name, "ncclDevKernel_SendRecv");
    nccl_kernels += kernel["count"].get<uint64_t>();
  }
  EXPECT_EQ(nccl_kernels, static_cast<uint64_t>(iters));
}

INSTANTIATE_TEST_SUITE_P(Interfaces, NcclOneRank, ::testing::Values(2, 3, 4, 5, 6));

// The user's plugin chained under an NCCL asking v4, v5 or v6 finds its own group as the parent
// of each send and receive (v4: parentObj; v5, v6: p2p.parentGroup), never gprof-run's handle.
class NcclChainedP2p : public NcclOneRank {};

TEST_P(NcclChainedP2p, TheUsersPluginFindsItsOwnGroupAsParent) {
  const int iters = 2;
  const std::string plugin = BuildDir() + "/tests/apps/libnccl_counting_plugin.so";
  RunOneRank(dir_.Sub("s"), iters,
             {"FAKE_NCCL_PROFILER_MAX=" + std::to_string(GetParam()),
              "NCCL_PROFILER_PLUGIN=" + plugin, "NCCL_COUNT_OUT=" + dir_.Sub("counts")});
  std::vector<Fact> facts = ParseFacts(ReadFile(dir_.Sub("counts.0")));
  ASSERT_EQ(facts.size(), 1u);
  EXPECT_EQ(facts[0].Number("groups"), static_cast<uint64_t>(iters));
  EXPECT_EQ(facts[0].Number("colls"), 0u);
  EXPECT_EQ(facts[0].Number("p2ps"), 2u * iters);
  EXPECT_EQ(facts[0].Number("p2p_parents_ok"), 2u * iters);
}

INSTANTIATE_TEST_SUITE_P(Interfaces, NcclChainedP2p, ::testing::Values(4, 5, 6));

// NCCL's activation mask is one of the process, which every communicator's init rewrites: the
// 300 communicators created after the first, more than the plugin has contexts for, leave the
// first one's events asked for.
TEST_F(NcclOneRankJob, CommunicatorsBeyondThePluginsContextsKeepTheOthersEvents) {
  const int iters = 2;
  OneRankRun run = RunOneRank(dir_.Sub("s"), iters, {}, 300);
  const json& nccl = run.report["nccl"];
  ASSERT_TRUE(nccl.is_object()) << run.out;
  EXPECT_EQ(nccl["records"].size(), 2u * iters) << nccl.dump(1);
}

// No NCCL_PROFILER_PLUGIN: NCCL would load libnccl-profiler.so from the library path; under
// gprof-run that plugin is chained and keeps its events.
TEST_F(NcclOneRankJob, TheLibraryNcclLoadsUnaskedIsChained) {
  const int iters = 2;
  OneRankRun run =
      RunOneRank(dir_.Sub("s"), iters,
                 {"LD_LIBRARY_PATH=" + BuildDir() + "/tests/apps/default_nccl_profiler",
                  "NCCL_COUNT_OUT=" + dir_.Sub("counts")});
  std::vector<Fact> facts = ParseFacts(ReadFile(dir_.Sub("counts.0")));
  ASSERT_EQ(facts.size(), 1u) << run.out;
  EXPECT_EQ(facts[0].Number("p2ps"), 2u * iters);
  EXPECT_EQ(facts[0].Number("p2p_parents_ok"), 2u * iters);
  EXPECT_EQ(run.report["nccl"]["records"].size(), 2u * iters);  // and gprof-run's own records
}

// The same in a job of two ranks: the RANKS section names the plugin it chained.
TEST_F(NcclOneRankJob, TheLibraryNcclLoadsUnaskedIsNamedInTheRanksSection) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", AppPath("nccl_ranks_app"),
               "launch", "--world", "2", "--late", "1", "--iters", "3", "--late-ms", "40"};
  spec.set_env = {"LD_LIBRARY_PATH=" + BuildDir() + "/tests/apps/default_nccl_profiler",
                  "NCCL_COUNT_OUT=" + dir_.Sub("counts")};
  spec.timeout_s = 120;
  ProcessResult result = RunProcess(spec);
  ASSERT_EQ(result.exit_code(), 0) << result.out << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<Fact> facts = ParseFacts(ReadFile(dir_.Sub("counts." + std::to_string(rank))));
    ASSERT_EQ(facts.size(), 1u) << rank;
    EXPECT_EQ(facts[0].Number("colls"), 3u);
    EXPECT_EQ(facts[0].Number("parents_ok"), 3u);
  }
  const std::string text = ReadFile(dir_.Sub("job/report.txt"));
  EXPECT_NE(text.find("profiler plugin (libnccl-profiler.so) was chained"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace gprof::test
