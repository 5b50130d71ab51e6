// The kernel recorder against the real kernel: loads the BPF programs, records a child process
// that runs known contention, and reads kernel.gpr back through the collector's readers.
//
// Needs root (or CAP_BPF+CAP_PERFMON). Without it the tests skip, unless GPROF_REQUIRE_BPF=1 (CI),
// where they fail: CI must really run BPF.
#include "kernel_recorder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
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
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "chunk_reader.h"
#include "kernel_events.h"
#include "session_format.h"
#include "session_reader.h"
#include "test_support.h"

namespace gprof::bpf {
namespace {

namespace fs = std::filesystem;
using collector::FutexCall;
using collector::OffCpuInterval;
using collector::OffCpuState;
using collector::RecordView;
using collector::Session;

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kHoldNs = 50 * kMs;  // how long the holder keeps the mutex once B sleeps

std::string MakeSessionDir() {
  char pattern[] = "/tmp/gprof-kernel-test-XXXXXX";
  const char* dir = mkdtemp(pattern);
  return dir != nullptr ? dir : "";
}

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The scheduler state letter of a thread of this process ('R', 'S', 'D', ...), or 0.
char ThreadState(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

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

// A process outside the tree (a sibling of the child) that sleeps and wakes all along.
pid_t StartNoiseProcess() {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 20000; ++i) SleepNs(500000);
    _exit(0);
  }
  return pid;
}

// A user stack of kernel.gpr: its flags and return addresses, innermost first.
struct UserStack {
  uint32_t flags = 0;
  std::vector<uint64_t> ips;
};

struct MapsSnapshot {
  uint32_t pid = 0;
  uint64_t time_ns = 0;
  std::string text;
};

struct RawRecords {
  std::vector<gprof_task_new> starts;
  std::vector<gprof_task_rename> renames;
  std::vector<gprof_task_exit> exits;
  std::vector<gprof_futex> futexes;
  std::vector<gprof_futex_waitv> waitvs;
  std::vector<gprof_offcpu> offcpu;
  std::vector<gprof_lock_wait> lock_waits;
  std::vector<gprof_device_wait> device_waits;
  std::vector<gprof_page_fault> page_faults;
  std::vector<gprof_memory_map> memory_maps;
  std::vector<gprof_event_count> counts;
  std::vector<gprof_lost> lost;
  std::vector<gprof_signal> signals;
  std::map<int32_t, UserStack> user_stacks;
  std::map<int32_t, std::vector<uint64_t>> kernel_stacks;
  std::map<uint64_t, std::string> kernel_symbols;  // by address
  std::vector<MapsSnapshot> maps;
  std::vector<std::string> messages;
  uint64_t count = 0;
  uint64_t unknown = 0;
  std::string malformed;  // the first loader record that did not decode
};

template <typename T>
void Collect(const RecordView& record, std::vector<T>* out) {
  T value;
  if (collector::ReadRecord(record.bytes, &value)) out->push_back(value);
}

// kernel.gpr record by record, for what the model folds away (exec flag, exit codes, flags).
RawRecords ReadRaw(const std::string& path, std::string* error) {
  RawRecords raw;
  std::vector<collector::Diagnostic> diagnostics;
  auto tail = [](const RecordView& record, size_t header) {
    return std::string(reinterpret_cast<const char*>(record.bytes.data()) + header,
                       record.bytes.size() - header);
  };
  auto summary = collector::ReadChunkFile(
      path,
      [&](const RecordView& record) {
        ++raw.count;
        switch (record.type) {
          case GPROF_REC_TASK_NEW:
            return Collect(record, &raw.starts);
          case GPROF_REC_TASK_RENAME:
            return Collect(record, &raw.renames);
          case GPROF_REC_TASK_EXIT:
            return Collect(record, &raw.exits);
          case GPROF_REC_FUTEX:
            return Collect(record, &raw.futexes);
          case GPROF_REC_FUTEX_WAITV:
            return Collect(record, &raw.waitvs);
          case GPROF_REC_OFFCPU:
            return Collect(record, &raw.offcpu);
          case GPROF_REC_LOCK_WAIT:
            return Collect(record, &raw.lock_waits);
          case GPROF_REC_DEVICE_WAIT:
            return Collect(record, &raw.device_waits);
          case GPROF_REC_PAGE_FAULT:
            return Collect(record, &raw.page_faults);
          case GPROF_REC_MEMORY_MAP:
            return Collect(record, &raw.memory_maps);
          case GPROF_REC_EVENT_COUNT:
            return Collect(record, &raw.counts);
          case GPROF_REC_LOST:
            return Collect(record, &raw.lost);
          case GPROF_REC_SIGNAL:
            return Collect(record, &raw.signals);
          case GPROF_REC_USER_STACK: {
            gprof_user_stack stack;
            if (!collector::ReadRecord(record.bytes, &stack) ||
                record.bytes.size() != sizeof(stack) + stack.depth * sizeof(uint64_t)) {
              raw.malformed = "user stack";
              return;
            }
            UserStack& out = raw.user_stacks[stack.stack_id];
            out.flags = stack.flags;
            out.ips.resize(stack.depth);
            memcpy(out.ips.data(), record.bytes.data() + sizeof(stack),
                   stack.depth * sizeof(uint64_t));
            return;
          }
          case GPROF_REC_PROCESS_MAPS: {
            gprof_process_maps maps;
            if (!collector::ReadRecord(record.bytes, &maps) ||
                record.bytes.size() != sizeof(maps) + maps.text_len) {
              raw.malformed = "process maps";
              return;
            }
            raw.maps.push_back({maps.pid, maps.time_ns, tail(record, sizeof(maps))});
            return;
          }
          case format::kMessage: {
            format::MessageRecord message;
            if (!collector::ReadRecord(record.bytes, &message)) {
              raw.malformed = "message";
              return;
            }
            raw.messages.push_back(tail(record, sizeof(message)));
            return;
          }
          case GPROF_REC_KERNEL_STACK: {
            gprof_kernel_stack stack;
            if (!collector::ReadRecord(record.bytes, &stack) ||
                record.bytes.size() != sizeof(stack) + stack.depth * sizeof(uint64_t)) {
              raw.malformed = "kernel stack";
              return;
            }
            std::vector<uint64_t>& ips = raw.kernel_stacks[stack.stack_id];
            ips.resize(stack.depth);
            memcpy(ips.data(), record.bytes.data() + sizeof(stack), stack.depth * sizeof(uint64_t));
            return;
          }
          case GPROF_REC_KERNEL_SYMBOL: {
            gprof_kernel_symbol symbol;
            if (!collector::ReadRecord(record.bytes, &symbol) ||
                record.bytes.size() != sizeof(symbol) + symbol.name_len) {
              raw.malformed = "kernel symbol";
              return;
            }
            raw.kernel_symbols[symbol.address] = tail(record, sizeof(symbol));
            return;
          }
          default:
            ++raw.unknown;
        }
      },
      &diagnostics);
  if (!summary.ok()) {
    *error = summary.status().message();
  } else if (!diagnostics.empty()) {
    *error = diagnostics.front().message;
  } else if (!raw.malformed.empty()) {
    *error = "malformed " + raw.malformed + " record";
  }
  return raw;
}

std::string Comm(const char (&comm)[GPROF_COMM_LEN]) {
  return std::string(comm, strnlen(comm, GPROF_COMM_LEN));
}

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

// ---- Scenarios run in a recorded child -------------------------------------------------------

// What a recorded child scenario sends back with its report: empty when it ran as planned.
struct ScenarioStatus {
  char failure[120] = {};
  void Fail(const char* why) {
    if (failure[0] == '\0') snprintf(failure, sizeof(failure), "%s", why);
  }
};

// Waits until thread `tid` of this process is in one of `states` ('S', 'D', 'Z'...), for up to
// 10 s.
bool WaitUntilState(pid_t tid, const char* states) {
  for (int i = 0; i < 10000; ++i) {
    char state = ThreadState(tid);
    if (state != 0 && strchr(states, state) != nullptr) return true;
    SleepNs(kMs);
  }
  return false;
}

// Forks a child that waits until `recorder` tracks it, runs `scenario`, sends the Report it
// returns and exits 0; polls the recorder until the child is gone, then finishes the recording.
// Reports are plain structs with a ScenarioStatus `status`.
template <typename Report>
void RunRecordedChild(KernelRecorder* recorder, const std::function<Report()>& scenario,
                      Report* report) {
  int release[2], result[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    if (read(release[0], &byte, 1) != 1) _exit(100);
    Report sent = scenario();
    (void)!write(result[1], &sent, sizeof(sent));
    _exit(0);
  }
  close(release[0]);
  close(result[1]);
  std::string error;
  ASSERT_TRUE(recorder->Track(child, &error)) << error;
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);
  int status = 0;
  uint64_t deadline = NowNs() + 60000 * kMs;
  while (waitpid(child, &status, WNOHANG) == 0) {
    int drained = recorder->Poll(50);
    ASSERT_GE(drained, 0) << strerror(-drained);
    if (NowNs() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the child did not finish in 60 s";
    }
  }
  ssize_t got = read(result[0], report, sizeof(*report));
  close(result[0]);
  recorder->Finish();
  EXPECT_TRUE(recorder->last_error().empty()) << recorder->last_error();
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(*report))) << "no report; wait status " << status;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(report->status.failure[0], '\0') << "child scenario failed: " << report->status.failure;
}

