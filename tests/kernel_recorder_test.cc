// The kernel recorder against the real kernel: loads the BPF programs, records a child process
// that runs known contention, and reads kernel.gpr back through the collector's readers. This
// file: the recorder's life (start, track, finish, what it could not hold, how the programs
// attached, a start refused); the other kernel_recorder_*_test.cc files, one kind of wait each;
// kernel_recorder_fixture.h, what they share.
//
// Needs root (or CAP_BPF+CAP_PERFMON). Without it the tests skip, unless GPROF_REQUIRE_BPF=1 (CI),
// where they fail: CI must really run BPF.
#include "bpf/kernel_recorder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collector/session/session_reader.h"
#include "tests/kernel_recorder_fixture.h"

namespace gprof::bpf::recorder_test {
namespace {

namespace fs = std::filesystem;
using collector::FutexCall;
using collector::OffCpuInterval;
using collector::OffCpuState;
using collector::Session;

constexpr uint64_t kHoldNs = 50 * kMs;  // how long the holder keeps the mutex once B sleeps

// Waits until `tid` sleeps (S), for up to 10 s. What the child's scenario hangs on is thus a
// state the kernel reports, not a guess of how long a thread needs to get there.
bool WaitUntilSleeping(pid_t tid) {
  for (int i = 0; i < 10000; ++i) {
    if (ThreadState(tid) == 'S') return true;
    SleepNs(kMs);
  }
  return false;
}

// What the recorded child tells the test about itself, through a pipe, once it is done.
struct ChildReport {
  uint32_t pid = 0;
  uint32_t main_tid = 0;
  uint32_t holder_tid = 0;       // A: holds the mutex, then signals the condition variable
  uint32_t waiter_tid = 0;       // B: blocks on the mutex
  uint32_t cond_waiter_tid = 0;  // C: waits on the condition variable
  uint32_t renamer_tid = 0;      // D: renames itself
  uint32_t grandchild_pid = 0;   // forked, execs `true`
  uint32_t ok = 0;               // the scenario ran as planned
  uint64_t mutex_addr = 0;
  uint64_t cond_addr = 0;
  uint64_t cond_size = 0;
  char failure[128] = {};
};

constexpr int kChildExitCode = 3;

struct Scenario {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_t cond_mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  std::atomic<int> holder_locked{0};
  std::atomic<int> cond_waiting{0};
  std::atomic<pid_t> holder_tid{0};
  std::atomic<pid_t> waiter_tid{0};
  std::atomic<pid_t> cond_waiter_tid{0};
  int ready = 0;  // under cond_mutex
  const char* failure = nullptr;
};

void* Holder(void* arg) {
  auto* s = static_cast<Scenario*>(arg);
  s->holder_tid = gettid();
  pthread_mutex_lock(&s->mutex);
  s->holder_locked = 1;
  while (s->waiter_tid == 0) sched_yield();
  if (!WaitUntilSleeping(s->waiter_tid)) s->failure = "waiter never blocked on the mutex";
  SleepNs(kHoldNs);
  pthread_mutex_unlock(&s->mutex);  // B waits: futex wake on the mutex word

  while (s->cond_waiting == 0 || s->cond_waiter_tid == 0) sched_yield();
  if (!WaitUntilSleeping(s->cond_waiter_tid)) s->failure = "condition waiter never slept";
  pthread_mutex_lock(&s->cond_mutex);
  s->ready = 1;
  pthread_cond_signal(&s->cond);  // C sleeps in the kernel: futex wake inside the cond
  pthread_mutex_unlock(&s->cond_mutex);
  return nullptr;
}

void* Waiter(void* arg) {
  auto* s = static_cast<Scenario*>(arg);
  s->waiter_tid = gettid();
  while (s->holder_locked == 0) sched_yield();
  pthread_mutex_lock(&s->mutex);  // blocks for kHoldNs and more
  pthread_mutex_unlock(&s->mutex);
  return nullptr;
}

void* CondWaiter(void* arg) {
  auto* s = static_cast<Scenario*>(arg);
  pthread_mutex_lock(&s->cond_mutex);
  s->cond_waiter_tid = gettid();
  s->cond_waiting = 1;
  while (!s->ready) pthread_cond_wait(&s->cond, &s->cond_mutex);
  pthread_mutex_unlock(&s->cond_mutex);
  return nullptr;
}

void* Renamer(void* arg) {
  pthread_setname_np(pthread_self(), "gp-renamed");  // prctl(PR_SET_NAME) on itself
  *static_cast<pid_t*>(arg) = gettid();
  return nullptr;
}

// The recorded child: waits on `release_fd`, runs the scenario, reports on `report_fd`, exits
// with kChildExitCode. Never returns; no gtest calls here.
[[noreturn]] void RunChild(int release_fd, int report_fd) {
  char byte;
  if (read(release_fd, &byte, 1) != 1) _exit(100);
  ChildReport report;
  auto fail = [&](const char* why) {
    snprintf(report.failure, sizeof(report.failure), "%s", why);
    (void)!write(report_fd, &report, sizeof(report));
    _exit(101);
  };
  Scenario s;
  report.pid = getpid();
  report.main_tid = gettid();
  report.mutex_addr = reinterpret_cast<uint64_t>(&s.mutex);
  report.cond_addr = reinterpret_cast<uint64_t>(&s.cond);
  report.cond_size = sizeof(s.cond);

  pthread_t holder, waiter, cond_waiter, renamer;
  pid_t renamer_tid = 0;
  if (pthread_create(&cond_waiter, nullptr, CondWaiter, &s) != 0 ||
      pthread_create(&holder, nullptr, Holder, &s) != 0 ||
      pthread_create(&waiter, nullptr, Waiter, &s) != 0 ||
      pthread_create(&renamer, nullptr, Renamer, &renamer_tid) != 0) {
    fail("pthread_create");
  }
  // Another thread's name: a write to /proc/self/task/TID/comm, the rename of a non-current task.
  if (pthread_setname_np(holder, "gp-holder") != 0) fail("pthread_setname_np(holder)");
  pthread_join(renamer, nullptr);
  pthread_join(waiter, nullptr);
  pthread_join(cond_waiter, nullptr);
  pthread_join(holder, nullptr);
  if (s.failure != nullptr) fail(s.failure);

  pid_t grandchild = fork();
  if (grandchild < 0) fail("fork");
  if (grandchild == 0) {
    execlp("true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fail("grandchild `true` failed");
  }

  report.holder_tid = s.holder_tid;
  report.waiter_tid = s.waiter_tid;
  report.cond_waiter_tid = s.cond_waiter_tid;
  report.renamer_tid = renamer_tid;
  report.grandchild_pid = grandchild;
  report.ok = 1;
  (void)!write(report_fd, &report, sizeof(report));
  _exit(kChildExitCode);
}

// Threads of the test process itself that contend a mutex and sleep while the child runs: the
// recorder must leave them out.
class Noise {
 public:
  Noise() {
    for (int i = 0; i < 2; ++i) {
      threads_.emplace_back([this] {
        while (!stop_) {
          pthread_mutex_lock(&mutex_);
          SleepNs(200000);
          pthread_mutex_unlock(&mutex_);
          SleepNs(100000);
        }
      });
    }
  }
  ~Noise() {
    stop_ = true;
    for (auto& thread : threads_) thread.join();
  }

 private:
  std::atomic<bool> stop_{false};
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  std::vector<std::thread> threads_;
};

bool StackMentions(const Session& session, int32_t stack_id, const std::string& word) {
  for (const std::string& frame : session.KernelStack(stack_id)) {
    if (frame.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string DescribeStack(const Session& session, int32_t stack_id) {
  std::string text;
  for (const std::string& frame : session.KernelStack(stack_id)) text += "\n    " + frame;
  return text;
}

TEST_F(KernelRecorderTest, RecordsContentionOfTheProcessTreeOnly) {
  KernelRecorderOptions options;
  options.stack_map_entries = 65536;  // make a stack-bucket collision on the asserted stacks rare
  StartRecorder(options);
  if (recorder_ == nullptr) return;

  int release[2], report[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(release[1]);
    close(report[0]);
    RunChild(release[0], report[1]);
  }
  close(release[0]);
  close(report[1]);
  pid_t noise_process = StartNoiseProcess();
  ASSERT_GT(noise_process, 0);
  Noise noise;

  Status tracked = recorder_->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  Status own = recorder_->Track(getpid());
  EXPECT_FALSE(own.ok()) << "the recorder must refuse its own process";
  EXPECT_EQ(own.code(), StatusCode::kInvalid) << own.message();
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);

  int status = 0;
  uint64_t deadline = NowNs() + 30000 * kMs;
  int64_t drained = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    int n = recorder_->Poll(50);
    ASSERT_GE(n, 0) << strerror(-n);
    drained += n;
    if (NowNs() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the child did not finish in 30 s";
    }
  }
  ChildReport child_report;
  ssize_t got = read(report[0], &child_report, sizeof(child_report));
  close(report[0]);
  kill(noise_process, SIGKILL);
  waitpid(noise_process, nullptr, 0);

  recorder_->Finish();
  recorder_->Finish();  // idempotent
  EXPECT_EQ(recorder_->Poll(10), 0);
  Status after_finish = recorder_->Track(child);
  EXPECT_FALSE(after_finish.ok());
  EXPECT_EQ(after_finish.code(), StatusCode::kInvalid) << after_finish.message();
  EXPECT_TRUE(recorder_->last_error().empty()) << recorder_->last_error();
  KernelRecorderStats stats = recorder_->stats();

  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(child_report)));
  ASSERT_EQ(child_report.ok, 1u) << "child scenario failed: " << child_report.failure;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kChildExitCode) << status;
  EXPECT_GT(drained, 0);

