// Issue 7's security promises, for real (root, real BPF): under sudo the command runs as the user
// who asked and every session file is theirs; no session file is world-writable and none is made
// outside the session; and nothing of a process outside the profiled tree is recorded.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "collector/collect.h"
#include "collector/session/chunk_reader.h"
#include "collector/session/session_reader.h"
#include "tests/test_support.h"

extern char** environ;

namespace gprof::test {
namespace {

namespace fs = std::filesystem;

// A short random tag, so that names and values the tests look for occur nowhere by chance.
std::string UniqueTag() {
  std::random_device random;
  char text[16];
  snprintf(text, sizeof(text), "%08x", random());
  return text;
}

// What identity_app printed.
struct Identity {
  uid_t uid = ~0u;
  gid_t gid = ~0u;
  std::vector<gid_t> groups;
  std::string umask;
  std::map<std::string, std::string> environment;
};

Identity ParseIdentity(const std::string& out) {
  Identity identity;
  size_t environ_start = out.find("environ\n");
  std::istringstream lines(out.substr(0, environ_start));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "uid") words >> identity.uid;
    if (key == "gid") words >> identity.gid;
    if (key == "umask") words >> identity.umask;
    for (gid_t group; key == "groups" && words >> group;) identity.groups.push_back(group);
  }
  if (environ_start == std::string::npos) return identity;
  std::istringstream entries(out.substr(environ_start + strlen("environ\n")));
  while (std::getline(entries, line, '\0')) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) identity.environment[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return identity;
}

// Every file and directory under `root`, `root` included.
std::vector<fs::path> Everything(const fs::path& root) {
  std::vector<fs::path> paths{root};
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(root, ec))
    paths.push_back(entry.path());
  return paths;
}

// Under /tmp, /var/tmp and /dev/shm (where a user without a home can write), what `uid` owns.
std::vector<std::string> OwnedInScratchPlaces(uid_t uid) {
  std::vector<std::string> owned;
  for (const char* place : {"/tmp", "/var/tmp", "/dev/shm"}) {
    std::error_code ec;
    fs::recursive_directory_iterator it(place, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      struct stat st {};
      if (lstat(it->path().c_str(), &st) == 0 && st.st_uid == uid) owned.push_back(it->path());
    }
  }
  return owned;
}

