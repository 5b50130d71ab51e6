// Issue 34, cases 3 and 4, for real (root, real BPF):
// - a secure execution (set-user-ID, set-group-ID, file capabilities) records nothing and writes
//   nothing, under gprof-run or with the injected library named by hand, and the report names it;
// - the limits the command inherits (ulimit -f, -v, -d, -n, -u) are the command's: they never
//   kill gprof-run, never make a call of the program fail that succeeds without gprof-run, and
//   the report says what they cut.
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collector/collect.h"
#include "collector/session/session_reader.h"
#include "collector/writers/report_html.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The names in `directory` (empty when it cannot be read).
std::set<std::string> Names(const std::string& directory) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec))
    names.insert(entry.path().filename().string());
  return names;
}

bool HasInjectFile(const std::string& directory) {
  for (const std::string& name : Names(directory))
    if (name.starts_with(collector::kInjectFilePrefix)) return true;
  return false;
}

// A copy of privilege_limits_app that runs privileged: set-user-ID root, set-group-ID to a group
// that is not the user's, or with a file capability. Its directory is open to everyone (the
// fake runtime is found through the copy's absolute RUNPATH, which secure mode keeps).
struct PrivilegedCopy {
  const char* kind;
  std::string path;
};

std::vector<PrivilegedCopy> MakePrivilegedCopies(const TempDir& dir) {
  chmod(dir.path().c_str(), 0755);
  std::vector<PrivilegedCopy> copies;
  // `setup` is run with the copy's path after each command.
  auto copy = [&](const char* kind, std::vector<std::string> setup) {
    std::string path = dir.Sub(std::string("app-") + kind);
    fs::copy_file(AppPath("privilege_limits_app"), path);
    std::string command = "chown root:root " + path;
    for (const std::string& step : setup) command += " && " + step + " " + path;
    if (Shell(command) == 0)
      copies.push_back({kind, path});
    else
      ADD_FAILURE() << "cannot make the " << kind << " copy: " << command;
  };
  copy("setuid", {"chmod 4755"});
  copy("setgid", {"chgrp daemon", "chmod 2755"});
  copy("filecap", {"chmod 0755", "setcap cap_net_raw+ep"});
  return copies;
}

// The pid of the command gprof-run ran, from report.txt's "command" line.
uint32_t CommandPid(const std::string& report) {
  size_t at = report.find("(pid ");
  return at == std::string::npos ? 0 : static_cast<uint32_t>(std::stoul(report.substr(at + 5)));
}

// --- secure executions ---