  const uint32_t pid = child_report.pid;
  const uint32_t a = child_report.holder_tid, b = child_report.waiter_tid;
  const uint32_t c = child_report.cond_waiter_tid, d = child_report.renamer_tid;
  const uint32_t grandchild = child_report.grandchild_pid;
  ASSERT_EQ(pid, static_cast<uint32_t>(child));

  auto loaded = collector::ReadSession(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Session& session = loaded.value();
  for (const auto& diagnostic : session.diagnostics) {
    EXPECT_EQ(diagnostic.file.find("kernel.gpr"), std::string::npos) << diagnostic.message;
  }
  std::string raw_error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &raw_error);
  ASSERT_TRUE(raw_error.empty()) << raw_error;

  // Only the tree: the child and its grandchild, not the test process, its threads or siblings.
  std::set<uint32_t> tree = {pid, grandchild};
  for (const auto& interval : session.off_cpu)
    EXPECT_TRUE(tree.count(interval.pid)) << interval.pid;
  for (const auto& call : session.futex_calls) EXPECT_TRUE(tree.count(call.pid)) << call.pid;
  for (const auto& start : session.task_starts) EXPECT_TRUE(tree.count(start.pid)) << start.pid;
  for (const auto& [tid, thread] : session.threads) EXPECT_TRUE(tree.count(thread.pid)) << tid;
  for (const auto& r : raw.renames) EXPECT_TRUE(tree.count(r.pid)) << r.pid;
  for (const auto& r : raw.exits) EXPECT_TRUE(tree.count(r.pid)) << r.pid;

