// Issue 38, items 2-4 for `gprof-run -p PID[,PID...] [--duration SEC]`: recording running
// processes that gprof-run did not start (tests/apps/attach_app: a pipe ping-pong, a fake-runtime
// CUDA loop), their CUDA calls by uprobes on the fake's libcuda.so.1, detaching without a trace
// (the programs' output and exit status are those of runs without gprof-run; no probe left in
// their code, no BPF object left), and the one-line refusals of what cannot be attached to.
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace gprof::test {
namespace {

// attach_app in the background, started by the test (never by gprof-run): stdout into a file,
// stdin a pipe whose end stops it.
class RunningApp {
 public:
  // `uid` >= 0: run as that user (and group `gid`).
  RunningApp(const std::string& mode, const std::string& out_path, int uid = -1, int gid = -1) {
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, STDOUT_FILENO);
      if (uid >= 0 && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0))
        _exit(126);
      std::string path = AppPath("attach_app");
      std::string arg = mode;
      char* argv[] = {path.data(), arg.data(), nullptr};
      execv(argv[0], argv);
      _exit(127);
    }
    close(in[0]);
    in_ = in[1];
  }
  ~RunningApp() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0) close(in_);
  }
  pid_t pid() const { return pid_; }
  // Waits until it runs `threads` threads (its work has started), up to 30 s.
  bool WaitThreads(size_t threads) const {
    for (int tries = 0; tries < 3000; ++tries) {
      std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
      for (std::string line; std::getline(status, line);) {
        if (line.starts_with("Threads:") && std::stoul(line.substr(8)) >= threads) return true;
      }
      usleep(10'000);
    }
    return false;
  }
  // Closes its stdin and waits for its end: its wait status.
  int Stop() {
    close(in_);
    in_ = -1;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
};

// session.json without its whitespace (it is written indented).
std::string CompactMeta(const std::string& session) {
  std::string meta = ReadFile(session + "/session.json");
  meta.erase(std::remove_if(meta.begin(), meta.end(), [](char c) { return std::isspace(c); }),
             meta.end());
  return meta;
}

// A run without gprof-run: output and wait status.
std::pair<std::string, int> PlainRun(const std::string& mode, const TempDir& dir) {
  std::string out = dir.Sub("plain-" + mode + ".out");
  RunningApp app(mode, out);
  EXPECT_TRUE(app.WaitThreads(3));
  usleep(300'000);
  int status = app.Stop();
  return {ReadFile(out), status};
}

// The first byte of libcuda.so.1's entry point `name` in process `pid`'s memory, or -1: where a
// uprobe puts its breakpoint (int3, 0xcc) while it is attached.
int EntryPointByte(pid_t pid, const char* name) {
  static void* library =
      dlopen((BuildDir() + "/tests/fake_cuda/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return -1;
  Dl_info info{};
  void* symbol = dlsym(library, name);
  if (symbol == nullptr || dladdr(symbol, &info) == 0) return -1;
  uint64_t offset = reinterpret_cast<uint64_t>(symbol) - reinterpret_cast<uint64_t>(info.dli_fbase);
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  uint64_t base = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/libcuda.so.1") == std::string::npos) continue;
    base = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    break;
  }
  if (base == 0) return -1;
  int mem = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  unsigned char byte = 0;
  ssize_t got = pread(mem, &byte, 1, static_cast<off_t>(base + offset));
  close(mem);
  return got == 1 ? byte : -1;
}

// The ids of the BPF objects of a kind (prog, link, map) that process `pid` holds descriptors of
// now, from their fdinfo ("prog_id:", "link_id:", "map_id:").
std::set<std::string> BpfObjectsOf(const std::string& kind, pid_t pid) {
  std::set<std::string> ids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo/";
  const std::string key = kind + "_id:";
  for (int fd = 0; fd < 65536; ++fd) {
    std::ifstream info(dir + std::to_string(fd));
    if (!info) {
      if (fd > 4096) break;
      continue;
    }
    for (std::string line; std::getline(info, line);) {
      if (!line.starts_with(key)) continue;
      std::string id = line.substr(key.size());
      id.erase(0, id.find_first_not_of(" \t"));
      ids.insert(id);
    }
  }
  return ids;
}

bool BpfObjectExists(const std::string& kind, const std::string& id) {
  return Shell("bpftool " + kind + " show id " + id + " >/dev/null 2>&1") == 0;
}

// gprof-run -p on a running app: its output and status must be a plain run's, the session says it
// was an attach, and the report its header line. Returns report.txt.
std::string AttachAndCompare(const std::string& mode, const TempDir& dir) {
  auto [plain_out, plain_status] = PlainRun(mode, dir);
  std::string out = dir.Sub("attached-" + mode + ".out");
  RunningApp app(mode, out);
  EXPECT_TRUE(app.WaitThreads(3));
  const pid_t pid = app.pid();
  std::string session = dir.Sub("session-" + mode);
  ProcessResult gprof = RunGprof({"-p", std::to_string(pid), "--duration", "2", "-o", session});
  EXPECT_EQ(gprof.exit_code(), 0) << gprof.err;
  int status = app.Stop();
  EXPECT_EQ(ReadFile(out), plain_out);
  EXPECT_EQ(status, plain_status);
  EXPECT_TRUE(WIFEXITED(status));
  std::string meta = CompactMeta(session);
  EXPECT_NE(meta.find("\"attach\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"pids\":[" + std::to_string(pid) + "]"), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"ended\":\"duration\""), std::string::npos) << meta;
  std::string json = ReadFile(session + "/report.json");
  json.erase(std::remove_if(json.begin(), json.end(), [](char c) { return std::isspace(c); }),
             json.end());
  EXPECT_NE(json.find("\"attach\":{\"ended\":\"duration\",\"pids\":[" + std::to_string(pid) + "]"),
            std::string::npos)
      << json.substr(0, 2000);
  std::string report = ReadFile(session + "/report.txt");
  EXPECT_NE(report.find("attached  to running process " + std::to_string(pid)), std::string::npos)
      << report;
  return report;
}

TEST(Attach, PipePingPongRunsOnUntouchedAndIsRecorded) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string report = AttachAndCompare("pipe", dir);
  // The waits of its threads, which existed before the attach, were recorded (the third thread
  // sleeps in read() throughout: nothing of it falls in the window).
  EXPECT_NE(report.find("recorded  1 process, 2 threads, 0 CUDA calls, "), std::string::npos)
      << report;
  EXPECT_EQ(report.find(" 0 off-CPU intervals"), std::string::npos) << report;
}

TEST(Attach, CudaLoopCallsComeFromUprobesOnLibcuda) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string report = AttachAndCompare("cuda", dir);
  EXPECT_EQ(report.find(" 0 CUDA calls"), std::string::npos) << report;
  // Every call of the loop, by its driver entry point.
  for (const char* call : {"cuLaunchKernel", "cuMemcpyAsync", "cuStreamSynchronize"})
    EXPECT_NE(report.find(call), std::string::npos) << call << "\n" << report;
}