TEST(SecureExecution, UnderSudoAPrivilegedProgramIsNamedAndNothingOfItIsRecorded) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and set-user-ID copies");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string sessions = dir.Sub("sessions");  // the user's, where gprof-run makes the sessions
  fs::create_directory(sessions);
  ASSERT_EQ(chown(sessions.c_str(), user.uid(), user.gid()), 0);
  for (const PrivilegedCopy& copy : MakePrivilegedCopies(dir)) {
    SCOPED_TRACE(copy.kind);
    std::string session = sessions + "/" + copy.kind;
    ProcessSpec spec;
    spec.argv = {GprofRunPath(), "-q", "-o", session, "--", copy.path, "who"};
    spec.set_env = user.SudoEnvironment();
    spec.unset_env = {"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
    spec.cwd = dir.path();
    ProcessResult run = RunProcess(spec);
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_TRUE(run.out.starts_with("uid " + std::to_string(user.uid()) + " ")) << run.out;
    EXPECT_TRUE(Contains(run.out, "calls ok")) << run.out;
    EXPECT_EQ(run.err, "") << "nothing on the command's stderr";
    // Nothing written by it, nothing recorded of its CUDA calls.
    EXPECT_FALSE(HasInjectFile(session)) << "a privileged process wrote into the session";

    std::string report = ReadFile(session + "/" + collector::kTextReportFile);
    uint32_t pid = CommandPid(report);
    ASSERT_NE(pid, 0u) << report;
    EXPECT_TRUE(Contains(report, "UNRECORDED pid " + std::to_string(pid))) << report;
    EXPECT_TRUE(Contains(report, "secure execution")) << report;
    EXPECT_FALSE(Contains(report, "lost      nothing")) << report;
    std::string json = ReadFile(session + "/" + collector::kJsonReportFile);
    EXPECT_TRUE(Contains(json, "\"secure_exec\"")) << "report.json";
    std::string html = ReadFile(session + "/" + collector::kHtmlReportFile);
    EXPECT_TRUE(Contains(html, "UNRECORDED</b> pid " + std::to_string(pid))) << "report.html";

    // The session is the user's: of the privileged process the kernel's record keeps its
    // existence only (no maps, no waits, no memory map calls), and so of its forked child.
    auto read = collector::ReadSession(session);
    ASSERT_TRUE(read.ok()) << read.status().message();
    // (The command's pid ran gprof-run's own code before its exec: that is recorded.)
    std::map<uint32_t, uint64_t> hidden_since;  // pid: its secure exec, or its fork
    for (const auto& [process, facts] : read->processes)
      if (facts.secure_ns != 0) hidden_since[process] = facts.secure_ns;
    ASSERT_EQ(hidden_since.count(pid), 1u) << "the exec is not marked secure";
    EXPECT_TRUE(read->processes.at(pid).secure_hidden);
    EXPECT_EQ(hidden_since.size(), 2u) << "the command and its forked child";
    for (const auto& [process, since] : hidden_since) {
      const collector::Process& facts = read->processes.at(process);
      EXPECT_TRUE(facts.secure_hidden) << "pid " << process;
      for (const auto& maps : facts.maps)
        EXPECT_LT(maps.time_ns, since) << "pid " << process << ": its maps were read";
      for (const auto& file : facts.loaded_files)
        EXPECT_LT(file.time_ns, since) << "pid " << process << ": its mmap of " << file.name;
    }
    auto hidden_at = [&](uint32_t process, uint64_t time_ns) {
      auto it = hidden_since.find(process);
      return it != hidden_since.end() && time_ns >= it->second;
    };
    for (const auto& interval : read->off_cpu)
      EXPECT_FALSE(hidden_at(interval.pid, interval.start_ns))
          << "an off-CPU interval of pid " << interval.pid;
    for (const auto& call : read->api_calls)
      EXPECT_FALSE(hidden_at(call.pid, call.enter_ns)) << "a CUDA call of pid " << call.pid;
  }
}

// Without gprof-run: a user names the injected library and a root directory by hand, and runs a
// privileged program. libcuda (the fake driver alike) dlopens CUDA_INJECTION64_PATH with a plain
// getenv: the library must do nothing there. The same program unprivileged does record, so the
// environment is one that works.
TEST(SecureExecution, TheLibraryNamedByHandInAPrivilegedProgramWritesNothing) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and set-user-ID copies");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string roots = dir.Sub("roots");  // root's, writable by root only
  std::string users = dir.Sub("users");  // the user's own
  fs::create_directory(roots);
  fs::create_directory(users);
  chmod(roots.c_str(), 0755);
  ASSERT_EQ(chown(users.c_str(), user.uid(), user.gid()), 0);
  std::string plain = dir.Sub("app-plain");
  fs::copy_file(AppPath("privilege_limits_app"), plain);
  chmod(plain.c_str(), 0755);

  auto run = [&](const std::string& program, const std::string& target, bool inject) {
    ProcessSpec spec;
    spec.argv = {program, "who"};
    spec.run_as_uid = static_cast<int>(user.uid());
    spec.cwd = dir.path();
    spec.unset_env = {"LD_PRELOAD", "CUDA_INJECTION64_PATH", "GPROF_SESSION_DIR_ID",
                      "GPROF_SESSION_CONTROL", "GPROF_RUN_PID"};
    if (inject) {
      spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath(),
                      "CUDA_INJECTION64_PATH=" + InjectLibraryPath(), "GPROF_SESSION_DIR=" + target,
                      "GPROF_STACK_THRESHOLD_NS=0"};
    }
    return RunProcess(spec);
  };

  ProcessResult unprivileged = run(plain, users, true);
  ASSERT_EQ(unprivileged.exit_code(), 0) << unprivileged.err;
  ASSERT_TRUE(HasInjectFile(users)) << "the environment does not make the library record";

  for (const PrivilegedCopy& copy : MakePrivilegedCopies(dir)) {
    SCOPED_TRACE(copy.kind);
    ProcessResult alone = run(copy.path, roots, false);
    ASSERT_EQ(alone.exit_code(), 0) << alone.err;
    ProcessResult injected = run(copy.path, roots, true);
    EXPECT_EQ(injected.exit_code(), 0) << injected.err;
    EXPECT_EQ(injected.out, alone.out);
    EXPECT_EQ(injected.err, alone.err);
    EXPECT_EQ(Names(roots), std::set<std::string>{}) << "the privileged program wrote there";
  }
}

