// Issue 34, case 5: nothing lost in silence. Each run below lost CUDA calls while its report said
// "lost nothing": now each either records them or says, in the report's lost line (report.json's
// "lost", report.html), how many were lost and why. gprof-run for real, on tests/apps/
// silent_loss_app (its shared and static builds); the cases under sudo need root.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "collector/session/session_reader.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using collector::Session;

// `gprof-run -q ARGS... -- COMMAND...`.
ProcessSpec GprofRun(std::vector<std::string> options, std::vector<std::string> command) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q"};
  spec.argv.insert(spec.argv.end(), options.begin(), options.end());
  spec.argv.push_back("--");
  spec.argv.insert(spec.argv.end(), command.begin(), command.end());
  spec.unset_env = {"LD_PRELOAD", "CUDA_INJECTION64_PATH", "GPROF_SESSION_DIR",
                    "GPROF_SESSION_CONTROL", "GPROF_SESSION_DIR_ID"};
  spec.timeout_s = 90;
  return spec;
}

std::string MockCupti() { return BuildDir() + "/tests/fake_cuda/libcupti.so.13"; }

// The calls silent_loss_app says it made ("calls=N").
long CallsMade(const ProcessResult& run) {
  std::smatch match;
  std::regex pattern("calls=([0-9]+)");
  return std::regex_search(run.out, match, pattern) ? std::stol(match[1]) : -1;
}

Session ReadOrFail(const std::string& directory) {
  auto session = collector::ReadSession(directory);
  EXPECT_TRUE(session.ok()) << session.status().message();
  return session.ok() ? std::move(*session) : Session();
}

// The report's header, up to its first blank line.
std::string Header(const std::string& report) { return report.substr(0, report.find("\n\n")); }

// The lost entries of report.json's session.
nlohmann::json LostJson(const std::string& directory) {
  auto json = nlohmann::json::parse(ReadFile(directory + "/report.json"), nullptr, false);
  if (json.is_discarded() || !json.contains("session")) return nlohmann::json::array();
  return json["session"]["lost"];
}

// --- a umask of 0777 under sudo ---

// The command's `umask 0777` made the injected library's file unreadable to its owner, and the
// report, built as that owner, had none of its calls. Its files are its owner's to read and write
// whatever the umask, never writable by group or others, and narrowed no further than the umask.
TEST(SilentLoss, AUmaskOf0777UnderSudoStillRecordsEveryCall) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  ASSERT_EQ(chown(dir.path().c_str(), user.uid(), user.gid()), 0);
  for (const char* mask : {"0777", "0177", "0002"}) {
    std::string session = dir.Sub(std::string("s") + mask);
    ProcessSpec spec = GprofRun({"-o", session}, {"/bin/sh", "-c",
                                                  std::string("umask ") + mask + "; exec " +
                                                      AppPath("silent_loss_app") + " 2 300 exit"});
    spec.set_env = user.SudoEnvironment();
    ProcessResult run = RunProcess(spec);
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    Session read = ReadOrFail(session);
    EXPECT_EQ(static_cast<long>(read.api_calls.size()), CallsMade(run)) << "umask " << mask;
    std::string report = ReadFile(session + "/report.txt");
    EXPECT_NE(Header(report).find("lost      nothing"), std::string::npos) << report;
    for (const auto& entry : std::filesystem::directory_iterator(session)) {
      if (!entry.path().filename().string().starts_with("inject-")) continue;
      struct stat st {};
      ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
      mode_t umask_value = static_cast<mode_t>(std::stoul(mask, nullptr, 8));
      EXPECT_EQ(st.st_mode & 07777, (0644 & ~umask_value) | 0600) << entry.path() << " " << mask;
      EXPECT_EQ(st.st_uid, user.uid());
    }
  }
}

// A session file that cannot be read (here: made unreadable to its owner, whom `gprof-run report`
// runs as) is not "lost nothing": the lost line names the file, why, and that how many calls it
// held is unknown.
TEST(SilentLoss, AFileTheReportCannotReadIsNamedAsLost) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  ASSERT_EQ(chown(dir.path().c_str(), user.uid(), user.gid()), 0);
  std::string session = dir.Sub("s");
  ProcessSpec spec = GprofRun({"-o", session}, {AppPath("silent_loss_app"), "1", "200", "exit"});
  spec.set_env = user.SudoEnvironment();
  ASSERT_EQ(RunProcess(spec).exit_code(), 0);
  std::string file;
  for (const auto& entry : std::filesystem::directory_iterator(session)) {
    if (entry.path().filename().string().starts_with("inject-")) file = entry.path();
  }
  ASSERT_FALSE(file.empty());
  ASSERT_EQ(chmod(file.c_str(), 0), 0);
  ProcessResult report = RunProcess(Command({GprofRunPath(), "report", session}));
  ASSERT_EQ(report.exit_code(), 0) << report.err;
  std::string header = Header(report.out);
  EXPECT_EQ(header.find("lost      nothing"), std::string::npos) << header;
  EXPECT_NE(header.find("LOST      an unknown number of CUDA calls of " +
                        std::filesystem::path(file).filename().string() +
                        ": the file could not be read"),
            std::string::npos)
      << header;
  bool in_json = false;
  for (const auto& entry : LostJson(session)) in_json |= entry["count"].is_null();
  EXPECT_TRUE(in_json) << LostJson(session).dump();
  EXPECT_NE(ReadFile(session + "/report.html").find("<b>LOST</b> an unknown number of CUDA calls"),
            std::string::npos);
}

