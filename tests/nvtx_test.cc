// The program's own words (issue 39, items 1-4; docs/nvtx.md): NVTX ranges recorded through
// NVTX_INJECTION64_PATH, checked against what nvtx_app measured itself; freezes and slow calls
// placed inside them; the user's own NVTX tool still called; nothing changes without NVTX.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using nlohmann::json;

ProcessResult Gprof(std::vector<std::string> args, ProcessSpec spec = {}) {
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return RunProcess(spec);
}

json ReadJson(const std::string& path) {
  json parsed = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << path;
  return parsed;
}

// "key=value key=value" into a map.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    size_t equals = word.find('=');
    if (equals != std::string::npos) fields[word.substr(0, equals)] = word.substr(equals + 1);
  }
  return fields;
}

std::pair<std::string, std::string> Key(const char* domain, const char* name) {
  return {domain, name};
}

struct Truth {
  uint64_t count = 0, total_ns = 0, slow_launch_ns = 0;
};
// nvtx_app's --truth file, by (domain, name).
std::map<std::pair<std::string, std::string>, Truth> ReadTruth(const std::string& path) {
  std::map<std::pair<std::string, std::string>, Truth> truth;
  std::istringstream lines(ReadFile(path));
  std::string line;
  while (std::getline(lines, line)) {
    auto fields = Fields(line);
    Truth& entry = truth[{fields["domain"], fields["name"]}];
    entry.count = std::stoull(fields["count"]);
    entry.total_ns = std::stoull(fields["total_ns"]);
    entry.slow_launch_ns = std::stoull(fields["slow_launch_ns"]);
  }
  return truth;
}

// Where report.json placed `entry` (its "nvtx"), null where it says nothing.
json Nvtx(const json& entry) { return entry.contains("nvtx") ? entry["nvtx"] : json(); }
std::string NvtxText(const json& entry) {
  json nvtx = Nvtx(entry);
  return nvtx.is_object() && nvtx.contains("text") ? nvtx["text"].get<std::string>() : "";
}

const json* RangeRow(const json& report, const std::string& domain, const std::string& name) {
  if (!report.contains("nvtx_ranges")) return nullptr;
  for (const json& row : report["nvtx_ranges"]) {
    if (row["domain"] == domain && row["name"] == name) return &row;
  }
  return nullptr;
}

std::vector<std::string> AppArgs(const std::string& truth, int launchers, int rounds) {
  return {AppPath("nvtx_app"),
          "--launchers",
          std::to_string(launchers),
          "--rounds",
          std::to_string(rounds),
          "--truth",
          truth};
}

// Every range name the program used, with its count and time, in report.json's and report.txt's
// RANGES table and as slices on the threads' tracks of the trace.
TEST(Nvtx, RangesTableMatchesWhatTheProgramDid) {
  TempDir dir;
  std::vector<std::string> args = {"-o", dir.Sub("s"), "--"};
  for (const std::string& arg : AppArgs(dir.Sub("truth"), 3, 2)) args.push_back(arg);
  ProcessResult run = Gprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  auto truth = ReadTruth(dir.Sub("truth"));
  ASSERT_EQ(truth.size(), 4u);  // train_step, forward, hold [loader], op::fake
  json report = ReadJson(dir.Sub("s/report.json"));
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("RANGES (NVTX) by total time"), std::string::npos) << text;
  for (const auto& [key, expected] : truth) {
    const auto& [domain, name] = key;
    const json* row = RangeRow(report, domain, name);
    ASSERT_NE(row, nullptr) << domain << "/" << name << " missing: " << report["nvtx_ranges"];
    EXPECT_EQ((*row)["count"].get<uint64_t>(), expected.count) << name;
    // Measured by the program just outside the NVTX calls: a little longer than recorded.
    double recorded = (*row)["total_ns"].get<double>();
    EXPECT_LE(recorded, double(expected.total_ns)) << name;
    EXPECT_GE(recorded, 0.8 * double(expected.total_ns)) << name;
    EXPECT_LE((*row)["blocked_ns"].get<uint64_t>(), (*row)["total_ns"].get<uint64_t>()) << name;
    EXPECT_NE(text.find((*row)["text"].get<std::string>()), std::string::npos) << name;
  }
  // A wide-string message, and a range never ended: open until the recording's end.
  const json* wide = RangeRow(report, "", "main");
  ASSERT_NE(wide, nullptr);
  EXPECT_EQ((*wide)["count"], 1);
  const json* open = RangeRow(report, "", "never_ended");
  ASSERT_NE(open, nullptr);
  EXPECT_EQ((*open)["open"], 1);
  // Nested slices on the threads' tracks: the domain (else "nvtx") as category.
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(dir.Sub("s/trace.perfetto-trace")));
  EXPECT_TRUE(trace.errors.empty()) << trace.errors.front();
  std::map<std::pair<std::string, std::string>, uint64_t> slices;
  for (const DecodedEvent& event : trace.events) {
    if (event.type == kSliceBegin && event.categories.size() == 1)
      slices[{event.categories[0], event.name}] += 1;
  }
  // GPU work launched inside a range carries it: every launcher's kernel, launched in "forward".
  uint64_t tagged = 0;
  for (const DecodedEvent& event : trace.events) {
    auto range = event.annotations.find("nvtx_range");
    if (event.type == kSliceBegin && range != event.annotations.end() && range->second == "forward")
      ++tagged;
  }
  EXPECT_GE(tagged, truth[Key("", "forward")].count * 9 / 10) << "kernels tagged with their range";
  EXPECT_EQ(slices[Key("nvtx", "forward")], truth[Key("", "forward")].count);
  EXPECT_EQ(slices[Key("loader", "hold")], truth[Key("loader", "hold")].count);
  uint64_t marks = 0;  // the holder's "round" in "loader", one a round
  for (const DecodedEvent& event : trace.events) {
    if (event.type == kInstant && event.name == "round" && event.categories.size() == 1 &&
        event.categories[0] == "loader")
      ++marks;
  }
  EXPECT_EQ(marks, truth[Key("loader", "hold")].count);
}

