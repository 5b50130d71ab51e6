// The kernel recorder on locks: a pthread mutex convoy's futex waits and their wakers, a mutex
// in the kernel that names its owner, and the futex2 calls (futex_waitv, futex_wait,
// futex_wake, futex_requeue). Shared helpers: kernel_recorder_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "tests/kernel_recorder_fixture.h"

namespace gprof::bpf::recorder_test {
namespace {

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
  KernelRecorderOptions options;
  options.count_under_ns = 0;  // the futex_wake and futex_requeue calls are short
  StartRecorder(options);
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

}  // namespace
}  // namespace gprof::bpf::recorder_test