// --- a static CUDA runtime with CUPTI unusable ---

// Interposition cannot see a runtime linked into the program; with CUPTI taken by another tool
// nothing records its calls. The report says so for that process (and not for the same program
// on the shared runtime, which interposition records whole).
TEST(SilentLoss, AStaticRuntimeNothingCanRecordIsNamedAsLost) {
  for (const char* app : {"silent_loss_static_app", "silent_loss_app"}) {
    TempDir dir;
    ProcessSpec spec = GprofRun({"-o", dir.Sub("s"), "--cupti-lib", MockCupti()},
                                {AppPath(app), "2", "150", "exit"});
    spec.set_env = {"MOCK_CUPTI_TAKEN=1"};
    ProcessResult run = RunProcess(spec);
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    Session read = ReadOrFail(dir.Sub("s"));
    std::string header = Header(ReadFile(dir.Sub("s") + "/report.txt"));
    bool is_static = std::string(app) == "silent_loss_static_app";
    if (!is_static) {
      EXPECT_EQ(static_cast<long>(read.api_calls.size()), CallsMade(run));
      EXPECT_NE(header.find("lost      nothing"), std::string::npos) << header;
      continue;
    }
    EXPECT_TRUE(read.api_calls.empty());
    EXPECT_EQ(header.find("lost      nothing"), std::string::npos) << header;
    EXPECT_NE(header.find("LOST      an unknown number of CUDA calls of pid"), std::string::npos)
        << header;
    EXPECT_NE(header.find("no libcudart.so for interposition to see"), std::string::npos)
        << header;
    EXPECT_NE(header.find("CUPTI is taken"), std::string::npos) << header;
    bool in_json = false;
    for (const auto& entry : LostJson(dir.Sub("s")))
      in_json |= entry["count"].is_null() &&
                 entry["what"].get<std::string>().find("which nothing recorded") !=
                     std::string::npos;
    EXPECT_TRUE(in_json) << LostJson(dir.Sub("s")).dump();
  }
}