// Functions whose code lies in a section of its own, so that a test can tell whether a return
// address of a user stack is inside them (the linker defines __start_/__stop_ for such sections).
// They issue their system calls themselves: the kernel's user stack then starts in them, and the
// frame-pointer walk goes on through their callers. GCC builds a leaf function without a frame
// even with -fno-omit-frame-pointer: taking the frame's address makes it keep one.
#define GPROF_TEST_SECTION(name) __attribute__((noinline, section(#name)))
#define GPROF_SECTION_BOUNDS(name) extern "C" const char __start_##name[], __stop_##name[]

GPROF_SECTION_BOUNDS(gprof_pipe_read);
GPROF_SECTION_BOUNDS(gprof_pipe_reader);
GPROF_SECTION_BOUNDS(gprof_pipe_write);
GPROF_SECTION_BOUNDS(gprof_deep_stack);
GPROF_SECTION_BOUNDS(gprof_spin);
GPROF_SECTION_BOUNDS(gprof_touch);

bool InSection(uint64_t ip, const char* start, const char* stop) {
  return ip >= reinterpret_cast<uint64_t>(start) && ip < reinterpret_cast<uint64_t>(stop);
}
#define IN_SECTION(ip, name) InSection(ip, __start_##name, __stop_##name)

GPROF_TEST_SECTION(gprof_pipe_read) long PipeReadFrame(int fd, void* buffer, size_t size) {
  long ret;
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_read)), "D"(fd), "S"(buffer), "d"(size)
               : "rcx", "r11", "memory");
  return ret;
}

GPROF_TEST_SECTION(gprof_pipe_write) long PipeWriteFrame(int fd, const void* buffer, size_t size) {
  long ret;
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_write)), "D"(fd), "S"(buffer), "d"(size)
               : "rcx", "r11", "memory");
  return ret;
}

GPROF_TEST_SECTION(gprof_pipe_reader) long PipeReader(int fd) {
  char byte = 0;
  long got = PipeReadFrame(fd, &byte, 1);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return got;
}

// Blocks in a pipe read `depth` frames deep: deeper than the kernel walks.
GPROF_TEST_SECTION(gprof_deep_stack) long DeepRead(int depth, int fd) {
  if (depth == 0) return PipeReader(fd);
  long got = DeepRead(depth - 1, fd);
  asm volatile("" ::: "memory");
  return got;
}

// Writes a byte: a page fault, if one comes, is taken in this function.
GPROF_TEST_SECTION(gprof_touch) void TouchPage(char* page) {
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  *static_cast<volatile char*>(page) = 1;
}

// Spins until the deadline, reading the clock only every million iterations: a preemption
// finds it in its own code, not in the clock's.
GPROF_TEST_SECTION(gprof_spin) void SpinUntil(uint64_t deadline_ns) {
  while (NowNs() < deadline_ns) {
    for (int i = 0; i < 1000000; ++i) asm volatile("" ::: "memory");
  }
}

const UserStack* FindUserStack(const RawRecords& raw, int32_t id) {
  auto found = raw.user_stacks.find(id);
  return found == raw.user_stacks.end() ? nullptr : &found->second;
}

// The off-CPU interval of `tid` that was in progress at `time_ns`, or null.
const gprof_offcpu* OffCpuAt(const RawRecords& raw, uint32_t tid, uint64_t time_ns) {
  for (const auto& o : raw.offcpu) {
    if (o.tid == tid && o.start_ns <= time_ns && o.end_ns >= time_ns) return &o;
  }
  return nullptr;
}

// The longest off-CPU interval of `tid`, or null.
// The longest off-CPU interval of `tid`, of those inside [from_ns, to_ns] when given.
const gprof_offcpu* LongestOffCpu(const RawRecords& raw, uint32_t tid, uint64_t from_ns = 0,
                                  uint64_t to_ns = UINT64_MAX) {
  const gprof_offcpu* longest = nullptr;
  for (const auto& o : raw.offcpu) {
    if (o.tid == tid && o.start_ns >= from_ns && o.end_ns <= to_ns &&
        (longest == nullptr || o.end_ns - o.start_ns > longest->end_ns - longest->start_ns)) {
      longest = &o;
    }
  }
  return longest;
}

// The function names of kernel stack `id`, innermost first ("" for an address without one).
std::vector<std::string> KernelFrames(const RawRecords& raw, int32_t id) {
  std::vector<std::string> names;
  auto stack = raw.kernel_stacks.find(id);
  if (stack == raw.kernel_stacks.end()) return names;
  for (uint64_t ip : stack->second) {
    auto symbol = raw.kernel_symbols.find(ip);
    names.push_back(symbol == raw.kernel_symbols.end() ? "" : symbol->second);
  }
  return names;
}

