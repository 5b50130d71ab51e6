// Every recorded process knows its rank (issue 37, item 1): from the variables its launcher set
// (torchrun's RANK, LOCAL_RANK, WORLD_SIZE; srun's SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS),
// whether gprof-run records the whole job (the kernel recorder reads each rank's environment at
// its exec, keeping only those variables) or one rank (`-o DIR/r%q{RANK}`: session.json's "rank",
// from gprof-run's environment). The report, report.json and the trace name processes by rank.
// The launcher and its ranks are tests/apps/ranks/.
#include "collector/session/rank_identity.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/session/chunk_reader.h"
#include "collector/session/session_reader.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using collector::Session;
using json = nlohmann::json;

const char kSystemPython[] = "/usr/bin/python3";

std::string Launcher() { return SourceDir() + "/tests/apps/ranks/launcher.py"; }
std::string RankScript() { return SourceDir() + "/tests/apps/ranks/rank.py"; }

struct RankLine {
  uint32_t rank = 0;
  uint32_t pid = 0;
  uint32_t worker = 0;
};

// The ranks' "rank=R pid=P worker=W" lines.
std::vector<RankLine> RankLines(const std::string& out) {
  std::vector<RankLine> lines;
  std::regex pattern(R"(rank=(\d+) pid=(\d+) worker=(\d+))");
  std::istringstream text(out);
  std::string line;
  for (std::smatch match; std::getline(text, line);) {
    if (std::regex_match(line, match, pattern))
      lines.push_back({uint32_t(std::stoul(match[1])), uint32_t(std::stoul(match[2])),
                       uint32_t(std::stoul(match[3]))});
  }
  return lines;
}

// report.json's processes, by pid.
std::map<uint32_t, json> ReportedProcesses(const std::string& session_dir) {
  json report = json::parse(ReadFile(session_dir + "/report.json"), nullptr, false);
  std::map<uint32_t, json> processes;
  if (report.is_discarded()) return processes;
  for (const json& process : report["session"]["processes"])
    processes[process["pid"].get<uint32_t>()] = process;
  return processes;
}

// The trace's process names, by pid.
std::map<uint32_t, std::string> TraceProcessNames(const std::string& session_dir) {
  std::map<uint32_t, std::string> names;
  DecodedTrace trace = DecodeTraceFile(session_dir + "/trace.perfetto-trace");
  for (const DecodedTrack& track : trace.tracks) {
    if (track.is_process && !track.process_name.empty())
      names[static_cast<uint32_t>(track.pid)] = track.process_name;
  }
  return names;
}

// Rank `line.rank` of `world`: its process and its forked worker carry it, in the model and in
// report.json, and are named by it.
void ExpectRank(const Session& session, const std::map<uint32_t, json>& reported,
                const RankLine& line, uint32_t world, const std::string& variable) {
  SCOPED_TRACE("rank " + std::to_string(line.rank));
  auto process = session.processes.find(line.pid);
  ASSERT_NE(process, session.processes.end());
  ASSERT_TRUE(process->second.rank.has_value());
  EXPECT_EQ(process->second.rank->rank, line.rank);
  EXPECT_EQ(process->second.rank->local_rank, line.rank % 2);
  EXPECT_EQ(process->second.rank->world_size, world);
  EXPECT_EQ(process->second.rank->variable, variable);
  EXPECT_EQ(session.ProcessLabel(line.pid),
            "rank " + std::to_string(line.rank) + " (pid " + std::to_string(line.pid) + ")");
  auto worker = session.processes.find(line.worker);
  ASSERT_NE(worker, session.processes.end());
  EXPECT_EQ(worker->second.rank, process->second.rank);
  EXPECT_NE(session.ProcessLabel(line.worker)
                .find(" of rank " + std::to_string(line.rank) + " (pid " +
                      std::to_string(line.worker) + ")"),
            std::string::npos)
      << session.ProcessLabel(line.worker);
  ASSERT_TRUE(reported.contains(line.pid));
  const json& entry = reported.at(line.pid);
  EXPECT_EQ(entry.value("rank", json()), json(line.rank));
  EXPECT_EQ(entry.value("local_rank", json()), json(line.rank % 2));
  EXPECT_EQ(entry.value("world_size", json()), json(world));
  EXPECT_EQ(entry.value("label", ""), session.ProcessLabel(line.pid));
}

