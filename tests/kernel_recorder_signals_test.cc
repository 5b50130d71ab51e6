// The kernel recorder on signals and exec: a thread that is not the leader execs, Poll ends
// cleanly when a signal arrives, and the signals of the tree and of the recorder's own process
// are recorded. Shared helpers: kernel_recorder_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "collector/session/session_reader.h"
#include "tests/kernel_recorder_fixture.h"

namespace gprof::bpf::recorder_test {
namespace {

namespace fs = std::filesystem;

// The exec helper: the test binary run again by a recorded thread that is not its process's
// leader (ExecOfAThreadThatIsNotTheLeader). It makes a child that gets the exec'ing thread's old
// tid (writing ns_last_pid), reports, and waits until the test closes its pipe. It runs before
// main() when its environment variable is set, and never returns.
constexpr char kExecHelperEnv[] = "GPROF_KERNEL_RECORDER_TEST_EXEC_HELPER";

struct ExecHelperReport {
  uint32_t pid, tid;  // after the exec
  uint32_t reuser;    // the child that got the old tid; 0 if none did
  uint32_t attempts;
};

[[noreturn]] void RunExecHelper(const char* arguments) {
  unsigned old_tid = 0;
  int report_fd = -1, finish_fd = -1;
  if (sscanf(arguments, "%u %d %d", &old_tid, &report_fd, &finish_fd) != 3) _exit(120);
  ExecHelperReport report{};
  report.pid = static_cast<uint32_t>(getpid());
  report.tid = static_cast<uint32_t>(gettid());
  for (uint32_t attempt = 1; attempt <= 20 && report.reuser == 0; ++attempt) {
    report.attempts = attempt;
    FILE* last_pid = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (last_pid == nullptr) break;
    fprintf(last_pid, "%u", old_tid - 1);
    fclose(last_pid);
    pid_t child = fork();
    if (child == 0) {
      if (static_cast<unsigned>(getpid()) == old_tid) {
        const size_t size = 16 * 4096;
        char* pages = static_cast<char*>(
            mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        for (size_t at = 0; pages != MAP_FAILED && at < size; at += 4096) pages[at] = 1;
      }
      _exit(0);
    }
    if (child < 0) break;
    waitpid(child, nullptr, 0);
    if (static_cast<unsigned>(child) == old_tid) report.reuser = static_cast<uint32_t>(child);
  }
  (void)!write(report_fd, &report, sizeof(report));
  char byte;
  (void)!read(finish_fd, &byte, 1);
  _exit(0);
}

__attribute__((constructor)) void RunExecHelperIfAsked() {
  const char* arguments = getenv(kExecHelperEnv);
  if (arguments != nullptr) RunExecHelper(arguments);
}

// A thread that is not the leader execs (the test binary again, as the exec helper) after the
// leader exited: the leader's exit is not the process's, the exec names the thread's old tid, the
// process is still followed, and the old tid's quick page faults are counted as its own. The old
// tid, reused by a new process of the tree, starts with nothing of it. /proc/PID/maps snapshots:
// when the process is tracked, after the exec, and at the end.
TEST_F(KernelRecorderTest, ExecOfAThreadThatIsNotTheLeader) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr uint32_t kTouched = 2000;
  struct PreExecReport {
    ScenarioStatus status;
    uint32_t pid, thread;
    uint64_t region;
  };
  int release[2], before[2], after[2], finish[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(before, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(after, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(finish, O_CLOEXEC), 0);
  char binary[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", binary, sizeof(binary) - 1), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    if (read(release[0], &byte, 1) != 1) _exit(100);
    static const char* path = binary;
    static int pipes[3] = {before[1], after[1], finish[0]};
    pthread_t thread;
    pthread_create(
        &thread, nullptr,
        [](void*) -> void* {
          PreExecReport r{};
          const size_t size = kTouched * 4096ul;
          char* region = static_cast<char*>(
              mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
          madvise(region, size, MADV_NOHUGEPAGE);
          for (size_t at = 0; at < size; at += 4096) region[at] = 1;
          if (!WaitUntilState(getpid(), "Z")) r.status.Fail("the leader never exited");
          r.pid = static_cast<uint32_t>(getpid());
          r.thread = static_cast<uint32_t>(gettid());
          r.region = reinterpret_cast<uint64_t>(region);
          (void)!write(pipes[0], &r, sizeof(r));
          char arguments[64];
          snprintf(arguments, sizeof(arguments), "%d %d %d", gettid(), pipes[1], pipes[2]);
          setenv(kExecHelperEnv, arguments, 1);
          fcntl(pipes[1], F_SETFD, 0);  // the helper writes to it and waits on the other
          fcntl(pipes[2], F_SETFD, 0);
          execl(path, "kernel_recorder_test", static_cast<char*>(nullptr));
          _exit(121);
        },
        nullptr);
    syscall(SYS_exit, 0);  // the leader goes, the thread lives on (no unwinding through gtest)
  }
  close(release[0]);
  close(before[1]);
  close(after[1]);
  close(finish[0]);
  Status tracked = recorder_->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);
  PreExecReport pre{};
  ExecHelperReport post{};
  bool got_pre = ReadFully(before[0], &pre, sizeof(pre), 30000);
  bool got_post = got_pre && ReadFully(after[0], &post, sizeof(post), 30000);
  ASSERT_GE(recorder_->Poll(0), 0);  // the exec, seen while the helper still runs: a snapshot
  ASSERT_GE(recorder_->Poll(0), 0);
  uint64_t finish_ns = NowNs();
  recorder_->Finish();  // the helper still runs: a last snapshot
  close(finish[1]);
  int status = 0;
  if (!got_post) kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(before[0]);
  close(after[0]);
  ASSERT_TRUE(got_pre && got_post) << "no report from the child";
  ASSERT_EQ(pre.status.failure[0], '\0') << pre.status.failure;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const uint32_t pid = static_cast<uint32_t>(child), old_tid = pre.thread;
  ASSERT_EQ(pre.pid, pid);
  ASSERT_EQ(post.pid, pid);
  ASSERT_EQ(post.tid, pid) << "after the exec the thread has the leader's tid";
  ASSERT_EQ(post.reuser, old_tid) << "no new process got the old tid in " << post.attempts
                                  << " attempts";

  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  const gprof_task_rename* exec = nullptr;
  for (const auto& r : raw.renames) {
    if (r.is_exec) {
      EXPECT_EQ(exec, nullptr) << "one exec";
      exec = &r;
    }
  }
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(exec->pid, pid);
  EXPECT_EQ(exec->tid, pid);
  EXPECT_EQ(exec->exec_old_tid, old_tid);
  EXPECT_EQ(Comm(exec->comm), std::string("kernel_recorder_test").substr(0, GPROF_COMM_LEN - 1));

  const gprof_task_exit* leader_exit = nullptr;
  const gprof_task_exit* reuser_exit = nullptr;
  for (const auto& e : raw.exits) {
    EXPECT_FALSE(e.pid == pid && e.tid == old_tid) << "the exec'ing thread did not exit";
    if (e.pid == pid && e.tid == pid) leader_exit = &e;
    if (e.pid == old_tid) reuser_exit = &e;
  }
  ASSERT_NE(leader_exit, nullptr);
  EXPECT_EQ(leader_exit->flags, 0u) << "the leader's exit is not its process's";
  EXPECT_LT(leader_exit->time_ns, exec->time_ns);
  ASSERT_NE(reuser_exit, nullptr);
  EXPECT_EQ(reuser_exit->tid, old_tid);
  EXPECT_EQ(reuser_exit->flags, static_cast<uint32_t>(GPROF_TASK_EXIT_PROCESS));

  bool thread_start = false, reuser_start = false;
  for (const auto& s : raw.starts) {
    thread_start |= s.tid == old_tid && s.pid == pid && (s.flags & GPROF_TASK_NEW_THREAD);
    reuser_start |= s.tid == old_tid && s.pid == old_tid && s.parent_pid == pid && s.flags == 0;
  }
  EXPECT_TRUE(thread_start);
  EXPECT_TRUE(reuser_start) << "the new process of the reused tid is followed";

  // Written at its switch-outs and at the exec: summed.
  uint64_t thread_faults = 0, reuser_faults = 0;
  for (const auto& c : raw.counts) {
    if (c.kind != GPROF_COUNT_QUICK_PAGE_FAULTS || c.tid != old_tid) continue;
    (c.pid == pid ? thread_faults : reuser_faults) += c.count;
  }
  EXPECT_GE(thread_faults, kTouched - 100) << "a few of them may have been slow";
  EXPECT_LT(reuser_faults, kTouched / 2) << "the reused tid inherited the old count";
  EXPECT_GE(reuser_faults, 16u);

  char region[32];
  snprintf(region, sizeof(region), "%lx-", static_cast<unsigned long>(pre.region));
  int at_track = 0, after_exec = 0, at_finish = 0;
  for (const auto& m : raw.maps) {
    if (m.pid != pid) continue;
    EXPECT_NE(m.text.find(binary), std::string::npos) << m.text;
    if (m.time_ns < exec->time_ns) {
      ++at_track;
      continue;
    }
    EXPECT_EQ(m.text.find(region), std::string::npos) << "a mapping of the program before exec";
    if (m.time_ns < finish_ns) {
      ++after_exec;
    } else {
      ++at_finish;
    }
  }
  EXPECT_EQ(at_track, 1);
  EXPECT_EQ(after_exec, 1);
  EXPECT_EQ(at_finish, 1);
}

std::atomic<int> g_signals{0};
void OnSignal(int) { ++g_signals; }

// Signals (SIGCHLD when the target exits, SIGINT from the user) end a wait in Poll cleanly: 0,
// not an error. The test process spends nearly all its time inside Poll's epoll_wait, so the
// signals land there.
TEST_F(KernelRecorderTest, PollReturnsCleanlyWhenSignalsArrive) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  struct sigaction action {
  }, previous{};
  action.sa_handler = OnSignal;  // no SA_RESTART (epoll_wait is never restarted anyway)
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  g_signals = 0;
  pthread_t self = pthread_self();
  constexpr int kSignals = 10;
  std::thread signaller([self] {
    for (int i = 0; i < kSignals; ++i) {
      SleepNs(13 * kMs);
      pthread_kill(self, SIGUSR1);
    }
  });
  int calls = 0;
  while (g_signals < kSignals) {
    int drained = recorder_->Poll(60000);  // nothing is tracked: only the signals to itself
    ASSERT_GE(drained, 0) << strerror(-drained);
    ++calls;
  }
  signaller.join();
  sigaction(SIGUSR1, &previous, nullptr);
  // Each signal cut a wait short: far fewer than one call per 100 ms would mean they did not.
  EXPECT_GE(calls, kSignals / 2);
  recorder_->Finish();
  int seen = 0;
  for (const SignalRecord& record : recorder_->TakeSignals()) {
    EXPECT_EQ(record.target_pid, getpid());
    seen += record.signal == SIGUSR1;
  }
  EXPECT_EQ(seen, kSignals);
}

// Signals to the tree and to the recorder's own process are recorded, with their sender, and
// whether one call sent them to many processes (kill of a process group): gprof-run's forwarding
// reads them. Those to other processes are not.
TEST_F(KernelRecorderTest, RecordsSignalsForTheTreeAndForItself) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  ASSERT_TRUE(recorder_->records_signals());
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);
    signal(SIGUSR1, SIG_IGN);
    (void)!write(ready[1], "r", 1);
    for (;;) pause();  // until SIGTERM
  }
  close(ready[1]);
  Status tracked = recorder_->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  pid_t outsider = StartNoiseProcess();
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  struct sigaction counting {
  }, previous{};
  counting.sa_handler = OnSignal;
  ASSERT_EQ(sigaction(SIGUSR2, &counting, &previous), 0);
  kill(child, SIGUSR1);
  kill(-child, SIGUSR1);
  kill(outsider, SIGCONT);
  kill(getpid(), SIGUSR2);
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  kill(outsider, SIGKILL);
  waitpid(outsider, nullptr, 0);
  sigaction(SIGUSR2, &previous, nullptr);
  ASSERT_GE(recorder_->Poll(10), 0);
  recorder_->Finish();