bool KernelStackMentions(const RawRecords& raw, int32_t id, const std::string& word) {
  for (const std::string& name : KernelFrames(raw, id)) {
    if (name.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string DescribeKernelStack(const RawRecords& raw, int32_t id) {
  std::string text = "kernel stack " + std::to_string(id) + ":";
  for (const std::string& name : KernelFrames(raw, id)) text += "\n    " + name;
  return text;
}

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

class KernelRecorderTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Starts a recorder in a fresh session dir; leaves recorder_ null (and the test skipped or
  // failed) when BPF cannot be used.
  void StartRecorder(const KernelRecorderOptions& options = {}) {
    GPROF_NEED_BPF();
    dir_ = MakeSessionDir();
    ASSERT_FALSE(dir_.empty()) << strerror(errno);
    std::string error;
    bool denied = false;
    recorder_ = KernelRecorder::Start(dir_, options, &error, &denied);
    if (recorder_ == nullptr && denied) GPROF_SKIP_OR_FAIL("BPF load refused: " + error);
    ASSERT_NE(recorder_, nullptr) << error;
    EXPECT_TRUE(error.empty()) << error;
    EXPECT_FALSE(denied);
  }

  std::string dir_;
  std::unique_ptr<KernelRecorder> recorder_;
};

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

  std::string error;
  ASSERT_TRUE(recorder_->Track(child, &error)) << error;
  EXPECT_FALSE(recorder_->Track(getpid(), &error)) << "the recorder must refuse its own process";
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
  EXPECT_FALSE(recorder_->Track(child, &error));
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
  std::string error;
  ASSERT_TRUE(recorder_->Track(child, &error)) << error;
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
  std::string error;
  ASSERT_TRUE(recorder_->Track(child, &error)) << error;
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

// A pthread mutex convoy: a holder and three waiters queued one after the other. Each waiter
// sleeps in a futex wait on the mutex word and is woken by the thread that held it before: the
// holder wakes the first, the first the second, the second the third.
TEST_F(KernelRecorderTest, MutexConvoyChainsTheWakers) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr uint64_t kHold = 20 * kMs;
  struct Report {
    ScenarioStatus status;
    uint32_t tids[4];  // the holder, then the waiters in queue order
    uint64_t mutex_addr;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
        std::atomic<pid_t> tids[4] = {};
        std::atomic<int> locked{0};
        std::vector<std::thread> threads;
        threads.emplace_back([&] {
          tids[0] = gettid();
          pthread_mutex_lock(&mutex);
          locked = 1;
          for (int i = 1; i < 4; ++i) {
            while (tids[i] == 0) sched_yield();
            if (!WaitUntilState(tids[i], "S")) r.status.Fail("a waiter never blocked");
          }
          SleepNs(kHold);
          pthread_mutex_unlock(&mutex);
        });
        for (int i = 1; i < 4; ++i) {
          threads.emplace_back([&, i] {
            while (locked == 0) sched_yield();
            // Queue behind the previous waiter: the futex wakes waiters in the order they came.
            while (tids[i - 1] == 0) sched_yield();
            if (i > 1 && !WaitUntilState(tids[i - 1], "S")) r.status.Fail("waiter not queued");
            tids[i] = gettid();
            pthread_mutex_lock(&mutex);
            SleepNs(kHold);
            pthread_mutex_unlock(&mutex);
          });
        }
        for (auto& thread : threads) thread.join();
        for (int i = 0; i < 4; ++i) r.tids[i] = static_cast<uint32_t>(tids[i]);
        r.mutex_addr = reinterpret_cast<uint64_t>(&mutex);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  for (int i = 1; i < 4; ++i) {
    SCOPED_TRACE("waiter " + std::to_string(i));
    const uint32_t waiter = report.tids[i], previous = report.tids[i - 1];
    // The same chain in the futex calls: the waiter's wait on the mutex word, and the previous
    // holder's wake of one thread while it waited.
    const gprof_futex* wait = nullptr;
    for (const auto& f : raw.futexes) {
      if (f.tid == waiter && f.uaddr == report.mutex_addr && (f.op & 127) == FUTEX_WAIT &&
          (wait == nullptr || f.end_ns - f.start_ns > wait->end_ns - wait->start_ns)) {
        wait = &f;
      }
    }
    ASSERT_NE(wait, nullptr) << "no futex wait on the mutex";
    EXPECT_EQ(wait->ret, 0);
    const gprof_offcpu* sleep = LongestOffCpu(raw, waiter, wait->start_ns, wait->end_ns);
    ASSERT_NE(sleep, nullptr) << "no sleep inside the futex wait";
    EXPECT_GE(sleep->end_ns - sleep->start_ns, i * kHold);
    EXPECT_EQ(sleep->state & 3, static_cast<uint32_t>(GPROF_TASK_INTERRUPTIBLE)) << sleep->state;
    EXPECT_EQ(sleep->waker_tid, previous) << "woken by the thread that held the mutex before";
    EXPECT_TRUE(KernelStackMentions(raw, sleep->kstack_id, "futex"))
        << DescribeKernelStack(raw, sleep->kstack_id);
    EXPECT_TRUE(KernelStackMentions(raw, sleep->waker_kstack_id, "futex_wake"))
        << DescribeKernelStack(raw, sleep->waker_kstack_id);
    EXPECT_NE(FindUserStack(raw, sleep->user_stack_id), nullptr) << sleep->user_stack_id;
    EXPECT_NE(FindUserStack(raw, sleep->waker_user_stack_id), nullptr)
        << sleep->waker_user_stack_id;

    bool woken = false;
    for (const auto& f : raw.futexes) {
      woken |= f.tid == previous && f.uaddr == report.mutex_addr && (f.op & 127) == FUTEX_WAKE &&
               f.ret == 1 && f.start_ns >= wait->start_ns && f.start_ns <= wait->end_ns;
    }
    EXPECT_TRUE(woken) << "no wake of the previous holder inside the wait";
  }
}

// More runnable threads than CPUs: three threads spin on one CPU. Each is preempted again and
// again: runnable intervals (state 0), with no waker, whose total is its time waiting for the CPU,
// and whose user stack is in the spinning function.
TEST_F(KernelRecorderTest, RunnableThreadsWaitForTheCpu) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr uint64_t kSpin = 300 * kMs;
  struct Report {
    ScenarioStatus status;
    uint32_t tids[3];
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        cpu_set_t one_cpu;
        CPU_ZERO(&one_cpu);
        CPU_SET(0, &one_cpu);
        if (sched_setaffinity(0, sizeof(one_cpu), &one_cpu) != 0) r.status.Fail("affinity");
        std::atomic<pid_t> tids[3] = {};
        uint64_t deadline = NowNs() + kSpin;
        std::vector<std::thread> spinners;
        for (int i = 0; i < 3; ++i) {
          spinners.emplace_back([&, i] {
            tids[i] = gettid();
            SpinUntil(deadline);
          });
        }
        for (auto& thread : spinners) thread.join();
        for (int i = 0; i < 3; ++i) r.tids[i] = static_cast<uint32_t>(tids[i]);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  for (uint32_t tid : report.tids) {
    SCOPED_TRACE("spinner " + std::to_string(tid));
    uint64_t waiting_ns = 0;
    int runnable = 0, in_spin = 0;
    for (const auto& o : raw.offcpu) {
      if (o.tid != tid || o.state != GPROF_TASK_RUNNING) continue;
      ++runnable;
      waiting_ns += o.end_ns - o.start_ns;
      EXPECT_EQ(o.wake_ns, 0u) << "a preempted thread is never woken";
      EXPECT_EQ(o.waker_tid, 0u);
      EXPECT_EQ(o.waker_pid, 0u);
      EXPECT_EQ(Comm(o.waker_comm), "");
      EXPECT_EQ(o.cpu, 0u) << "pinned to CPU 0";
      EXPECT_EQ(o.flags, 0u);
      const UserStack* stack = FindUserStack(raw, o.user_stack_id);
      if (stack != nullptr && !stack->ips.empty() && IN_SECTION(stack->ips[0], gprof_spin)) {
        ++in_spin;
      }
    }
    EXPECT_GE(runnable, 5);
    // Three threads share one CPU: each waits about two thirds of the time.
    EXPECT_GE(waiting_ns, kSpin / 3) << runnable << " runnable intervals";
    EXPECT_GE(in_spin, runnable / 2) << "user stacks at preemption in SpinUntil";
  }
}

// The return addresses of kernel stack `id` below the scheduler's __schedule: where the thread
// slept, whichever side of the switch the stack was taken on.
std::vector<uint64_t> FramesBelowSchedule(const RawRecords& raw, int32_t id) {
  std::vector<std::string> names = KernelFrames(raw, id);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != "__schedule") continue;
    const std::vector<uint64_t>& ips = raw.kernel_stacks.at(id);
    return {ips.begin() + static_cast<long>(i) + 1, ips.end()};
  }
  return {};
}

struct StackThresholdReport {
  ScenarioStatus status;
  uint32_t ping, pong, spinners[2];
  uint64_t long_read_ns;
};

// Two threads hand a byte back and forth through pipes (short sleeps), then one of them blocks in
// a pipe read until the main thread writes 20 ms later (a long sleep in a system call); two
// threads spin on CPU 0 (long waits for the CPU, preempted in user mode).
StackThresholdReport RunStackThresholdScenario() {
  constexpr int kRounds = 2000;
  StackThresholdReport r{};
  int to_pong[2], to_ping[2], wake[2];
  if (pipe(to_pong) != 0 || pipe(to_ping) != 0 || pipe(wake) != 0) {
    r.status.Fail("pipe");
    return r;
  }
  std::atomic<pid_t> ping{0}, pong{0}, spinners[2] = {};
  std::thread pong_thread([&] {
    pong = gettid();
    char byte = 0;
    for (int i = 0; i < kRounds; ++i) {
      if (PipeReadFrame(to_pong[0], &byte, 1) != 1 || PipeWriteFrame(to_ping[1], &byte, 1) != 1) {
        r.status.Fail("pong");
        return;
      }
    }
  });
  std::thread ping_thread([&] {
    ping = gettid();
    char byte = 'x';
    for (int i = 0; i < kRounds; ++i) {
      if (PipeWriteFrame(to_pong[1], &byte, 1) != 1 || PipeReadFrame(to_ping[0], &byte, 1) != 1) {
        r.status.Fail("ping");
        return;
      }
    }
    if (PipeReader(wake[0]) != 1) r.status.Fail("long read");
  });
  pong_thread.join();
  while (ping == 0) sched_yield();
  if (!WaitUntilState(ping, "S")) r.status.Fail("ping never blocked");
  SleepNs(20 * kMs);
  r.long_read_ns = NowNs();
  if (PipeWriteFrame(wake[1], "y", 1) != 1) r.status.Fail("write");
  ping_thread.join();

  uint64_t deadline = NowNs() + 60 * kMs;
  std::vector<std::thread> spinning;
  for (int i = 0; i < 2; ++i) {
    spinning.emplace_back([&, i] {
      cpu_set_t one_cpu;
      CPU_ZERO(&one_cpu);
      CPU_SET(0, &one_cpu);
      if (sched_setaffinity(0, sizeof(one_cpu), &one_cpu) != 0) r.status.Fail("affinity");
      spinners[i] = gettid();
      SpinUntil(deadline);
    });
  }
  for (auto& thread : spinning) thread.join();
  r.ping = static_cast<uint32_t>(ping);
  r.pong = static_cast<uint32_t>(pong);
  for (int i = 0; i < 2; ++i) r.spinners[i] = static_cast<uint32_t>(spinners[i]);
  return r;
}

// Off-CPU intervals shorter than the stack threshold have no stacks; longer ones have the stacks
// the thread switched out with: a sleep in a system call its kernel stack through pipe_read and
// its user stack from the function that made the call, a preemption in user mode its user stack
// in the spinning function. Taken when the thread runs again (sched_exit_tp) or at every
// switch-out, the stacks are the same.
TEST_F(KernelRecorderTest, StacksOnlyForLongIntervalsAsAtTheSwitchOut) {
  constexpr uint64_t kStackMinNs = 20000;
  std::vector<uint64_t> long_read_frames[2];
  std::vector<uint64_t> long_read_ips[2];
  for (int at_switch_out = 0; at_switch_out < 2; ++at_switch_out) {
    SCOPED_TRACE(at_switch_out ? "stacks at every switch-out" : "stacks when it runs again");
    KernelRecorderOptions options;
    options.stack_map_entries = 65536;  // make a stack-bucket collision rare
    options.stack_min_ns = kStackMinNs;
    options.stacks_at_switch_out = at_switch_out == 1;
    if (at_switch_out) TearDown();
    StartRecorder(options);
    if (recorder_ == nullptr) return;
    const std::vector<std::string>& notes = recorder_->notes();
    EXPECT_EQ(std::count(notes.begin(), notes.end(),
                         "kernel recorder: stacks only for off-CPU intervals of at least 20 us, "
                         "and a waker's only for a wait that long"),
              1);
    EXPECT_EQ(std::count(notes.begin(), notes.end(),
                         "kernel recorder: off-CPU stacks taken at every switch-out, not when the "
                         "thread runs again (asked for)"),
              at_switch_out);
    StackThresholdReport report{};
    ASSERT_NO_FATAL_FAILURE(RunRecordedChild<StackThresholdReport>(
        recorder_.get(), RunStackThresholdScenario, &report));
    std::string error;
    RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
    ASSERT_TRUE(error.empty()) << error;

    int short_ones = 0, long_ones = 0, spinner_waits = 0, spinner_waits_in_spin = 0;
    for (const auto& o : raw.offcpu) {
      bool spinner = o.tid == report.spinners[0] || o.tid == report.spinners[1];
      if (o.tid != report.ping && o.tid != report.pong && !spinner) continue;
      if (o.end_ns - o.start_ns < kStackMinNs) {
        ++short_ones;
        EXPECT_EQ(o.kstack_id, -ENODATA) << o.end_ns - o.start_ns << " ns";
        EXPECT_EQ(o.user_stack_id, -ENODATA) << o.end_ns - o.start_ns << " ns";
        continue;
      }
      ++long_ones;
      // A stack map bucket already taken by another stack is the one loss allowed (-EEXIST).
      EXPECT_TRUE(o.kstack_id >= 0 || o.kstack_id == -EEXIST) << o.kstack_id;
      if (o.kstack_id >= 0) {
        EXPECT_FALSE(FramesBelowSchedule(raw, o.kstack_id).empty())
            << DescribeKernelStack(raw, o.kstack_id);
      }
      // -EFAULT: a walk that found no user frame (a thread on its way out).
      EXPECT_TRUE(o.user_stack_id >= 0 || o.user_stack_id == -EEXIST || o.user_stack_id == -EFAULT)
          << o.user_stack_id;
      if (spinner && o.state == GPROF_TASK_RUNNING) {
        ++spinner_waits;
        const UserStack* stack = FindUserStack(raw, o.user_stack_id);
        if (stack != nullptr && !stack->ips.empty() && IN_SECTION(stack->ips[0], gprof_spin)) {
          ++spinner_waits_in_spin;
        }
      }
    }
    EXPECT_GE(short_ones, 100) << "a pipe ping-pong's sleeps are short";
    EXPECT_GE(long_ones, 3);
    EXPECT_GE(spinner_waits, 4) << "two threads spinning on one CPU wait for it";
    EXPECT_GE(spinner_waits_in_spin, spinner_waits / 2) << "user stacks at preemption in SpinUntil";

    const gprof_offcpu* wait = OffCpuAt(raw, report.ping, report.long_read_ns);
    ASSERT_NE(wait, nullptr) << "no off-CPU interval of the long read";
    EXPECT_GE(wait->end_ns - wait->start_ns, 20 * kMs);
    long_read_frames[at_switch_out] = FramesBelowSchedule(raw, wait->kstack_id);
    EXPECT_TRUE(KernelStackMentions(raw, wait->kstack_id, "pipe_read"))
        << DescribeKernelStack(raw, wait->kstack_id);
    const UserStack* stack = FindUserStack(raw, wait->user_stack_id);
    ASSERT_NE(stack, nullptr) << "no user stack: " << wait->user_stack_id;
    ASSERT_GE(stack->ips.size(), 2u);
    EXPECT_TRUE(IN_SECTION(stack->ips[0], gprof_pipe_read)) << std::hex << stack->ips[0];
    EXPECT_TRUE(IN_SECTION(stack->ips[1], gprof_pipe_reader)) << std::hex << stack->ips[1];
    long_read_ips[at_switch_out] = stack->ips;
  }
  // The same call path both ways (the frames above __schedule are the tracing's own), and the
  // same user return addresses (both children are forks of this process: the same layout).
  EXPECT_FALSE(long_read_frames[0].empty());
  EXPECT_EQ(long_read_frames[0], long_read_frames[1]);
  EXPECT_EQ(long_read_ips[0], long_read_ips[1]);
}

// A thread blocked in a pipe read is woken by the writer: off-CPU in pipe_read, woken by the
// writing thread, with its user stack (in the reading function, then its caller) and the
// writer's user stack at the wakeup (in the writing function). A read 200 frames deep has a user
// stack cut at the depth limit, flagged as truncated.
TEST_F(KernelRecorderTest, PipeWaitNamesTheWriterAndBothUserStacks) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  struct Report {
    ScenarioStatus status;
    uint32_t reader, deep_reader, writer;
    uint64_t write_ns;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        int shallow[2], deep[2];
        if (pipe(shallow) != 0 || pipe(deep) != 0) {
          r.status.Fail("pipe");
          return r;
        }
        std::atomic<pid_t> reader{0}, deep_reader{0};
        std::thread shallow_thread([&] {
          reader = gettid();
          if (PipeReader(shallow[0]) != 1) r.status.Fail("read");
        });
        std::thread deep_thread([&] {
          deep_reader = gettid();
          if (DeepRead(200, deep[0]) != 1) r.status.Fail("deep read");
        });
        while (reader == 0 || deep_reader == 0) sched_yield();
        if (!WaitUntilState(reader, "S") || !WaitUntilState(deep_reader, "S")) {
          r.status.Fail("readers never blocked");
        }
        SleepNs(30 * kMs);
        r.write_ns = NowNs();
        if (PipeWriteFrame(shallow[1], "x", 1) != 1 || PipeWriteFrame(deep[1], "y", 1) != 1) {
          r.status.Fail("write");
        }
        shallow_thread.join();
        deep_thread.join();
        r.reader = static_cast<uint32_t>(reader);
        r.deep_reader = static_cast<uint32_t>(deep_reader);
        r.writer = static_cast<uint32_t>(gettid());
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  const gprof_offcpu* wait = OffCpuAt(raw, report.reader, report.write_ns);
  ASSERT_NE(wait, nullptr) << "no off-CPU interval of the reader at the write";
  EXPECT_GE(wait->end_ns - wait->start_ns, 30 * kMs);
  EXPECT_EQ(wait->state & 3, static_cast<uint32_t>(GPROF_TASK_INTERRUPTIBLE)) << wait->state;
  EXPECT_EQ(wait->waker_tid, report.writer);
  EXPECT_GE(wait->wake_ns, report.write_ns);
  EXPECT_TRUE(KernelStackMentions(raw, wait->kstack_id, "pipe_read"))
      << DescribeKernelStack(raw, wait->kstack_id);
  EXPECT_TRUE(KernelStackMentions(raw, wait->waker_kstack_id, "pipe_write"))
      << DescribeKernelStack(raw, wait->waker_kstack_id);

  const UserStack* stack = FindUserStack(raw, wait->user_stack_id);
  ASSERT_NE(stack, nullptr) << "no user stack: " << wait->user_stack_id;
  ASSERT_GE(stack->ips.size(), 2u);
  EXPECT_TRUE(IN_SECTION(stack->ips[0], gprof_pipe_read)) << std::hex << stack->ips[0];
  EXPECT_TRUE(IN_SECTION(stack->ips[1], gprof_pipe_reader)) << std::hex << stack->ips[1];
  EXPECT_EQ(stack->flags, 0u);
  const UserStack* waker_stack = FindUserStack(raw, wait->waker_user_stack_id);
  ASSERT_NE(waker_stack, nullptr) << "no user stack of the waker: " << wait->waker_user_stack_id;
  ASSERT_FALSE(waker_stack->ips.empty());
  EXPECT_TRUE(IN_SECTION(waker_stack->ips[0], gprof_pipe_write)) << std::hex << waker_stack->ips[0];

  const gprof_offcpu* deep_wait = OffCpuAt(raw, report.deep_reader, report.write_ns);
  ASSERT_NE(deep_wait, nullptr);
  EXPECT_EQ(deep_wait->waker_tid, report.writer);
  const UserStack* deep_stack = FindUserStack(raw, deep_wait->user_stack_id);
  ASSERT_NE(deep_stack, nullptr) << deep_wait->user_stack_id;
  EXPECT_EQ(deep_stack->ips.size(), static_cast<size_t>(GPROF_MAX_STACK_DEPTH));
  EXPECT_EQ(deep_stack->flags, static_cast<uint32_t>(GPROF_USER_STACK_TRUNCATED));
  EXPECT_TRUE(IN_SECTION(deep_stack->ips[0], gprof_pipe_read));
  EXPECT_TRUE(IN_SECTION(deep_stack->ips.back(), gprof_deep_stack));
}

// A struct mutex in the kernel: a write to a pseudo-terminal holds the tty's atomic_write_lock
// for the whole write, sleeping while the terminal is full. A second writer sleeps on that mutex;
// its lock wait names the first writer as the owner, and the first writer wakes it.
TEST_F(KernelRecorderTest, KernelMutexWaitNamesTheOwner) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr uint64_t kHold = 50 * kMs;
  constexpr size_t kBig = 1 << 20;
  struct Report {
    ScenarioStatus status;
    uint32_t pid, owner, waiter;
    uint64_t hold_start_ns, hold_end_ns;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        int master = posix_openpt(O_RDWR | O_NOCTTY);
        if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
          r.status.Fail("pseudo-terminal");
          return r;
        }
        int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
        termios raw_mode{};
        if (slave < 0 || tcgetattr(slave, &raw_mode) != 0) {
          r.status.Fail("terminal");
          return r;
        }
        cfmakeraw(&raw_mode);
        tcsetattr(slave, TCSANOW, &raw_mode);
        std::atomic<pid_t> owner{0}, waiter{0};
        std::thread owner_thread([&] {
          pthread_setname_np(pthread_self(), "gp-tty-owner");
          owner = gettid();
          std::vector<char> big(kBig, 'x');
          if (write(slave, big.data(), big.size()) != static_cast<ssize_t>(big.size())) {
            r.status.Fail("big write");
          }
        });
        while (owner == 0) sched_yield();
        if (!WaitUntilState(owner, "S")) r.status.Fail("the first writer never blocked");
        std::thread waiter_thread([&] {
          pthread_setname_np(pthread_self(), "gp-tty-waiter");
          waiter = gettid();
          if (write(slave, "!", 1) != 1) r.status.Fail("small write");
        });
        while (waiter == 0) sched_yield();
        if (!WaitUntilState(waiter, "S")) r.status.Fail("the second writer never blocked");
        r.hold_start_ns = NowNs();
        SleepNs(kHold);
        r.hold_end_ns = NowNs();
        std::vector<char> sink(65536);
        size_t drained = 0;
        while (drained < kBig + 1) {
          pollfd readable{master, POLLIN, 0};
          if (poll(&readable, 1, 10000) != 1) break;
          ssize_t got = read(master, sink.data(), sink.size());
          if (got <= 0) break;
          drained += static_cast<size_t>(got);
        }
        owner_thread.join();
        waiter_thread.join();
        if (drained != kBig + 1) r.status.Fail("the terminal did not deliver everything");
        r.pid = static_cast<uint32_t>(getpid());
        r.owner = static_cast<uint32_t>(owner);
        r.waiter = static_cast<uint32_t>(waiter);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  const gprof_lock_wait* wait = nullptr;
  for (const auto& w : raw.lock_waits) {
    if (w.tid == report.waiter && w.start_ns <= report.hold_start_ns &&
        w.end_ns >= report.hold_end_ns) {
      wait = &w;
    }
  }
  ASSERT_NE(wait, nullptr) << "no lock wait of the second writer over the hold";
  EXPECT_EQ(wait->pid, report.pid);
  EXPECT_EQ(wait->flags, static_cast<uint32_t>(GPROF_LOCK_MUTEX)) << std::hex << wait->flags;
  EXPECT_EQ(wait->owner_tid, report.owner);
  EXPECT_EQ(wait->owner_pid, report.pid);
  EXPECT_EQ(Comm(wait->owner_comm), "gp-tty-owner");
  EXPECT_EQ(wait->ret, 0);
  EXPECT_NE(wait->lock_address, 0u);
  EXPECT_TRUE(KernelStackMentions(raw, wait->kstack_id, "tty_write"))
      << DescribeKernelStack(raw, wait->kstack_id);
  EXPECT_NE(FindUserStack(raw, wait->user_stack_id), nullptr) << wait->user_stack_id;
  const gprof_offcpu* sleep = OffCpuAt(raw, report.waiter, report.hold_end_ns);
  ASSERT_NE(sleep, nullptr);
  EXPECT_EQ(sleep->waker_tid, report.owner) << "the owner's unlock wakes the waiter";
  EXPECT_TRUE(KernelStackMentions(raw, sleep->kstack_id, "mutex"))
      << DescribeKernelStack(raw, sleep->kstack_id);
}