// The slow calls the report lists each name their thread and duration: both workers' threads, in
// the calls the workers make (every call explained: --threshold 0).
TEST(Attach, UprobeCallsHaveThreadAndDuration) {
  GPROF_NEED_BPF();
  TempDir dir;
  RunningApp app("cuda", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  const pid_t pid = app.pid();
  std::set<std::string> workers;  // the tids of cuda-0 and cuda-1
  for (int tid = pid; tid < pid + 1000 && workers.size() < 2; ++tid) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
    std::string name;
    if (std::getline(comm, name) && name.starts_with("cuda-")) workers.insert(std::to_string(tid));
  }
  ASSERT_EQ(workers.size(), 2u);
  std::string session = dir.Sub("session");
  ProcessResult gprof =
      RunGprof({"-p", std::to_string(pid), "--duration", "1.5", "--threshold", "0", "-o", session});
  ASSERT_EQ(gprof.exit_code(), 0) << gprof.err;
  app.Stop();
  std::string report = ReadFile(session + "/report.txt");
  // "  12345 in cuStreamSynchronize (+0.258 s, 13.4 ms)"
  std::regex call(R"((\d+) in (cu[A-Za-z_0-9]+) \(\+[0-9.]+ s, [0-9.]+ (ns|us|ms|s)\))");
  std::set<std::string> callers, names;
  for (std::sregex_iterator it(report.begin(), report.end(), call), end; it != end; ++it) {
    callers.insert((*it)[1]);
    names.insert((*it)[2]);
  }
  EXPECT_EQ(callers, workers) << report;
  EXPECT_TRUE(names.contains("cuStreamSynchronize")) << report;
}