// The session's bytes as a reader sees them: the records of every chunk file, decompressed, and
// every other file whole.
std::string SessionBytes(const std::string& directory) {
  std::string bytes;
  for (const auto& entry : fs::directory_iterator(directory)) {
    std::string path = entry.path().string();
    if (!path.ends_with(collector::kRecordingFileSuffix)) {
      bytes += ReadFile(path);
      continue;
    }
    std::vector<collector::Diagnostic> diagnostics;
    auto summary = collector::ReadChunkFile(
        path,
        [&](const collector::RecordView& record) {
          bytes.append(reinterpret_cast<const char*>(record.bytes.data()), record.bytes.size());
        },
        &diagnostics);
    EXPECT_TRUE(summary.ok()) << path;
    EXPECT_TRUE(diagnostics.empty()) << path << ": " << diagnostics.front().message;
  }
  return bytes;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// --- under sudo ---

TEST(Security, UnderSudoTheCommandRunsAsTheInvokingUserWhoOwnsTheSession) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  GPROF_NEED_BPF();  // kernel.gpr is written by root: its owner matters most
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  fs::create_directory(dir.Sub("cwd"));
  fs::create_directory(dir.Sub("tmp"));
  chmod(dir.Sub("cwd").c_str(), 0777);
  chmod(dir.Sub("tmp").c_str(), 0777);
  std::string session = dir.Sub("s");

  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q", "-o", session, "--", AppPath("identity_app")};
  spec.set_env = user.SudoEnvironment("/usr/local/bin/gprof-run -- identity_app");
  spec.set_env.push_back("GPROF_TEST_VALUE=kept as it was");
  spec.set_env.push_back("TMPDIR=" + dir.Sub("tmp"));
  spec.unset_env = {"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
  spec.cwd = dir.Sub("cwd");
  // The widest umask: nothing gprof-run makes may be writable by others even so.
  mode_t saved_umask = umask(0);
  ProcessResult run = RunProcess(spec);
  umask(saved_umask);
  ASSERT_EQ(run.exit_code(), 0) << run.err;

  Identity identity = ParseIdentity(run.out);
  EXPECT_EQ(identity.uid, user.uid());
  EXPECT_EQ(identity.gid, user.gid());
  std::vector<gid_t> expected_groups{user.gid(), user.extra_gid()};
  std::sort(expected_groups.begin(), expected_groups.end());
  EXPECT_EQ(identity.groups, expected_groups) << "initgroups of SUDO_USER";
  EXPECT_EQ(identity.umask, "000") << "the command's umask is its own";

  // The environment is sudo's, untouched, plus what the injected library needs.
  std::map<std::string, std::string> given = EnvironmentFor(spec);
  const std::set<std::string> added = {"LD_PRELOAD",
                                       "CUDA_INJECTION64_PATH",
                                       "GPROF_SESSION_DIR",
                                       "GPROF_CUDA_MODE",
                                       "GPROF_STACK_THRESHOLD_NS",
                                       "GPROF_RUN_PID",
                                       "GPROF_SESSION_CONTROL",
                                       "GPROF_SESSION_DIR_ID",
                                       "NVTX_INJECTION64_PATH",
                                       "NCCL_PROFILER_PLUGIN"};
  for (const auto& [name, value] : given) {
    if (name.starts_with("GPROF_") && added.contains(name)) continue;
    auto found = identity.environment.find(name);
    if (found == identity.environment.end()) {
      ADD_FAILURE() << name << " is missing from the command's environment";
    } else {
      EXPECT_EQ(found->second, value) << name;
    }
  }
  for (const auto& [name, value] : identity.environment) {
    EXPECT_TRUE(given.contains(name) || added.contains(name)) << name << "=" << value << " added";
  }
  EXPECT_EQ(identity.environment["HOME"], "/root");
  EXPECT_EQ(identity.environment["SUDO_USER"], user.name());

  // Every file of the session is the user's, and none is writable by others.
  std::set<std::string> names;
  for (const fs::path& path : Everything(session)) {
    struct stat st {};
    ASSERT_EQ(lstat(path.c_str(), &st), 0) << path;
    names.insert(path.filename().string());
    EXPECT_EQ(st.st_uid, user.uid()) << path;
    EXPECT_EQ(st.st_gid, user.gid()) << path;
    EXPECT_EQ(st.st_mode & S_IWOTH, 0u) << path << " is world-writable";
    EXPECT_EQ(st.st_mode & S_IWGRP, 0u) << path << " is group-writable";
  }
  struct stat top {};
  ASSERT_EQ(stat(session.c_str(), &top), 0);
  EXPECT_EQ(top.st_mode & 07777, 0700u) << "only its owner may read a session";
  for (const char* expected :
       {"session.json", "kernel.gpr", "report.json", "report.txt", "trace.perfetto-trace"}) {
    EXPECT_TRUE(names.contains(expected)) << expected << " missing";
  }
  int inject_files = 0;
  for (const auto& name : names) inject_files += name.starts_with(collector::kInjectFilePrefix);
  EXPECT_EQ(inject_files, 2) << "the app and its forked child";

  // Nothing was made outside the session: not in the working directory, not in TMPDIR, and
  // nothing anywhere the user could write.
  EXPECT_TRUE(fs::is_empty(dir.Sub("cwd")));
  EXPECT_TRUE(fs::is_empty(dir.Sub("tmp")));
  std::vector<std::string> owned = OwnedInScratchPlaces(user.uid());
  owned.erase(std::remove_if(owned.begin(), owned.end(),
                             [&](const std::string& path) { return path.starts_with(session); }),
              owned.end());
  EXPECT_TRUE(owned.empty()) << owned.front();

  // The session reads back whole, as the user would read it.
  auto read = collector::ReadSession(session);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_TRUE(read->diagnostics.empty());
  EXPECT_GE(read->processes.size(), 2u);
}

TEST(Security, UnderSudoTheFilesAreTheUsersWhileRecording) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  // gprof-run killed while the command runs: what it had written is the user's already.
  ProcessSpec spec;
  spec.argv = {GprofRunPath(),      "-q",    "-o",  dir.Sub("s"), "--",
               AppPath("exit_app"), "sleep", "2500"};
  spec.set_env = user.SudoEnvironment("/usr/local/bin/gprof-run -- exit_app sleep 2500");
  spec.signal_after_ms = 1500;
  spec.signal = SIGKILL;
  ProcessResult run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 128 + SIGKILL) << run.err;
  std::set<std::string> names;
  for (const fs::path& path : Everything(dir.Sub("s"))) {
    struct stat st {};
    ASSERT_EQ(lstat(path.c_str(), &st), 0) << path;
    names.insert(path.filename().string());
    EXPECT_EQ(st.st_uid, user.uid()) << path;
    EXPECT_EQ(st.st_gid, user.gid()) << path;
  }
  EXPECT_TRUE(names.contains("kernel.gpr"));
  EXPECT_TRUE(names.contains("session.json"));
}