  std::vector<std::string> taken;
  for (const SignalRecord& record : recorder_->TakeSignals()) {
    if (record.signal == SIGCHLD) continue;  // the child's end, and the outsider's
    std::string target = record.target_pid == child      ? "child"
                         : record.target_pid == getpid() ? "self"
                                                         : "other";
    taken.push_back(target + " " + std::to_string(record.signal) + " from " +
                    (record.sender_pid == getpid() ? "self" : "other") +
                    (record.to_many ? " to many" : ""));
  }
  EXPECT_EQ(taken, (std::vector<std::string>{"child 10 from self", "child 10 from self to many",
                                             "self 12 from self", "child 15 from self"}));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<std::string> written;
  for (const gprof_signal& record : raw.signals) {
    if (record.signal == SIGCHLD) continue;
    EXPECT_EQ(record.sender_pid, static_cast<uint32_t>(getpid()));
    EXPECT_EQ(record.sender_tid, static_cast<uint32_t>(gettid()));
    EXPECT_EQ(record.code, 0) << "SI_USER";
    EXPECT_EQ(record.tid, record.pid);
    written.push_back(std::to_string(record.signal) + " flags " + std::to_string(record.flags) +
                      " result " + std::to_string(record.result) + " " + Comm(record.sender_comm));
  }
  EXPECT_EQ(written,
            (std::vector<std::string>{
                "10 flags 0 result 1 kernel_recorder", "10 flags 2 result 1 kernel_recorder",
                "12 flags 0 result 0 kernel_recorder", "15 flags 0 result 0 kernel_recorder"}));
  // The session keeps the tree's (gprof-run's own are the recorder's business).
  auto loaded = collector::ReadSession(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::vector<int32_t> kept;
  for (const collector::SignalSent& signal : loaded->signals) {
    EXPECT_EQ(signal.pid, static_cast<uint32_t>(child));
    kept.push_back(signal.signal);
  }
  EXPECT_EQ(kept, (std::vector<int32_t>{SIGUSR1, SIGUSR1, SIGTERM}));

  // After Finish, signals are still seen (gprof-run forwards until the command ends), and the
  // closed file takes nothing more.
  uintmax_t size = fs::file_size(dir_ + "/kernel.gpr");
  ASSERT_EQ(sigaction(SIGUSR2, &counting, &previous), 0);
  kill(getpid(), SIGUSR2);
  sigaction(SIGUSR2, &previous, nullptr);
  ASSERT_TRUE(recorder_->records_signals());
  ASSERT_GE(recorder_->Poll(10), 0);
  std::vector<SignalRecord> later = recorder_->TakeSignals();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].signal, SIGUSR2);
  EXPECT_EQ(later[0].target_pid, getpid());
  EXPECT_EQ(fs::file_size(dir_ + "/kernel.gpr"), size);
}

}  // namespace
}  // namespace gprof::bpf::recorder_test