// munmap of a large populated region while other threads need the mmap_lock. Since Linux 6.1
// munmap frees the pages with the lock downgraded to read, and faults take per-VMA locks: a
// faulting thread waits only behind a queued writer (here a thread calling mmap). Both wait on
// the process's mmap_lock held for reading, and the lock's reader hint names the munmapping
// thread. An mmap(MAP_FIXED) over a populated region unmaps it with the lock held for writing:
// the faulting thread then waits on the writer itself. Each waiting fault is a slow page fault.
TEST_F(KernelRecorderTest, MunmapHoldsTheMmapLockWhileAnotherThreadFaults) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr size_t kRegion = 512ul << 20;
  struct Report {
    ScenarioStatus status;
    uint32_t pid, unmapper, writer, faulter;
    uint64_t region, munmap_start_ns, munmap_end_ns;
    uint64_t replaced, replace_start_ns, replace_end_ns;
    uint64_t fault_pages[2];  // the faulter's page during the munmap, and during the replacement
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        // Fresh one-page mappings, kept apart by PROT_NONE pages: the first fault of each needs the
        // mmap_lock (a new anon_vma), the way first touches of fresh memory do.
        char* fresh = static_cast<char*>(
            mmap(nullptr, 4 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (fresh == MAP_FAILED || mprotect(fresh, 4096, PROT_READ | PROT_WRITE) != 0 ||
            mprotect(fresh + 2 * 4096, 4096, PROT_READ | PROT_WRITE) != 0) {
          r.status.Fail("fresh pages");
          return r;
        }
        r.fault_pages[0] = reinterpret_cast<uint64_t>(fresh);
        r.fault_pages[1] = reinterpret_cast<uint64_t>(fresh + 2 * 4096);
        auto populate = [&]() -> char* {
          char* region = static_cast<char*>(
              mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
          if (region == MAP_FAILED) return nullptr;
          madvise(region, kRegion, MADV_NOHUGEPAGE);  // 4 KiB pages: a long unmap
          for (size_t at = 0; at < kRegion; at += 4096) region[at] = 1;
          return region;
        };
        std::atomic<int> phase{0};
        std::atomic<pid_t> unmapper{0}, writer{0}, faulter{0};
        std::thread unmapper_thread([&] {
          pthread_setname_np(pthread_self(), "gp-unmapper");
          unmapper = gettid();
          char* region = populate();
          if (region == nullptr) {
            r.status.Fail("mmap");
            phase = 99;
            return;
          }
          r.region = reinterpret_cast<uint64_t>(region);
          r.munmap_start_ns = NowNs();
          phase = 1;
          munmap(region, kRegion);
          r.munmap_end_ns = NowNs();
          while (phase < 2) sched_yield();
          region = populate();
          if (region == nullptr) {
            r.status.Fail("mmap again");
            phase = 99;
            return;
          }
          r.replace_start_ns = NowNs();
          phase = 3;
          void* replaced = mmap(region, kRegion, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
          r.replace_end_ns = NowNs();
          r.replaced = reinterpret_cast<uint64_t>(replaced);
          munmap(replaced, kRegion);
        });
        std::thread writer_thread([&] {
          writer = gettid();
          while (phase < 1) sched_yield();
          SleepNs(2 * kMs);
          void* small = mmap(nullptr, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (small != MAP_FAILED) munmap(small, 65536);
        });
        std::thread faulter_thread([&] {
          faulter = gettid();
          // Reading /proc allocates: this thread's first malloc maps a new arena, an mmap that
          // would itself queue behind the munmap. Make it now, before the munmap starts.
          ThreadState(faulter);
          while (phase < 1) sched_yield();
          if (phase == 99) return;
          // Behind the writer, once it waits (mmap_write_lock_killable: state D).
          while (writer == 0) sched_yield();
          if (!WaitUntilState(writer, "D")) r.status.Fail("the writer never waited");
          TouchPage(fresh);
          phase = 2;
          while (phase < 3) sched_yield();
          if (phase == 99) return;
          SleepNs(3 * kMs);
          fresh[2 * 4096] = 1;
        });
        unmapper_thread.join();
        writer_thread.join();
        faulter_thread.join();
        r.pid = static_cast<uint32_t>(getpid());
        r.unmapper = static_cast<uint32_t>(unmapper);
        r.writer = static_cast<uint32_t>(writer);
        r.faulter = static_cast<uint32_t>(faulter);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  // The munmap and the replacing mmap, with their sizes and durations.
  const gprof_memory_map* munmap_call = nullptr;
  const gprof_memory_map* replace_call = nullptr;
  for (const auto& m : raw.memory_maps) {
    if (m.tid != report.unmapper || m.length != kRegion) continue;
    // The region is unmapped twice (the second time once replaced): the first is the one.
    if (m.syscall_nr == SYS_munmap && m.address == report.region &&
        m.start_ns >= report.munmap_start_ns && m.start_ns <= report.munmap_end_ns) {
      munmap_call = &m;
    }
    if (m.syscall_nr == SYS_mmap && (m.flags & MAP_FIXED)) replace_call = &m;
  }
  ASSERT_NE(munmap_call, nullptr) << "no munmap of the 512 MB region";
  EXPECT_EQ(munmap_call->ret, 0);
  EXPECT_GE(munmap_call->start_ns, report.munmap_start_ns);
  EXPECT_LE(munmap_call->end_ns, report.munmap_end_ns);
  EXPECT_GE(munmap_call->end_ns - munmap_call->start_ns, 5 * kMs);
  ASSERT_NE(replace_call, nullptr) << "no mmap(MAP_FIXED) over the region";
  EXPECT_EQ(replace_call->address, report.replaced);
  EXPECT_EQ(static_cast<uint64_t>(replace_call->ret), report.replaced);
  EXPECT_EQ(replace_call->prot, static_cast<uint32_t>(PROT_READ | PROT_WRITE));

  auto lock_wait_of = [&](uint32_t tid, uint64_t from, uint64_t to) -> const gprof_lock_wait* {
    for (const auto& w : raw.lock_waits) {
      if (w.tid == tid && (w.flags & GPROF_LOCK_MMAP_LOCK) && w.start_ns >= from &&
          w.start_ns <= to) {
        return &w;
      }
    }
    return nullptr;
  };
  auto slow_fault_of = [&](uint64_t page) -> const gprof_page_fault* {
    for (const auto& f : raw.page_faults) {
      if (f.tid == report.faulter && f.address == page) return &f;
    }
    return nullptr;
  };

  {
    SCOPED_TRACE("munmap");
    const uint64_t from = munmap_call->start_ns, to = munmap_call->end_ns;
    const gprof_lock_wait* writer_wait = lock_wait_of(report.writer, from, to);
    ASSERT_NE(writer_wait, nullptr) << "the mmap of the writer did not wait on the mmap_lock";
    EXPECT_EQ(writer_wait->flags,
              GPROF_LOCK_WRITE | GPROF_LOCK_MMAP_LOCK | GPROF_LOCK_READER_OWNED);
    EXPECT_EQ(writer_wait->owner_tid, report.unmapper);
    EXPECT_EQ(Comm(writer_wait->owner_comm), "gp-unmapper");
    const gprof_lock_wait* fault_wait = lock_wait_of(report.faulter, from, to);
    ASSERT_NE(fault_wait, nullptr) << "the faulting thread did not wait on the mmap_lock";
    EXPECT_EQ(fault_wait->flags, GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK | GPROF_LOCK_READER_OWNED);
    EXPECT_EQ(fault_wait->owner_tid, report.unmapper);
    EXPECT_EQ(fault_wait->owner_pid, report.pid);
    EXPECT_EQ(fault_wait->ret, 0);
    // Queued behind the writer (asleep on the lock before the page was touched), it gets the
    // lock only once the munmap has released it and the writer has had its turn. The munmap's
    // return is no bound: it frees the unmapped areas after unlocking, and a preemption there
    // (a loaded CI machine) lets both waiters through before it returns.
    EXPECT_GE(fault_wait->end_ns, writer_wait->end_ns) << "it waits behind the writer";
    EXPECT_TRUE(KernelStackMentions(raw, fault_wait->kstack_id, "fault"))
        << DescribeKernelStack(raw, fault_wait->kstack_id);
    // Asleep in a page fault, not in a system call: the stacks of the fault.
    const gprof_offcpu* sleep =
        LongestOffCpu(raw, report.faulter, fault_wait->start_ns, fault_wait->end_ns);
    ASSERT_NE(sleep, nullptr) << "no off-CPU interval in the faulting thread's lock wait";
    EXPECT_TRUE(KernelStackMentions(raw, sleep->kstack_id, "exc_page_fault"))
        << DescribeKernelStack(raw, sleep->kstack_id);
    const UserStack* sleep_stack = FindUserStack(raw, sleep->user_stack_id);
    ASSERT_NE(sleep_stack, nullptr) << "no user stack: " << sleep->user_stack_id;
    ASSERT_FALSE(sleep_stack->ips.empty());
    EXPECT_TRUE(IN_SECTION(sleep_stack->ips[0], gprof_touch)) << std::hex << sleep_stack->ips[0];
    const gprof_page_fault* fault = slow_fault_of(report.fault_pages[0]);
    ASSERT_NE(fault, nullptr) << "no slow page fault of the faulting thread";
    EXPECT_LE(fault->start_ns, fault_wait->start_ns);
    EXPECT_GE(fault->end_ns, fault_wait->end_ns);
    EXPECT_EQ(fault->flags, 0x41u) << "FAULT_FLAG_WRITE | FAULT_FLAG_USER";
    EXPECT_EQ(fault->pid, report.pid);
  }
  {
    SCOPED_TRACE("mmap(MAP_FIXED)");
    const uint64_t from = replace_call->start_ns, to = replace_call->end_ns;
    const gprof_lock_wait* fault_wait = lock_wait_of(report.faulter, from, to);
    ASSERT_NE(fault_wait, nullptr) << "the faulting thread did not wait on the mmap_lock";
    EXPECT_EQ(fault_wait->flags, GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK) << "held for writing";
    EXPECT_EQ(fault_wait->owner_tid, report.unmapper);
    EXPECT_EQ(fault_wait->owner_pid, report.pid);
    EXPECT_EQ(Comm(fault_wait->owner_comm), "gp-unmapper");
    EXPECT_GE(fault_wait->end_ns, to - kMs);
    const gprof_page_fault* fault = slow_fault_of(report.fault_pages[1]);
    ASSERT_NE(fault, nullptr) << "no slow page fault of the faulting thread";
    EXPECT_LE(fault->start_ns, fault_wait->start_ns);
    EXPECT_GE(fault->end_ns, fault_wait->end_ns);
  }
  // The populating thread's hundreds of thousands of quick faults are counted, not recorded.
  uint64_t quick = 0;
  for (const auto& c : raw.counts) {
    if (c.kind == GPROF_COUNT_QUICK_PAGE_FAULTS && c.tid == report.unmapper) {
      quick += c.count;
      EXPECT_EQ(c.limit_ns, 50000u);
      EXPECT_EQ(c.cpu, GPROF_ALL_CPUS);
      EXPECT_EQ(c.pid, report.pid);
    }
  }
  EXPECT_GE(quick, kRegion / 4096);
}

// Writes `byte` to `fd` once thread `tid` sleeps, and a little later: the wait it ends is then a
// real one.
std::thread WriteWhenAsleep(pid_t tid, int fd, char byte, ScenarioStatus* status) {
  return std::thread([=] {
    if (!WaitUntilState(tid, "S")) status->Fail("the waiting thread never slept");
    SleepNs(30 * kMs);
    if (write(fd, &byte, 1) != 1) status->Fail("write");
  });
}

// System calls on the configured device (here /dev/ptmx, a pseudo-terminal master): ioctl,
// poll (the device not the first fd), select, mmap; and epoll_wait, recorded whatever it waits
// on. Calls on other files (a pipe, /dev/null) are not device waits.
TEST_F(KernelRecorderTest, DeviceWaitsOnTheConfiguredPrefix) {
  KernelRecorderOptions options;
  options.device_prefix = "ptmx";
  StartRecorder(options);
  if (recorder_ == nullptr) return;
  struct Report {
    ScenarioStatus status;
    uint32_t tid;
    int32_t master, null_fd, epoll_fd, pipe_fd;
    uint64_t start_ns;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        int master = posix_openpt(O_RDWR | O_NOCTTY);
        int ignored = 0;
        if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
          r.status.Fail("pseudo-terminal");
          return r;
        }
        int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
        int null_fd = open("/dev/null", O_RDWR);
        int pipe_fds[2];
        int epoll_fd = epoll_create1(0);
        epoll_event event{};
        event.events = EPOLLIN;
        if (slave < 0 || null_fd < 0 || pipe(pipe_fds) != 0 || epoll_fd < 0 ||
            epoll_ctl(epoll_fd, EPOLL_CTL_ADD, master, &event) != 0) {
          r.status.Fail("files");
          return r;
        }
        termios raw_mode{};
        tcgetattr(slave, &raw_mode);
        cfmakeraw(&raw_mode);
        tcsetattr(slave, TCSANOW, &raw_mode);
        r.start_ns = NowNs();
        pid_t self = gettid();
        char byte;

        unsigned int pty_number = 0;
        if (ioctl(master, TIOCGPTN, &pty_number) != 0) r.status.Fail("TIOCGPTN");
        if (ioctl(null_fd, TIOCGPTN, &pty_number) == 0) r.status.Fail("TIOCGPTN on /dev/null");

        std::thread writer = WriteWhenAsleep(self, slave, 'a', &r.status);
        pollfd fds[2] = {{pipe_fds[0], POLLIN, 0}, {master, POLLIN, 0}};
        if (poll(fds, 2, 10000) != 1) r.status.Fail("poll");
        writer.join();
        ignored += read(master, &byte, 1);

        writer = WriteWhenAsleep(self, slave, 'b', &r.status);
        fd_set readable;
        FD_ZERO(&readable);
        FD_SET(pipe_fds[0], &readable);
        FD_SET(master, &readable);
        timeval timeout{10, 0};
        if (select(std::max(master, pipe_fds[0]) + 1, &readable, nullptr, nullptr, &timeout) != 1) {
          r.status.Fail("select");
        }
        writer.join();
        ignored += read(master, &byte, 1);

        writer = WriteWhenAsleep(self, slave, 'c', &r.status);
        epoll_event events[4];
        if (epoll_wait(epoll_fd, events, 4, 10000) != 1) r.status.Fail("epoll_wait");
        writer.join();
        ignored += read(master, &byte, 1);

        if (mmap(nullptr, 4096, PROT_READ, MAP_SHARED, master, 0) != MAP_FAILED ||
            errno != ENODEV) {
          r.status.Fail("mmap of the terminal");
        }
        pollfd pipe_only{pipe_fds[0], POLLIN, 0};
        if (poll(&pipe_only, 1, 0) != 0) r.status.Fail("poll of the pipe");
        (void)ignored;
        r.tid = static_cast<uint32_t>(self);
        r.master = master;
        r.null_fd = null_fd;
        r.epoll_fd = epoll_fd;
        r.pipe_fd = pipe_fds[0];
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  std::map<uint32_t, std::vector<gprof_device_wait>> by_kind;
  for (const auto& d : raw.device_waits) {
    if (d.start_ns < report.start_ns) continue;  // the terminal's own setup (grantpt, ...)
    EXPECT_EQ(d.tid, report.tid);
    EXPECT_NE(d.fd, report.null_fd) << "/dev/null does not have the prefix";
    by_kind[d.kind].push_back(d);
  }
  ASSERT_EQ(by_kind[GPROF_DEVICE_IOCTL].size(), 1u);
  const gprof_device_wait& ioctl_call = by_kind[GPROF_DEVICE_IOCTL][0];
  EXPECT_EQ(ioctl_call.fd, report.master);
  EXPECT_EQ(ioctl_call.request, static_cast<uint64_t>(TIOCGPTN));
  EXPECT_EQ(ioctl_call.ret, 0);
  EXPECT_EQ(Comm(ioctl_call.device), "ptmx");

  ASSERT_EQ(by_kind[GPROF_DEVICE_POLL].size(), 2u) << "poll and select; not the pipe's poll";
  const gprof_device_wait& poll_call = by_kind[GPROF_DEVICE_POLL][0];
  const gprof_device_wait& select_call = by_kind[GPROF_DEVICE_POLL][1];
  EXPECT_EQ(poll_call.fd, report.master) << "the first fd on the device";
  EXPECT_EQ(poll_call.request, 2u);
  EXPECT_EQ(poll_call.ret, 1);
  EXPECT_GE(poll_call.end_ns - poll_call.start_ns, 25 * kMs);
  EXPECT_EQ(Comm(poll_call.device), "ptmx");
  EXPECT_EQ(select_call.fd, report.master);
  EXPECT_EQ(select_call.request,
            static_cast<uint64_t>(std::max(report.master, report.pipe_fd) + 1));
  EXPECT_EQ(select_call.ret, 1);
  EXPECT_GE(select_call.end_ns - select_call.start_ns, 25 * kMs);

  ASSERT_EQ(by_kind[GPROF_DEVICE_EPOLL].size(), 1u);
  const gprof_device_wait& epoll_call = by_kind[GPROF_DEVICE_EPOLL][0];
  EXPECT_EQ(epoll_call.fd, report.epoll_fd);
  EXPECT_EQ(epoll_call.request, 4u) << "maxevents";
  EXPECT_EQ(epoll_call.ret, 1);
  EXPECT_EQ(Comm(epoll_call.device), "");
  EXPECT_GE(epoll_call.end_ns - epoll_call.start_ns, 25 * kMs);

  ASSERT_EQ(by_kind[GPROF_DEVICE_MMAP].size(), 1u);
  const gprof_device_wait& mmap_call = by_kind[GPROF_DEVICE_MMAP][0];
  EXPECT_EQ(mmap_call.fd, report.master);
  EXPECT_EQ(mmap_call.request, 4096u);
  EXPECT_EQ(mmap_call.ret, -ENODEV);
  // The same call as a memory map.
  bool memory_map = false;
  for (const auto& m : raw.memory_maps) {
    memory_map |= m.syscall_nr == SYS_mmap && m.start_ns == mmap_call.start_ns &&
                  m.length == 4096 && m.ret == -ENODEV && m.prot == PROT_READ &&
                  (m.flags & MAP_SHARED) && m.address == 0;
  }
  EXPECT_TRUE(memory_map);
}

// An mmap of a file names it (its dentry's name, cut to fit the record), however short the
// process lives: what says which libraries it loaded (issue 17: processes that load CUDA without
// the injected library). Anonymous memory and the other calls name nothing.
TEST_F(KernelRecorderTest, MmapOfAFileNamesTheFile) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  const std::string long_name = dir_ + "/libgprof-test-a-name-longer-than-the-record.so.1";
  const std::string short_name = dir_ + "/data.bin";
  for (const std::string& path : {long_name, short_name}) {
    std::ofstream(path) << std::string(8192, 'x');
  }
  struct Report {
    ScenarioStatus status;
    uint64_t code, data, anonymous;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [&] {
        Report r{};
        int code_fd = open(long_name.c_str(), O_RDONLY);
        int data_fd = open(short_name.c_str(), O_RDONLY);
        void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, code_fd, 0);
        void* data = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, data_fd, 4096);
        void* anonymous =
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (code == MAP_FAILED || data == MAP_FAILED || anonymous == MAP_FAILED) {
          r.status.Fail("mmap");
          return r;
        }
        munmap(code, 4096);
        r.code = reinterpret_cast<uint64_t>(code);
        r.data = reinterpret_cast<uint64_t>(data);
        r.anonymous = reinterpret_cast<uint64_t>(anonymous);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;
  auto file_of = [](const gprof_memory_map& m) {
    return std::string(m.file, strnlen(m.file, sizeof(m.file)));
  };
  std::map<std::pair<long, uint64_t>, std::string> named;  // (syscall, address) -> file
  for (const auto& m : raw.memory_maps) {
    uint64_t address = static_cast<uint64_t>(m.address);
    if (address == report.code || address == report.data || address == report.anonymous)
      named[{m.syscall_nr, address}] = file_of(m);
    EXPECT_EQ(m.file[sizeof(m.file) - 1], '\0') << "NUL-terminated";
  }
  std::string cut = std::filesystem::path(long_name).filename().string().substr(
      0, GPROF_FILE_NAME_LEN - 1);
  auto name_at = [&](long syscall, uint64_t address) {
    auto it = named.find({syscall, address});
    return it == named.end() ? std::string("(no record)") : it->second;
  };
  EXPECT_EQ(name_at(SYS_mmap, report.code), cut);
  EXPECT_EQ(name_at(SYS_mmap, report.data), "data.bin");
  EXPECT_EQ(name_at(SYS_mmap, report.anonymous), "");
  EXPECT_EQ(name_at(SYS_munmap, report.code), "");

  // The collector keeps the executable one as a library the process loaded.
  auto session = collector::ReadSession(dir_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  bool loaded = false;
  for (const auto& [pid, process] : session->processes) {
    for (const auto& file : process.loaded_files) loaded |= file.name == cut;
  }
  EXPECT_TRUE(loaded);
}

// futex2, as x86_64 numbers them (older C library headers lack some).
constexpr long kSysFutexWaitv = 449;
constexpr long kSysFutexWake = 454;
constexpr long kSysFutexWait = 455;
constexpr long kSysFutexRequeue = 456;
constexpr unsigned kFutex2SizeU32 = 0x02;
constexpr unsigned kFutex2Private = 128;
constexpr uint32_t kFutexBitsetAny = 0xffffffffu;
struct FutexWaitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};

// futex_waitv woken through one of its futexes by futex_wake, a timed futex_waitv, futex_wait,
// and futex_requeue: each recorded with the arguments a wait needs to be paired with its wake.
TEST_F(KernelRecorderTest, FutexWaitvAndTheFutex2Calls) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  struct Report {
    ScenarioStatus status;
    uint32_t waiter, waker;
    uint64_t a, b;
    int64_t timeout_ns;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        static uint32_t a = 0, b = 0;
        const unsigned flags = kFutex2SizeU32 | kFutex2Private;
        pid_t self = gettid();
        std::atomic<pid_t> waker{0};
        auto wake_when_asleep = [&](uint32_t* word) {
          return std::thread([&, word] {
            waker = gettid();
            if (!WaitUntilState(self, "S")) r.status.Fail("the waiter never slept");
            SleepNs(20 * kMs);
            if (syscall(kSysFutexWake, word, kFutexBitsetAny, 1, flags) != 1) {
              r.status.Fail("futex_wake woke nobody");
            }
          });
        };
        FutexWaitv both[2] = {{0, reinterpret_cast<uint64_t>(&a), flags, 0},
                              {0, reinterpret_cast<uint64_t>(&b), flags, 0}};
        std::thread wake_b = wake_when_asleep(&b);
        if (syscall(kSysFutexWaitv, both, 2, 0, nullptr, CLOCK_MONOTONIC) != 1) {
          r.status.Fail("futex_waitv not woken through b");
        }
        wake_b.join();

        timespec deadline{};
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_nsec += 10 * kMs;
        if (deadline.tv_nsec >= 1000000000) {
          deadline.tv_sec += 1;
          deadline.tv_nsec -= 1000000000;
        }
        r.timeout_ns = deadline.tv_sec * 1000000000ll + deadline.tv_nsec;
        if (syscall(kSysFutexWaitv, both, 2, 0, &deadline, CLOCK_MONOTONIC) != -1 ||
            errno != ETIMEDOUT) {
          r.status.Fail("futex_waitv did not time out");
        }

        std::thread wake_a = wake_when_asleep(&a);
        if (syscall(kSysFutexWait, &a, 0, kFutexBitsetAny, flags, nullptr, 0) != 0) {
          r.status.Fail("futex_wait");
        }
        wake_a.join();
        if (syscall(kSysFutexRequeue, both, 0, 1, 0) != 0) r.status.Fail("futex_requeue");
        r.waiter = static_cast<uint32_t>(self);
        r.waker = static_cast<uint32_t>(waker);
        r.a = reinterpret_cast<uint64_t>(&a);
        r.b = reinterpret_cast<uint64_t>(&b);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  ASSERT_EQ(raw.waitvs.size(), 2u);
  const gprof_futex_waitv& woken = raw.waitvs[0];
  EXPECT_EQ(woken.tid, report.waiter);
  EXPECT_EQ(woken.count, 2u);
  EXPECT_EQ(woken.uaddr[0], report.a);
  EXPECT_EQ(woken.uaddr[1], report.b);
  EXPECT_EQ(woken.uaddr[2], 0u);
  EXPECT_EQ(woken.uaddr[3], 0u);
  EXPECT_EQ(woken.ret, 1) << "woken through its second futex";
  EXPECT_EQ(woken.timeout_ns, -1);
  EXPECT_EQ(woken.flags, 0u);
  EXPECT_GE(woken.end_ns - woken.start_ns, 20 * kMs);
  const gprof_futex_waitv& timed = raw.waitvs[1];
  EXPECT_EQ(timed.ret, -ETIMEDOUT);
  EXPECT_EQ(timed.timeout_ns, report.timeout_ns);
  EXPECT_EQ(timed.flags, 0u) << "CLOCK_MONOTONIC";

  // The futex2 calls, in futex(2) terms.
  const gprof_futex *wake_a = nullptr, *wake_b = nullptr, *wait_a = nullptr, *requeue = nullptr;
  int futex2_calls = 0;
  for (const auto& f : raw.futexes) {
    if (!(f.flags & GPROF_FUTEX_FUTEX2)) continue;
    ++futex2_calls;
    uint32_t command = f.op & ~static_cast<uint32_t>(FUTEX_PRIVATE_FLAG);
    if (command == FUTEX_WAKE_BITSET) (f.uaddr == report.a ? wake_a : wake_b) = &f;
    if (command == FUTEX_WAIT_BITSET) wait_a = &f;
    if (command == FUTEX_CMP_REQUEUE) requeue = &f;
  }
  EXPECT_EQ(futex2_calls, 4) << "two futex_wake, a futex_wait, a futex_requeue";
  ASSERT_TRUE(wake_a != nullptr && wake_b != nullptr && wait_a != nullptr && requeue != nullptr);

  // The futex_wake that ended the futex_waitv: on b, inside it, by the thread that woke it.
  EXPECT_NE(wake_b->tid, report.waiter);
  EXPECT_EQ(wake_b->uaddr, report.b);
  EXPECT_EQ(wake_b->op, static_cast<uint32_t>(FUTEX_WAKE_BITSET | FUTEX_PRIVATE_FLAG));
  EXPECT_EQ(wake_b->val, 1u);
  EXPECT_EQ(wake_b->val3, kFutexBitsetAny);
  EXPECT_EQ(wake_b->ret, 1);
  EXPECT_GE(wake_b->start_ns, woken.start_ns);
  EXPECT_LE(wake_b->start_ns, woken.end_ns);
  const gprof_offcpu* sleep = OffCpuAt(raw, report.waiter, wake_b->start_ns);
  ASSERT_NE(sleep, nullptr);
  EXPECT_EQ(sleep->waker_tid, wake_b->tid);

  EXPECT_EQ(wait_a->tid, report.waiter);
  EXPECT_EQ(wait_a->uaddr, report.a);
  EXPECT_EQ(wait_a->op, static_cast<uint32_t>(FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG));
  EXPECT_EQ(wait_a->val, 0u);
  EXPECT_EQ(wait_a->val3, kFutexBitsetAny);
  EXPECT_EQ(wait_a->timeout_ns, -1);
  EXPECT_EQ(wait_a->ret, 0);
  EXPECT_EQ(wake_a->tid, report.waker);
  EXPECT_EQ(wake_a->ret, 1);
  EXPECT_GE(wake_a->start_ns, wait_a->start_ns);
  EXPECT_LE(wake_a->start_ns, wait_a->end_ns);

  EXPECT_EQ(requeue->op, static_cast<uint32_t>(FUTEX_CMP_REQUEUE | FUTEX_PRIVATE_FLAG));
  EXPECT_EQ(requeue->uaddr, report.a);
  EXPECT_EQ(requeue->uaddr2, report.b);
  EXPECT_EQ(requeue->val, 1u) << "nr_wake";
  EXPECT_EQ(requeue->val3, 0u) << "the value a must hold";
  EXPECT_EQ(requeue->ret, 0);
}

// Reads exactly `size` bytes from `fd` within `timeout_ms`; false on timeout, EOF or error.
bool ReadFully(int fd, void* buffer, size_t size, int timeout_ms) {
  char* at = static_cast<char*>(buffer);
  while (size > 0) {
    pollfd readable{fd, POLLIN, 0};
    if (poll(&readable, 1, timeout_ms) != 1) return false;
    ssize_t got = read(fd, at, size);
    if (got <= 0) return false;
    at += got;
    size -= static_cast<size_t>(got);
  }
  return true;
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
  std::string error;
  ASSERT_TRUE(recorder_->Track(child, &error)) << error;
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

  const gprof_event_count* thread_faults = nullptr;
  const gprof_event_count* reuser_faults = nullptr;
  for (const auto& c : raw.counts) {
    if (c.kind != GPROF_COUNT_QUICK_PAGE_FAULTS || c.tid != old_tid) continue;
    (c.pid == pid ? thread_faults : reuser_faults) = &c;
  }
  ASSERT_NE(thread_faults, nullptr) << "the exec'ing thread's quick faults, written at the exec";
  EXPECT_GE(thread_faults->count, kTouched - 100) << "a few of them may have been slow";
  ASSERT_NE(reuser_faults, nullptr);
  EXPECT_LT(reuser_faults->count, kTouched / 2) << "the reused tid inherited the old count";
  EXPECT_GE(reuser_faults->count, 16u);

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
  std::string error;
  ASSERT_TRUE(recorder_->Track(child, &error)) << error;
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

// Without the capabilities, Start fails cleanly, says why, and leaves no kernel.gpr behind.
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
    bool denied = false;
    if (code == 0) {
      auto recorder = KernelRecorder::Start(dir, {}, &error, &denied);
      if (recorder != nullptr)
        code = 12;
      else if (!denied)
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

}  // namespace
}  // namespace gprof::bpf
