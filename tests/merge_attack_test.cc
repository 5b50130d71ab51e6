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

}  // namespace
}  // namespace gprof::test
