// `gprof-run merge` and -o's placeholders used as a careless user or an attacker would (issue 37):
// the merged directory is as private as a session's and never another user's or a link, a failed
// merge leaves nothing, one session given twice is refused, a session still being recorded is
// said to be, and a %q{VAR} that cannot be expanded is named for what is wrong with it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/job/clock_alignment.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

bool Exists(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0;
}

// A finished session of `command` in `path`.
void Record(const std::string& path, std::vector<std::string> command) {
  std::vector<std::string> args = {"-q", "-o", path, "--"};
  args.insert(args.end(), command.begin(), command.end());
  ProcessResult run = RunGprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
}

ProcessResult Merge(std::vector<std::string> args) {
  args.insert(args.begin(), "merge");
  return RunGprof(args);
}

// What the merge writes in a directory it was refused: nothing.
std::vector<std::string> Names(const std::string& directory) {
  std::vector<std::string> names;
  ProcessResult listed = RunProcess(Command({"/bin/ls", "-A", directory}));
  size_t from = 0;
  for (size_t end; (end = listed.out.find('\n', from)) != std::string::npos; from = end + 1)
    names.push_back(listed.out.substr(from, end - from));
  return names;
}

TEST(MergeAttack, OutIsAsPrivateAsASessionAndAFailedMergeLeavesNoOut) {
  TempDir dir;
  Record(dir.Sub("a"), {"/bin/true"});
  Record(dir.Sub("b"), {"/bin/sleep", "0.01"});
  ProcessResult merged = Merge({"-o", dir.Sub("job"), dir.Sub("a"), dir.Sub("b")});
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  struct stat info {};
  ASSERT_EQ(stat(dir.Sub("job").c_str(), &info), 0);
  // It holds each session's whole report: command lines, memory maps, kernel addresses.
  EXPECT_EQ(info.st_mode & 0777, 0700u);

  // Inputs that are no session (an empty directory, a file's directory, one missing): OUT was
  // never there before, and is not after.
  ASSERT_EQ(mkdir(dir.Sub("empty").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(dir.Sub("other").c_str(), 0700), 0);
  ASSERT_EQ(Shell("echo x > '" + dir.Sub("other/notes.txt") + "'"), 0);
  for (const std::string& bad : {dir.Sub("empty"), dir.Sub("other"), dir.Sub("missing")}) {
    SCOPED_TRACE(bad);
    ProcessResult refused = Merge({"-o", dir.Sub("never"), dir.Sub("a"), bad});
    EXPECT_EQ(refused.exit_code(), 125) << refused.err;
    EXPECT_NE(refused.err.find(bad), std::string::npos) << refused.err;
    EXPECT_FALSE(Exists(dir.Sub("never")));
  }
  // An empty OUT given is kept, and still empty: the merge can be run again into it.
  ASSERT_EQ(mkdir(dir.Sub("given").c_str(), 0700), 0);
  EXPECT_EQ(Merge({"-o", dir.Sub("given"), dir.Sub("a"), dir.Sub("empty")}).exit_code(), 125);
  EXPECT_TRUE(Names(dir.Sub("given")).empty());
  EXPECT_EQ(Merge({"-o", dir.Sub("given"), dir.Sub("a"), dir.Sub("b")}).exit_code(), 0);
  EXPECT_TRUE(Exists(dir.Sub("given/report.json")));
}

TEST(MergeAttack, OneSessionGivenTwiceIsRefused) {
  TempDir dir;
  Record(dir.Sub("a"), {"/bin/true"});
  Record(dir.Sub("b"), {"/bin/true"});
  ASSERT_EQ(symlink(dir.Sub("a").c_str(), dir.Sub("link").c_str()), 0);
  // The same directory by its name, with a trailing slash and through a link, among others.
  for (const std::vector<std::string>& twice :
       {std::vector<std::string>{dir.Sub("a"), dir.Sub("a")},
        std::vector<std::string>{dir.Sub("a"), dir.Sub("b"), dir.Sub("a/")},
        std::vector<std::string>{dir.Sub("link"), dir.Sub("b"), dir.Sub("a")}}) {
    std::vector<std::string> args = {"-o", dir.Sub("job")};
    args.insert(args.end(), twice.begin(), twice.end());
    ProcessResult refused = Merge(args);
    EXPECT_EQ(refused.exit_code(), 125) << refused.err;
    EXPECT_NE(refused.err.find("one session directory"), std::string::npos) << refused.err;
    EXPECT_FALSE(Exists(dir.Sub("job")));
  }
}

// As root, OUT is never a directory another user owns or can change, nor a link: root would
// write its sessions' reports where that user reads them, or where a link planted sends them.
TEST(MergeAttack, AsRootOutIsNeitherAnotherUsersNorWritableByOthersNorALink) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok());
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  Record(dir.Sub("a"), {"/bin/true"});
  Record(dir.Sub("b"), {"/bin/true"});
  ASSERT_EQ(mkdir(dir.Sub("users").c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.Sub("users").c_str(), user.uid(), user.gid()), 0);
  ASSERT_EQ(mkdir(dir.Sub("shared").c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.Sub("shared").c_str(), 01777), 0);
  ASSERT_EQ(mkdir(dir.Sub("roots").c_str(), 0700), 0);
  ASSERT_EQ(symlink(dir.Sub("roots").c_str(), dir.Sub("planted").c_str()), 0);
  ASSERT_EQ(lchown(dir.Sub("planted").c_str(), user.uid(), user.gid()), 0);
  for (const char* out : {"users", "shared", "planted"}) {
    SCOPED_TRACE(out);
    ProcessResult refused = Merge({"-o", dir.Sub(out), dir.Sub("a"), dir.Sub("b")});
    EXPECT_EQ(refused.exit_code(), 125) << refused.err;
    EXPECT_NE(refused.err.find(dir.Sub(out)), std::string::npos) << refused.err;
    EXPECT_TRUE(Names(dir.Sub(out)).empty());
  }
  EXPECT_TRUE(Names(dir.Sub("roots")).empty());
}