  // B: one long sleep on the mutex, ended by A's wakeup, in a futex wait.
  const OffCpuInterval* b_sleep = nullptr;
  for (const auto& interval : session.off_cpu) {
    if (interval.tid == b && (b_sleep == nullptr || interval.duration() > b_sleep->duration())) {
      b_sleep = &interval;
    }
  }
  ASSERT_NE(b_sleep, nullptr) << "no off-CPU interval of the mutex waiter";
  EXPECT_EQ(b_sleep->pid, pid);
  EXPECT_GE(b_sleep->duration(), kHoldNs);
  EXPECT_LT(b_sleep->duration(), 10000 * kMs);
  EXPECT_EQ(b_sleep->state(), OffCpuState::kSleeping) << b_sleep->raw_state;
  EXPECT_EQ(b_sleep->waker_tid, a);
  EXPECT_EQ(b_sleep->waker_pid, pid);
  EXPECT_EQ(session.WakerComm(*b_sleep), "gp-holder");
  EXPECT_GE(b_sleep->wake_ns, b_sleep->start_ns);
  EXPECT_LE(b_sleep->wake_ns, b_sleep->end_ns);
  EXPECT_EQ(b_sleep->flags, 0u);
  ASSERT_GE(b_sleep->kstack_id, 0) << "no kernel stack: " << b_sleep->kstack_id;
  ASSERT_TRUE(session.kernel_stacks.count(b_sleep->kstack_id));
  EXPECT_TRUE(StackMentions(session, b_sleep->kstack_id, "futex"))
      << DescribeStack(session, b_sleep->kstack_id);
  EXPECT_TRUE(StackMentions(session, b_sleep->kstack_id, "schedule"))
      << DescribeStack(session, b_sleep->kstack_id);
  if (b_sleep->waker_kstack_id >= 0) {
    EXPECT_TRUE(StackMentions(session, b_sleep->waker_kstack_id, "futex_wake"))
        << DescribeStack(session, b_sleep->waker_kstack_id);
  }

