// NCCL's collectives matched across ranks through NCCL's profiler plugin (issue 37, item 5), on
// the fake NCCL (tests/fake_nccl) with jobs of tests/apps/nccl_ranks_app.cc: gprof-run names
// itself in NCCL_PROFILER_PLUGIN, NCCL takes the newest interface the injected library exports
// that it knows, and the report matches each collective by communicator and sequence number,
// names the rank that arrived last, the others' waits (within 5% of what they measured), and why
// it was late. A user's own plugin keeps getting its events; an NCCL whose interface is v1 only
// is said not to be read.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "collector/analysis/nccl_collectives.h"
#include "collector/session/session_reader.h"
#include "collector/writers/report_ranks.h"
#include "inject/format/session_format.h"
#include "tests/scenario_facts.h"
#include "tests/straggler_support.h"
#include "tests/session_builder.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using nlohmann::json;

struct Job {
  int world = 2;
  int late = 1;
  int iters = 5;
  int late_ms = 120;
  std::string mode = "sleep";
  std::vector<std::string> environment;  // more of the job's variables, "NAME=VALUE"
};

JobRun RunJob(const std::string& session, const Job& job) {
  JobRun run;
  ProcessSpec spec;
  spec.argv = {GprofRunPath(),
               "-q",
               "-o",
               session,
               "--",
               AppPath("nccl_ranks_app"),
               "launch",
               "--world",
               std::to_string(job.world),
               "--late",
               std::to_string(job.late),
               "--iters",
               std::to_string(job.iters),
               "--late-ms",
               std::to_string(job.late_ms),
               "--mode",
               job.mode};
  spec.set_env = job.environment;
  spec.timeout_s = 120;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.out << result.err;
  run.out = result.out + result.err;
  for (const Fact& fact : ParseFacts(result.out)) {
    if (fact.kind == "logger") run.loggers.insert(static_cast<uint32_t>(fact.Number("tid")));
    if (fact.kind == "wait")
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

// The job's i-th collective: every third a broadcast. NCCL numbers each function's apart.
std::string FuncOf(size_t i) { return i % 3 == 2 ? "Broadcast" : "AllReduce"; }
size_t SeqOf(size_t i) { return i % 3 == 2 ? i / 3 : i - i / 3; }

// Every collective of the job matched across all ranks by NCCL's sequence number, in order.
void ExpectMatchedBySeq(const json& ranks, const Job& job) {
  ASSERT_TRUE(ranks.is_object());
  const json& nccl = ranks["nccl_collectives"];
  ASSERT_EQ(nccl.size(), static_cast<size_t>(job.iters)) << ranks.dump(1);
  for (size_t i = 0; i < nccl.size(); ++i) {
    EXPECT_EQ(nccl[i]["matched_by"], "sequence_number");
    EXPECT_EQ(nccl[i]["func"], FuncOf(i));
    EXPECT_EQ(nccl[i]["seq_number"], SeqOf(i));
    EXPECT_EQ(nccl[i]["arrivals"].size(), static_cast<size_t>(job.world));
  }
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  TempDir dir_;
};

TEST_F(Nccl, TwoRanksTheSleepingRankNamedInCollectivesMatchedBySequenceNumber) {
  Job job;
  JobRun run = RunJob(dir_.Sub("job"), job);
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "nanosleep", .nccl = true});
  const std::string text = ReadFile(dir_.Sub("job/report.txt"));
  EXPECT_NE(text.find("matched across ranks by communicator and NCCL's sequence number"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1 arrived last"), std::string::npos) << text;
  EXPECT_NE(text.find("late to NCCL AllReduce #0"), std::string::npos) << text;
  // The trace: each rank's collectives on its thread's track, numbered alike on both ranks.
  DecodedTrace trace = DecodeTraceFile(dir_.Sub("job/trace.perfetto-trace"));
  std::map<uint64_t, std::vector<std::string>> seq_by_track;
  for (const DecodedEvent& event : trace.events) {
    if (std::find(event.categories.begin(), event.categories.end(), "nccl") ==
        event.categories.end())
      continue;
    seq_by_track[event.track_uuid].push_back(event.name + "#" + event.annotations.at("seq_number"));
  }
  ASSERT_EQ(seq_by_track.size(), 2u);
  const std::vector<std::string> expected = {"ncclAllReduce#0", "ncclAllReduce#1",
                                             "ncclBroadcast#0", "ncclAllReduce#2",
                                             "ncclAllReduce#3"};
  for (const auto& [track, seqs] : seq_by_track) EXPECT_EQ(seqs, expected);
}

// Four ranks, NCCL 2.26's interface (v4: the communicator told at init): rank 2 waits for the
// log's lock, which its own logging thread holds while it writes.
TEST_F(Nccl, FourRanksTheRankBlockedOnItsLoggersLockNamedWithTheLogger) {
  Job job;
  job.world = 4;
  job.late = 2;
  job.mode = "lock";
  job.environment = {"FAKE_NCCL_PROFILER_MAX=4"};
  JobRun run = RunJob(dir_.Sub("job"), job);
  ASSERT_EQ(run.loggers.size(), 1u) << run.out;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  ExpectStraggler(report["ranks"], run, {.late = 2, .root_tids = run.loggers, .nccl = true});
  EXPECT_EQ(report["ranks"]["ranks"][0]["rank"], 2) << report["ranks"].dump(1);
}

// One session per rank (each rank under its own gprof-run, as srun would start them), merged: the
// collectives are matched across the sessions, the late rank and its cause named as in one.
// Rank 1's thread is on time, but its GPU is busy with a kernel of its own when it launches the
// collective's: the others wait for its NCCL kernel to start on the GPU, and the report says the
// kernel waited behind that work, not what the thread did.
TEST_F(Nccl, ARankWhoseGpuIsBusyIsNamedWithTheKernelItsCollectiveWaitedBehind) {
  Job job;
  job.mode = "gpu";
  job.late_ms = 150;
  JobRun run = RunJob(dir_.Sub("job"), job);
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  ExpectStraggler(report["ranks"], run,
                  {.late = 1, .cause = "on its GPU behind fakeKernel", .nccl = true});
  for (const json& collective : report["ranks"]["nccl_collectives"]) {
    for (const json& arrival : collective["arrivals"]) {
      if (arrival["rank"] != 1) continue;
      EXPECT_EQ(arrival["queued_behind"], "fakeKernel(unsigned int)") << collective.dump(1);
      // Its thread launched the kernel about 150 ms before the kernel started.
      EXPECT_GT(arrival["start_ns"].get<uint64_t>() - arrival["launch_ns"].get<uint64_t>(),
                100'000'000u)
          << collective.dump(1);
    }
  }
}

TEST_F(Nccl, PerRankSessionsMergedMatchTheCollectives) {
  Job job;
  job.world = 3;
  job.late = 0;
  job.environment = {"NCCL_TEST_WRAP=" + GprofRunPath() + " -q -o " + dir_.Sub("r%r") + " --"};
  JobRun run = RunJob(dir_.Sub("launcher"), job);
  ProcessResult merge =
      RunGprof({"merge", "-o", dir_.Sub("job"), dir_.Sub("r0"), dir_.Sub("r1"), dir_.Sub("r2")});
  ASSERT_EQ(merge.exit_code(), 0) << merge.out << merge.err;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  ExpectStraggler(report["ranks"], run, {.late = 0, .cause = "nanosleep", .nccl = true});
  for (const json& collective : report["ranks"]["nccl_collectives"]) {
    std::set<int> sessions;
    for (const json& arrival : collective["arrivals"])
      sessions.insert(arrival["session"].get<int>());
    EXPECT_EQ(sessions.size(), 3u) << collective.dump(1);
  }
}

// Each interface NCCL 2.24 to 2.29 asks for (v2 to v6) gives the collectives their numbers.
class NcclVersions : public Nccl, public ::testing::WithParamInterface<int> {};

TEST_P(NcclVersions, CollectivesMatchedBySequenceNumber) {
  Job job;
  job.iters = 4;
  job.late_ms = 40;
  job.environment = {"FAKE_NCCL_PROFILER_MAX=" + std::to_string(GetParam())};
  JobRun run = RunJob(dir_.Sub("job"), job);
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  EXPECT_EQ(report["ranks"]["nccl_interface"], GetParam());
  // v2/v3 told natively by their own NCCL (2.24, 2.25) and v4+ at init carry the communicator.
  for (const json& collective : report["ranks"]["nccl_collectives"])
    EXPECT_NE(collective["comm_hash"], 0) << collective.dump(1);
}

INSTANTIATE_TEST_SUITE_P(Interfaces, NcclVersions, ::testing::Values(2, 3, 4, 5, 6));

// The user's own plugin (v4 and v5 only) under an NCCL asking v6: it is chained with v5, and
// counts every group and collective with its own handles as their parents.
TEST_F(Nccl, UsersOwnPluginChainedKeepsItsEvents) {
  Job job;
  job.iters = 4;
  job.late_ms = 40;
  const std::string plugin = BuildDir() + "/tests/apps/libnccl_counting_plugin.so";
  job.environment = {"FAKE_NCCL_PROFILER_MAX=6", "NCCL_PROFILER_PLUGIN=" + plugin,
                     "NCCL_COUNT_OUT=" + dir_.Sub("counts")};
  JobRun run = RunJob(dir_.Sub("job"), job);
  for (int rank = 0; rank < job.world; ++rank) {
    std::vector<Fact> facts = ParseFacts(ReadFile(dir_.Sub("counts." + std::to_string(rank))));
    ASSERT_EQ(facts.size(), 1u) << rank;
    EXPECT_EQ(facts[0].Number("inits"), 1u);
    EXPECT_EQ(facts[0].Number("groups"), 4u);
    EXPECT_EQ(facts[0].Number("colls"), 4u);
    EXPECT_EQ(facts[0].Number("stops"), 8u);
    EXPECT_EQ(facts[0].Number("parents_ok"), 4u);
    EXPECT_EQ(facts[0].Number("finalizes"), 1u);
  }
  json meta = ReadJson(dir_.Sub("job/session.json"));
  EXPECT_EQ(meta.value("nccl_plugin", ""), plugin);
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  const std::string text = ReadFile(dir_.Sub("job/report.txt"));
  EXPECT_NE(text.find("the program's own profiler plugin (" + plugin + ") was chained"),
            std::string::npos)
      << text;
}

// A plugin named as NCCL names them (NCCL_PROFILER_PLUGIN=counting: libnccl-profiler-counting.so,
// found on the library path) is chained too, under NCCL 2.26's interface (v4).
TEST_F(Nccl, UsersPluginNamedByItsShortNameIsChained) {
  Job job;
  job.iters = 3;
  job.late_ms = 40;
  job.environment = {"FAKE_NCCL_PROFILER_MAX=4", "NCCL_PROFILER_PLUGIN=counting",
                     "LD_LIBRARY_PATH=" + BuildDir() + "/tests/apps",
                     "NCCL_COUNT_OUT=" + dir_.Sub("counts")};
  JobRun run = RunJob(dir_.Sub("job"), job);
  for (int rank = 0; rank < job.world; ++rank) {
    std::vector<Fact> facts = ParseFacts(ReadFile(dir_.Sub("counts." + std::to_string(rank))));
    ASSERT_EQ(facts.size(), 1u) << rank;
    EXPECT_EQ(facts[0].Number("colls"), 3u);
    EXPECT_EQ(facts[0].Number("parents_ok"), 3u);
  }
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectMatchedBySeq(report["ranks"], job);
  EXPECT_NE(ReadFile(dir_.Sub("job/report.txt")).find("(counting) was chained"), std::string::npos);
}

// NCCL 2.23 knows only v1, whose collectives gprof-run does not read: they are matched by the order
// of each rank's NCCL kernels on the GPU timeline instead, and the report says so.
TEST_F(Nccl, AnNcclOfInterfaceV1IsMatchedByTheOrderOfItsKernels) {
  Job job;
  job.iters = 4;
  job.late_ms = 60;
  job.environment = {"FAKE_NCCL_PROFILER_MAX=1"};
  JobRun run = RunJob(dir_.Sub("job"), job);
  json report = ReadJson(dir_.Sub("job/report.json"));
  ASSERT_TRUE(report["ranks"].is_object()) << run.out;
  EXPECT_EQ(report["ranks"]["nccl_interface"], 1);
  const json& nccl = report["ranks"]["nccl_collectives"];
  ASSERT_EQ(nccl.size(), static_cast<size_t>(job.iters)) << report["ranks"].dump(1);
  for (size_t i = 0; i < nccl.size(); ++i) {
    EXPECT_EQ(nccl[i]["matched_by"], "order");
    EXPECT_EQ(nccl[i]["seq_number"], i);
    EXPECT_EQ(nccl[i]["func"], FuncOf(i));
    EXPECT_EQ(nccl[i]["arrivals"].size(), 2u);
  }
  ExpectStraggler(report["ranks"], run, {.late = 1, .cause = "nanosleep", .nccl = true});
  const std::string text = ReadFile(dir_.Sub("job/report.txt"));
  EXPECT_NE(text.find("interface is v1 (NCCL 2.23), which gprof-run does not read"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("matched across ranks by their order on each rank"), std::string::npos)
      << text;
}

// Records without NCCL's sequence number are matched by their order on each communicator, and
// said to be; records with it by the number, whatever their order.
TEST(NcclMatching, WithoutSequenceNumbersByOrderOnEachCommunicator) {
  using collector::NcclEvent;
  auto event = [](uint32_t pid, int rank, uint64_t comm, uint64_t start, int64_t seq) {
    NcclEvent e;
    e.pid = e.tid = pid;
    e.rank = rank;
    e.kind = static_cast<uint16_t>(format::NcclEventKind::kCollective);
    e.comm_hash = comm;
    e.flags = format::kNcclHasCommHash;
    if (seq >= 0) {
      e.seq_number = static_cast<uint64_t>(seq);
      e.flags |= format::kNcclHasSeqNumber;
    }
    e.start_ns = e.stop_ns = start;
    return e;
  };
  collector::Session one, two;
  // Rank 0: two collectives on communicator 7, one on 9; rank 1 the same, 9's first.
  one.nccl_events = {event(10, 0, 7, 100, -1), event(10, 0, 9, 150, -1), event(10, 0, 7, 200, -1)};
  two.nccl_events = {event(20, 1, 9, 120, -1), event(20, 1, 7, 300, -1), event(20, 1, 7, 400, -1)};
  std::vector<collector::JobSession> sessions = {{&one, nullptr, 0}, {&two, nullptr, 0}};
  auto matched =
      collector::MatchNcclCollectives(sessions, [](int, uint32_t) { return std::optional<int>(); });
  ASSERT_EQ(matched.size(), 3u);
  for (const auto& collective : matched) {
    EXPECT_FALSE(collective.by_seq);
    ASSERT_EQ(collective.arrivals.size(), 2u);
  }
  // Communicator 7's first on each rank is one collective: arrivals at 100 and 300.
  EXPECT_EQ(matched[0].comm_hash, 7u);
  EXPECT_EQ(matched[0].arrivals[0].start_ns, 100u);
  EXPECT_EQ(matched[0].arrivals[1].start_ns, 300u);
  EXPECT_EQ(matched[1].comm_hash, 9u);
  // With NCCL's numbers, the numbers decide.
  one.nccl_events = {event(10, 0, 7, 100, 5), event(10, 0, 7, 200, 6)};
  two.nccl_events = {event(20, 1, 7, 150, 6), event(20, 1, 7, 250, 5)};
  matched =
      collector::MatchNcclCollectives(sessions, [](int, uint32_t) { return std::optional<int>(); });
  ASSERT_EQ(matched.size(), 2u);
  EXPECT_TRUE(matched[0].by_seq);
  EXPECT_EQ(matched[0].seq_number, 5u);
  EXPECT_EQ(matched[0].arrivals[1].start_ns, 250u);
  // NCCL numbers each function's collectives apart: AllReduce #0 and Broadcast #0 are two.
  one.nccl_names = two.nccl_names = {"AllReduce", "Broadcast"};
  one.nccl_events = {event(10, 0, 7, 100, 0), event(10, 0, 7, 200, 0)};
  one.nccl_events[1].func = 1;
  two.nccl_events = {event(20, 1, 7, 150, 0), event(20, 1, 7, 250, 0)};
  two.nccl_events[1].func = 1;
  matched =
      collector::MatchNcclCollectives(sessions, [](int, uint32_t) { return std::optional<int>(); });
  ASSERT_EQ(matched.size(), 2u);
  EXPECT_EQ(matched[0].func, "AllReduce");
  EXPECT_EQ(matched[0].arrivals[1].start_ns, 150u);
  EXPECT_EQ(matched[1].func, "Broadcast");
  EXPECT_EQ(matched[1].arrivals[0].start_ns, 200u);
}

// Across hosts, a rank is said to have waited for the last only where it arrived earlier by more
// than the two sessions' clocks may be off (docs/distributed.md): no order finer than that.
TEST(NcclMatching, NoRankIsNamedLateByLessThanTheClocksUncertainty) {
  using collector::NcclEvent;
  auto event = [](uint32_t pid, int rank, uint64_t start, uint64_t seq) {
    NcclEvent e;
    e.pid = e.tid = pid;
    e.rank = rank;
    e.kind = static_cast<uint16_t>(format::NcclEventKind::kCollective);
    e.comm_hash = 7;
    e.seq_number = seq;
    e.flags = format::kNcclHasCommHash | format::kNcclHasSeqNumber;
    e.start_ns = e.stop_ns = start;
    return e;
  };
  collector::Session one, two;
  // Collective 0: rank 1 later by 0.5 ms; collective 1: by 5 ms.
  one.nccl_events = {event(10, 0, 1'000'000, 0), event(10, 0, 20'000'000, 1)};
  two.nccl_events = {event(20, 1, 1'500'000, 0), event(20, 1, 25'000'000, 1)};
  const auto no_rank = [](int, uint32_t) { return std::optional<int>(); };
  const auto no_chain = [](int, uint32_t, uint64_t, uint64_t) {
    return std::vector<collector::JobLink>();
  };
  for (const uint64_t uncertainty : {uint64_t{1'000'000}, UINT64_MAX}) {
    // Two hosts, each placed within 1 ms (or not placed at all).
    std::vector<collector::JobSession> sessions = {{&one, nullptr, 0, uncertainty, 0},
                                                   {&two, nullptr, 0, uncertainty, 1}};
    auto matched = collector::MatchNcclCollectives(sessions, no_rank);
    ASSERT_EQ(matched.size(), 2u);
    EXPECT_TRUE(matched[0].order_unknown);
    EXPECT_EQ(matched[1].order_unknown, uncertainty == UINT64_MAX);
    auto waits = collector::NcclRankWaits(sessions, matched, no_chain);
    ASSERT_EQ(waits.size(), uncertainty == UINT64_MAX ? 0u : 1u);
    if (!waits.empty()) {
      EXPECT_EQ(waits[0].nccl, 1);
      EXPECT_EQ(waits[0].late_rank, 1);
    }
  }
  // Ranks 0 and 1 on one host, 100 ms apart; rank 2 on another, 0.5 ms after rank 1: rank 1 or
  // rank 2 came last, not known which, so rank 0's wait is not given to either.
  collector::Session three;
  three.nccl_events = {event(30, 2, 20'500'000, 1)};
  one.nccl_events = {event(10, 0, 0, 1)};
  two.nccl_events = {event(20, 1, 20'000'000, 1)};
  std::vector<collector::JobSession> hosts = {{&one, nullptr, 0, 1'000'000, 0},
                                              {&two, nullptr, 0, 1'000'000, 0},
                                              {&three, nullptr, 0, 1'000'000, 1}};
  auto three_ranks = collector::MatchNcclCollectives(hosts, no_rank);
  ASSERT_EQ(three_ranks.size(), 1u);
  EXPECT_TRUE(three_ranks[0].order_unknown);
  EXPECT_TRUE(collector::NcclRankWaits(hosts, three_ranks, no_chain).empty());
  one.nccl_events = {event(10, 0, 1'000'000, 0), event(10, 0, 20'000'000, 1)};
  two.nccl_events = {event(20, 1, 1'500'000, 0), event(20, 1, 25'000'000, 1)};
  // One host (one clock): 0.5 ms is an order.
  std::vector<collector::JobSession> one_host = {{&one, nullptr, 0, 1'000'000, 0},
                                                 {&two, nullptr, 0, 1'000'000, 0}};
  auto matched = collector::MatchNcclCollectives(one_host, no_rank);
  EXPECT_FALSE(matched[0].order_unknown);
  EXPECT_EQ(collector::NcclRankWaits(one_host, matched, no_chain).size(), 2u);
}

// An inject file's NCCL records read back as written (a malformed one a diagnostic), and
// report.json's `nccl` gives each collective the NCCL kernel its thread had launched just before
// (NCCL starts the event after the launch), with the GPU work the kernel waited behind.
TEST(NcclRecords, ReadBackAndGivenTheirKernels) {
  TempDir dir;
  {
    std::ofstream meta(dir.Sub("session.json"));
    meta << R"({"version": 1, "command": ["./app"], "root_pid": 100,
      "start": {"monotonic_ns": 1000, "realtime_ns": 5, "boottime_ns": 2000},
      "end": {"monotonic_ns": 90000}, "exit": {"code": 0},
      "kernel_recording": {"enabled": false, "note": ""}})";
  }
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, 100), 0);
  RecordBatch batch;
  AddCaptureInfo(&batch, format::CaptureMode::kCupti, 130001, "/usr/lib/libcupti.so");
  AddApiName(&batch, 1, "cudaLaunchKernel");
  auto nccl = [](uint16_t kind, uint64_t start, uint64_t stop, uint64_t seq) {
    format::NcclEventRecord record{};
    record.start_ns = start;
    record.stop_ns = stop;
    record.comm_hash = 0xabc;
    record.seq_number = seq;
    record.count = 1024;
    record.tid = 101;
    record.rank = 1;
    record.n_ranks = 2;
    record.peer = -1;
    record.kind = kind;
    record.flags = format::kNcclHasCommHash | format::kNcclHasSeqNumber;
    record.version = 5;
    return record;
  };
  auto init = nccl(static_cast<uint16_t>(format::NcclEventKind::kCommInit), 1500, 1500, 0);
  batch.Add(init, format::kNcclEvent);
  const uint16_t collective = static_cast<uint16_t>(format::NcclEventKind::kCollective);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    auto launch = ApiCall(101, 1, 2100 + seq * 1000, 2200 + seq * 1000);
    launch.correlation_id = 7 + seq;
    batch.Add(launch, format::kApiCall);
    auto record = nccl(collective, 2250 + seq * 1000, 2280 + seq * 1000, seq);
    record.func_len = 9;
    record.datatype_len = 11;
    batch.Add(record, format::kNcclEvent, "AllReducencclFloat32");
  }
  // The second collective's kernel waits behind a long kernel of the program on the GPU.
  auto gemm_launch = ApiCall(101, 1, 3000, 3050);
  gemm_launch.correlation_id = 20;
  batch.Add(gemm_launch, format::kApiCall);
  auto broken = nccl(collective, 5000, 5100, 2);
  broken.func_len = 200;  // more text than the record holds
  batch.Add(broken, format::kNcclEvent, "AllReduce");
  AddGpuName(&batch, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  AddGpuName(&batch, 2, "big_gemm");
  batch.Add(KernelRecord(Placement(2300, 2900, 7, 13), 1), format::kGpuKernel);
  batch.Add(KernelRecord(Placement(3060, 4000, 20, 13), 2), format::kGpuKernel);
  batch.Add(KernelRecord(Placement(4000, 4500, 8, 13), 1), format::kGpuKernel);
  batch.WriteTo(&file);
  file.Close();

  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_EQ(session->nccl_events.size(), 3u);
  size_t malformed = 0;
  for (const auto& diagnostic : session->diagnostics)
    malformed += diagnostic.message.find("malformed NCCL event") != std::string::npos;
  EXPECT_EQ(malformed, 1u);
  const collector::NcclEvent& first = session->nccl_events[1];
  EXPECT_EQ(session->nccl_names[first.func], "AllReduce");
  EXPECT_EQ(session->nccl_names[first.datatype], "ncclFloat32");
  EXPECT_EQ(first.comm_hash, 0xabcu);
  json records = collector::NcclRecordsJson(*session);
  EXPECT_EQ(records["interface"], 5);
  ASSERT_EQ(records["records"].size(), 2u);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    const json& record = records["records"][seq];
    EXPECT_EQ(record["seq_number"], seq);
    ASSERT_FALSE(record["kernel"].is_null()) << record.dump(1);
    EXPECT_EQ(record["kernel"]["name"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    EXPECT_EQ(record["kernel"]["launch_ns"], 2100 + seq * 1000);
    EXPECT_EQ(record["kernel"]["launch_end_ns"], 2200 + seq * 1000);
  }
  EXPECT_EQ(records["records"][0]["kernel"]["start_ns"], 2300);
  EXPECT_TRUE(records["records"][0]["kernel"]["queued_behind"].is_null());
  EXPECT_EQ(records["records"][1]["kernel"]["start_ns"], 4000);
  EXPECT_EQ(records["records"][1]["kernel"]["queued_behind"], "big_gemm");
}

}  // namespace
}  // namespace gprof::test