// kernel.gpr's records, decompressed.
std::string KernelRecordBytes(const std::string& session_dir) {
  std::string bytes;
  std::vector<collector::Diagnostic> diagnostics;
  auto summary = collector::ReadChunkFile(
      session_dir + "/kernel.gpr",
      [&](const collector::RecordView& record) {
        bytes.append(reinterpret_cast<const char*>(record.bytes.data()), record.bytes.size());
      },
      &diagnostics);
  EXPECT_TRUE(summary.ok());
  return bytes;
}

// One session for the whole job: `gprof-run -- launcher.py KIND 3`. Of the ranks' environments
// only the launcher's variables are kept: a secret beside them is in no record.
TEST(RankIdentity, OneSessionForTheJobKnowsEachRankFromItsOwnEnvironment) {
  GPROF_NEED_BPF();
  for (const auto& [kind, variable] : std::vector<std::pair<std::string, std::string>>{
           {"torchrun", "RANK"}, {"srun", "SLURM_PROCID"}}) {
    SCOPED_TRACE(kind);
    TempDir dir;
    ProcessSpec spec;
    // The test's own environment names no rank: the launcher's children alone have one.
    spec.unset_env = {"RANK",          "LOCAL_RANK",   "WORLD_SIZE",           "SLURM_PROCID",
                      "SLURM_LOCALID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    spec.set_env = {"GPROF_TEST_SECRET=kept-nowhere-4f1d", "RANK_TABLE=secret-table-9a2c"};
    ProcessResult run =
        RunGprof({"-q", "-o", dir.Sub("s"), "--", kSystemPython, Launcher(), kind, "3"}, spec);
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    std::vector<RankLine> lines = RankLines(run.out);
    ASSERT_EQ(lines.size(), 3u) << run.out;
    Session session = collector::ReadSession(dir.Sub("s")).value();
    std::map<uint32_t, json> reported = ReportedProcesses(dir.Sub("s"));
    for (const RankLine& line : lines) ExpectRank(session, reported, line, 3, variable);
    std::string recorded = KernelRecordBytes(dir.Sub("s"));
    EXPECT_NE(recorded.find(variable + "=1"), std::string::npos);
    EXPECT_EQ(recorded.find("kept-nowhere-4f1d"), std::string::npos);
    EXPECT_EQ(recorded.find("secret-table-9a2c"), std::string::npos);
    // The launcher has none, and says none.
    auto launcher = session.processes.find(session.meta.root_pid);
    ASSERT_NE(launcher, session.processes.end());
    EXPECT_FALSE(launcher->second.rank.has_value());
    EXPECT_FALSE(session.meta.rank.has_value());
    EXPECT_FALSE(reported[session.meta.root_pid].contains("rank"));
    // The trace names each rank's process by its rank.
    std::map<uint32_t, std::string> names = TraceProcessNames(dir.Sub("s"));
    for (const RankLine& line : lines)
      EXPECT_EQ(names[line.pid], "rank " + std::to_string(line.rank));
  }
}

// One session per rank, as `srun gprof-run -o prof/r%q{SLURM_PROCID} -- python train.py` makes
// them: each session says its rank in session.json, and its command's process is that rank. Run
// without the kernel recorder (session.json alone tells), and with it where BPF runs.
TEST(RankIdentity, OneSessionPerRankNamedByTheLaunchersVariableKnowsItsRank) {
  std::vector<std::vector<std::string>> modes = {{"--no-kernel"}};
  if (BpfUnavailableReason().empty()) modes.push_back({});
  for (const auto& [kind, variable] : std::vector<std::pair<std::string, std::string>>{
           {"torchrun", "RANK"}, {"srun", "SLURM_PROCID"}}) {
    for (const auto& extra : modes) {
      SCOPED_TRACE(kind + (extra.empty() ? "" : " " + extra.front()));
      TempDir dir;
      std::vector<std::string> argv = {kSystemPython, Launcher(),     kind, "2",
                                       "--",          GprofRunPath(), "-q"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      argv.insert(argv.end(),
                  {"-o", dir.Sub("r%q{" + variable + "}"), "--", kSystemPython, RankScript()});
      ProcessSpec spec = Command(argv);
      spec.unset_env = {"RANK",          "LOCAL_RANK",   "WORLD_SIZE",           "SLURM_PROCID",
                        "SLURM_LOCALID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
      ProcessResult run = RunProcess(spec);
      ASSERT_EQ(run.exit_code(), 0) << run.err;
      std::vector<RankLine> lines = RankLines(run.out);
      ASSERT_EQ(lines.size(), 2u) << run.out;
      for (const RankLine& line : lines) {
        const std::string session_dir = dir.Sub("r" + std::to_string(line.rank));
        Session session = collector::ReadSession(session_dir).value();
        ASSERT_TRUE(session.meta.rank.has_value());
        EXPECT_EQ(session.meta.rank->rank, line.rank);
        EXPECT_EQ(session.meta.rank->world_size, 2u);
        EXPECT_EQ(session.meta.rank->variable, variable);
        EXPECT_EQ(session.meta.root_pid, line.pid);
        // Without the kernel recorder the session knows no process of the tree but its own
        // files' (none here: no CUDA): session.json alone tells.
        if (extra.empty()) ExpectRank(session, ReportedProcesses(session_dir), line, 2, variable);
      }
    }
  }
}

// Which launcher's variables count: a number in the first launcher's rank variable, its local rank
// and world size beside it; torchrun's before srun's (torchrun under srun: RANK is the program's).
TEST(RankIdentity, TheLaunchersVariablesAreReadInOrder) {
  auto from = [](std::map<std::string, std::string> values) {
    return collector::RankFromVariables([&](const char* name) -> const char* {
      auto value = values.find(name);
      return value == values.end() ? nullptr : value->second.c_str();
    });
  };
  auto both = from({{"SLURM_PROCID", "3"},
                    {"SLURM_NTASKS", "8"},
                    {"RANK", "5"},
                    {"LOCAL_RANK", "1"},
                    {"WORLD_SIZE", "16"}});
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->rank, 5u);
  EXPECT_EQ(both->local_rank, 1u);
  EXPECT_EQ(both->world_size, 16u);
  EXPECT_EQ(both->variable, "RANK");
  auto mpi = from({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  ASSERT_TRUE(mpi.has_value());
  EXPECT_EQ(mpi->rank, 2u);
  EXPECT_FALSE(mpi->local_rank.has_value());
  EXPECT_EQ(mpi->world_size, 4u);
  auto pmi = from({{"PMI_RANK", "7"}, {"PMI_SIZE", "9"}});
  ASSERT_TRUE(pmi.has_value());
  EXPECT_EQ(pmi->variable, "PMI_RANK");
  EXPECT_FALSE(from({{"RANK", "x1"}, {"LOCAL_RANK", "0"}}).has_value());
  EXPECT_FALSE(from({{"RANK", ""}}).has_value());
  EXPECT_FALSE(from({{"RANK", "99999999999"}}).has_value());
  auto text = collector::RankFromVariableText(std::string("SLURM_PROCID=4\0SLURM_LOCALID=0\0", 31));
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->rank, 4u);
  EXPECT_EQ(text->local_rank, 0u);
  EXPECT_FALSE(text->world_size.has_value());
}

}  // namespace
}  // namespace gprof::test