  // The same contention as futex calls: B waits on the mutex word, A wakes it, inside B's wait.
  const FutexCall* b_wait = nullptr;
  const FutexCall* a_wake = nullptr;
  for (const auto& call : session.futex_calls) {
    if (call.uaddr != child_report.mutex_addr) continue;
    if (call.tid == b && call.is_wait() &&
        (b_wait == nullptr || call.duration() > b_wait->duration())) {
      b_wait = &call;
    }
    if (call.tid == a && call.is_wake()) a_wake = &call;
  }
  ASSERT_NE(b_wait, nullptr) << "no futex wait of B on the mutex";
  ASSERT_NE(a_wake, nullptr) << "no futex wake of A on the mutex";
  EXPECT_GE(b_wait->duration(), kHoldNs);
  EXPECT_EQ(b_wait->ret, 0);
  EXPECT_EQ(b_wait->timeout_ns, -1);
  EXPECT_EQ(b_wait->op & FUTEX_PRIVATE_FLAG, static_cast<uint32_t>(FUTEX_PRIVATE_FLAG));
  EXPECT_EQ(a_wake->ret, 1) << "A's wake should have woken B";
  EXPECT_GE(a_wake->start_ns, b_wait->start_ns);
  EXPECT_LE(a_wake->start_ns, b_wait->end_ns);

  // The condition variable: C waits on a word inside it and A's signal wakes it.
  auto in_cond = [&](uint64_t address) {
    return address >= child_report.cond_addr &&
           address < child_report.cond_addr + child_report.cond_size;
  };
  const FutexCall* c_wait = nullptr;
  const FutexCall* a_signal = nullptr;
  for (const auto& call : session.futex_calls) {
    if (!in_cond(call.uaddr)) continue;
    if (call.tid == c && call.is_wait()) c_wait = &call;
    if (call.tid == a && call.is_wake() && call.ret >= 1) a_signal = &call;
  }
  ASSERT_NE(c_wait, nullptr) << "no futex wait of C in the condition variable";
  ASSERT_NE(a_signal, nullptr) << "no futex wake of A in the condition variable";
  EXPECT_EQ(c_wait->uaddr, a_signal->uaddr);
  const OffCpuInterval* c_sleep = nullptr;
  for (const auto& interval : session.off_cpu) {
    if (interval.tid == c && interval.start_ns <= a_signal->start_ns &&
        interval.end_ns >= a_signal->start_ns) {
      c_sleep = &interval;
    }
  }
  ASSERT_NE(c_sleep, nullptr) << "no off-CPU interval of C around A's signal";
  EXPECT_EQ(c_sleep->waker_tid, a);
  EXPECT_EQ(c_sleep->state(), OffCpuState::kSleeping);

  // A's 50 ms nanosleep ends by the timer interrupt: no thread is named as its waker.
  bool a_timer_sleep = false;
  for (const auto& interval : session.off_cpu) {
    if (interval.tid == a && interval.duration() >= kHoldNs && interval.wake_ns != 0) {
      a_timer_sleep = true;
      EXPECT_EQ(interval.waker_pid, 0u);
      EXPECT_EQ(interval.waker_tid, 0u);
      EXPECT_EQ(session.WakerComm(interval), "[irq]");
      EXPECT_TRUE(StackMentions(session, interval.kstack_id, "nanosleep"))
          << DescribeStack(session, interval.kstack_id);
    }
  }
  EXPECT_TRUE(a_timer_sleep) << "no 50 ms sleep of A";

  // Thread and process starts.
  for (uint32_t tid : {a, b, c, d}) {
    auto start = std::find_if(session.task_starts.begin(), session.task_starts.end(),
                              [&](const auto& s) { return s.tid == tid; });
    ASSERT_NE(start, session.task_starts.end()) << "no task_new for thread " << tid;
    EXPECT_TRUE(start->is_thread);
    EXPECT_EQ(start->pid, pid);
    EXPECT_EQ(start->parent_tid, child_report.main_tid);
    EXPECT_EQ(start->parent_pid, pid);
  }
  auto grandchild_start = std::find_if(session.task_starts.begin(), session.task_starts.end(),
                                       [&](const auto& s) { return s.tid == grandchild; });
  ASSERT_NE(grandchild_start, session.task_starts.end()) << "fork not followed";
  EXPECT_FALSE(grandchild_start->is_thread);
  EXPECT_EQ(grandchild_start->pid, grandchild);
  EXPECT_EQ(grandchild_start->parent_pid, pid);
  EXPECT_EQ(session.processes.at(grandchild).ppid, pid);

  // Renames: D by itself (prctl), A by the main thread (/proc/.../comm), the grandchild by exec,
  // reported once with is_exec.
  EXPECT_EQ(session.threads.at(d).name, "gp-renamed");
  EXPECT_EQ(session.threads.at(a).name, "gp-holder");
  EXPECT_EQ(session.threads.at(grandchild).name, "true");
  int d_renames = 0, a_renames = 0, grandchild_renames = 0;
  for (const auto& r : raw.renames) {
    if (r.tid == d && Comm(r.comm) == "gp-renamed" && r.is_exec == 0) ++d_renames;
    if (r.tid == a && Comm(r.comm) == "gp-holder" && r.is_exec == 0) ++a_renames;
    if (r.tid == grandchild) {
      ++grandchild_renames;
      EXPECT_EQ(r.is_exec, 1u);
      EXPECT_EQ(Comm(r.comm), "true");
    }
  }
  EXPECT_EQ(d_renames, 1);
  EXPECT_EQ(a_renames, 1);
  EXPECT_EQ(grandchild_renames, 1) << "exec must be reported once, as exec";