// --- limits the command inherits ---

// `ulimit -f 64` (soft and hard) and `ulimit -S -f 64`: gprof-run is not killed by SIGXFSZ, the
// program runs as without it, and the report says the file size limit stopped its record.
TEST(InheritedLimits, AFileSizeLimitCutsTheRecordNeverTheProgramNorGprofRun) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string app = AppPath("privilege_limits_app") + " calls 60000";
  ProcessResult alone = RunProcess(Command({"/bin/sh", "-c", "ulimit -f 64 && exec " + app}));
  ASSERT_EQ(alone.exit_code(), 0) << alone.err;
  for (const char* limit : {"-S -f 64", "-f 64"}) {
    SCOPED_TRACE(limit);
    std::string session = dir.Sub(std::string("s") + (limit[1] == 'S' ? "soft" : "hard"));
    ProcessResult run =
        RunProcess(Command({"/bin/sh", "-c",
                            std::string("ulimit ") + limit + " && exec " + GprofRunPath() +
                                " -q -o " + session + " -- " + app}));
    EXPECT_EQ(run.exit_code(), 0) << run.err;  // 153 (SIGXFSZ) today
    EXPECT_EQ(run.out, alone.out);
    std::string report = ReadFile(session + "/" + collector::kTextReportFile);
    EXPECT_TRUE(Contains(report, "STOPPED   inject-")) << report;
    EXPECT_TRUE(Contains(report, "file size limit (ulimit -f")) << report;
    if (limit[1] == 'S') {  // gprof-run's own files are its own: whole
      EXPECT_FALSE(Contains(report, "STOPPED   kernel.gpr")) << report;
      EXPECT_TRUE(fs::exists(session + "/" + collector::kJsonReportFile));
    }
  }
}

// The smallest address-space (or data) limit, in KiB, under which `command` succeeds.
long SmallestLimitThatWorks(const std::string& option, const std::string& command) {
  long works = 1 << 20, fails = 1024;  // 1 GiB works, 1 MiB does not
  auto succeeds = [&](long kib) {
    return Shell("ulimit -S " + option + " " + std::to_string(kib) + " && exec " + command +
                 " >/dev/null 2>&1") == 0;
  };
  if (!succeeds(works) || succeeds(fails)) return -1;
  while (works - fails > 64) {
    long middle = (works + fails) / 2;
    (succeeds(middle) ? works : fails) = middle;
  }
  return works;
}

// A program that succeeds under `ulimit -v N` (or -d N) without gprof-run succeeds, with the same
// output, under gprof-run, for N at the edge and above it; the report says its CUDA calls were
// not recorded, and why.
TEST(InheritedLimits, AMemoryLimitNeverFailsACallThatSucceedsWithoutGprofRun) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string app = AppPath("privilege_limits_app") + " calls 2000";
  for (const char* option : {"-v", "-d"}) {
    SCOPED_TRACE(option);
    long edge = SmallestLimitThatWorks(option, app);
    ASSERT_GT(edge, 0) << "no limit between 1 MiB and 1 GiB decides";
    for (long kib : {edge, edge + 64, edge + 512, edge + 4096, edge + 16384}) {
      SCOPED_TRACE(kib);
      std::string ulimit = std::string("ulimit -S ") + option + " " + std::to_string(kib);
      ProcessResult alone = RunProcess(Command({"/bin/sh", "-c", ulimit + " && exec " + app}));
      if (alone.exit_code() != 0) continue;  // the edge moved a little: nothing to compare
      std::string session = dir.Sub(std::string("s") + option + std::to_string(kib));
      ProcessResult run = RunProcess(
          Command({"/bin/sh", "-c",
                   ulimit + " && exec " + GprofRunPath() + " -q -o " + session + " -- " + app}));
      EXPECT_EQ(run.exit_code(), 0) << run.err;
      EXPECT_EQ(run.out, alone.out);
      std::string report = ReadFile(session + "/" + collector::kTextReportFile);
      EXPECT_TRUE(Contains(report, "STOPPED   inject-*.gpr")) << report;
      EXPECT_TRUE(Contains(report, "limit")) << report;
    }
  }
}

