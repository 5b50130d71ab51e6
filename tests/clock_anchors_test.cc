// Clocks that can be merged (issue 37, item 2): session.json names the host and its boot, and
// holds clock anchors, CLOCK_REALTIME and the kernel's CLOCK_MONOTONIC read tightly bracketed at
// the start and the end, with BOOTTIME; the trace's clock snapshot holds REALTIME from them; a
// test-only skew moves REALTIME; and gprof-run itself in a time namespace writes the kernel's
// times, as its recorders do. Each anchor is checked against the clocks this test reads itself
// around the run (this test runs outside any time namespace).
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/session/session_reader.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using collector::Session;
using json = nlohmann::json;

constexpr uint32_t kClockRealtime = 1;  // Perfetto's BUILTIN_CLOCK_REALTIME
const char kUnshare[] = "/usr/bin/unshare";

uint64_t Now(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The three clocks as this test sees them (the kernel's: no time namespace here).
struct Clocks {
  uint64_t monotonic = Now(CLOCK_MONOTONIC);
  uint64_t realtime = Now(CLOCK_REALTIME);
  uint64_t boottime = Now(CLOCK_BOOTTIME);
};

Session ReadOrFail(const std::string& dir) {
  auto session = collector::ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return Session();
  for (const auto& diagnostic : session->diagnostics)
    ADD_FAILURE() << diagnostic.file << ": " << diagnostic.message;
  return std::move(session.value());
}

// An anchor read between `before` and `after`, its REALTIME moved by `skew_ns`, its bracket
// narrower than the whole run.
void ExpectAnchorBetween(const collector::ClockAnchor& anchor, const Clocks& before,
                         const Clocks& after, int64_t skew_ns) {
  EXPECT_GE(anchor.monotonic_ns, before.monotonic);
  EXPECT_LE(anchor.monotonic_ns, after.monotonic);
  EXPECT_GE(anchor.boottime_ns, before.boottime);
  EXPECT_LE(anchor.boottime_ns, after.boottime);
  EXPECT_GE(anchor.realtime_ns, before.realtime + skew_ns);
  EXPECT_LE(anchor.realtime_ns, after.realtime + skew_ns);
  EXPECT_LT(anchor.uncertainty_ns, after.monotonic - before.monotonic);
}

std::string BootId() {
  std::string id = ReadFile("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

TEST(ClockAnchors, SessionNamesItsHostAndBootAndAnchorsBothEnds) {
  TempDir dir;
  Clocks before;
  ProcessResult run =
      RunGprof({"-q", "--no-kernel", "-o", dir.Sub("s"), "--", "/bin/sleep", "0.2"});
  Clocks after;
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(dir.Sub("s"));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(session.meta.host_name, host);
  EXPECT_EQ(session.meta.boot_id, BootId());
  ASSERT_TRUE(session.meta.start_anchor.has_value());
  ASSERT_TRUE(session.meta.end_anchor.has_value());
  ExpectAnchorBetween(*session.meta.start_anchor, before, after, 0);
  ExpectAnchorBetween(*session.meta.end_anchor, before, after, 0);
  // The command ran between them: 0.2 s of sleep on either clock.
  EXPECT_GE(session.meta.end_anchor->monotonic_ns - session.meta.start_anchor->monotonic_ns,
            200'000'000u);
  EXPECT_GE(session.meta.end_anchor->realtime_ns, session.meta.start_anchor->realtime_ns);
  EXPECT_EQ(session.meta.start_monotonic_ns, session.meta.start_anchor->monotonic_ns);
  EXPECT_EQ(session.meta.end_monotonic_ns, session.meta.end_anchor->monotonic_ns);
  EXPECT_EQ(session.meta.time_namespace_monotonic_ns, 0);
  EXPECT_EQ(session.meta.test_realtime_skew_ns, 0);
}

// The test-only skew moves every REALTIME reading, and the trace's snapshot holds it, at the
// moment its MONOTONIC is, so that trace_processor places the trace where the skewed host would.
TEST(ClockAnchors, TestSkewMovesRealtimeAndTheTraceSnapshotCarriesIt) {
  for (int64_t skew : {-40'000'000ll, 25'000'000ll}) {
    SCOPED_TRACE("skew " + std::to_string(skew));
    TempDir dir;
    ProcessSpec spec;
    spec.set_env = {"GPROF_TEST_REALTIME_SKEW_NS=" + std::to_string(skew)};
    Clocks before;
    ProcessResult run =
        RunGprof({"-q", "--no-kernel", "-o", dir.Sub("s"), "--", "/bin/sleep", "0.05"}, spec);
    Clocks after;
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    Session session = ReadOrFail(dir.Sub("s"));
    ASSERT_TRUE(session.meta.start_anchor.has_value());
    ASSERT_TRUE(session.meta.end_anchor.has_value());
    ExpectAnchorBetween(*session.meta.start_anchor, before, after, skew);
    ExpectAnchorBetween(*session.meta.end_anchor, before, after, skew);
    EXPECT_EQ(session.meta.test_realtime_skew_ns, skew);
    DecodedTrace trace = DecodeTraceFile(dir.Sub("s/trace.perfetto-trace"));
    EXPECT_TRUE(trace.errors.empty()) << trace.errors.front();
    EXPECT_EQ(trace.clock_snapshot[kClockMonotonic], session.meta.start_anchor->monotonic_ns);
    EXPECT_EQ(trace.clock_snapshot[kClockBoottime], session.meta.start_anchor->boottime_ns);
    EXPECT_EQ(trace.clock_snapshot[kClockRealtime], session.meta.start_anchor->realtime_ns);
  }
}

// A session.json of a gprof-run from before the anchors still reads, with none of them.
TEST(ClockAnchors, AnOlderSessionWithoutThemStillReads) {
  TempDir dir;
  ASSERT_EQ(Shell("mkdir " + dir.Sub("s") +
                  " && printf '%s' '{\"format\": \"gprof-run-session\", "
                  "\"version\": 1, \"command\": [\"x\"], \"root_pid\": 5, \"start\": "
                  "{\"monotonic_ns\": 100, \"realtime_ns\": 200, \"boottime_ns\": 300}, \"end\": "
                  "{\"monotonic_ns\": 400}, \"finished\": true}' > " +
                  dir.Sub("s/session.json")),
            0);
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_TRUE(session.meta.known);
  EXPECT_EQ(session.meta.start_monotonic_ns, 100u);
  EXPECT_FALSE(session.meta.start_anchor.has_value());
  EXPECT_FALSE(session.meta.end_anchor.has_value());
  EXPECT_TRUE(session.meta.host_name.empty());
  EXPECT_FALSE(session.meta.rank.has_value());
}

// gprof-run itself in a time namespace whose CLOCK_MONOTONIC and BOOTTIME run 7 s ahead: every
// time it writes is the kernel's still (the anchors, the start and end, the --delay window every
// recorder gets), so the injected library's calls fall inside the run and inside the window, and
// the kernel recorder's record of each thread's sleep after its calls starts right after them.
TEST(ClockAnchors, GprofRunInATimeNamespaceWritesTheKernelsTimes) {
  GPROF_NEED_BPF();
  if (access(kUnshare, X_OK) != 0) FAIL() << kUnshare << " is missing (util-linux)";
  ProcessResult probe =
      RunProcess(Command({kUnshare, "-T", "--monotonic", "7", "-f", "/bin/true"}));
  if (probe.exit_code() != 0) GTEST_SKIP() << "no time namespaces here: " << probe.err;
  TempDir dir;
  // 2 threads of 150 calls 1 ms apart; the window opens 50 ms after the start.
  std::vector<std::string> command = {kUnshare,     "-T",           "--monotonic",
                                      "7",          "--boottime",   "7",
                                      "-f",         GprofRunPath(), "-q",
                                      "--delay",    "0.05",         "-o",
                                      dir.Sub("s"), "--",           AppPath("namespace_app"),
                                      "2",          "150",          "0",
                                      "1000"};
  Clocks before;
  ProcessResult run = RunProcess(Command(command));
  Clocks after;
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(session.meta.time_namespace_monotonic_ns, 7'000'000'000);
  EXPECT_EQ(session.meta.time_namespace_boottime_ns, 7'000'000'000);
  EXPECT_TRUE(session.meta.start_anchor.has_value());
  EXPECT_TRUE(session.meta.end_anchor.has_value());
  if (session.meta.start_anchor) ExpectAnchorBetween(*session.meta.start_anchor, before, after, 0);
  if (session.meta.end_anchor) ExpectAnchorBetween(*session.meta.end_anchor, before, after, 0);
  EXPECT_GE(session.meta.start_monotonic_ns, before.monotonic);
  EXPECT_LE(session.meta.end_monotonic_ns, after.monotonic);
  ASSERT_TRUE(session.meta.window.has_value());
  EXPECT_EQ(session.meta.window->start_monotonic_ns, session.meta.start_monotonic_ns + 50'000'000);
  ASSERT_FALSE(session.api_calls.empty()) << "no call recorded inside the window";
  std::map<uint32_t, uint64_t> last_exit_by_tid;
  for (const auto& call : session.api_calls) {
    ASSERT_GE(call.enter_ns, session.meta.window->start_monotonic_ns);
    ASSERT_LE(call.exit_ns, session.meta.end_monotonic_ns);
    last_exit_by_tid[call.tid] = std::max(last_exit_by_tid[call.tid], call.exit_ns);
  }
  // One event seen by both recorders: the 5 ms sleep after a thread's last call, which the
  // library's clock puts after that call and the kernel's starts within a second of it (7 s
  // apart were either on the namespace's clock).
  EXPECT_EQ(last_exit_by_tid.size(), 2u);
  for (const auto& [tid, last_exit] : last_exit_by_tid) {
    bool seen = false;
    for (const auto& interval : session.off_cpu) {
      seen |= interval.tid == tid && interval.start_ns >= last_exit &&
              interval.start_ns - last_exit < 1'000'000'000 &&
              interval.end_ns - interval.start_ns >= 4'000'000;
    }
    EXPECT_TRUE(seen) << "the kernel recorder's sleep of tid " << tid << " after its last call";
  }
  // The kernel recorder's own readings (its maps snapshots) on the same clock.
  for (const auto& [pid, process] : session.processes) {
    for (const auto& maps : process.maps) {
      EXPECT_GE(maps.time_ns, session.meta.start_monotonic_ns - 1'000'000'000);
      EXPECT_LE(maps.time_ns, after.monotonic);
    }
  }
}

}  // namespace
}  // namespace gprof::test