  // Exits, with wait(2)'s encoding of the status.
  auto exit_of = [&](uint32_t tid) -> const gprof_task_exit* {
    for (const auto& e : raw.exits) {
      if (e.tid == tid) return &e;
    }
    return nullptr;
  };
  for (uint32_t tid : {a, b, c, d, child_report.main_tid, grandchild}) {
    ASSERT_NE(exit_of(tid), nullptr) << "no exit of " << tid;
    EXPECT_NE(session.threads.at(tid).exit_ns, 0u);
  }
  EXPECT_EQ(exit_of(child_report.main_tid)->exit_code, kChildExitCode << 8);
  EXPECT_EQ(exit_of(grandchild)->exit_code, 0);

  // Stacks and their symbols.
  EXPECT_FALSE(session.kernel_stacks.empty());
  EXPECT_FALSE(session.kernel_symbols.empty());
  for (const auto& [id, frames] : session.kernel_stacks) {
    EXPECT_GE(id, 0);
    EXPECT_FALSE(frames.empty()) << "empty stack " << id;
  }

  // Nothing unfinished: every thread ran to its end before Finish.
  for (const auto& r : raw.offcpu) EXPECT_EQ(r.flags, 0u) << r.tid;
  for (const auto& r : raw.futexes) EXPECT_EQ(r.flags, 0u) << r.tid;

  // Losses: the ring and the maps had room. A stack lost to a hash-bucket collision of the
  // stack map is allowed (its probability is not zero), nothing else. The count in stats()
  // matches the file.
  uint64_t lost_in_file = 0;
  for (const auto& l : raw.lost) {
    lost_in_file += l.count;
    EXPECT_EQ(l.kind, static_cast<uint32_t>(GPROF_LOST_STACK))
        << "lost " << l.count << " of type " << l.record_type << ", kind " << l.kind;
  }
  EXPECT_EQ(stats.lost, lost_in_file);
  EXPECT_EQ(stats.records_written, raw.count);
  EXPECT_EQ(raw.unknown, 0u);
}

// A thread still blocked when recording stops: its off-CPU interval and futex call are written
// as unfinished. Also a timed futex wait, for the timeout and the return value.
TEST_F(KernelRecorderTest, WritesUnfinishedIntervalsAndTimeouts) {
  StartRecorder();
  if (recorder_ == nullptr) return;

  struct Report {
    uint32_t tid;
    uint32_t reserved;
    uint64_t word_addr;
  };
  int release[2], report[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    if (read(release[0], &byte, 1) != 1) _exit(100);
    static uint32_t word = 0;
    timespec timeout{0, 10 * static_cast<long>(kMs)};
    syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout, nullptr, 0);  // times out
    Report r{static_cast<uint32_t>(gettid()), 0, reinterpret_cast<uint64_t>(&word)};
    (void)!write(report[1], &r, sizeof(r));
    syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);  // until killed
    _exit(101);
  }
  close(release[0]);
  close(report[1]);
  Status tracked = recorder_->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);

  Report r{};
  ASSERT_EQ(read(report[0], &r, sizeof(r)), static_cast<ssize_t>(sizeof(r)));
  close(report[0]);
  // Blocked in the second wait: the kernel says so in /proc.
  bool sleeping = false;
  for (int i = 0; i < 10000 && !sleeping; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    sleeping = paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
    if (!sleeping) SleepNs(kMs);
  }
  ASSERT_TRUE(sleeping);
  ASSERT_GE(recorder_->Poll(0), 0);
  uint64_t before_finish = NowNs();
  recorder_->Finish();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  std::string raw_error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &raw_error);
  ASSERT_TRUE(raw_error.empty()) << raw_error;

  const gprof_futex* timed = nullptr;
  const gprof_futex* unfinished = nullptr;
  for (const auto& f : raw.futexes) {
    if (f.tid != r.tid || f.uaddr != r.word_addr) continue;
    if (f.flags & GPROF_FUTEX_UNFINISHED) {
      unfinished = &f;
    } else {
      timed = &f;
    }
  }
  ASSERT_NE(timed, nullptr);
  EXPECT_EQ(timed->timeout_ns, static_cast<int64_t>(10 * kMs));
  EXPECT_EQ(timed->ret, -ETIMEDOUT);
  EXPECT_GE(timed->end_ns - timed->start_ns, 10 * kMs);
  EXPECT_EQ(timed->op, static_cast<uint32_t>(FUTEX_WAIT_PRIVATE));
  ASSERT_NE(unfinished, nullptr) << "no unfinished futex wait";
  EXPECT_EQ(unfinished->timeout_ns, -1);
  EXPECT_EQ(unfinished->ret, 0);
  EXPECT_GE(unfinished->end_ns, before_finish);

  const gprof_offcpu* open_interval = nullptr;
  for (const auto& o : raw.offcpu) {
    if (o.tid == r.tid && (o.flags & GPROF_OFFCPU_UNFINISHED)) open_interval = &o;
  }
  ASSERT_NE(open_interval, nullptr) << "no unfinished off-CPU interval";
  EXPECT_EQ(open_interval->pid, static_cast<uint32_t>(child));
  EXPECT_EQ(open_interval->state & 0x3, static_cast<uint32_t>(GPROF_TASK_INTERRUPTIBLE));
  EXPECT_GE(open_interval->end_ns, before_finish);
  EXPECT_LE(open_interval->start_ns, unfinished->end_ns);
  EXPECT_EQ(open_interval->wake_ns, 0u);
}