// A freeze inside the program's ranges is placed inside them, innermost last, in report.txt and
// report.json; so is each slow call; and the time the threads were blocked shows in the range.
TEST(Nvtx, FreezesAndSlowCallsSayTheRangesTheyHappenedIn) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::vector<std::string> args = {"-o", dir.Sub("s"), "--"};
  for (const std::string& arg : AppArgs(dir.Sub("truth"), 2, 3)) args.push_back(arg);
  ProcessResult run = Gprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  auto truth = ReadTruth(dir.Sub("truth"));
  json report = ReadJson(dir.Sub("s/report.json"));
  ASSERT_TRUE(report["session"]["kernel_recording"].get<bool>()) << run.err;

  // The launches the holder's rounds blocked: in train_step > forward; the holder's own
  // cudaDeviceSynchronize: in its start/end range of the "loader" domain.
  size_t launches = 0, syncs = 0;
  for (const json& call : report["slow_calls"]) {
    std::string thread = call["thread"].get<std::string>();
    if (call["api"] == "cudaLaunchKernel" && thread.starts_with("launcher")) {
      EXPECT_EQ(NvtxText(call), "in train_step > forward") << call;
      ++launches;
    }
    if (call["api"] == "cudaDeviceSynchronize" && thread == "holder") {
      EXPECT_EQ(NvtxText(call), "in hold [loader]") << call;
      ++syncs;
    }
  }
  EXPECT_GE(launches, 3u);
  EXPECT_EQ(syncs, 3u);
  // Each freeze of the launchers: every frozen launcher in train_step > forward.
  size_t placed = 0;
  for (const json& freeze : report["freezes"]) {
    std::string words = NvtxText(freeze);
    if (words.find("train_step > forward") != std::string::npos) ++placed;
  }
  EXPECT_GE(placed, 3u) << report["freezes"];
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("in train_step > forward"), std::string::npos) << text;
  ExpectReadableReport(text);
  // Blocked inside "forward": at least most of the slow launches' time (asleep in them).
  const json* forward = RangeRow(report, "", "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_GE((*forward)["blocked_ns"].get<double>(),
            0.5 * double(truth[Key("", "forward")].slow_launch_ns));
}