TEST(Security, RunAsRootKeepsRootUnderSudo) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q",         "--no-kernel", "--run-as-root",
               "-o",           dir.Sub("s"), "--",          AppPath("identity_app")};
  spec.set_env = user.SudoEnvironment("/usr/local/bin/gprof-run --run-as-root -- identity_app");
  ProcessResult run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Identity identity = ParseIdentity(run.out);
  EXPECT_EQ(identity.uid, 0u);
  EXPECT_EQ(identity.gid, getgid());
  struct stat st {};
  ASSERT_EQ(stat(dir.Sub("s/report.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

// --- root and the user's paths (issue 17) ---

// A tree for one test: the test's directory, root's (0755: only root changes what is in it),
// holding the user's home (theirs, 0755).
std::string MakeHome(const TempDir& dir, const ThrowawayUser& user) {
  chmod(dir.path().c_str(), 0755);
  std::string home = dir.Sub("home");
  mkdir(home.c_str(), 0755);
  chown(home.c_str(), user.uid(), user.gid());
  return home;
}

// A directory of root's with `mode`, holding one file, or none.
std::string MakeRootDirectory(const std::string& path, mode_t mode, bool with_file) {
  mkdir(path.c_str(), mode);
  chmod(path.c_str(), mode);
  if (with_file) {
    std::string file = path + "/precious";
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, "precious\n", 9);
      close(fd);
    }
  }
  return path;
}

// A symbolic link `path` -> `target` that the user made.
void UserSymlink(const ThrowawayUser& user, const std::string& target, const std::string& path) {
  unlink(path.c_str());
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0) << path;
  ASSERT_EQ(lchown(path.c_str(), user.uid(), user.gid()), 0) << path;
}

// What a file or directory looks like (owner, mode, inode; a file's bytes, a directory's names),
// to show that it was not touched.
std::string Describe(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return "missing";
  std::ostringstream text;
  text << "uid " << st.st_uid << " gid " << st.st_gid << " mode " << std::oct << st.st_mode
       << std::dec << " inode " << st.st_ino;
  if (S_ISREG(st.st_mode)) text << " bytes [" << ReadFile(path) << "]";
  if (S_ISDIR(st.st_mode)) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(path)) names.insert(entry.path().string());
    for (const auto& name : names) text << " " << name;
  }
  return text.str();
}

// Everything under `root`, `root` included, that root owns or is of root's group.
std::vector<std::string> RootOwnedUnder(const std::string& root) {
  std::vector<std::string> owned;
  for (const fs::path& path : Everything(root)) {
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && (st.st_uid == 0 || st.st_gid == 0))
      owned.push_back(path.string() + (S_ISDIR(st.st_mode) ? "/" : ""));
  }
  return owned;
}

std::string Lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

ProcessSpec SudoGprofRun(const ThrowawayUser& user, std::vector<std::string> arguments) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), arguments.begin(), arguments.end());
  spec.set_env = user.SudoEnvironment("/usr/local/bin/gprof-run ...");
  spec.unset_env = {"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
  spec.timeout_s = 60;
  return spec;
}

// The user, racing gprof-run: whenever `target` is a real directory, renames it away (to
// <target>.movedN) and puts a symbolic link to `link_to` in its place. Runs until killed.
pid_t StartRacer(const ThrowawayUser& user, const std::string& target, const std::string& link_to) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (setgroups(0, nullptr) != 0 || setgid(user.gid()) != 0 || setuid(user.uid()) != 0) _exit(1);
  char moved[4096];
  for (unsigned n = 0;; ++n) {
    struct stat st {};
    if (lstat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      snprintf(moved, sizeof(moved), "%s.moved%u", target.c_str(), n);
      if (rename(target.c_str(), moved) == 0) (void)!symlink(link_to.c_str(), target.c_str());
    } else {
      sched_yield();
    }
  }
}

void StopRacer(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(Security, UnderSudoALinkToARootDirectoryIsNotTakenAsTheSession) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  std::string empty = MakeRootDirectory(dir.Sub("root-empty"), 0755, false);
  UserSymlink(user, empty, home + "/link");
  std::string before = Describe(empty);
  ProcessResult run = RunProcess(
      SudoGprofRun(user, {"-q", "--no-kernel", "-o", home + "/link", "--", AppPath("exit_app")}));
  EXPECT_EQ(run.exit_code(), 125) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_TRUE(Contains(run.err, "symbolic link")) << run.err;
  EXPECT_EQ(Describe(empty), before) << "root's directory was given away or written";
}

TEST(Security, UnderSudoALinkIntoARootOnlyDirectoryMakesNothingThere) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  // One the user cannot enter, one the user can enter but not write.
  for (mode_t mode : {mode_t{0700}, mode_t{0755}}) {
    std::string root_dir = MakeRootDirectory(dir.Sub("root-" + std::to_string(mode)), mode, true);
    UserSymlink(user, root_dir, home + "/link");
    std::string before = Describe(root_dir);
    ProcessResult run = RunProcess(SudoGprofRun(
        user, {"-q", "--no-kernel", "-o", home + "/link/new", "--", AppPath("exit_app")}));
    EXPECT_EQ(run.exit_code(), 125) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_EQ(Describe(root_dir), before) << "made in root's " << std::oct << mode << " directory";
  }
}