// While attached, the entry points hold the uprobes' breakpoints and gprof-run holds BPF programs
// and links; after, the code is as the file has it and every one of those objects is gone.
TEST(Attach, DetachLeavesNoProbeNorBpfObject) {
  GPROF_NEED_BPF();
  TempDir dir;
  RunningApp app("cuda", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  const int original = EntryPointByte(app.pid(), "cuLaunchKernel");
  ASSERT_GE(original, 0);
  ASSERT_NE(original, 0xcc);
  pid_t gprof = fork();
  if (gprof == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::string path = GprofRunPath(), pid = std::to_string(app.pid()), out = dir.Sub("session");
    char* argv[] = {path.data(),
                    const_cast<char*>("-p"),
                    pid.data(),
                    const_cast<char*>("--duration"),
                    const_cast<char*>("4"),
                    const_cast<char*>("-o"),
                    out.data(),
                    nullptr};
    execv(argv[0], argv);
    _exit(127);
  }
  bool probed = false;
  for (int tries = 0; tries < 3000 && !probed; ++tries) {
    probed = EntryPointByte(app.pid(), "cuLaunchKernel") == 0xcc;
    if (!probed) usleep(10'000);
  }
  std::set<std::string> programs = BpfObjectsOf("prog", gprof);
  std::set<std::string> links = BpfObjectsOf("link", gprof);
  std::set<std::string> maps = BpfObjectsOf("map", gprof);
  int status = 0;
  waitpid(gprof, &status, 0);
  EXPECT_TRUE(probed) << "no uprobe breakpoint seen in cuLaunchKernel while attached";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(programs.empty());
  EXPECT_FALSE(links.empty());
  // Where the kernel makes uprobe_multi links (6.6 on), the fake libcuda's 34 probed functions are
  // two links (entries, returns), not 68: a detach waits for RCU once per link.
  struct utsname kernel {};
  unsigned major_version = 0, minor_version = 0;
  if (uname(&kernel) == 0 && sscanf(kernel.release, "%u.%u", &major_version, &minor_version) == 2 &&
      (major_version > 6 || (major_version == 6 && minor_version >= 6))) {
    EXPECT_LT(links.size(), 40u) << "a link per probe, not per binary";
  }
  EXPECT_EQ(EntryPointByte(app.pid(), "cuLaunchKernel"), original);
  EXPECT_EQ(EntryPointByte(app.pid(), "cuStreamSynchronize"),
            EntryPointByte(getpid(), "cuStreamSynchronize"));
  for (const std::string& id : programs) EXPECT_FALSE(BpfObjectExists("prog", id)) << id;
  for (const std::string& id : links) EXPECT_FALSE(BpfObjectExists("link", id)) << id;
  for (const std::string& id : maps) EXPECT_FALSE(BpfObjectExists("map", id)) << id;
  int app_status = app.Stop();
  EXPECT_TRUE(WIFEXITED(app_status) && WEXITSTATUS(app_status) == 4) << app_status;
  EXPECT_EQ(ReadFile(dir.Sub("app.out")), "attach_app cuda: every round went as it should\n");
}

// Ctrl-C (SIGINT to gprof-run) ends the window, not the processes; with no --duration it is the
// only end but theirs.
TEST(Attach, InterruptEndsTheWindowOnly) {
  GPROF_NEED_BPF();
  TempDir dir;
  RunningApp app("pipe", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  ProcessSpec spec;
  spec.signal_after_ms = 3000;
  spec.signal = SIGINT;
  ProcessResult gprof = RunGprof({"-p", std::to_string(app.pid()), "-o", dir.Sub("s")}, spec);
  EXPECT_EQ(gprof.exit_code(), 0) << gprof.err;
  EXPECT_NE(CompactMeta(dir.Sub("s")).find("\"ended\":\"signal\""), std::string::npos);
  int status = app.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  EXPECT_EQ(ReadFile(dir.Sub("app.out")), "attach_app pipe: every round went as it should\n");
}

// The processes' end ends the recording.
TEST(Attach, EndOfTheProcessesEndsTheRecording) {
  GPROF_NEED_BPF();
  TempDir dir;
  RunningApp app("pipe", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  pid_t pid = app.pid();
  pid_t stopper = fork();
  if (stopper == 0) {
    sleep(3);
    _exit(0);
  }
  pid_t gprof = fork();
  if (gprof == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, STDERR_FILENO);
    std::string path = GprofRunPath(), target = std::to_string(pid), out = dir.Sub("s");
    char* argv[] = {path.data(),   const_cast<char*>("-p"),
                    target.data(), const_cast<char*>("-o"),
                    out.data(),    nullptr};
    execv(argv[0], argv);
    _exit(127);
  }
  waitpid(stopper, nullptr, 0);
  app.Stop();
  int status = 0;
  waitpid(gprof, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(CompactMeta(dir.Sub("s")).find("\"ended\":\"exited\""), std::string::npos);
}

// Several processes at once (-p A,B: the ranks of a job on one host): both are recorded, the pipe's
// waits and the CUDA loop's calls, and both run on.
TEST(Attach, SeveralProcessesAtOnce) {
  GPROF_NEED_BPF();
  TempDir dir;
  RunningApp pipe_app("pipe", dir.Sub("pipe.out"));
  RunningApp cuda_app("cuda", dir.Sub("cuda.out"));
  ASSERT_TRUE(pipe_app.WaitThreads(3));
  ASSERT_TRUE(cuda_app.WaitThreads(3));
  const std::string pids = std::to_string(pipe_app.pid()) + "," + std::to_string(cuda_app.pid());
  ProcessResult gprof = RunGprof({"-p", pids, "--duration", "1.5", "-o", dir.Sub("s")});
  EXPECT_EQ(gprof.exit_code(), 0) << gprof.err;
  EXPECT_NE(CompactMeta(dir.Sub("s")).find("\"pids\":[" + pids + "]"), std::string::npos);
  std::string report = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(report.find("to running processes " + std::to_string(pipe_app.pid()) + ", " +
                        std::to_string(cuda_app.pid())),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("recorded  2 processes"), std::string::npos) << report;
  EXPECT_NE(report.find("cuStreamSynchronize"), std::string::npos) << report;
  int pipe_status = pipe_app.Stop(), cuda_status = cuda_app.Stop();
  EXPECT_TRUE(WIFEXITED(pipe_status) && WEXITSTATUS(pipe_status) == 3) << pipe_status;
  EXPECT_TRUE(WIFEXITED(cuda_status) && WEXITSTATUS(cuda_status) == 4) << cuda_status;
}

// One line, status 125, naming what is wrong, for what cannot be attached to.
void ExpectRefusal(const std::vector<std::string>& args, const std::string& words,
                   ProcessSpec spec = {}) {
  ProcessResult result = RunGprof(args, spec);
  EXPECT_EQ(result.exit_code(), 125) << result.err;
  EXPECT_NE(result.err.find(words), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST(Attach, RefusesWhatCannotBeAttachedTo) {
  // No such process: the highest pid the kernel can give, plus one.
  ExpectRefusal({"-p", "1073741823"}, "no such process");
  ExpectRefusal({"-p", "12x"}, "'12x' is not a process id");
  // A kernel thread (kthreadd is pid 2 in every PID namespace that has kernel threads).
  ExpectRefusal({"-p", "2"}, "kernel thread");
  // A zombie: a child that exited and was not reaped.
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  for (int tries = 0; tries < 500; ++tries) {
    std::ifstream stat("/proc/" + std::to_string(zombie) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    if (text.find(") Z ") != std::string::npos) break;
    usleep(10'000);
  }
  ExpectRefusal({"-p", std::to_string(zombie)}, "zombie");
  waitpid(zombie, nullptr, 0);
  // A thread, not a process: its process's id is said.
  TempDir dir;
  RunningApp app("pipe", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  std::string thread;
  for (int tid = app.pid() + 1; tid < app.pid() + 1000 && thread.empty(); ++tid) {
    if (access(("/proc/" + std::to_string(app.pid()) + "/task/" + std::to_string(tid)).c_str(),
               F_OK) == 0)
      thread = std::to_string(tid);
  }
  ASSERT_FALSE(thread.empty());
  ExpectRefusal({"-p", thread}, "is a thread of process " + std::to_string(app.pid()));
  // A command and -p together.
  ProcessResult both = RunGprof({"-p", std::to_string(app.pid()), "--", "true"});
  EXPECT_EQ(both.exit_code(), 125) << both.err;
  ExpectRefusal({"-p", std::to_string(app.pid()), "--no-kernel"}, "no --no-kernel goes with it");
  ExpectRefusal({"-p", std::to_string(app.pid()), "--delay", "1"}, "no --delay goes with it");
}

// gprof-run's own pid: a shell that execs gprof-run gives it its own pid ($$).
TEST(Attach, RefusesItself) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "exec \"$0\" -p $$", GprofRunPath()};
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 125) << result.err;
  EXPECT_NE(result.err.find("that is gprof-run itself"), std::string::npos) << result.err;
}

// Without the capabilities, the refusal names the missing one before anything is loaded: root with
// CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN dropped from its bounding set (setpriv), then without
// CAP_SYS_PTRACE on another user's process. (Yama's ptrace_scope: this kernel has no Yama.)
TEST(Attach, RefusalNamesTheMissingPrivilege) {
  if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root");
  if (Shell("command -v setpriv >/dev/null") != 0) GPROF_SKIP_OR_FAIL("needs setpriv (util-linux)");
  TempDir dir;
  RunningApp app("pipe", dir.Sub("app.out"));
  ASSERT_TRUE(app.WaitThreads(3));
  ProcessSpec spec;
  spec.argv = {"/usr/bin/setpriv",
               "--bounding-set",
               "-bpf,-perfmon,-sys_admin",
               "--inh-caps",
               "-all",
               GprofRunPath(),
               "-p",
               std::to_string(app.pid())};
  ProcessResult no_bpf = RunProcess(spec);
  EXPECT_EQ(no_bpf.exit_code(), 125) << no_bpf.err;
  EXPECT_NE(no_bpf.err.find("lacks CAP_BPF and CAP_PERFMON"), std::string::npos) << no_bpf.err;
  ThrowawayUser user;
  ASSERT_TRUE(user.ok());
  RunningApp theirs("pipe", dir.Sub("theirs.out"), static_cast<int>(user.uid()),
                    static_cast<int>(user.gid()));
  ASSERT_TRUE(theirs.WaitThreads(3));
  spec.argv = {"/usr/bin/setpriv",
               "--bounding-set",
               "-sys_ptrace",
               "--inh-caps",
               "-all",
               GprofRunPath(),
               "-p",
               std::to_string(theirs.pid())};
  ProcessResult no_ptrace = RunProcess(spec);
  EXPECT_EQ(no_ptrace.exit_code(), 125) << no_ptrace.err;
  EXPECT_NE(no_ptrace.err.find("another user's (uid " + std::to_string(user.uid()) +
                               "), and gprof-run lacks CAP_SYS_PTRACE"),
            std::string::npos)
      << no_ptrace.err;
}

}  // namespace
}  // namespace gprof::test
