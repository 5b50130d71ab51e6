#include "tests/test_support.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

extern char** environ;

namespace gprof::test {

std::map<std::string, std::string> EnvironmentFor(const ProcessSpec& spec) {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string variable(*entry);
    size_t eq = variable.find('=');
    if (eq != std::string::npos) variables[variable.substr(0, eq)] = variable.substr(eq + 1);
  }
  for (const auto& name : spec.unset_env) variables.erase(name);
  for (const auto& variable : spec.set_env) {
    size_t eq = variable.find('=');
    variables[variable.substr(0, eq)] = variable.substr(eq + 1);
  }
  return variables;
}

namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = getenv(name);
  return value != nullptr && value[0] != '\0' ? value : fallback;
}

double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::vector<std::string> Environment(const ProcessSpec& spec) {
  std::vector<std::string> out;
  for (const auto& [name, value] : EnvironmentFor(spec)) out.push_back(name + "=" + value);
  return out;
}

}  // namespace

std::string BuildDir() { return EnvOr("GPROF_BUILD_DIR", GPROF_DEFAULT_BUILD_DIR); }
std::string SourceDir() { return EnvOr("GPROF_SOURCE_DIR", GPROF_DEFAULT_SOURCE_DIR); }
std::string PerfettoSchemaPath() {
  return EnvOr("GPROF_PERFETTO_SCHEMA",
               (SourceDir() + "/../shared/schemas/perfetto_trace.proto").c_str());
}
std::string GprofRunPath() { return BuildDir() + "/bin/gprof-run"; }
std::string InjectLibraryPath() { return BuildDir() + "/lib/gprof-run/libgprof_inject.so"; }
std::string AppPath(const std::string& name) { return BuildDir() + "/tests/apps/" + name; }

TempDir::TempDir() {
  char pattern[] = "/tmp/gprof-test-XXXXXX";
  char* made = mkdtemp(pattern);
  path_ = made != nullptr ? made : "/tmp";
  chmod(path_.c_str(), 0777);  // tests that drop privileges write here too
}