// With CUPTI usable, the static runtime's calls are recorded whole: nothing is said lost.
TEST(SilentLoss, AStaticRuntimeWithCuptiIsRecordedWhole) {
  TempDir dir;
  ProcessResult run = RunProcess(GprofRun({"-o", dir.Sub("s"), "--cupti-lib", MockCupti()},
                                          {AppPath("silent_loss_static_app"), "2", "150", "exit"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session read = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(static_cast<long>(read.api_calls.size()), CallsMade(run));
  EXPECT_NE(Header(ReadFile(dir.Sub("s") + "/report.txt")).find("lost      nothing"),
            std::string::npos);
}

// --- a session path longer than PATH_MAX ---

// A directory `depth` components of 200 characters below `root`, made a component at a time; its
// descriptor, or -1.
int MakeDeepDirectory(const std::string& root, int depth, std::vector<std::string>* components) {
  int at = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; i < depth && at >= 0; ++i) {
    std::string name = std::string(199, static_cast<char>('a' + i % 26)) + std::to_string(i % 10);
    components->push_back(name);
    if (mkdirat(at, name.c_str(), 0755) != 0) return -1;
    int next = openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(at);
    at = next;
  }
  return at;
}

// gprof-run started in a working directory whose path is longer than PATH_MAX, with a relative
// -o: the command's processes get the session's absolute path, which open() refuses
// (ENAMETOOLONG). The injected library opens it a component at a time and records every call.
TEST(SilentLoss, ASessionPathLongerThanPathMaxIsRecorded) {
  TempDir dir;
  for (int depth : {22, 40}) {  // 4.4 KB and 8 KB: past PATH_MAX (4096)
    std::vector<std::string> components;
    std::string top = dir.Sub("deep" + std::to_string(depth));
    ASSERT_EQ(mkdir(top.c_str(), 0755), 0);
    int deep = MakeDeepDirectory(top, depth, &components);
    ASSERT_GE(deep, 0);
    // `env -C NAME` changes into one component at a time: no path is ever PATH_MAX long.
    ProcessSpec spec = GprofRun({"-o", "s"}, {AppPath("silent_loss_app"), "3", "100", "exit"});
    std::vector<std::string> argv;
    for (const std::string& name : components) {
      argv.insert(argv.end(), {"/usr/bin/env", "-C", name});
    }
    argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
    spec.argv = argv;
    spec.cwd = top;
    ProcessResult run = RunProcess(spec);
    ASSERT_EQ(run.exit_code(), 0) << run.err.substr(0, 2000);
    int session_fd = openat(deep, "s", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(deep);
    ASSERT_GE(session_fd, 0);
    auto read = collector::ReadSession(session_fd, "s");
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(static_cast<long>(read->api_calls.size()), CallsMade(run)) << "depth " << depth;
    int report = openat(session_fd, "report.txt", O_RDONLY | O_CLOEXEC);
    close(session_fd);
    ASSERT_GE(report, 0);
    std::string text(1 << 16, '\0');
    ssize_t n = pread(report, text.data(), text.size(), 0);
    close(report);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    EXPECT_NE(text.find("lost      nothing"), std::string::npos) << text.substr(0, 3000);
  }
}

// --- the command SIGKILLed ---

// A SIGKILL takes the calls still in the process's rings (and the writer's staging) along. Each
// recorded call is also counted in the session's shared control, where gprof-run reads it after
// the process is gone: the report says exactly how many were lost, so that what is recorded and
// what is said lost add up to what the program made.
TEST(SilentLoss, CallsASigkillTookAlongAreCounted) {
  struct Variant {
    const char* threads;
    std::vector<std::string> options;
  };
  for (const Variant& variant : {Variant{"1", {"--cuda=preload"}},
                                 Variant{"4", {"--cupti-lib", MockCupti()}}}) {
    TempDir dir;
    std::vector<std::string> options = {"-o", dir.Sub("s")};
    options.insert(options.end(), variant.options.begin(), variant.options.end());
    // Fewer calls per thread than wake the writer early (inject/thread_ring.h): what the last
    // periodic pass did not take is in the rings when the program kills itself.
    ProcessResult run = RunProcess(
        GprofRun(options, {AppPath("silent_loss_app"), variant.threads, "8000", "kill"}));
    ASSERT_EQ(run.exit_code(), 128 + SIGKILL) << run.err;
    Session read = ReadOrFail(dir.Sub("s"));
    uint64_t lost = 0;
    for (const auto& entry : read.lost) {
      if (entry.what.find("CUDA calls of pid " + std::to_string(read.meta.root_pid)) == 0) {
        EXPECT_TRUE(entry.count_known);
        lost += entry.count;
      }
    }
    EXPECT_EQ(static_cast<long>(read.api_calls.size() + lost), CallsMade(run))
        << "threads " << variant.threads << ": " << read.api_calls.size() << " recorded, " << lost
        << " said lost";
    std::string header = Header(ReadFile(dir.Sub("s") + "/report.txt"));
    if (lost > 0) {
      EXPECT_NE(header.find("LOST      " + collector::LostEvents{"", lost, {}}.Text()),
                std::string::npos)
          << header;
    }
  }
}

// A process that exits normally leaves nothing said lost: the counts match what it wrote.
TEST(SilentLoss, AProcessThatExitsLosesNothing) {
  TempDir dir;
  ProcessResult run = RunProcess(
      GprofRun({"-o", dir.Sub("s"), "--cuda=preload"}, {AppPath("silent_loss_app"), "4", "8000", "exit"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session read = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(static_cast<long>(read.api_calls.size()), CallsMade(run));
  EXPECT_TRUE(read.lost.empty());
}

// --- a nested gprof-run ---

// gprof-run -- gprof-run -o INNER -- CMD: CMD is recorded in INNER. The outer session's report
// names the nested gprof-run, where its session is and how many calls it holds, instead of
// "lost nothing" over 0 calls.
TEST(SilentLoss, ANestedGprofRunIsNamedWithItsSession) {
  for (const char* mode : {"--cuda=auto", "--cuda=preload"}) {
    TempDir dir;
    ProcessResult run = RunProcess(GprofRun(
        {"-o", dir.Sub("outer")}, {GprofRunPath(), "-q", mode, "-o", dir.Sub("inner"), "--",
                                   AppPath("silent_loss_app"), "2", "120", "exit"}));
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    Session inner = ReadOrFail(dir.Sub("inner"));
    EXPECT_EQ(static_cast<long>(inner.api_calls.size()), CallsMade(run));
    Session outer = ReadOrFail(dir.Sub("outer"));
    ASSERT_EQ(outer.meta.nested_sessions.size(), 1u);
    const collector::NestedSession& nested = outer.meta.nested_sessions.front();
    EXPECT_EQ(nested.pid, outer.meta.root_pid);
    EXPECT_EQ(nested.directory, dir.Sub("inner"));
    ASSERT_TRUE(nested.calls.has_value());
    EXPECT_EQ(*nested.calls, inner.api_calls.size());
    std::string header = Header(ReadFile(dir.Sub("outer") + "/report.txt"));
    EXPECT_EQ(header.find("lost      nothing"), std::string::npos) << header;
    EXPECT_NE(header.find("NESTED    pid " + std::to_string(outer.meta.root_pid) +
                          " (gprof-run) recorded its command into " + dir.Sub("inner") + " (" +
                          std::to_string(inner.api_calls.size()) + " CUDA calls)"),
              std::string::npos)
        << header;
    // The inner session is whole, and says nothing of the outer one.
    EXPECT_TRUE(inner.meta.nested_sessions.empty());
  }
}

}  // namespace
}  // namespace gprof::test
