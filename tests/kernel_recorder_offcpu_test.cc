// The kernel recorder off the CPU: threads that wait for a CPU, the stacks of long intervals
// only, a pipe wait woken by its writer with both user stacks, and system calls on the
// configured device. Shared helpers: kernel_recorder_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "tests/kernel_recorder_fixture.h"

namespace gprof::bpf::recorder_test {
namespace {

// Keeps the calling thread on CPU 0 (a scenario's failure otherwise).
void StayOnCpu0(ScenarioStatus* status) {
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  CPU_SET(0, &one_cpu);
  if (sched_setaffinity(0, sizeof(one_cpu), &one_cpu) != 0) status->Fail("affinity");
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
        StayOnCpu0(&r.status);
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

// A thread woken from a pipe read by the main thread, then preempted again and again on a CPU it
// shares with a spinning thread, three times over: its sleeps name their waker, the intervals
// preempted after them none (nothing clears a waker's fields at a switch-out: they count for the
// interval they were written in only).
TEST_F(KernelRecorderTest, AWakerIsNamedOnTheSleepItEndedOnly) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr int kRounds = 3;
  constexpr uint64_t kSpin = 60 * kMs;
  struct Report {
    ScenarioStatus status;
    uint32_t sleeper, waker;
    uint64_t reads_from_ns;  // on CPU 0 by then: the move there is a sleep of its own
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        int wake[2];
        if (pipe(wake) != 0) {
          r.status.Fail("pipe");
          return r;
        }
        std::atomic<pid_t> sleeper{0};
        std::atomic<uint64_t> reads_from_ns{0};
        std::atomic<int> reads{0};
        std::atomic<bool> done{false};
        std::thread hog([&] {
          StayOnCpu0(&r.status);
          while (!done) {
          }
        });
        std::thread sleeping([&] {
          StayOnCpu0(&r.status);
          sleeper = gettid();
          reads_from_ns = NowNs();
          for (int i = 0; i < kRounds; ++i) {
            char byte = 0;
            ++reads;
            if (PipeReadFrame(wake[0], &byte, 1) != 1) r.status.Fail("read");
            SpinUntil(NowNs() + kSpin);
          }
        });
        for (int i = 0; i < kRounds; ++i) {
          while (reads < i + 1) sched_yield();
          if (!WaitUntilState(sleeper, "S")) r.status.Fail("the sleeper never blocked");
          SleepNs(5 * kMs);
          if (PipeWriteFrame(wake[1], "x", 1) != 1) r.status.Fail("write");
        }
        sleeping.join();
        done = true;
        hog.join();
        r.sleeper = static_cast<uint32_t>(sleeper);
        r.waker = static_cast<uint32_t>(gettid());
        r.reads_from_ns = reads_from_ns;
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  int sleeps = 0, preempted = 0;
  for (const auto& o : raw.offcpu) {
    if (o.tid != report.sleeper || o.start_ns < report.reads_from_ns) continue;
    if (o.state == GPROF_TASK_RUNNING) {
      ++preempted;
      EXPECT_EQ(o.wake_ns, 0u) << "preempted at " << o.start_ns;
      EXPECT_EQ(o.waker_tid, 0u) << "preempted at " << o.start_ns;
      EXPECT_EQ(o.waker_pid, 0u);
      EXPECT_EQ(Comm(o.waker_comm), "");
      EXPECT_EQ(o.waker_kstack_id, -1);
      EXPECT_EQ(o.waker_user_stack_id, -1);
    } else if (o.end_ns - o.start_ns >= 4 * kMs) {
      ++sleeps;
      EXPECT_EQ(o.waker_tid, report.waker) << "slept from " << o.start_ns;
      EXPECT_GE(o.wake_ns, o.start_ns);
      EXPECT_LE(o.wake_ns, o.end_ns);
    }
  }
  EXPECT_EQ(sleeps, kRounds);
  EXPECT_GE(preempted, kRounds) << "preempted by the spinning thread after each sleep";
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

// Two threads hand a byte back and forth through pipes on CPU 0 (short sleeps: on two CPUs, one
// whose idle CPU the hypervisor wakes late can make every sleep of a run long), then one of them
// blocks in a pipe read until the main thread writes 20 ms later (a long sleep in a system call);
// two threads spin on CPU 0 (long waits for the CPU, preempted in user mode).
StackThresholdReport RunStackThresholdScenario() {
  constexpr int kRounds = 2000;
  StackThresholdReport r{};
  auto on_cpu_0 = [&r] { StayOnCpu0(&r.status); };
  int to_pong[2], to_ping[2], wake[2];
  if (pipe(to_pong) != 0 || pipe(to_ping) != 0 || pipe(wake) != 0) {
    r.status.Fail("pipe");
    return r;
  }
  std::atomic<pid_t> ping{0}, pong{0}, spinners[2] = {};
  std::thread pong_thread([&] {
    on_cpu_0();
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
    on_cpu_0();
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
      on_cpu_0();
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
    options.count_under_ns = 0;  // the short intervals are recorded, without stacks
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

}  // namespace
}  // namespace gprof::bpf::recorder_test