TempDir::~TempDir() {
  // GPROF_KEEP_TEST_DIRS=1 keeps them, to look into a failure's session afterwards.
  if (path_ == "/tmp" || EnvOr("GPROF_KEEP_TEST_DIRS", "")[0] != '\0') return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int ProcessResult::exit_code() const {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

int Shell(const std::string& command) {
  return RunProcess(Command({"/bin/sh", "-c", command})).exit_code();
}

ThrowawayUser::ThrowawayUser() {
  std::random_device random;
  char tag[16];
  snprintf(tag, sizeof(tag), "%08x", random());
  name_ = std::string("gprofu") + tag;
  group_ = std::string("gprofg") + tag;
  extra_group_ = std::string("gprofx") + tag;
  if (Shell("groupadd " + group_ + " && groupadd " + extra_group_ + " && useradd -M -N -g " +
            group_ + " -G " + extra_group_ + " -s /usr/sbin/nologin -d /nonexistent " + name_) !=
      0)
    return;
  passwd* user = getpwnam(name_.c_str());
  group* extra = getgrnam(extra_group_.c_str());
  if (user == nullptr || extra == nullptr) return;
  uid_ = user->pw_uid;
  gid_ = user->pw_gid;
  extra_gid_ = extra->gr_gid;
}

ThrowawayUser::~ThrowawayUser() {
  Shell("userdel " + name_ + " 2>/dev/null; groupdel " + extra_group_ + " 2>/dev/null; groupdel " +
        group_ + " 2>/dev/null");
}

std::vector<std::string> ThrowawayUser::SudoEnvironment(const std::string& command) const {
  return {"SUDO_UID=" + std::to_string(uid_), "SUDO_GID=" + std::to_string(gid_),
          "SUDO_USER=" + name_,                "SUDO_COMMAND=" + command,
          "HOME=/root",                        "USER=root",
          "LOGNAME=root"};
}

SmallFileSystem::SmallFileSystem(const std::string& path, const std::string& size) : path_(path) {
  std::filesystem::create_directories(path);
  mounted_ = mount("tmpfs", path.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  if (!mounted_) error_ = strerror(errno);
}

SmallFileSystem::~SmallFileSystem() {
  if (mounted_) umount2(path_.c_str(), MNT_DETACH);
}

ProcessResult RunGprof(std::vector<std::string> args, ProcessSpec spec) {
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return RunProcess(spec);
}

ProcessResult RunProcess(const ProcessSpec& spec) {
  ProcessResult result;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return result;
  }
  std::vector<std::string> environment = Environment(spec);
  std::vector<char*> envp, argv;
  for (auto& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  double start = NowSeconds();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    setpgid(0, 0);  // its own group: the test's signals go only where the test sends them
    if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) _exit(121);
    if (spec.run_as_uid >= 0 && (setgid(spec.run_as_uid) != 0 || setuid(spec.run_as_uid) != 0))
      _exit(122);
    execve(argv[0], argv.data(), envp.data());
    _exit(123);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  size_t written = 0;
  if (spec.input.empty()) {
    close(in_pipe[1]);
    in_pipe[1] = -1;
  }
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  bool signalled = spec.signal_after_ms < 0;
  int open_outputs = 2;
  while (open_outputs > 0) {
    double elapsed = NowSeconds() - start;
    if (elapsed > spec.timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    if (!signalled && elapsed * 1000 >= spec.signal_after_ms) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      result.signalled_at_ns = now.tv_sec * 1000000000ull + now.tv_nsec;
      kill(pid, spec.signal);
      signalled = true;
    }
    pollfd fds[3] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}, {in_pipe[1], POLLOUT, 0}};
    int nfds = in_pipe[1] >= 0 ? 3 : 2;
    if (poll(fds, nfds, 20) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[65536];
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buffer, n);
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        (i == 0 ? out_pipe[0] : err_pipe[0]) = -1;
        --open_outputs;
      }
    }
    if (nfds == 3 && (fds[2].revents & (POLLOUT | POLLERR))) {
      ssize_t n = write(in_pipe[1], spec.input.data() + written, spec.input.size() - written);
      if (n > 0) written += n;
      if (n < 0 && errno != EAGAIN && errno != EINTR) written = spec.input.size();
      if (written == spec.input.size()) {
        close(in_pipe[1]);
        in_pipe[1] = -1;
      }
    }
  }
  for (int fd : {in_pipe[1], out_pipe[0], err_pipe[0]}) {
    if (fd >= 0) close(fd);
  }
  waitpid(pid, &result.wait_status, 0);
  result.seconds = NowSeconds() - start;
  return result;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void ExpectReadableReport(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  size_t number = 0, summary_lines = 0;
  bool in_summary = false;
  while (std::getline(lines, line)) {
    ++number;
    size_t columns = 0;
    for (char c : line) columns += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
    EXPECT_LE(columns, 160u) << "line " << number << ": " << line;
    if (line == "SUMMARY") {
      in_summary = true;
    } else if (in_summary && (line.empty() || line[0] != ' ')) {
      in_summary = false;
    } else if (in_summary) {
      ++summary_lines;
    }
  }
  EXPECT_LE(summary_lines, 15u) << text;
  // Each citation: "cause 3", "freeze 2", "freezes 1, 2 and 4".
  for (const char* kind : {"cause", "freeze"}) {
    const std::string one = std::string(kind) + " ";
    const std::string heading = kind == std::string("cause") ? "\n  cause " : "\nfreeze ";
    for (size_t at = text.find(one); at != std::string::npos; at = text.find(one, at + 1)) {
      if (at > 0 && std::isalnum(static_cast<unsigned char>(text[at - 1]))) continue;
      size_t digits = at + one.size();
      if (digits >= text.size() || !std::isdigit(static_cast<unsigned char>(text[digits])))
        continue;
      const std::string n = std::to_string(std::stoul(text.substr(digits)));
      const std::string told = heading + n + (kind == std::string("cause") ? " [" : " at ");
      EXPECT_NE(text.find(told), std::string::npos)
          << kind << " " << n << " is cited but not told\n"
          << text;
    }
    // The plural lists: "freezes 1, 2 and 4".
    const std::string many = std::string(kind) + (kind == std::string("cause") ? "s " : "s ");
    for (size_t at = text.find(many); at != std::string::npos; at = text.find(many, at + 1)) {
      size_t i = at + many.size();
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
        size_t end = i;
        while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
        const std::string n = text.substr(i, end - i);
        EXPECT_NE(text.find(heading + n + (kind == std::string("cause") ? " [" : " at ")),
                  std::string::npos)
            << kind << " " << n << " is cited but not told\n"
            << text;
        if (text.compare(end, 2, ", ") == 0) {
          i = end + 2;
        } else if (text.compare(end, 5, " and ") == 0) {
          i = end + 5;
        } else {
          break;
        }
      }
    }
  }
}

bool BpfRequired() { return EnvOr("GPROF_REQUIRE_BPF", "0") == "1"; }

namespace {

bool HasEffectiveCapability(int capability) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[capability / 32].effective >> (capability % 32)) & 1u;
}

}  // namespace

std::string BpfUnavailableReason() {
  constexpr int kCapPerfmon = 38, kCapBpf = 39;  // newer than some libc headers
  bool can_load = HasEffectiveCapability(CAP_SYS_ADMIN) ||
                  (HasEffectiveCapability(kCapBpf) && HasEffectiveCapability(kCapPerfmon));
  if (!can_load) return "kernel recording needs root or CAP_BPF+CAP_PERFMON";
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    return "kernel has no BTF (/sys/kernel/btf/vmlinux)";
  return {};
}

}  // namespace gprof::test