// A ring buffer too small for what the child does, drained only after it exits: the events that
// did not fit are counted by kind, type and CPU (the child runs on one, the last), written as
// gprof_lost records, one per (kind, type, CPU), and match stats().
TEST_F(KernelRecorderTest, CountsWhatTheRingBufferCouldNotHold) {
  KernelRecorderOptions options;
  options.ring_buffer_bytes = 1;  // rounds up to one page: a few dozen records
  options.kernel_stacks = false;
  options.count_under_ns = 0;  // the failing waits are short: every one to the ring
  StartRecorder(options);
  if (recorder_ == nullptr) return;
  const int cpu = get_nprocs_conf() - 1;

  int release[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    if (read(release[0], &byte, 1) != 1) _exit(100);
    cpu_set_t one_cpu;
    CPU_ZERO(&one_cpu);
    CPU_SET(cpu, &one_cpu);
    if (sched_setaffinity(0, sizeof(one_cpu), &one_cpu) != 0) _exit(101);
    static uint32_t word = 1;
    for (int i = 0; i < 5000; ++i) {  // 5000 futex records, each failing FUTEX_WAIT (EAGAIN)
      syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
    }
    _exit(0);
  }
  close(release[0]);
  Status tracked = recorder_->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  recorder_->Finish();
  KernelRecorderStats stats = recorder_->stats();

  std::string raw_error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &raw_error);
  ASSERT_TRUE(raw_error.empty()) << raw_error;
  uint64_t futex_lost = 0, total_lost = 0;
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> keys;
  for (const auto& l : raw.lost) {
    total_lost += l.count;
    EXPECT_GT(l.count, 0u);
    EXPECT_TRUE(keys.insert({l.kind, l.record_type, l.cpu}).second) << "one record per key";
    if (l.kind == GPROF_LOST_RINGBUF && l.record_type == GPROF_REC_FUTEX) {
      EXPECT_EQ(l.cpu, static_cast<uint32_t>(cpu)) << "lost on the child's CPU";
      futex_lost += l.count;
    }
  }
  uint64_t futex_recorded = 0;
  for (const auto& f : raw.futexes) {
    if (f.pid == static_cast<uint32_t>(child) && f.ret == -EAGAIN) ++futex_recorded;
  }
  EXPECT_GT(futex_recorded, 0u);
  EXPECT_GT(futex_lost, 0u);
  EXPECT_EQ(futex_recorded + futex_lost, 5000u) << "every futex call recorded or counted";
  EXPECT_EQ(stats.lost, total_lost);
  for (const auto& o : raw.offcpu) EXPECT_EQ(o.kstack_id, -ENODATA);
}

// Scenario of RawTracepointsRecordTheSameFacts: a thread blocked on a pipe, a futex wait and
// wake, the unmap of a populated region, an ioctl on /dev/null, a rename.
struct FactsReport {
  ScenarioStatus status;
  uint32_t reader, futex_waiter, main;
  uint64_t word, region;
};