// A session another user may not read is said to be that, not missing: it is there.
TEST(MergeAttack, ASessionThatCannotBeOpenedSaysWhyNotThatItIsMissing) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok());
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  Record(dir.Sub("a"), {"/bin/true"});  // 0700, root's
  ProcessSpec as_user;
  as_user.run_as_uid = static_cast<int>(user.uid());
  as_user.cwd = "/";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"merge", "-o", "/tmp/never-made", dir.Sub("a")},
        std::vector<std::string>{"report", dir.Sub("a")}}) {
    SCOPED_TRACE(args[0]);
    ProcessResult refused = RunGprof(args, as_user);
    EXPECT_EQ(refused.exit_code(), 125) << refused.err;
    EXPECT_NE(refused.err.find(dir.Sub("a") + ": cannot open: Permission denied"),
              std::string::npos)
        << refused.err;
  }
}

// Waits up to a minute for `path` to hold `text`.
bool WaitForText(const std::string& path, const std::string& text) {
  for (int i = 0; i < 1200; ++i) {
    if (Exists(path) && ReadFile(path).find(text) != std::string::npos) return true;
    struct timespec pause {0, 50'000'000};
    nanosleep(&pause, nullptr);
  }
  return false;
}

// A session merged while its gprof-run still records it is said to be still recorded, not cut
// short by gprof-run's death; once the run has ended, it is whole.
TEST(MergeAttack, ASessionStillBeingRecordedIsSaidToBe) {
  TempDir dir;
  Record(dir.Sub("a"), {"/bin/true"});
  const std::string go = dir.Sub("go");
  struct EndsTheCommand {  // however the test ends
    std::string go;
    ~EndsTheCommand() { Shell("touch '" + go + "'"); }
  } ends{go};
  // The command ends when the test says so.
  ASSERT_EQ(Shell("'" + GprofRunPath() + "' -q -o '" + dir.Sub("live") +
                  "' -- /bin/sh -c 'while [ ! -e \"" + go +
                  "\" ]; do sleep 0.05; done' >/dev/null 2>&1 &"),
            0);
  ASSERT_TRUE(WaitForText(dir.Sub("live/session.json"), "\"finished\": false"));
  ProcessResult merged = Merge({"-o", dir.Sub("job"), dir.Sub("a"), dir.Sub("live")});
  ASSERT_EQ(Shell("touch '" + go + "'"), 0);
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  EXPECT_NE(merged.err.find("still recording"), std::string::npos) << merged.err;
  EXPECT_NE(merged.out.find("still being recorded"), std::string::npos) << merged.out;
  nlohmann::json report = nlohmann::json::parse(ReadFile(dir.Sub("job/report.json")));
  EXPECT_EQ(report["sessions"][1]["report"]["session"]["cut_short"]["cause"], "still_recording")
      << report["sessions"][1]["report"]["session"].dump(1);
  ASSERT_TRUE(WaitForText(dir.Sub("live/session.json"), "\"finished\": true"));
  ASSERT_TRUE(WaitForText(dir.Sub("live/report.txt"), "exit"));
  ProcessResult whole = Merge({"-o", dir.Sub("job2"), dir.Sub("a"), dir.Sub("live")});
  ASSERT_EQ(whole.exit_code(), 0) << whole.err;
  EXPECT_EQ(whole.err.find("still recording"), std::string::npos) << whole.err;
}