// The user swaps the new session directory for a link to root's directory while gprof-run starts
// (kernel recording's start is the widest window), many times: no root directory becomes the
// user's or gets a session file, and every session file is the user's.
TEST(Security, UnderSudoTheNewSessionDirectoryCannotBeSwappedForALink) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  std::string root_dir = MakeRootDirectory(dir.Sub("root-dir"), 0755, false);
  const std::string before = Describe(root_dir);
  std::string target = home + "/s";
  pid_t racer = StartRacer(user, target, root_dir);
  int succeeded = 0;
  for (int i = 0; i < 16 && !HasFailure(); ++i) {
    unlink(target.c_str());  // the previous run's link
    std::vector<std::string> arguments = {"-q", "-o", target, "--", AppPath("exit_app")};
    if (i % 2 == 1) arguments.insert(arguments.begin(), "--no-kernel");  // a narrower window
    ProcessResult run = RunProcess(SudoGprofRun(user, arguments));
    // Refused when the link came before the directory was open; else recorded through it.
    EXPECT_TRUE(run.exit_code() == 0 || run.exit_code() == 125) << run.exit_code() << run.err;
    succeeded += run.exit_code() == 0;
    EXPECT_EQ(Describe(root_dir), before) << "run " << i << ": " << run.err;
  }
  StopRacer(racer);
  EXPECT_EQ(Describe(root_dir), before);
  EXPECT_EQ(Lines(RootOwnedUnder(home)), "") << "root's, in the user's home";
  // The racer did move sessions away while they were recorded: the reports are in them.
  int moved_with_reports = 0;
  for (const auto& entry : fs::directory_iterator(home)) {
    moved_with_reports += entry.path().filename().string().starts_with("s.moved") &&
                          fs::exists(entry.path() / "report.txt");
  }
  EXPECT_GT(moved_with_reports, 0) << succeeded << " runs recorded";
}

// The user, racing root's command once: as soon as `watch` is a directory, waits `delay_ms`, then
// renames `target` away (to <target>.moved) and puts a symbolic link to `link_to` in its place.
pid_t SwapOnce(const ThrowawayUser& user, const std::string& watch, const std::string& target,
               const std::string& link_to, int delay_ms) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (setgroups(0, nullptr) != 0 || setgid(user.gid()) != 0 || setuid(user.uid()) != 0) _exit(1);
  for (struct stat st {}; lstat(watch.c_str(), &st) != 0 || !S_ISDIR(st.st_mode);) usleep(200);
  usleep(delay_ms * 1000);
  if (rename(target.c_str(), (target + ".moved").c_str()) != 0) _exit(2);
  _exit(symlink(link_to.c_str(), target.c_str()) == 0 ? 0 : 3);
}

// Root's session in a directory another user can change (root's own gprof-run, or the command
// kept root's with --run-as-root): once gprof-run has made and opened the session directory, the
// user swaps it, or the directory it is in, for a link to a directory of their own, before the
// command's first CUDA call. Root's injected library then finds the path naming the user's
// directory: it must record nothing there, nor anywhere but in the session gprof-run made.
TEST(Security, AsRootASessionSwappedForALinkGetsNoFileOfRootsOutsideIt) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  struct Case {
    std::string what;
    std::string swapped;  // what the user swaps for a link to `own`: the session directory or the
                          // one it is in
    bool run_as_root;
  };
  const std::string own = home + "/own", work = home + "/work", session = work + "/s";
  const std::vector<Case> cases = {
      {"the session directory, under root's gprof-run", session, false},
      {"the directory it is in, under root's gprof-run", work, false},
      {"the session directory, under sudo --run-as-root", session, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // The user's directory that the links name (with a directory named like the session in it).
    fs::remove_all(own);
    mkdir(own.c_str(), 0755);
    mkdir((own + "/s").c_str(), 0755);
    ASSERT_EQ(chown(own.c_str(), user.uid(), user.gid()), 0);
    ASSERT_EQ(chown((own + "/s").c_str(), user.uid(), user.gid()), 0);
    fs::remove_all(work);
    fs::remove_all(work + ".moved");
    fs::remove_all(session + ".moved");
    mkdir(work.c_str(), 0755);
    ASSERT_EQ(chown(work.c_str(), user.uid(), user.gid()), 0);
    // The first CUDA call comes 400 ms after the start; the swap about 100 ms after the session
    // directory was made (and opened: gprof-run opens it at once).
    std::vector<std::string> arguments = {
        "-q", "--no-kernel", "-o", session, "--", "/bin/sh", "-c",
        "sleep 0.4; exec " + AppPath("exit_app") + " busy 100"};
    ProcessSpec spec = Command({});
    if (c.run_as_root) {
      arguments.insert(arguments.begin(), "--run-as-root");
      spec = SudoGprofRun(user, arguments);
    } else {
      arguments.insert(arguments.begin(), GprofRunPath());
      spec = Command(arguments);
      spec.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER", "LD_PRELOAD",
                        "CUDA_INJECTION64_PATH"};
    }
    pid_t racer = SwapOnce(user, session, c.swapped, own, 100);
    ProcessResult run = RunProcess(spec);
    int racer_status = 0;
    waitpid(racer, &racer_status, 0);
    ASSERT_TRUE(WIFEXITED(racer_status) && WEXITSTATUS(racer_status) == 0)
        << "the swap did not happen";
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_EQ(run.err, "") << "nothing on the program's stderr";
    EXPECT_EQ(Lines(RootOwnedUnder(own)), "") << "root's files in the user's directory";
    // The session is where the swap moved it, whole but for the command's record.
    std::string moved = c.swapped == session ? session + ".moved" : work + ".moved/s";
    EXPECT_TRUE(fs::exists(moved + "/report.txt")) << run.err;
    // And it says why the command's record is missing.
    EXPECT_TRUE(std::regex_search(
        ReadFile(moved + "/report.txt"),
        std::regex(R"(STOPPED   inject-\d+\.gpr at [^\n]*nothing recorded: the session directory )"
                   R"(was not at its path as gprof-run made it)")))
        << ReadFile(moved + "/report.txt");
    for (const std::string& root_owned : RootOwnedUnder(home)) {
      EXPECT_TRUE(root_owned.starts_with(moved + "/")) << root_owned << " is outside the session";
    }
  }
}

