// Recording only a part (issue 39 item 5): --capture-range=cudaProfilerApi, where the program's
// cudaProfilerStart/Stop open and close windows, and --capture-range=manual, where
// `gprof-run start|stop DIR` do from outside. Every recorder keeps what starts inside a window.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collector/session/session_reader.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

constexpr uint64_t kPhaseMs = 300;

ProcessResult Gprof(std::vector<std::string> args) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.timeout_s = 90;
  return RunProcess(spec);
}

json ReadJson(const std::string& path) {
  json parsed = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << path;
  return parsed;
}

struct Window {
  uint64_t start_ns, end_ns;
};

// The app's own times of its inside phases: [after the switch on, before the switch off].
std::vector<Window> InsidePhases(const std::string& path) {
  std::vector<Window> phases;
  std::istringstream in(ReadFile(path));
  std::string word;
  Window phase{};
  while (in >> word >> phase.start_ns >> phase.end_ns) phases.push_back(phase);
  return phases;
}

std::vector<Window> CaptureWindows(const json& meta) {
  std::vector<Window> windows;
  if (!meta.contains("capture")) return windows;
  for (const json& window : meta["capture"]["windows"]) {
    windows.push_back(
        {window["start_monotonic_ns"].get<uint64_t>(), window["end_monotonic_ns"].get<uint64_t>()});
  }
  return windows;
}

// Checks a session of capture_app against its own times: one window around each inside phase,
// and nothing of any recorder that started outside them. `kernel`: the kernel recorder ran.
void ExpectOnlyInsideWindows(const std::string& session_dir, const std::string& times,
                             size_t expected_windows, const std::string& opened_by, bool kernel,
                             bool gpu = true) {
  json meta = ReadJson(session_dir + "/session.json");
  std::vector<Window> windows = CaptureWindows(meta);
  std::vector<Window> phases = InsidePhases(times);
  ASSERT_EQ(phases.size(), expected_windows);
  ASSERT_EQ(windows.size(), expected_windows) << meta.dump();
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_LE(windows[i].start_ns, phases[i].start_ns) << "window " << i + 1;
    EXPECT_GE(windows[i].end_ns, phases[i].end_ns) << "window " << i + 1;
    EXPECT_EQ(meta["capture"]["windows"][i]["opened_by"], opened_by);
  }
  auto inside = [&](uint64_t ns) {
    for (const Window& window : windows) {
      if (ns >= window.start_ns && ns < window.end_ns) return true;
    }
    return false;
  };
  auto session = collector::ReadSession(session_dir);
  ASSERT_TRUE(session.ok()) << session.status().message();
  // Every recorder checks starts against the windows, on the one clock: no tolerance.
  ASSERT_FALSE(session->api_calls.empty());
  std::vector<int> calls_in(windows.size());
  for (const auto& call : session->api_calls) {
    EXPECT_TRUE(inside(call.enter_ns)) << "a CUDA call at " << call.enter_ns;
    for (size_t i = 0; i < windows.size(); ++i)
      calls_in[i] += call.enter_ns >= windows[i].start_ns && call.enter_ns < windows[i].end_ns;
  }
  for (size_t i = 0; i < windows.size(); ++i) EXPECT_GT(calls_in[i], 0) << "window " << i + 1;
  if (gpu) ASSERT_FALSE(session->gpu_activities.empty());
  for (const auto& gpu : session->gpu_activities)
    EXPECT_TRUE(inside(gpu.start_ns)) << "GPU work at " << gpu.start_ns;
  if (!kernel) return;
  // The main thread sleeps once a phase: of its long sleeps, one in each inside phase is
  // recorded, and none of the outside phases' (checked above for every interval).
  uint32_t main_tid = meta["root_pid"].get<uint32_t>();
  std::vector<int> phase_sleeps(phases.size());
  ASSERT_FALSE(session->off_cpu.empty());
  for (const auto& interval : session->off_cpu) {
    EXPECT_TRUE(inside(interval.start_ns)) << "off-CPU at " << interval.start_ns;
    if (interval.tid != main_tid || interval.end_ns - interval.start_ns < kPhaseMs * 1'000'000 / 2)
      continue;
    for (size_t i = 0; i < phases.size(); ++i)
      phase_sleeps[i] +=
          interval.start_ns >= phases[i].start_ns && interval.start_ns < phases[i].end_ns;
  }
  for (size_t i = 0; i < phases.size(); ++i) EXPECT_EQ(phase_sleeps[i], 1) << "phase " << i + 1;
  for (const auto& futex : session->futex_calls)
    EXPECT_TRUE(inside(futex.start_ns)) << "a futex call at " << futex.start_ns;
}