// -o's %q{VAR} that cannot be expanded: the line says what is wrong with it, and nothing is made.
TEST(MergeAttack, AnUnexpandableVariableIsNamedForWhatIsWrong) {
  TempDir dir;
  struct Case {
    std::string pattern;
    std::string said;
  };
  for (const Case& each : std::vector<Case>{{"r%q{GPROF_TEST_EMPTY}", "that is empty"},
                                            {"r%q{GPROF_TEST_UNSET}", "that is not set"},
                                            {"r%q{}", "in braces"},
                                            {"r%qRANK", "in braces"},
                                            {"r%q{RANK", "in braces"}}) {
    SCOPED_TRACE(each.pattern);
    ProcessSpec spec;
    spec.cwd = dir.path();
    spec.set_env = {"GPROF_TEST_EMPTY=", "RANK=3"};
    spec.unset_env = {"GPROF_TEST_UNSET"};
    ProcessResult refused = RunGprof({"-q", "-o", each.pattern, "--", "/bin/true"}, spec);
    EXPECT_EQ(refused.exit_code(), 125) << refused.err;
    EXPECT_NE(refused.err.find(each.said), std::string::npos) << refused.err;
    EXPECT_TRUE(Names(dir.path()).empty());
  }
}

// Two hosts with no message between them are placed by their wall clocks alone: the uncertainty
// stated holds those clocks' own error (here the test's 30 ms skew, which stands for NTP's), so
// the truth (one machine: no offset at all) lies within it, as the report says it does.
TEST(MergeAttack, HostsPlacedOnlyByTheirWallClocksSayHowFarThoseMayDisagree) {
  TempDir dir;
  ProcessSpec a, b;
  a.set_env = {"GPROF_TEST_BOOT_ID=11111111-2222-3333-4444-555555555555"};
  b.set_env = {"GPROF_TEST_BOOT_ID=66666666-7777-8888-9999-000000000000",
               "GPROF_TEST_REALTIME_SKEW_NS=30000000"};
  ASSERT_EQ(RunGprof({"-q", "-o", dir.Sub("a"), "--", "/bin/true"}, a).exit_code(), 0);
  ASSERT_EQ(RunGprof({"-q", "-o", dir.Sub("b"), "--", "/bin/true"}, b).exit_code(), 0);
  ProcessResult merged = Merge({"-o", dir.Sub("job"), dir.Sub("a"), dir.Sub("b")});
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  nlohmann::json clock =
      nlohmann::json::parse(ReadFile(dir.Sub("job/report.json")))["sessions"][1]["clock"];
  ASSERT_EQ(clock["how"], "REALTIME anchors") << clock.dump();
  const int64_t offset = clock["offset_ns"];
  const int64_t uncertainty = clock["uncertainty_ns"];
  EXPECT_NEAR(static_cast<double>(offset), 30e6, 1e6) << clock.dump();
  EXPECT_LE(std::abs(offset), uncertainty) << clock.dump();
  EXPECT_NE(merged.out.find("own error"), std::string::npos) << merged.out;
}

