// The flight recorder (issue 39 item 6): --flight-recorder SEC keeps only the last SEC seconds of
// every recorder, and --trigger freeze:MS|hang:SEC ends the recording a short tail after what it
// waits for; the report says the span held and what ended it.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "collector/session/session_reader.h"
#include "tests/flight_support.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

constexpr uint64_t kSecondNs = 1'000'000'000;
// How much older than the span held a kept record may be: a chunk holds up to a flush interval
// of records (200 ms, 250 ms) and is punched out a second after it is due at the latest.
constexpr uint64_t kSlackNs = 1'500'000'000;

json ReadJson(const std::string& path) {
  json parsed = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << path;
  return parsed;
}

std::vector<std::string> Files(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      std::string name = entry->d_name;
      if (name.starts_with(prefix) && name.ends_with(".gpr")) names.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return names;
}

struct Held {
  uint64_t start_ns = 0, end_ns = 0;
};

// The span the report says the recording held, checked against what the files hold: every CUDA
// call and off-CPU interval kept ends inside it (less the slack), and there are some.
Held ExpectOnlyTheSpanHeld(const std::string& session_dir, bool kernel) {
  json report = ReadJson(session_dir + "/report.json");
  const json& flight = report["session"]["capture"]["flight"];
  EXPECT_TRUE(flight.is_object()) << report["session"]["capture"].dump();
  if (!flight.is_object()) return {};
  Held held{flight["held_start_monotonic_ns"].get<uint64_t>(),
            flight["held_end_monotonic_ns"].get<uint64_t>()};
  auto session = collector::ReadSession(session_dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return held;
  EXPECT_FALSE(session->api_calls.empty());
  uint64_t oldest_call = UINT64_MAX;
  for (const auto& call : session->api_calls) oldest_call = std::min(oldest_call, call.exit_ns);
  EXPECT_GE(oldest_call + kSlackNs, held.start_ns)
      << "a CUDA call ended " << (held.start_ns - oldest_call) / 1e9 << " s before the span held";
  EXPECT_GT(session->trimmed_chunks, 0u) << "nothing was trimmed";
  for (const auto& diagnostic : session->diagnostics)
    ADD_FAILURE() << diagnostic.file << ": " << diagnostic.message;
  if (kernel) {
    EXPECT_FALSE(session->off_cpu.empty());
    uint64_t oldest = UINT64_MAX;
    for (const auto& interval : session->off_cpu) oldest = std::min(oldest, interval.end_ns);
    EXPECT_GE(oldest + kSlackNs, held.start_ns)
        << "an off-CPU interval ended " << (held.start_ns - oldest) / 1e9
        << " s before the span held";
  }
  return held;
}

// The issue's case: a program calm for a minute, then frozen in a CUDA call. The trigger fires
// while the call runs, the recording ends a second after the call returned, and holds the last
// 10 s only.
TEST(FlightRecorder, FreezeTriggerKeepsTheLastSecondsAndExplainsTheFreeze) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  ProcessResult run =
      RunGprof({"-o", session_dir, "--flight-recorder", "10", "--trigger", "freeze:400", "--",
                AppPath("flight_app"), "--calm-s", "60", "--freeze-ms", "1500", "--after-s", "4",
                "--times-out", dir.Sub("times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.out.find("flight_app: done"), std::string::npos) << "the program ran on to its end";
  auto times = AppTimes(dir.Sub("times"));
  ASSERT_EQ(times["freeze"].size(), 2u);
  uint64_t freeze_start = times["freeze"][0], freeze_end = times["freeze"][1];

  json meta = ReadJson(session_dir + "/session.json");
  const json& flight = meta["capture"]["flight"];
  ASSERT_TRUE(flight.is_object()) << meta.dump();
  EXPECT_EQ(flight["ended_by"], "freeze");
  EXPECT_EQ(flight["freeze_kind"], "running");
  EXPECT_GE(flight["duration_ns"].get<uint64_t>(), 400'000'000u);
  uint64_t fired = flight["fired_monotonic_ns"].get<uint64_t>();
  EXPECT_GE(fired, freeze_start + 400'000'000u);
  EXPECT_LT(fired + 500'000'000u, freeze_end) << "fired while the call ran, not at its end";

  Held held = ExpectOnlyTheSpanHeld(session_dir, /*kernel=*/true);
  // The last 10 s before the recording ended, a short tail after the call returned.
  EXPECT_NEAR((held.end_ns - held.start_ns) / 1e9, 10.0, 0.5);
  EXPECT_GE(held.end_ns, freeze_end + 900'000'000u);
  EXPECT_LE(held.end_ns, freeze_end + 3 * kSecondNs);
  // Nothing after the tail: the program's 4 calm seconds after it are not recorded.
  auto session = collector::ReadSession(session_dir);
  ASSERT_TRUE(session.ok());
  bool freeze_kept = false;
  for (const auto& call : session->api_calls) {
    EXPECT_LT(call.enter_ns, held.end_ns) << "a call after the recording ended";
    freeze_kept |= call.exit_ns - call.enter_ns >= 1'400'000'000u;
  }
  EXPECT_TRUE(freeze_kept);

  // The same words in the report, report.json and the trace.
  std::string report = ReadFile(session_dir + "/report.txt");
  ExpectReadableReport(report);
  EXPECT_NE(report.find("  flight    --flight-recorder 10 s: held the last "), std::string::npos)
      << report;
  EXPECT_NE(report.find("  trigger   the freeze trigger fired at "), std::string::npos) << report;
  // The worker's cudaStreamSynchronize waits for the long kernel, and so may the other thread's
  // cudaFree (the fake runtime's, as the real one, synchronizes): whichever is seen first fires.
  std::regex trigger_call(
      R"(\((cudaStreamSynchronize|cudaFree) still running after [0-9.]+ ms on thread \d+, pid \d+\))");
  // (the header wraps its long lines: read as one)
  const std::string unwrapped = std::regex_replace(report, std::regex("\n +"), " ");
  EXPECT_TRUE(std::regex_search(unwrapped, trigger_call)) << report;
  json report_json = ReadJson(session_dir + "/report.json");
  std::string text = report_json["session"]["capture"]["flight"]["text"];
  EXPECT_NE(text.find("the freeze trigger fired at"), std::string::npos) << text;
  std::string trace = ReadFile(session_dir + "/trace.perfetto-trace");
  EXPECT_NE(trace.find("flight recorder: " + text), std::string::npos);
}

// The same minute, then a freeze outside CUDA: the worker and the calls thread wait for a mutex
// the main thread holds while it sleeps. The frozen-threads trigger fires while they wait, and
// the report explains the freeze: both threads, on one lock, released by the sleeper.
TEST(FlightRecorder, FrozenThreadsTriggerKeepsTheLastSecondsAndExplainsTheFreeze) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  ProcessResult run =
      RunGprof({"-o", session_dir, "--flight-recorder", "10", "--trigger", "freeze:400", "--",
                AppPath("flight_app"), "--calm-s", "60", "--block-ms", "1500", "--after-s", "4",
                "--idle-threads", "2", "--times-out", dir.Sub("times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  auto times = AppTimes(dir.Sub("times"));
  ASSERT_EQ(times["block"].size(), 2u);
  uint64_t block_start = times["block"][0], block_end = times["block"][1];

  json meta = ReadJson(session_dir + "/session.json");
  const json& flight = meta["capture"]["flight"];
  ASSERT_TRUE(flight.is_object()) << meta.dump();
  EXPECT_EQ(flight["ended_by"], "freeze");
  EXPECT_EQ(flight["freeze_kind"], "threads");
  // The worker and the calls thread (a pool thread too, should it have got items in a row).
  EXPECT_GE(flight["threads"].get<int>(), 2);
  uint64_t fired = flight["fired_monotonic_ns"].get<uint64_t>();
  EXPECT_GE(fired, block_start + 400'000'000u);
  EXPECT_LT(fired, block_end);

  Held held = ExpectOnlyTheSpanHeld(session_dir, /*kernel=*/true);
  EXPECT_NEAR((held.end_ns - held.start_ns) / 1e9, 10.0, 0.5);
  EXPECT_GE(held.end_ns, block_end + 900'000'000u);
  EXPECT_LE(held.end_ns, block_end + 3 * kSecondNs);

  std::string report = ReadFile(session_dir + "/report.txt");
  ExpectReadableReport(report);
  EXPECT_NE(report.find("  trigger   the freeze trigger fired at "), std::string::npos) << report;
  std::smatch freeze;
  ASSERT_TRUE(std::regex_search(
      report, freeze, std::regex(R"(\nfreeze 1 at \+[0-9.]+ s, 1\.[45]\d\d s: ([^\n]*)\n)")))
      << report;
  EXPECT_NE(freeze[1].str().find("\"worker\""), std::string::npos) << freeze[0];
  EXPECT_NE(freeze[1].str().find("\"calls\""), std::string::npos) << freeze[0];
  EXPECT_NE(report.find("ended by \"flight_app\""), std::string::npos) << report;
}

TEST(FlightRecorder, HangTriggerFiresWhenNoCallFinishes) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  ProcessResult run =
      RunGprof({"-o", session_dir, "--flight-recorder", "5", "--trigger", "hang:2", "--trigger",
                "freeze:5000", "--", AppPath("flight_app"), "--calm-s", "12", "--silent-s", "5",
                "--after-s", "2", "--times-out", dir.Sub("times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  auto times = AppTimes(dir.Sub("times"));
  ASSERT_EQ(times["silent"].size(), 2u);
  json meta = ReadJson(session_dir + "/session.json");
  const json& flight = meta["capture"]["flight"];
  ASSERT_TRUE(flight.is_object()) << meta.dump();
  EXPECT_EQ(flight["ended_by"], "hang");
  uint64_t fired = flight["fired_monotonic_ns"].get<uint64_t>();
  // Two seconds into the silence (give or take gprof-run's turn and the last calls' ends).
  EXPECT_GE(fired, times["silent"][0] + 1'500'000'000u);
  EXPECT_LT(fired, times["silent"][1]);
  Held held = ExpectOnlyTheSpanHeld(session_dir, /*kernel=*/true);
  EXPECT_NEAR((held.end_ns - held.start_ns) / 1e9, 5.0, 0.5);
  std::string report = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(report.find("  trigger   the hang trigger fired at "), std::string::npos) << report;
  EXPECT_NE(report.find("(no CUDA call finished for "), std::string::npos) << report;
}

// Without a trigger the recording holds the last seconds before the command's end; a file cut
// mid-chunk after that (a full disk, a crash) still reads, trimmed parts and all.
TEST(FlightRecorder, CommandEndWithoutTriggerAndACutFileStillRead) {
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  bool kernel = BpfUnavailableReason().empty();
  std::vector<std::string> args = {"-o", session_dir, "--flight-recorder", "3"};
  if (!kernel) args.push_back("--no-kernel");
  for (std::string arg : {"--", "flight_app", "--calm-s", "9"})
    args.push_back(arg == "flight_app" ? AppPath(arg) : arg);
  ProcessResult run = RunGprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json meta = ReadJson(session_dir + "/session.json");
  ASSERT_TRUE(meta["capture"]["flight"].is_object()) << meta.dump();
  EXPECT_EQ(meta["capture"]["flight"]["ended_by"], "end");
  Held held = ExpectOnlyTheSpanHeld(session_dir, kernel);
  EXPECT_NEAR((held.end_ns - held.start_ns) / 1e9, 3.0, 0.5);
  std::string report = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(report.find("  trigger   ended with the command, no trigger fired"), std::string::npos)
      << report;

  // Cut each injected library's file in its last chunk: what came before still reads.
  auto before = collector::ReadSession(session_dir);
  ASSERT_TRUE(before.ok());
  std::vector<std::string> inject_files = Files(session_dir, "inject-");
  ASSERT_FALSE(inject_files.empty());
  for (const std::string& path : inject_files) {
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    ASSERT_EQ(truncate(path.c_str(), st.st_size - 20), 0);
  }
  auto after = collector::ReadSession(session_dir);
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_FALSE(after->api_calls.empty());
  EXPECT_EQ(after->trimmed_chunks, before->trimmed_chunks);
  bool cut_said = false;
  for (const auto& diagnostic : after->diagnostics)
    cut_said |= diagnostic.message.find("the writer was stopped mid-chunk") != std::string::npos;
  EXPECT_TRUE(cut_said);
  ProcessResult report_again = RunGprof({"report", session_dir});
  EXPECT_EQ(report_again.exit_code(), 0) << report_again.err;
  EXPECT_NE(report_again.out.find("  flight    --flight-recorder 3 s: held the last "),
            std::string::npos)
      << report_again.out;
}

// Asked from outside: `gprof-run stop DIR` ends the recording at once (the command runs on, and
// nothing after the stop is recorded), and `gprof-run start DIR` does not start it again.
TEST(FlightRecorder, StopFromOutsideEndsItForGood) {
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  bool kernel = BpfUnavailableReason().empty();
  std::string script = AppPath("flight_app") + " --calm-s 9 & sleep 6; " + GprofRunPath() +
                       " stop " + session_dir + "; echo stop=$?; " + GprofRunPath() + " start " +
                       session_dir + "; echo start=$?; wait";
  std::vector<std::string> args = {"-o", session_dir, "--flight-recorder", "2"};
  if (!kernel) args.push_back("--no-kernel");
  for (std::string arg : {"--", "sh", "-c", script.c_str()}) args.push_back(arg);
  ProcessResult run = RunGprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.out.find("stop=0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("start=125"), std::string::npos) << run.out;
  EXPECT_NE(run.err.find("a flight recording, once stopped, is not started again"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.out.find("flight_app: done"), std::string::npos);
  json meta = ReadJson(session_dir + "/session.json");
  ASSERT_TRUE(meta["capture"]["flight"].is_object()) << meta.dump();
  EXPECT_EQ(meta["capture"]["flight"]["ended_by"], "stop");
  Held held = ExpectOnlyTheSpanHeld(session_dir, kernel);
  EXPECT_NEAR((held.end_ns - held.start_ns) / 1e9, 2.0, 0.5);
  // The program ran 3 s on after the stop: none of it is recorded.
  uint64_t end = meta["end"]["monotonic_ns"].get<uint64_t>();
  EXPECT_GT(end, held.end_ns + 2 * kSecondNs);
  auto session = collector::ReadSession(session_dir);
  ASSERT_TRUE(session.ok());
  for (const auto& call : session->api_calls)
    EXPECT_LT(call.enter_ns, held.end_ns) << "a call after the stop";
  std::string report = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(report.find("  trigger   ended by gprof-run stop, no trigger fired"), std::string::npos)
      << report;
}

TEST(FlightRecorder, TriggerNeedsTheFlightRecorder) {
  ProcessResult run = RunGprof({"--trigger", "freeze:100", "--", "true"});
  EXPECT_NE(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.err.find("--trigger needs --flight-recorder SEC"), std::string::npos) << run.err;
  run = RunGprof({"--flight-recorder", "5", "--trigger", "sometimes", "--", "true"});
  EXPECT_NE(run.exit_code(), 0);
  EXPECT_NE(run.err.find("expected freeze:MS"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace gprof::test