// A user's own NVTX tool keeps getting every call, with its own handles and ids, as it does
// without gprof-run; session.json and the report say it was forwarded to; the ranges are recorded.
TEST(Nvtx, UsersOwnNvtxToolIsStillCalled) {
  TempDir dir;
  std::string tool = BuildDir() + "/tests/apps/libnvtx_counting_tool.so";
  ProcessSpec alone = Command(AppArgs(dir.Sub("truth-alone"), 2, 2));
  alone.set_env = {"NVTX_INJECTION64_PATH=" + tool, "NVTX_COUNT_OUT=" + dir.Sub("alone")};
  ASSERT_EQ(RunProcess(alone).exit_code(), 0);

  ProcessSpec spec;
  spec.set_env = {"NVTX_INJECTION64_PATH=" + tool, "NVTX_COUNT_OUT=" + dir.Sub("profiled")};
  std::vector<std::string> args = {"-o", dir.Sub("s"), "--"};
  for (const std::string& arg : AppArgs(dir.Sub("truth"), 2, 2)) args.push_back(arg);
  ProcessResult run = Gprof(args, spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  auto truth = ReadTruth(dir.Sub("truth"));
  auto counts = Fields(ReadFile(dir.Sub("profiled")));
  ASSERT_FALSE(counts.empty()) << "the user's tool was not called";
  uint64_t steps = truth[Key("", "train_step")].count, rounds = truth[Key("loader", "hold")].count;
  // train_step, forward, main, op::fake's five
  EXPECT_EQ(std::stoull(counts["pushes"]), 2 * steps + 6);
  EXPECT_EQ(std::stoull(counts["pops"]), 2 * steps + 6);
  EXPECT_EQ(std::stoull(counts["starts"]), rounds + 1);  // hold, never_ended
  EXPECT_EQ(std::stoull(counts["ends"]), rounds);
  EXPECT_EQ(std::stoull(counts["marks"]), rounds);
  EXPECT_EQ(counts["domains"], "1");
  EXPECT_EQ(counts["strings"], "1");
  EXPECT_EQ(std::stoull(counts["registered_uses"]), steps);
  EXPECT_EQ(counts["foreign_handles"], "0");
  // The same calls it gets without gprof-run (the counts scale with the run's own steps).
  auto alone_counts = Fields(ReadFile(dir.Sub("alone")));
  EXPECT_EQ(alone_counts["foreign_handles"], "0");
  EXPECT_EQ(alone_counts["domains"], counts["domains"]);
  EXPECT_EQ(alone_counts["inits"], counts["inits"]);

  json meta = ReadJson(dir.Sub("s/session.json"));
  EXPECT_EQ(meta.value("nvtx_tool", ""), tool);
  EXPECT_NE(ReadFile(dir.Sub("s/report.txt")).find(tool), std::string::npos);
  json report = ReadJson(dir.Sub("s/report.json"));
  const json* forward = RangeRow(report, "", "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ((*forward)["count"].get<uint64_t>(), truth[Key("", "forward")].count);
}

// A program that takes NVTX_INJECTION64_PATH out of its environment before a library's first
// NVTX call: that library's NVTX is not seen (NVTX keeps no list of its instances), and the
// report says so rather than staying silent (docs/nvtx.md).
TEST(Nvtx, ProgramThatRemovesTheVariableIsToldOf) {
  TempDir dir;
  ProcessResult run =
      Gprof({"-q", "-o", dir.Sub("s"), "--", AppPath("nvtx_app"), "--launchers", "1", "--rounds",
             "1", "--late-library", BuildDir() + "/tests/apps/libnvtx_late_lib.so"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("the program unset NVTX_INJECTION64_PATH: NVTX first used after that is "
                      "not recorded"),
            std::string::npos)
      << text;
  EXPECT_EQ(run.err.find("NVTX"), std::string::npos) << "nothing on the program's stderr";
}

// A program without NVTX: no RANGES table, nothing placed in ranges, its output its own.
TEST(Nvtx, NoNvtxNoRanges) {
  TempDir dir;
  ProcessResult alone = RunProcess(Command({AppPath("api_tour_app")}));
  ProcessResult run = Gprof({"-q", "-o", dir.Sub("s"), "--", AppPath("api_tour_app")});
  ASSERT_EQ(run.exit_code(), alone.exit_code()) << run.err;
  // Its output is its own (stream handles are addresses: they differ from run to run, and
  // cudaEventQuery answers not-ready, 600, or not, as the fake GPU's thread happens to run).
  auto same_every_run = [](const std::string& out) {
    std::string text = std::regex_replace(out, std::regex("0x[0-9a-f]+"), "0x");
    return std::regex_replace(text, std::regex("(api=cudaEventQuery stream=-) error=600"), "$1");
  };
  EXPECT_EQ(same_every_run(run.out), same_every_run(alone.out));
  json report = ReadJson(dir.Sub("s/report.json"));
  ASSERT_TRUE(report.contains("nvtx_ranges"));
  EXPECT_TRUE(report["nvtx_ranges"].empty());
  for (const json& call : report["slow_calls"]) {
    EXPECT_TRUE(call.contains("nvtx"));
    EXPECT_TRUE(Nvtx(call).is_null());
  }
  EXPECT_EQ(ReadFile(dir.Sub("s/report.txt")).find("RANGES"), std::string::npos);
}

}  // namespace
}  // namespace gprof::test
