// gprof-run in real environments (issue 34): many runs given one output directory, launchers that
// start many copies at once, -o's placeholders; messages that stay short and show what they
// quote (a megabyte command line, invisible format characters); options that name the wrong file;
// a command named like a subcommand; a session.json that cannot be read; a full disk under -q;
// the README's commands for root.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <latch>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "collector/model/model.h"
#include "inject/shared/disk_room.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ProcessSpec GprofSpec(std::vector<std::string> args) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return spec;
}

ProcessResult Gprof(std::vector<std::string> args) { return RunProcess(GprofSpec(std::move(args))); }

// Every spec started at the same moment, each from its own thread.
std::vector<ProcessResult> RunAtOnce(const std::vector<ProcessSpec>& specs) {
  std::vector<ProcessResult> results(specs.size());
  std::latch start(static_cast<std::ptrdiff_t>(specs.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = RunProcess(specs[i]);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

size_t Lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

std::vector<std::string> Names(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with(prefix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

json ReadJson(const std::string& path) { return json::parse(ReadFile(path), nullptr, false); }

// --- one session per run (case 2) ---

// Eight runs given one -o at once, new or an existing empty directory: one records, seven refuse
// with one line each before their command starts, and the session holds only the one run.
TEST(OneSessionPerRun, EightRunsGivenOneDirectoryAtOnceLeaveOneSession) {
  for (bool existing : {false, true}) {
    SCOPED_TRACE(existing ? "existing empty directory" : "new directory");
    TempDir dir;
    std::string session = dir.Sub("s");
    if (existing) {
      ASSERT_EQ(mkdir(session.c_str(), 0700), 0);
    }
    std::vector<ProcessSpec> specs;
    for (int i = 0; i < 8; ++i) {
      ProcessSpec spec = GprofSpec({"-q", "--no-kernel", "-o", session, "--", AppPath("exit_app"),
                                    "env", "GPROF_TEST_RUN", "exit", "7"});
      spec.set_env = {"GPROF_TEST_RUN=run" + std::to_string(i)};
      specs.push_back(spec);
    }
    std::vector<ProcessResult> results = RunAtOnce(specs);
    std::string winner;
    int refused = 0;
    for (const ProcessResult& result : results) {
      ASSERT_FALSE(result.timed_out);
      if (result.exit_code() == 7) {
        EXPECT_TRUE(winner.empty()) << "two runs recorded into " << session;
        winner = result.out;
        continue;
      }
      ++refused;
      EXPECT_EQ(result.exit_code(), 125) << result.err;
      EXPECT_EQ(result.out, "") << "a refused run's command never starts";
      EXPECT_EQ(Lines(result.err), 1u) << result.err;
      EXPECT_TRUE(std::regex_search(
          result.err, std::regex("^gprof-run: " + dir.Sub("s") +
                                 " (holds another gprof-run session|already exists and is not "
                                 "empty).*never writes two runs into one directory")))
          << result.err;
    }
    EXPECT_EQ(refused, 7);
    ASSERT_TRUE(std::regex_match(winner, std::regex("run\\d\n"))) << winner;
    // One run's files only: one recorded process, its command in session.json.
    EXPECT_EQ(Names(session, "inject-").size(), 1u);
    json meta = ReadJson(session + "/session.json");
    ASSERT_TRUE(meta.is_object());
    EXPECT_EQ(meta["exit"]["code"], 7);
    std::string report = ReadFile(session + "/report.txt");
    EXPECT_NE(report.find("recorded  1 process,"), std::string::npos) << report;
  }
}

// Under a launcher (torchrun's RANK, srun's SLURM_PROCID, Open MPI's OMPI_COMM_WORLD_RANK) the
// refusal says how to name one directory per copy; done so, every copy records.
TEST(OneSessionPerRun, UnderALauncherTheRefusalSaysHowToNameOneDirectoryPerCopy) {
  for (const char* variable : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    SCOPED_TRACE(variable);
    TempDir dir;
    auto copies = [&](const std::string& output) {
      std::vector<ProcessSpec> specs;
      for (int rank = 0; rank < 4; ++rank) {
        ProcessSpec spec = GprofSpec({"-q", "--no-kernel", "-o", output, "--",
                                      AppPath("exit_app"), "env", variable});
        spec.set_env = {std::string(variable) + "=" + std::to_string(rank)};
        spec.unset_env = {"RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                          "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"};
        std::erase(spec.unset_env, variable);
        specs.push_back(spec);
      }
      return RunAtOnce(specs);
    };
    std::string hint;
    for (const ProcessResult& result : copies(dir.Sub("prof"))) {
      if (result.exit_code() == 0) continue;
      EXPECT_EQ(result.exit_code(), 125) << result.err;
      EXPECT_EQ(Lines(result.err), 1u) << result.err;
      std::smatch found;
      ASSERT_TRUE(std::regex_search(result.err, found, std::regex(" -o (\\S+%q\\{(\\w+)\\})")))
          << result.err;
      EXPECT_EQ(found[2].str(), variable);
      hint = found[1].str();
    }
    ASSERT_FALSE(hint.empty()) << "no copy was refused";
    // The way the line says: each copy its own session.
    std::vector<ProcessResult> results = copies(hint);
    for (const ProcessResult& result : results) EXPECT_EQ(result.exit_code(), 0) << result.err;
    for (int rank = 0; rank < 4; ++rank) {
      std::string session = dir.Sub("prof-r" + std::to_string(rank));
      EXPECT_TRUE(fs::exists(session + "/report.txt")) << session;
    }
  }
}

// Without -o, copies started together in one directory each get a directory of their own, named
// with gprof-run's pid: gprof-<cmd>-<date>-<time>-<pid>.
TEST(OneSessionPerRun, DefaultDirectoriesOfCopiesStartedTogetherAreEachTheirOwn) {
  TempDir dir;
  std::vector<ProcessSpec> specs;
  for (int i = 0; i < 8; ++i) {
    // The shell's parent is gprof-run.
    ProcessSpec spec = GprofSpec({"-q", "--no-kernel", "--", "/bin/sh", "-c", "echo $PPID $$"});
    spec.cwd = dir.path();
    specs.push_back(spec);
  }
  std::set<std::string> directories;
  for (const ProcessResult& result : RunAtOnce(specs)) {
    ASSERT_EQ(result.exit_code(), 0) << result.err;
    std::smatch pids;
    ASSERT_TRUE(std::regex_match(result.out, pids, std::regex("(\\d+) (\\d+)\n"))) << result.out;
    std::vector<std::string> named;
    for (const std::string& name : Names(dir.path(), "gprof-sh-")) {
      if (std::regex_match(name, std::regex("gprof-sh-\\d{8}-\\d{6}-" + pids[1].str())))
        named.push_back(name);
    }
    ASSERT_EQ(named.size(), 1u) << "no directory named with gprof-run's pid " << pids[1];
    json meta = ReadJson(dir.Sub(named[0]) + "/session.json");
    ASSERT_TRUE(meta.is_object());
    EXPECT_EQ(std::to_string(meta["root_pid"].get<int>()), pids[2].str());
    directories.insert(named[0]);
  }
  EXPECT_EQ(directories.size(), 8u);
  EXPECT_EQ(Names(dir.path(), "gprof-").size(), 8u);
}

// -o's placeholders: %h the host, %p gprof-run's pid, %q{VAR} a variable, %% a percent sign; an
// unknown one or an unset variable is one line and 125, and nothing runs or is made.
TEST(OneSessionPerRun, OutputPlaceholdersAreExpandedOrRefused) {
  TempDir dir;
  ProcessSpec spec = GprofSpec({"-q", "--no-kernel", "-o", dir.Sub("%h-%p-%q{GPROF_TEST_NAME}-%%"),
                                "--", "/bin/sh", "-c", "echo $PPID"});
  spec.set_env = {"GPROF_TEST_NAME=alpha"};
  ProcessResult run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string pid = run.out.substr(0, run.out.find('\n'));
  std::string expected = dir.Sub(std::string(host) + "-" + pid + "-alpha-%");
  EXPECT_TRUE(fs::exists(expected + "/report.txt")) << expected;

  for (const auto& [output, named] : std::vector<std::pair<std::string, std::string>>{
           {"x-%y", "%y"}, {"x-%q{GPROF_TEST_UNSET_VARIABLE}", "GPROF_TEST_UNSET_VARIABLE"},
           {"x-%", "%"}}) {
    SCOPED_TRACE(output);
    ProcessSpec bad = GprofSpec({"-q", "--no-kernel", "-o", dir.Sub(output), "--",
                                 AppPath("exit_app"), "print"});
    bad.unset_env = {"GPROF_TEST_UNSET_VARIABLE"};
    ProcessResult refused = RunProcess(bad);
    EXPECT_EQ(refused.exit_code(), 125);
    EXPECT_EQ(refused.out, "");
    EXPECT_EQ(Lines(refused.err), 1u) << refused.err;
    EXPECT_NE(refused.err.find(named), std::string::npos) << refused.err;
  }
  EXPECT_EQ(Names(dir.path(), "x-").size(), 0u);
}

// --- messages (case 8) ---

// A launcher's 1.2 MB command line: the report shows its start and says how long it is; a line of
// gprof-run's own that quotes a 100 KB argument is cut too.
TEST(Messages, AMegabyteCommandLineIsShownShortWithItsLength) {
  TempDir dir;
  std::vector<std::string> args = {"-q", "--no-kernel", "-o", dir.Sub("s"), "--", "/bin/true"};
  for (int i = 0; i < 12000; ++i) args.push_back(std::string(99, 'x'));
  ProcessResult run = Gprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err.substr(0, 2000);
  std::string report = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_LT(Lines(report), 60u) << report.substr(0, 4000);
  EXPECT_NE(report.find("... (1,200,009 bytes, 12,001 arguments)"), std::string::npos)
      << report.substr(0, 4000);
  std::string html = ReadFile(dir.Sub("s/report.html"));
  EXPECT_NE(html.find("(1,200,009 bytes, 12,001 arguments)"), std::string::npos);
  EXPECT_LT(html.size(), 400000u);

  ProcessResult missing = Gprof({"-q", "--no-kernel", "-o", dir.Sub("t"), "--",
                                 dir.Sub(std::string(100000, 'y'))});
  EXPECT_EQ(missing.exit_code(), 126) << "a name too long to execute";
  EXPECT_EQ(Lines(missing.err), 1u);
  EXPECT_LT(missing.err.size(), 5000u);
  EXPECT_NE(missing.err.find(" bytes)"), std::string::npos) << missing.err.substr(0, 300);
}

// Invisible format characters (bidirectional overrides and isolates, zero-width characters, the
// byte-order mark, tags) and control characters are shown as escapes everywhere a name is shown.
TEST(Messages, FormatCharactersAreShownEscaped) {
  using collector::PrintableName;
  EXPECT_EQ(PrintableName("evil\u202egnp.exe"), "evil\\u202egnp.exe");
  EXPECT_EQ(PrintableName("\u2066x\u2069 \u200b\u200f\ufeff"),
            "\\u2066x\\u2069 \\u200b\\u200f\\ufeff");
  EXPECT_EQ(PrintableName("tag\U000E0041\u2028"), "tag\\U000e0041\\u2028");
  EXPECT_EQ(PrintableName("a\x1b[31m\x7f"), "a\\x1b[31m\\x7f");
  EXPECT_EQ(PrintableName("caf\u00e9 \u65e5\u672c \u0645"), "caf\u00e9 \u65e5\u672c \u0645");

  TempDir dir;
  const std::string argument = "evil\u202egnp.exe\u2066\x1b";
  const std::string shown = "evil\\u202egnp.exe\\u2066\\x1b";
  ProcessResult run = Gprof({"--no-kernel", "-o", dir.Sub("s"), "--", "/bin/echo", argument});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, argument + "\n") << "the command gets its argument as it is";
  for (const char* file : {"report.txt", "report.json", "report.html", "session.json"}) {
    std::string text = ReadFile(dir.Sub("s/") + file);
    EXPECT_EQ(text.find("\u202e"), std::string::npos) << file;
    EXPECT_EQ(text.find("\u2066"), std::string::npos) << file;
    EXPECT_NE(text.find(file == std::string("report.txt") || file == std::string("report.html")
                            ? shown
                            : "evil\\\\u202egnp.exe\\\\u2066\\\\x1b"),
              std::string::npos)
        << file;
  }
  EXPECT_EQ(run.err.find("\u202e"), std::string::npos) << "the printed report";
  EXPECT_NE(run.err.find(shown), std::string::npos);

  ProcessResult missing =
      Gprof({"-q", "--no-kernel", "-o", dir.Sub("t"), "--", dir.Sub("no\u202eexe")});
  EXPECT_EQ(missing.exit_code(), 127);
  EXPECT_EQ(missing.err.find("\u202e"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("no\\u202eexe"), std::string::npos) << missing.err;
}

// --cupti-lib takes only a CUPTI library of this machine's class, checked without loading it.
TEST(Messages, CuptiLibThatIsNotCuptiIsRefused) {
  TempDir dir;
  { std::ofstream(dir.Sub("text.so")) << "not an ELF file\n"; }
  for (const auto& [file, said] : std::vector<std::pair<std::string, std::string>>{
           {dir.Sub("text.so"), "is not an ELF shared object"},
           {BuildDir() + "/tests/fake_cuda/libcudart.so.13", "has no cuptiSubscribe"},
           {AppPath("exit_app"), "not a CUPTI library"},
           {"/bin/sh", "not a CUPTI library"}}) {
    SCOPED_TRACE(file);
    ProcessResult run = Gprof({"-q", "--no-kernel", "--cupti-lib", file, "-o", dir.Sub("s"), "--",
                               AppPath("exit_app"), "print"});
    EXPECT_EQ(run.exit_code(), 125);
    EXPECT_EQ(run.out, "");
    EXPECT_EQ(Lines(run.err), 1u) << run.err;
    EXPECT_NE(run.err.find(said), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(dir.Sub("s")));
  }
  ProcessResult run = Gprof({"-q", "--no-kernel", "--cupti-lib",
                             BuildDir() + "/tests/fake_cuda/libcupti.so.13", "-o", dir.Sub("s"),
                             "--", AppPath("exit_app"), "exit", "4"});
  EXPECT_EQ(run.exit_code(), 4) << run.err;
}

// After "--" everything is the command's: a program named report runs.
TEST(Messages, ACommandNamedReportRunsAfterTheSeparator) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.Sub("bin").c_str(), 0755), 0);
  { std::ofstream(dir.Sub("bin/report")) << "#!/bin/sh\necho \"report ran: $*\"\n"; }
  ASSERT_EQ(chmod(dir.Sub("bin/report").c_str(), 0755), 0);
  ProcessSpec spec = GprofSpec({"-q", "--no-kernel", "-o", dir.Sub("s"), "--", "report", "x"});
  spec.set_env = {"PATH=" + dir.Sub("bin") + ":/usr/bin:/bin"};
  ProcessResult run = RunProcess(spec);
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "report ran: x\n");
  // And "--" among the command's own arguments stays theirs.
  ProcessResult echo = Gprof({"-q", "--no-kernel", "-o", dir.Sub("t"), "/bin/echo", "a", "--", "b"});
  EXPECT_EQ(echo.exit_code(), 0) << echo.err;
  EXPECT_EQ(echo.out, "a -- b\n");
}

// A session.json that is missing or cannot be read: the report names the file and the error, and
// does not tell root to run as root (nor call the kernel unrecorded when kernel.gpr is there).
TEST(Messages, AnUnreadableSessionJsonIsNamedNotBlamedOnPrivileges) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root: the report runs as the session's owner");
  bool kernel = BpfUnavailableReason().empty();
  TempDir dir;
  std::vector<std::string> args = {"-q", "-o", dir.Sub("s"), "--", AppPath("exit_app"), "print"};
  if (!kernel) args.insert(args.begin(), "--no-kernel");
  ProcessResult run = Gprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  const std::string meta = dir.Sub("s/session.json");
  ASSERT_EQ(rename(meta.c_str(), dir.Sub("session.json.kept").c_str()), 0);
  ProcessResult missing = Gprof({"report", dir.Sub("s")});
  EXPECT_EQ(missing.exit_code(), 0) << missing.err;
  EXPECT_EQ(missing.out.find("run as root"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find(meta + " at offset 0: missing"), std::string::npos) << missing.out;
  if (kernel) {
    EXPECT_EQ(missing.out.find("kernel    NOT recorded"), std::string::npos) << missing.out;
  }

  // Unreadable by the session's owner, as whom root reports on it.
  ASSERT_EQ(rename(dir.Sub("session.json.kept").c_str(), meta.c_str()), 0);
  ASSERT_EQ(chmod(meta.c_str(), 0), 0);
  for (const auto& entry : fs::directory_iterator(dir.Sub("s")))
    ASSERT_EQ(chown(entry.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(chown(dir.Sub("s").c_str(), 65534, 65534), 0);
  ProcessResult unreadable = Gprof({"report", dir.Sub("s")});
  EXPECT_EQ(unreadable.exit_code(), 0) << unreadable.err;
  EXPECT_EQ(unreadable.out.find("run as root"), std::string::npos) << unreadable.out;
  EXPECT_NE(unreadable.out.find(meta + " at offset 0: unreadable or not a regular file (cannot "
                                       "open: Permission denied)"),
            std::string::npos)
      << unreadable.out;
  if (kernel) {
    EXPECT_EQ(unreadable.out.find("kernel    NOT recorded"), std::string::npos) << unreadable.out;
  }
}

// The README's two commands, as written, for root on a machine without sudo.
TEST(Messages, TheReadmeCommandsRunAsRootWithoutSudo) {
  std::string readme = ReadFile(SourceDir() + "/README.md");
  size_t section = readme.find("## The two commands");
  ASSERT_NE(section, std::string::npos);
  std::istringstream lines(readme.substr(section, readme.find("\n## ", section + 1) - section));
  int commands = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("    ")) continue;  // the indented command lines
    std::string command = line.substr(4, line.find(' ', 4) - 4);
    SCOPED_TRACE(line);
    ++commands;
    EXPECT_NE(command, "sudo") << "no sudo on a fresh Debian 12 where you are root";
    EXPECT_EQ(access((SourceDir() + "/" + command).c_str(), X_OK), 0) << command;
    EXPECT_EQ(ReadFile(SourceDir() + "/" + command).find("sudo "), std::string::npos) << command;
  }
  EXPECT_EQ(commands, 2);
}

// A 32-bit program of the tree is not offered the 64-bit injected library: its loader prints
// nothing ("wrong ELF class") into its stderr, and it runs as it does without gprof-run.
TEST(Messages, AThirtyTwoBitProgramGetsNoLoaderLine) {
  if (access("/lib/ld-linux.so.2", X_OK) != 0)
    GPROF_SKIP_OR_FAIL("no i386 loader /lib/ld-linux.so.2 (libc6-i386, scripts/setup.sh)");
  ASSERT_EQ(access(AppPath("hello_i386").c_str(), X_OK), 0) << "built with binutils";
  ProcessResult plain = RunProcess(Command({AppPath("hello_i386")}));
  ASSERT_EQ(plain.exit_code(), 5);
  ASSERT_EQ(plain.err, "hello from i386\n");
  TempDir dir;
  // Directly, and started by a 64-bit program of the tree (a shell), which is recorded.
  for (std::vector<std::string> command :
       {std::vector<std::string>{AppPath("hello_i386")},
        std::vector<std::string>{"/bin/sh", "-c", AppPath("hello_i386") + "; exit $?"}}) {
    SCOPED_TRACE(command.back());
    std::vector<std::string> args = {"-q", "--no-kernel", "-o", dir.Sub("s" + std::to_string(command.size())), "--"};
    args.insert(args.end(), command.begin(), command.end());
    ProcessResult run = Gprof(args);
    EXPECT_EQ(run.exit_code(), 5);
    EXPECT_EQ(run.err, plain.err);
    EXPECT_EQ(run.out, "");
  }
}

// --- a full disk under -q (case 5) ---

// The command leaves the disk with room for the small reports but not report.json or the trace:
// -q still says, on stderr, which outputs could not be written and why; the exit status is the
// command's; report.txt names what is missing.
TEST(FullDisk, UnderQuietTheOutputsNotWrittenAreSaid) {
  TempDir dir;
  SmallFileSystem small(dir.Sub("small"), std::to_string((kMinDiskMargin + (2u << 20)) >> 10) + "k");
  if (!small.mounted()) GPROF_SKIP_OR_FAIL("cannot mount a tmpfs: " + small.error());
  DiskRoom room = DiskRoomAt(dir.Sub("small").c_str());
  // What the outputs may use: 100 KiB above the floor they keep free.
  std::string left = std::to_string(room.Floor(RoomUse::kClosing) + (100u << 10));
  ProcessResult run = Gprof({"-q", "--no-kernel", "-o", dir.Sub("small/s"), "--",
                             AppPath("room_left_app"), dir.Sub("small/fill"), left, "1000", "3"});
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code(), 3) << run.err;
  EXPECT_TRUE(std::regex_match(run.out, std::regex("left=\\d+\n"))) << run.out;
  EXPECT_EQ(Lines(run.err), 1u) << run.err;
  EXPECT_TRUE(std::regex_search(run.err, std::regex("^gprof-run: could not write in " +
                                                    dir.Sub("small/s") + ": ")))
      << run.err;
  // The trace, the largest, never fits; report.txt, the smallest, always does. Each output that
  // is missing is named, with why, on stderr and in report.txt; none that is there.
  ASSERT_TRUE(fs::exists(dir.Sub("small/s/report.txt")));
  std::string report = ReadFile(dir.Sub("small/s/report.txt"));
  EXPECT_FALSE(fs::exists(dir.Sub("small/s/trace.perfetto-trace")));
  for (const char* output : {"report.json", "report.html", "trace.perfetto-trace"}) {
    SCOPED_TRACE(output);
    bool missing = !fs::exists(dir.Sub("small/s/") + output);
    EXPECT_EQ(std::regex_search(run.err, std::regex(std::string(output) +
                                                    " \\((its filesystem has [\\d.]+ MiB free|No "
                                                    "space left on device)")),
              missing)
        << run.err;
    EXPECT_EQ(report.find(std::string("  UNWRITTEN ") + output + ": ") != std::string::npos,
              missing)
        << report;
    if (fs::exists(dir.Sub("small/s/report.json"))) {
      json listed = ReadJson(dir.Sub("small/s/report.json"))["session"]["outputs_not_written"];
      bool named = std::any_of(listed.begin(), listed.end(),
                               [&](const json& entry) { return entry["file"] == output; });
      EXPECT_EQ(named, missing) << listed.dump();
    }
  }
}

}  // namespace
}  // namespace gprof::test