// The limit set inside the tree, after the injected library was loaded into the program: it
// declines at the program's first CUDA call, takes none of the program's memory, and the report
// names the process.
TEST(InheritedLimits, AMemoryLimitSetInsideTheTreeStopsTheLibraryNotTheProgram) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string app = AppPath("privilege_limits_app") + " calls 2000";
  long edge = SmallestLimitThatWorks("-v", app);
  ASSERT_GT(edge, 0);
  // Room for the library's own mapping (LD_PRELOAD maps it), not for what it would take to record.
  std::string ulimit = "ulimit -S -v " + std::to_string(edge + 4096);
  ProcessResult alone = RunProcess(Command({"/bin/sh", "-c", ulimit + " && exec " + app}));
  ASSERT_EQ(alone.exit_code(), 0) << alone.err;
  std::string session = dir.Sub("s");
  ProcessResult run = RunProcess(Command(
      {GprofRunPath(), "-q", "-o", session, "--", "/bin/sh", "-c", ulimit + " && exec " + app}));
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, alone.out);
  std::string report = ReadFile(session + "/" + collector::kTextReportFile);
  EXPECT_TRUE(Contains(report, "an address-space limit (ulimit -v)")) << report;
}

// A program at its descriptor limit: the library's files never take one of its numbers, so it
// opens as many as without gprof-run, and its calls are recorded or the report says why not.
TEST(InheritedLimits, AProgramAtItsDescriptorLimitOpensAsManyAsWithoutGprofRun) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  GPROF_NEED_BPF();
  TempDir dir;
  for (int limit : {16, 64}) {
    SCOPED_TRACE(limit);
    std::string command = "ulimit -n " + std::to_string(limit) + " && exec " +
                          AppPath("privilege_limits_app") + " descriptors 500";
    ProcessResult alone = RunProcess(Command({"/bin/sh", "-c", command}));
    ASSERT_EQ(alone.exit_code(), 0) << alone.err;
    std::string session = dir.Sub("s" + std::to_string(limit));
    ProcessResult run =
        RunProcess(Command({GprofRunPath(), "-q", "-o", session, "--", "/bin/sh", "-c", command}));
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_EQ(run.out, alone.out);
    auto read = collector::ReadSession(session);
    ASSERT_TRUE(read.ok()) << read.status().message();
    std::string report = ReadFile(session + "/" + collector::kTextReportFile);
    EXPECT_TRUE(read->api_calls.size() >= 501 || Contains(report, "STOPPED")) << report;
  }
}

// A small process limit (ulimit -u: the user's processes and threads): the writer thread would
// take the thread the fake runtime starts for its GPU. The program's own threads still start,
// its calls succeed, and the report names the process.
TEST(InheritedLimits, AProcessLimitThatLeavesNoRoomForTheWriterIsReported) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  chmod(dir.path().c_str(), 0777);
  // The program's main thread and the fake runtime's GPU thread: two.
  std::string command = "exec prlimit --nproc=2 " + AppPath("privilege_limits_app") + " calls 200";
  ProcessSpec alone_spec = Command({"/bin/sh", "-c", command});
  alone_spec.run_as_uid = static_cast<int>(user.uid());
  alone_spec.cwd = dir.path();
  ProcessResult alone = RunProcess(alone_spec);
  ASSERT_EQ(alone.exit_code(), 0) << alone.err;
  std::string session = dir.Sub("s");
  ProcessSpec spec = Command({GprofRunPath(), "-q", "-o", session, "--", "/bin/sh", "-c", command});
  spec.set_env = user.SudoEnvironment();
  spec.cwd = dir.path();
  ProcessResult run = RunProcess(spec);
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, alone.out);
  std::string report = ReadFile(session + "/" + collector::kTextReportFile);
  EXPECT_TRUE(Contains(report, "small process limit (ulimit -u)")) << report;
}

}  // namespace
}  // namespace gprof::test