// Sessions of two runs merged together (prof/r* over both): each rank is in two sessions, which
// the merge says (on stderr and in report.txt) rather than mixing the runs' waits in silence;
// sessions of one run, none is said.
TEST(MergeAttack, ARankInTwoSessionsIsSaid) {
  TempDir dir;
  for (const char* name : {"a0", "a1", "b0"}) {
    ProcessSpec spec;
    spec.set_env = {std::string("RANK=") + name[1], "WORLD_SIZE=2", "LOCAL_RANK=0"};
    ASSERT_EQ(RunGprof({"-q", "-o", dir.Sub(name), "--", "/bin/sleep", "0.01"}, spec).exit_code(),
              0);
  }
  ProcessResult one_run = Merge({"-o", dir.Sub("job"), dir.Sub("a0"), dir.Sub("a1")});
  ASSERT_EQ(one_run.exit_code(), 0) << one_run.err;
  EXPECT_EQ(one_run.err.find("sessions ("), std::string::npos) << one_run.err;
  ProcessResult two_runs =
      Merge({"-o", dir.Sub("mixed"), dir.Sub("a0"), dir.Sub("a1"), dir.Sub("b0")});
  ASSERT_EQ(two_runs.exit_code(), 0) << two_runs.err;
  EXPECT_NE(two_runs.err.find("rank 0 is in 2 sessions (1 " + dir.Sub("a0") + ", 3 " +
                              dir.Sub("b0") + ")"),
            std::string::npos)
      << two_runs.err;
  EXPECT_EQ(two_runs.err.find("rank 1 is in"), std::string::npos) << two_runs.err;
  const std::string text = ReadFile(dir.Sub("mixed/report.txt"));
  EXPECT_NE(text.find("WARNING   rank 0 is in 2 sessions (1, 3)"), std::string::npos) << text;
  ExpectReadableReport(text);
}

// A host's session placed before the first session's clock began (its wall clock two days back:
// a session recorded before the first's host booted) still gets the trace, whichever comes first.
TEST(MergeAttack, ASessionBeforeTheFirstsBootStillGetsTheTrace) {
  TempDir dir;
  ProcessSpec a, b;
  a.set_env = {"GPROF_TEST_BOOT_ID=11111111-2222-3333-4444-555555555555"};
  b.set_env = {"GPROF_TEST_BOOT_ID=66666666-7777-8888-9999-000000000000",
               "GPROF_TEST_REALTIME_SKEW_NS=-172800000000000"};
  ASSERT_EQ(RunGprof({"-q", "-o", dir.Sub("a"), "--", "/bin/true"}, a).exit_code(), 0);
  ASSERT_EQ(RunGprof({"-q", "-o", dir.Sub("b"), "--", "/bin/true"}, b).exit_code(), 0);
  for (const auto& [out, order] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"ab", {dir.Sub("a"), dir.Sub("b")}}, {"ba", {dir.Sub("b"), dir.Sub("a")}}}) {
    SCOPED_TRACE(out);
    std::vector<std::string> args = {"-o", dir.Sub(out)};
    args.insert(args.end(), order.begin(), order.end());
    ProcessResult merged = Merge(args);
    ASSERT_EQ(merged.exit_code(), 0) << merged.err;
    EXPECT_EQ(merged.err.find("trace"), std::string::npos) << merged.err;
    EXPECT_TRUE(Exists(dir.Sub(out + "/trace.perfetto-trace")));
  }
}