// A session that never ran is removed through its descriptor: a swap for a link to root's
// directory must not remove root's files.
TEST(Security, UnderSudoADiscardedSessionRemovesNothingOfRoots) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  std::string root_dir = MakeRootDirectory(dir.Sub("root-dir"), 0755, true);
  const std::string before = Describe(root_dir);
  std::string target = home + "/s";
  pid_t racer = StartRacer(user, target, root_dir);
  for (int i = 0; i < 4 && !HasFailure(); ++i) {
    unlink(target.c_str());
    ProcessResult run =
        RunProcess(SudoGprofRun(user, {"-q", "-o", target, "--", dir.Sub("no-such-command")}));
    EXPECT_TRUE(run.exit_code() == 127 || run.exit_code() == 125) << run.exit_code() << run.err;
    EXPECT_EQ(Describe(root_dir), before) << "run " << i << ": " << run.err;
  }
  StopRacer(racer);
  EXPECT_EQ(Lines(RootOwnedUnder(home)), "");
}

// Killed in its first moments (Ctrl-C before its handlers, the OOM killer), gprof-run under sudo
// leaves nothing of root's in the user's directory.
TEST(Security, UnderSudoKilledAtAnyMomentLeavesNothingOfRoots) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to play sudo");
  GPROF_NEED_BPF();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  int n = 0;
  for (int delay_ms : {0, 1, 3, 5, 10, 20, 30, 40, 60, 80, 100, 130, 160, 200, 250, 300}) {
    std::string session = home + "/s" + std::to_string(n++);
    ProcessSpec spec = SudoGprofRun(user, {"-q", "--max-size", "64M", "-o", session, "--",
                                           AppPath("exit_app"), "sleep", "300"});
    spec.signal_after_ms = delay_ms;
    spec.signal = SIGKILL;
    RunProcess(spec);
    EXPECT_EQ(Lines(RootOwnedUnder(home)), "") << "killed after " << delay_ms << " ms";
    if (HasFailure()) break;
  }
}

// A SUDO_UID that names no id is refused, not read as root's.
TEST(Security, UnderSudoAnIdThatIsNoIdIsRefused) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to play sudo");
  TempDir dir;
  for (const char* uid : {"abc", "1000x", "-1", "", " 1000", "4294967295"}) {
    ProcessSpec spec = Command({GprofRunPath(), "-q", "--no-kernel", "-o", dir.Sub("s"), "--",
                                AppPath("identity_app")});
    spec.set_env = {std::string("SUDO_UID=") + uid, "SUDO_GID=1000", "SUDO_USER=nobody"};
    ProcessResult run = RunProcess(spec);
    EXPECT_EQ(run.exit_code(), 125) << "SUDO_UID=" << uid << ": " << run.err;
    EXPECT_EQ(run.out, "") << "SUDO_UID=" << uid << ": the command ran";
    EXPECT_FALSE(fs::exists(dir.Sub("s")));
  }
}

