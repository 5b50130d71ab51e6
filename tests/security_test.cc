// Issue 7's security promises, for real (root, real BPF): under sudo the command runs as the user
// who asked and every session file is theirs; no session file is world-writable and none is made
// outside the session; and nothing of a process outside the profiled tree is recorded.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "chunk_reader.h"
#include "session_reader.h"
#include "test_support.h"

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

int Shell(const std::string& command) {
  ProcessResult result = RunProcess(Command({"/bin/sh", "-c", command}));
  return result.exit_code();
}

// A user and two groups made for one test (the user's own group and a supplementary one), removed
// with it.
class ThrowawayUser {
 public:
  ThrowawayUser() {
    std::string tag = UniqueTag();
    name_ = "gprofsec" + tag;
    group_ = "gprofsecg" + tag;
    extra_group_ = "gprofsecx" + tag;
    if (Shell("groupadd " + group_ + " && groupadd " + extra_group_ + " && useradd -M -N -g " +
              group_ + " -G " + extra_group_ + " -s /usr/sbin/nologin -d /nonexistent " + name_) !=
        0) {
      return;
    }
    passwd* user = getpwnam(name_.c_str());
    group* extra = getgrnam(extra_group_.c_str());
    if (user == nullptr || extra == nullptr) return;
    uid_ = user->pw_uid;
    gid_ = user->pw_gid;
    extra_gid_ = extra->gr_gid;
  }
  ~ThrowawayUser() {
    Shell("userdel " + name_ + " 2>/dev/null; groupdel " + extra_group_ +
          " 2>/dev/null; groupdel " + group_ + " 2>/dev/null");
  }
  bool ok() const { return uid_ > 0; }
  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  gid_t extra_gid() const { return extra_gid_; }

  // What sudo leaves in the environment of the command it runs as root for this user (Debian's
  // defaults: env_reset, with HOME, USER and LOGNAME those of root).
  std::vector<std::string> SudoEnvironment(const std::string& command) const {
    return {"SUDO_UID=" + std::to_string(uid_),
            "SUDO_GID=" + std::to_string(gid_),
            "SUDO_USER=" + name_,
            "SUDO_COMMAND=" + command,
            "HOME=/root",
            "USER=root",
            "LOGNAME=root"};
  }

 private:
  std::string name_, group_, extra_group_;
  uid_t uid_ = 0;
  gid_t gid_ = 0, extra_gid_ = 0;
};

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
  const std::set<std::string> added = {
      "LD_PRELOAD",      "CUDA_INJECTION64_PATH",    "GPROF_SESSION_DIR",
      "GPROF_CUDA_MODE", "GPROF_STACK_THRESHOLD_NS", "GPROF_RUN_PID"};
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
  spec.argv = {GprofRunPath(),
               "-q",
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