collector::SessionMeta HostMeta(const std::string& boot, int64_t realtime_minus_monotonic,
                                uint64_t max_error_ns) {
  collector::SessionMeta meta;
  meta.boot_id = boot;
  meta.start_anchor = collector::ClockAnchor{
      1'000'000'000, static_cast<uint64_t>(1'000'000'000 + realtime_minus_monotonic), 0, 100,
      max_error_ns};
  return meta;
}

// Anchors of no sense (a hostile or damaged session.json) are not taken, and an error bound past
// any the kernel keeps does not wrap the sum it is in to a small, confident uncertainty.
TEST(MergeAttack, AnchorsOfNoSenseAreNeitherTakenNorWrapped) {
  collector::SessionMeta a = HostMeta("boot-a", 1'700'000'000'000'000'000, 10'000'000);
  collector::SessionMeta wide = HostMeta("boot-b", 1'700'000'000'000'000'000, UINT64_MAX);
  std::vector<collector::SessionClock> clocks = collector::AlignClocks({&a, &wide}, {});
  EXPECT_GE(clocks[1].uncertainty_ns, 1'000'000'000'000u) << clocks[1].how;
  for (auto damage : {+[](collector::ClockAnchor* anchor) { anchor->realtime_ns = UINT64_MAX; },
                      +[](collector::ClockAnchor* anchor) { anchor->monotonic_ns = 1ull << 63; },
                      +[](collector::ClockAnchor* anchor) { anchor->uncertainty_ns = UINT64_MAX; }}) {
    collector::SessionMeta damaged = HostMeta("boot-b", 1'700'000'000'000'000'000, 10'000'000);
    damage(&*damaged.start_anchor);
    clocks = collector::AlignClocks({&a, &damaged}, {});
    EXPECT_NE(clocks[1].how.find("no clock anchors"), std::string::npos) << clocks[1].how;
    EXPECT_EQ(clocks[1].offset_ns, 0);
    EXPECT_FALSE(clocks[1].uncertainty_known) << "nothing bounds it: not 'within 0 ns'";
  }
}

// Messages one way only bound one side: the other comes from the wall clocks' error, and the
// truth is within what is stated, whichever way the wall clock is off and the messages go.
TEST(MergeAttack, MessagesOneWayAndTheWallClocksBoundTheOffsetTogether) {
  constexpr int64_t kTrueOffset = -5'000'000'000;  // b's time + offset = a's time
  constexpr int64_t kFlight = 80'000;
  for (int64_t skew : {-20'000'000, 3'000'000, 20'000'000}) {
    for (bool a_to_b : {true, false}) {
      SCOPED_TRACE("skew " + std::to_string(skew) + (a_to_b ? ", a to b" : ", b to a"));
      collector::SessionMeta a = HostMeta("boot-a", 1'700'000'000'000'000'000, 10'000'000);
      collector::SessionMeta b =
          HostMeta("boot-b", 1'700'000'000'000'000'000 + kTrueOffset + skew, 15'000'000);
      std::vector<collector::SessionMessage> messages;
      for (uint64_t t = 2'000'000'000; t < 3'000'000'000; t += 50'000'000) {
        const uint64_t in_b = static_cast<uint64_t>(static_cast<int64_t>(t) - kTrueOffset);
        if (a_to_b)
          messages.push_back({0, 1, t, in_b + kFlight});
        else
          messages.push_back({1, 0, in_b, t + kFlight});
      }
      std::vector<collector::SessionClock> clocks = collector::AlignClocks({&a, &b}, messages);
      const int64_t off = clocks[1].offset_ns - kTrueOffset;
      EXPECT_LE(std::abs(off), static_cast<int64_t>(clocks[1].uncertainty_ns))
          << clocks[1].offset_ns << " within " << clocks[1].uncertainty_ns;
      // No wider than the anchors alone allow, and narrower where the messages cut it.
      EXPECT_LE(clocks[1].uncertainty_ns, 25'000'200u);
    }
  }
}

}  // namespace
}  // namespace gprof::test