FactsReport RunFactsScenario() {
  FactsReport r{};
  static uint32_t word = 0;
  int fds[2];
  if (pipe(fds) != 0) {
    r.status.Fail("pipe");
    return r;
  }
  std::atomic<pid_t> reader{0}, waiter{0};
  std::thread reader_thread([&] {
    pthread_setname_np(pthread_self(), "gp-reader");
    reader = gettid();
    PipeReader(fds[0]);
  });
  std::thread waiter_thread([&] {
    waiter = gettid();
    syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  });
  while (reader == 0 || waiter == 0) sched_yield();
  if (!WaitUntilState(reader, "S") || !WaitUntilState(waiter, "S")) r.status.Fail("no sleep");
  SleepNs(20 * kMs);
  PipeWriteFrame(fds[1], "x", 1);
  syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  reader_thread.join();
  waiter_thread.join();
  const size_t size = 8u << 20;
  char* region = static_cast<char*>(
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  for (size_t at = 0; at < size; at += 4096) region[at] = 1;
  munmap(region, size);
  int null_fd = open("/dev/null", O_RDONLY);
  unsigned int number = 0;
  if (ioctl(null_fd, TIOCGPTN, &number) != -1 || errno != ENOTTY) r.status.Fail("ioctl");
  close(null_fd);
  // SIGUSR2, ignored, to the process, to its thread, and to its process group (its own alone).
  signal(SIGUSR2, SIG_IGN);
  if (setpgid(0, 0) != 0) r.status.Fail("setpgid");
  kill(getpid(), SIGUSR2);
  syscall(SYS_tgkill, getpid(), gettid(), SIGUSR2);
  kill(0, SIGUSR2);
  r.reader = static_cast<uint32_t>(reader);
  r.futex_waiter = static_cast<uint32_t>(waiter);
  r.main = static_cast<uint32_t>(gettid());
  r.word = reinterpret_cast<uint64_t>(&word);
  r.region = reinterpret_cast<uint64_t>(region);
  return r;
}

// The facts of the scenario, as the recorder wrote them, in words that do not depend on the run.
std::multiset<std::string> ScenarioFacts(const RawRecords& raw, const FactsReport& report) {
  std::multiset<std::string> facts;
  auto who = [&](uint32_t tid) -> std::string {
    if (tid == report.reader) return "reader";
    if (tid == report.futex_waiter) return "waiter";
    if (tid == report.main) return "main";
    return "other";
  };
  for (const auto& f : raw.futexes) {
    if (f.uaddr != report.word) continue;
    facts.insert(who(f.tid) + " futex op " + std::to_string(f.op) + " val " +
                 std::to_string(f.val) + " ret " + std::to_string(f.ret));
  }
  for (const auto& m : raw.memory_maps) {
    if (m.address != report.region) continue;
    facts.insert(who(m.tid) + " syscall " + std::to_string(m.syscall_nr) + " length " +
                 std::to_string(m.length) + " ret " + std::to_string(m.ret == 0 ? 0 : 1));
  }
  for (const auto& d : raw.device_waits) {
    facts.insert(who(d.tid) + " device " + Comm(d.device) + " kind " + std::to_string(d.kind) +
                 " request " + std::to_string(d.request) + " ret " + std::to_string(d.ret));
  }
  for (const auto& o : raw.offcpu) {
    if (o.tid != report.reader && o.tid != report.futex_waiter) continue;
    if (o.end_ns - o.start_ns < 10 * kMs) continue;
    const UserStack* stack = FindUserStack(raw, o.user_stack_id);
    facts.insert(who(o.tid) + " off-CPU state " + std::to_string(o.state & 3) + " woken by " +
                 who(o.waker_tid) +
                 (KernelStackMentions(raw, o.kstack_id, "pipe_read") ? " in pipe_read" : "") +
                 (stack && !stack->ips.empty() && IN_SECTION(stack->ips[0], gprof_pipe_read)
                      ? " user stack in PipeReadFrame"
                      : ""));
  }
  for (const auto& g : raw.signals) {
    if (g.signal != SIGUSR2) continue;
    facts.insert(who(g.tid) + " signal " + std::to_string(g.signal) + " from " + who(g.sender_tid) +
                 " " + Comm(g.sender_comm) + " code " + std::to_string(g.code) + " flags " +
                 std::to_string(g.flags) + " result " + std::to_string(g.result));
  }
  for (const auto& r : raw.renames) facts.insert(who(r.tid) + " renamed " + Comm(r.comm));
  for (const auto& s : raw.starts) facts.insert(who(s.tid) + " started by " + who(s.parent_tid));
  for (const auto& e : raw.exits) {
    facts.insert(who(e.tid) + " exited " + std::to_string(e.exit_code) + " flags " +
                 std::to_string(e.flags));
  }
  return facts;
}

// Every tracepoint program attached as raw_tp instead of tp_btf: the same scenario gives the
// same records, and the session says how the programs were attached.
TEST_F(KernelRecorderTest, RawTracepointsRecordTheSameFacts) {
  std::multiset<std::string> facts[2];
  for (int raw_tp = 0; raw_tp < 2; ++raw_tp) {
    SCOPED_TRACE(raw_tp ? "raw_tp" : "tp_btf");
    KernelRecorderOptions options;
    options.device_prefix = "null";
    options.force_raw_tracepoints = raw_tp == 1;
    if (raw_tp) TearDown();
    StartRecorder(options);
    if (recorder_ == nullptr) return;
    const std::vector<std::string> notes = recorder_->notes();
    ASSERT_FALSE(notes.empty());
    EXPECT_EQ(notes.front(), raw_tp ? "kernel recorder: tracepoints attached as raw_tp (asked for)"
                                    : "kernel recorder: tracepoints attached as tp_btf");
    FactsReport report{};
    ASSERT_NO_FATAL_FAILURE(
        RunRecordedChild<FactsReport>(recorder_.get(), RunFactsScenario, &report));
    std::string error;
    RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
    ASSERT_TRUE(error.empty()) << error;
    EXPECT_EQ(raw.messages, notes) << "the notes are in kernel.gpr";
    facts[raw_tp] = ScenarioFacts(raw, report);
    for (const char* expected :
         {"reader off-CPU state 1 woken by main in pipe_read user stack in PipeReadFrame",
          "waiter off-CPU state 1 woken by main", "waiter futex op 128 val 0 ret 0",
          "main futex op 129 val 1 ret 1", "main syscall 11 length 8388608 ret 0",
          "main device null kind 1 request 2147767344 ret -25", "reader renamed gp-reader",
          "reader started by main",
          // kill(getpid()): SI_USER, to the process; tgkill: SI_TKILL, to the thread; kill(0):
          // to the process group, one call for many. All ignored.
          "main signal 12 from main kernel_recorder code 0 flags 0 result 1",
          "main signal 12 from main kernel_recorder code -6 flags 1 result 1",
          "main signal 12 from main kernel_recorder code 0 flags 2 result 1"}) {
      EXPECT_EQ(facts[raw_tp].count(expected), 1u) << expected;
    }
  }
  EXPECT_EQ(facts[0], facts[1]);
}

// Without the capabilities, Start fails cleanly, says why (the code gprof-run branches on to say
// which capabilities would do), and leaves no kernel.gpr behind.
TEST(KernelRecorderPrivilegeTest, ReportsMissingPrivileges) {
  std::string dir = MakeSessionDir();
  ASSERT_FALSE(dir.empty());
  int result[2];
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Drop every effective capability (root keeps its uid: only the capabilities matter).
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    int code = 0;
    if (syscall(SYS_capget, &header, data) != 0) code = 10;
    for (auto& part : data) part.effective = 0;
    if (code == 0 && syscall(SYS_capset, &header, data) != 0) code = 11;
    std::string error;
    if (code == 0) {
      auto recorder = KernelRecorder::Start(dir, {});
      if (!recorder.ok()) error = recorder.status().message();
      if (recorder.ok())
        code = 12;
      else if (recorder.status().code() != StatusCode::kPermissionDenied)
        code = 13;
      else if (error.find("CAP_BPF") == std::string::npos)
        code = 14;
      else if (access((dir + "/kernel.gpr").c_str(), F_OK) == 0)
        code = 15;
    }
    (void)!write(result[1], error.data(), std::min<size_t>(error.size(), 512));
    _exit(code);
  }
  close(result[1]);
  char message[513] = {};
  ssize_t n = read(result[0], message, 512);
  (void)n;
  close(result[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  fs::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "error text: " << message;
}

// Options the programs cannot run with are refused before anything is loaded, as invalid: not
// as missing privileges, for which gprof-run would name capabilities that would not help.
TEST(KernelRecorderOptionsTest, RefusesOptionsTheProgramsCannotRunWith) {
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) GTEST_SKIP() << "no BTF: refused before";
  std::string dir = MakeSessionDir();
  ASSERT_FALSE(dir.empty());
  KernelRecorderOptions no_stack_entries;
  no_stack_entries.stack_map_entries = 0;
  KernelRecorderOptions long_prefix;
  long_prefix.device_prefix = std::string(GPROF_COMM_LEN, 'x');
  KernelRecorderOptions huge_ring;
  huge_ring.ring_buffer_bytes = (uint64_t{1} << 30) + 1;
  for (const KernelRecorderOptions& options : {no_stack_entries, long_prefix, huge_ring}) {
    auto started = KernelRecorder::Start(dir, options);
    ASSERT_FALSE(started.ok());
    EXPECT_EQ(started.status().code(), StatusCode::kInvalid) << started.status().message();
    EXPECT_FALSE(started.status().message().empty());
  }
  EXPECT_FALSE(fs::exists(dir + "/kernel.gpr"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gprof::bpf::recorder_test