TEST(CaptureRange, ProfilerApiWindowsHoldOnlyWhatStartsInside) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  ProcessResult run = Gprof({"-o", session_dir, "--capture-range=cudaProfilerApi", "--",
                             AppPath("capture_app"), "--windows", "3", "--phase-ms",
                             std::to_string(kPhaseMs), "--times-out", dir.Sub("times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  ExpectOnlyInsideWindows(session_dir, dir.Sub("times"), 3, "cudaProfilerStart", true);
  // Listed in the report with what was left out between them, and marked in the trace.
  std::string report = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(report.find("  range     --capture-range=cudaProfilerApi: 3 windows"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("  window 3  "), std::string::npos) << report;
  EXPECT_NE(report.find("not recorded before it: "), std::string::npos) << report;
  EXPECT_NE(report.find("not recorded after the last window: "), std::string::npos) << report;
  json report_json = ReadJson(session_dir + "/report.json");
  EXPECT_EQ(report_json["session"]["capture"]["windows"].size(), 3u);
  std::string trace = ReadFile(session_dir + "/trace.perfetto-trace");
  EXPECT_NE(trace.find("recorded: window 3"), std::string::npos);
}

// Without the kernel recorder the injected library alone keeps to the windows, and the number of
// windows is the program's own; through CUPTI's callbacks and through the interposed functions.
TEST(CaptureRange, ProfilerApiWindowsWithoutKernelRecorder) {
  for (const char* cuda : {"cupti", "preload"}) {
    SCOPED_TRACE(cuda);
    TempDir dir;
    std::string session_dir = dir.Sub("s");
    ProcessResult run = Gprof({"-o", session_dir, "--no-kernel", "--cuda", cuda, "--capture-range",
                               "cudaProfilerApi", "--", AppPath("capture_app"), "--windows", "2",
                               "--phase-ms", "200", "--times-out", dir.Sub("times")});
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    ExpectOnlyInsideWindows(session_dir, dir.Sub("times"), 2, "cudaProfilerStart", false,
                            /*gpu=*/std::string(cuda) == "cupti");
    std::string report = ReadFile(session_dir + "/report.txt");
    EXPECT_NE(report.find(std::string(cuda) == "cupti" ? "API calls from callbacks"
                                                       : "capture   interposition"),
              std::string::npos)
        << report;
  }
}

// --capture-range=nvtx:NAME: the program's NVTX range NAME (nested in an outer range, holding an
// inner one) opens and closes the window: every such range with --capture-range-end=repeat, only
// the first without.
TEST(CaptureRange, NvtxRangeWindows) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string every = dir.Sub("every");
  ProcessResult run =
      Gprof({"-o", every, "--capture-range=nvtx:load step", "--capture-range-end=repeat", "--",
             AppPath("capture_app"), "--nvtx", "load step", "--windows", "3", "--phase-ms",
             std::to_string(kPhaseMs), "--times-out", dir.Sub("every.times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  ExpectOnlyInsideWindows(every, dir.Sub("every.times"), 3, "the NVTX range's start", true);
  EXPECT_NE(ReadFile(every + "/report.txt").find("--capture-range=nvtx:load step (every range)"),
            std::string::npos);

  std::string first = dir.Sub("first");
  run = Gprof({"-o", first, "--capture-range=nvtx:load step", "--", AppPath("capture_app"),
               "--nvtx", "load step", "--windows", "2", "--phase-ms", "200", "--times-out",
               dir.Sub("first.times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json meta = ReadJson(first + "/session.json");
  std::vector<Window> windows = CaptureWindows(meta);
  std::vector<Window> phases = InsidePhases(dir.Sub("first.times"));
  ASSERT_EQ(windows.size(), 1u) << meta.dump();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_LE(windows[0].start_ns, phases[0].start_ns);
  EXPECT_GE(windows[0].end_ns, phases[0].end_ns);
  EXPECT_LT(windows[0].end_ns, phases[1].start_ns);
  auto session = collector::ReadSession(first);
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_FALSE(session->api_calls.empty());
  for (const auto& call : session->api_calls) {
    EXPECT_TRUE(call.enter_ns >= windows[0].start_ns && call.enter_ns < windows[0].end_ns)
        << "a CUDA call at " << call.enter_ns;
  }

  ProcessResult bad = Gprof({"-o", dir.Sub("bad"), "--capture-range=nvtx:", "--", "/bin/true"});
  EXPECT_EQ(bad.exit_code(), 125);
  EXPECT_NE(bad.err.find("NAME must be 1 to 216 printable ASCII characters"), std::string::npos)
      << bad.err;
}

// `gprof-run start DIR` and `stop DIR`, from another process while the command runs.
TEST(CaptureRange, StartAndStopFromOutside) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  std::string start = GprofRunPath() + " start " + session_dir + " >/dev/null";
  std::string stop = GprofRunPath() + " stop " + session_dir + " >/dev/null";
  ProcessResult run =
      Gprof({"-o", session_dir, "--capture-range=manual", "--", AppPath("capture_app"), "--windows",
             "2", "--phase-ms", std::to_string(kPhaseMs), "--start-cmd", start, "--stop-cmd", stop,
             "--times-out", dir.Sub("times")});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  ExpectOnlyInsideWindows(session_dir, dir.Sub("times"), 2, "gprof-run start", true);
  // Once the command has ended there is nothing to switch.
  ProcessResult late = RunProcess(Command({GprofRunPath(), "start", session_dir}));
  EXPECT_NE(late.exit_code(), 0);
  EXPECT_NE(late.err.find("gprof-run: "), std::string::npos) << late.err;
}

// Only the session's owner (or root, as the owner) switches it: another user cannot attach the
// session's control, whatever the directory's modes let them read.
TEST(CaptureRange, OthersCannotSwitchASession) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a user";
  ThrowawayUser other;
  ASSERT_TRUE(other.ok());
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  std::string session_dir = dir.Sub("s");
  std::string attempt = dir.Sub("attempt");
  // The app's start command opens the session to the other user's reading (what a careless
  // owner might do), then runs as them; it must fail at the control, so the app exits 1.
  std::string start = "chmod 755 " + session_dir + " && chmod 644 " + session_dir +
                      "/session.json && runuser -u " + other.name() + " -- " + GprofRunPath() +
                      " start " + session_dir + " 2>" + attempt;
  ProcessResult run = Gprof({"-q", "-o", session_dir, "--no-kernel", "--capture-range=manual", "--",
                             AppPath("capture_app"), "--windows", "1", "--phase-ms", "100",
                             "--start-cmd", start, "--stop-cmd", "true"});
  EXPECT_EQ(run.exit_code(), 1) << run.err;
  EXPECT_NE(ReadFile(attempt).find("is not running, or is not yours"), std::string::npos)
      << ReadFile(attempt);
  json meta = ReadJson(session_dir + "/session.json");
  ASSERT_TRUE(meta.contains("capture")) << meta.dump();
  EXPECT_TRUE(meta["capture"]["windows"].empty()) << meta.dump();
}

}  // namespace
}  // namespace gprof::test