// `-o` naming an empty directory that is not the user's, whom the command runs as.
TEST(Security, AnExistingSessionDirectoryMustBeTheUsersOwn) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make users");
  ThrowawayUser user, other;
  ASSERT_TRUE(user.ok() && other.ok()) << "cannot create throwaway users (useradd, groupadd)";
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  struct Case {
    std::string what;
    uid_t owner;
    mode_t mode;
    const ThrowawayUser* sudo_user;  // nullptr: root itself
  };
  const std::vector<Case> cases = {
      {"root, in another user's 0777 directory", other.uid(), 0777, nullptr},
      {"root, in another user's 0700 directory", other.uid(), 0700, nullptr},
      {"root, in its own directory that anyone may write", 0, 0777, nullptr},
      {"a sudo user, in another user's 0777 directory", other.uid(), 0777, &user},
      {"a sudo user, in root's 0777 directory", 0, 0777, &user},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::string target = dir.Sub("x" + std::to_string(n++));
    mkdir(target.c_str(), c.mode);
    chmod(target.c_str(), c.mode);
    chown(target.c_str(), c.owner, c.owner == 0 ? 0 : other.gid());
    ProcessSpec spec = c.sudo_user != nullptr
                           ? SudoGprofRun(*c.sudo_user, {"-q", "--no-kernel", "-o", target, "--",
                                                         AppPath("exit_app")})
                           : Command({GprofRunPath(), "-q", "--no-kernel", "-o", target, "--",
                                      AppPath("exit_app")});
    if (c.sudo_user == nullptr) spec.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER"};
    ProcessResult run = RunProcess(spec);
    EXPECT_EQ(run.exit_code(), 125) << c.what << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << c.what << ": " << run.err;
    EXPECT_TRUE(fs::is_empty(target)) << c.what;
  }
  // The user's own empty directory is taken, and keeps its mode.
  std::string own = dir.Sub("own");
  mkdir(own.c_str(), 0750);
  chown(own.c_str(), user.uid(), user.gid());
  ProcessResult run =
      RunProcess(SudoGprofRun(user, {"-q", "--no-kernel", "-o", own, "--", AppPath("exit_app")}));
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_TRUE(fs::exists(own + "/report.txt"));
  EXPECT_EQ(Lines(RootOwnedUnder(own)), "");
}

// Root running `report` on a session directory the user controls: the user's links and hard
// links for the reports do not make root write root's files, and a link to root's own session is
// not read.
TEST(Security, ReportAsRootOnAUsersSessionRunsAsItsOwner) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  std::string home = MakeHome(dir, user);
  std::string marker = "rootsecret-" + UniqueTag();
  // Root's own session, which only root may read.
  std::string root_session = dir.Sub("root-session");
  ProcessSpec root_run = Command({GprofRunPath(), "-q", "--no-kernel", "-o", root_session, "--",
                                  AppPath("exit_app"), "env", marker});
  root_run.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER", "LD_PRELOAD"};
  ASSERT_EQ(RunProcess(root_run).exit_code(), 0);
  std::string root_inject;
  for (const auto& entry : fs::directory_iterator(root_session)) {
    if (entry.path().filename().string().starts_with(collector::kInjectFilePrefix))
      root_inject = entry.path().string();
  }
  ASSERT_FALSE(root_inject.empty());
  ASSERT_TRUE(Contains(SessionBytes(root_session), marker));
  // The user's session, and root's files the user would like root to overwrite.
  std::string session = home + "/s";
  ASSERT_EQ(RunProcess(
                SudoGprofRun(user, {"-q", "--no-kernel", "-o", session, "--", AppPath("exit_app")}))
                .exit_code(),
            0);
  std::string precious = MakeRootDirectory(dir.Sub("root-files"), 0755, true) + "/precious";
  std::string linked = dir.Sub("root-files/linked");
  fs::copy_file(precious, linked);
  const std::string precious_before = Describe(precious), linked_before = Describe(linked);
  UserSymlink(user, precious, session + "/" + collector::kTextReportFile);
  UserSymlink(user, precious, session + "/" + collector::kJsonReportFile);
  UserSymlink(user, root_inject, session + "/inject-99999.gpr");
  UserSymlink(user, root_session + "/session.json", session + "/inject-99998.gpr");
  // Hard links to a file of root's, as fs.protected_hardlinks=0 lets a user make them (root makes
  // them here): one to be written, one to be read.
  for (const char* name : {"trace.perfetto-trace", "inject-99997.gpr"}) {
    std::string hard = session + "/" + name;
    unlink(hard.c_str());
    ASSERT_EQ(link(linked.c_str(), hard.c_str()), 0) << hard;
  }

  for (bool sudo_env : {false, true}) {
    ProcessSpec report = Command({GprofRunPath(), "report", session});
    if (sudo_env) {
      report.set_env = user.SudoEnvironment("gprof-run report");
    } else {
      report.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER"};
    }
    ProcessResult run = RunProcess(report);
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_EQ(Describe(precious), precious_before) << "written through the user's link";
    EXPECT_EQ(Describe(linked), linked_before) << "written through the user's hard link";
    EXPECT_FALSE(Contains(run.out + run.err, marker)) << "root's session was read";
    for (const char* name :
         {collector::kTextReportFile, collector::kJsonReportFile, "trace.perfetto-trace"}) {
      std::string path = session + "/" + name;
      struct stat st {};
      ASSERT_EQ(lstat(path.c_str(), &st), 0) << path;
      EXPECT_TRUE(S_ISREG(st.st_mode)) << path;
      EXPECT_EQ(st.st_uid, user.uid()) << path << ": the report runs as the directory's owner";
      EXPECT_FALSE(Contains(ReadFile(path), marker)) << path;
    }
    // The user's links are left as they were.
    EXPECT_TRUE(fs::is_symlink(session + "/inject-99999.gpr"));
  }
}

// Root's `report` refuses a directory of root's that others may change, and one whose owner is
// no user it could become.
TEST(Security, ReportAsRootRefusesADirectoryItCannotTrust) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  TempDir dir;
  std::string session = dir.Sub("s");
  ProcessSpec run =
      Command({GprofRunPath(), "-q", "--no-kernel", "-o", session, "--", AppPath("exit_app")});
  run.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER", "LD_PRELOAD"};
  ASSERT_EQ(RunProcess(run).exit_code(), 0);
  for (const auto& [mode, owner] :
       {std::pair<mode_t, uid_t>{0777, 0}, {01777, 0}, {0770, 0}, {0700, 3999999}}) {
    chmod(session.c_str(), mode);
    chown(session.c_str(), owner, owner == 0 ? 0 : owner);
    fs::remove(session + "/" + collector::kTextReportFile);
    ProcessResult report = RunProcess(Command({GprofRunPath(), "report", session}));
    EXPECT_EQ(report.exit_code(), 125) << std::oct << mode << std::dec << " " << owner;
    EXPECT_EQ(std::count(report.err.begin(), report.err.end(), '\n'), 1) << report.err;
    EXPECT_FALSE(fs::exists(session + "/" + collector::kTextReportFile));
  }
}

// --- without root ---

TEST(Security, FileCapabilitiesAreEnoughForKernelRecording) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root, to make a user and to set capabilities");
  GPROF_NEED_BPF();
  if (access("/usr/sbin/setcap", X_OK) != 0 && access("/sbin/setcap", X_OK) != 0)
    GPROF_SKIP_OR_FAIL("setcap is not installed (libcap2-bin)");
  ThrowawayUser user;
  ASSERT_TRUE(user.ok()) << "cannot create a throwaway user (useradd, groupadd)";
  TempDir dir;
  struct statvfs filesystem {};
  if (statvfs(dir.path().c_str(), &filesystem) == 0 && (filesystem.f_flag & ST_NOSUID))
    GPROF_SKIP_OR_FAIL(dir.path() + " is on a nosuid file system: file capabilities do nothing");
  // A copy of the install, so that the build's own gprof-run keeps no capabilities.
  fs::create_directories(dir.Sub("bin"));
  fs::create_directories(dir.Sub("lib/gprof-run"));
  fs::copy_file(GprofRunPath(), dir.Sub("bin/gprof-run"));
  fs::copy_file(InjectLibraryPath(), dir.Sub("lib/gprof-run/libgprof_inject.so"));
  for (const char* path :
       {"bin", "lib", "lib/gprof-run", "bin/gprof-run", "lib/gprof-run/libgprof_inject.so"}) {
    chmod(dir.Sub(path).c_str(), 0755);
  }
  ASSERT_EQ(Shell("setcap cap_bpf,cap_perfmon,cap_syslog+ep " + dir.Sub("bin/gprof-run")), 0);

  ProcessSpec spec;
  spec.argv = {"/usr/bin/setpriv",
               "--reuid=" + std::to_string(user.uid()),
               "--regid=" + std::to_string(user.gid()),
               "--init-groups",
               dir.Sub("bin/gprof-run"),
               "-q",
               "-o",
               dir.Sub("s"),
               "--",
               AppPath("exit_app"),
               "env",
               "LD_LIBRARY_PATH",
               "env",
               "TMPDIR"};
  // glibc drops these from a program with capabilities; the command still gets them.
  spec.set_env = {"LD_LIBRARY_PATH=/gprof-test/libraries", "TMPDIR=/gprof-test/tmp"};
  spec.unset_env = {"SUDO_UID", "SUDO_GID", "SUDO_USER"};
  ProcessResult run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "/gprof-test/libraries\n/gprof-test/tmp\n");
  EXPECT_EQ(run.err, "") << "no 'kernel recording off'";
  auto read = collector::ReadSession(dir.Sub("s"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_TRUE(read->meta.kernel_recording);
  EXPECT_FALSE(read->off_cpu.empty());
  EXPECT_FALSE(read->kernel_symbols.empty()) << "CAP_SYSLOG names kernel functions";
  for (const fs::path& path : Everything(dir.Sub("s"))) {
    struct stat st {};
    ASSERT_EQ(lstat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_uid, user.uid()) << path;
  }
}

// --- only the tree ---

struct Bystander {
  std::string comm, note, secret;  // its name, a word of its command line, an env value
  std::set<uint32_t> ids;          // its pid, its threads and its children, as it printed them
  ProcessResult result;
};

Bystander MakeBystander(char letter) {
  std::string tag = UniqueTag();
  return {std::string("byst") + letter + tag,
          std::string("note") + letter + "-" + tag,
          std::string("secret") + letter + "-" + tag,
          {},
          {}};
}

void RunBystander(Bystander* bystander, int ms, const std::string& fifo) {
  ProcessSpec spec = Command(
      {AppPath("bystander_app"), bystander->comm, std::to_string(ms), fifo, bystander->note});
  spec.set_env = {"GPROF_BYSTANDER_SECRET=" + bystander->secret};
  spec.timeout_s = 60;
  bystander->result = RunProcess(spec);
  std::istringstream lines(bystander->result.out);
  std::string kind;
  for (uint32_t id; lines >> kind >> id;) bystander->ids.insert(id);
}

TEST(Security, NothingOfProcessesOutsideTheTreeIsRecorded) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string fifo = dir.Sub("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string session = dir.Sub("s");
  std::string tag = UniqueTag();
  std::string target_note = "targetnote-" + tag, target_secret = "targetsecret-" + tag;

  // `idle` runs beside the command and has nothing to do with it; `waker` writes to the FIFO the
  // command reads, so it wakes the command's thread: it is named as the waker (pid, tid, name),
  // and nothing else of it is recorded.
  Bystander idle = MakeBystander('I'), waker = MakeBystander('W');
  std::thread idle_thread(RunBystander, &idle, 5000, "-");
  std::thread waker_thread(RunBystander, &waker, 2500, fifo);
  ProcessSpec spec;
  // exit_app's `env NAME` prints nothing for an unset name: the note only marks its command line.
  // --threshold 0: every CUDA call's stack is copied, from the main thread, whose environment lies
  // just above its first frame (CI found the secret in a copy taken past it).
  spec.argv = {GprofRunPath(),
               "-q",
               "--threshold",
               "0",
               "-o",
               session,
               "--",
               "/bin/sh",
               "-c",
               "exec \"$0\" env \"$2\" echo < \"$1\"",
               AppPath("exit_app"),
               fifo,
               target_note};
  spec.set_env = {"GPROF_TARGET_SECRET=" + target_secret};
  spec.timeout_s = 60;
  ProcessResult run = RunProcess(spec);
  idle_thread.join();
  waker_thread.join();
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  ASSERT_EQ(idle.result.exit_code(), 0) << idle.result.err;
  ASSERT_EQ(waker.result.exit_code(), 0) << waker.result.err;
  ASSERT_GT(idle.ids.size(), 10u) << idle.result.out;
  ASSERT_GT(waker.ids.size(), 10u) << waker.result.out;
  EXPECT_EQ(run.out, std::string(waker.ids.size() - 4, 'x')) << "one byte per child it forked";

  auto read = collector::ReadSession(session);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const collector::Session& s = *read;
  auto outside = [&](uint32_t id) { return idle.ids.contains(id) || waker.ids.contains(id); };
  for (const auto& [pid, process] : s.processes) EXPECT_FALSE(outside(pid)) << "process " << pid;
  for (const auto& [tid, thread] : s.threads) EXPECT_FALSE(outside(tid)) << "thread " << tid;
  for (const auto& start : s.task_starts) {
    EXPECT_FALSE(outside(start.pid) || outside(start.tid) || outside(start.parent_tid));
  }
  for (const auto& futex : s.futex_calls) EXPECT_FALSE(outside(futex.tid));
  for (const auto& wait : s.lock_waits) {
    EXPECT_FALSE(outside(wait.tid));
    EXPECT_FALSE(idle.ids.contains(wait.owner_tid));
  }
  int woken_by_waker = 0;
  for (const auto& interval : s.off_cpu) {
    EXPECT_FALSE(outside(interval.tid));
    EXPECT_FALSE(idle.ids.contains(interval.waker_tid)) << "the idle bystander woke nothing";
    if (!waker.ids.contains(interval.waker_tid)) continue;
    ++woken_by_waker;
    EXPECT_EQ(s.WakerComm(interval), waker.comm);
    EXPECT_LT(interval.waker_user_stack_id, 0) << "a user stack of a process outside the tree";
  }
  EXPECT_GT(woken_by_waker, 0) << "the command never saw the waker wake it";

  // In no file, decompressed, is the idle bystander's name, and in none a command line or an
  // environment value of a process outside the tree. Of the command's own, its command line is
  // recorded (session.json, and each process's by the injected library); its environment is not.
  std::string bytes = SessionBytes(session);
  ASSERT_GT(bytes.size(), 10000u);
  EXPECT_FALSE(Contains(bytes, idle.comm));
  for (const Bystander* bystander : {&idle, &waker}) {
    EXPECT_FALSE(Contains(bytes, bystander->note)) << "command line of " << bystander->comm;
    EXPECT_FALSE(Contains(bytes, bystander->secret)) << "environment of " << bystander->comm;
  }
  EXPECT_TRUE(Contains(bytes, waker.comm)) << "named as the waker";
  EXPECT_TRUE(Contains(bytes, target_note)) << "the command's own command line";
  EXPECT_FALSE(Contains(bytes, target_secret)) << "the command's environment";
  bool cmdline_in_inject = false;
  for (const auto& [pid, process] : s.processes) {
    for (const auto& arg : process.cmdline) cmdline_in_inject |= arg == target_note;
  }
  EXPECT_TRUE(cmdline_in_inject) << "the injected library records each process's command line";
}

}  // namespace
}  // namespace gprof::test
