#include "tests/fake_cuda/fake_gpu.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <utility>

namespace fake_cuda {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

namespace {

void SleepUntil(uint64_t deadline_ns) {
  const timespec deadline = {time_t(deadline_ns / 1'000'000'000),
                             long(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::optional<FakeGpu::Seq> FakeGpu::Submit(uint64_t duration_ns, OnRun on_run, Gate gate) {
  std::unique_lock lock(mutex_);
  if (!worker_started_) {
    // All signals blocked in the worker, as in the real driver's threads: signals sent to the
    // process reach the program's own threads.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t worker;
    const int rc = pthread_create(&worker, &attr, &FakeGpu::WorkerMain, this);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (rc != 0) return std::nullopt;
    pthread_setname_np(worker, "fake-gpu");  // here, not in the thread: named before any work runs
    worker_started_ = true;
  }
  const Seq seq = ++last_submitted_;
  queue_.push_back({seq, MonotonicNs(), duration_ns, std::move(on_run), gate});
  lock.unlock();
  work_queued_.notify_one();
  return seq;
}

FakeGpu::Seq FakeGpu::LastSubmitted() const {
  std::lock_guard lock(mutex_);
  return last_submitted_;
}

void FakeGpu::WaitSleeping(Seq seq) {
  std::unique_lock lock(mutex_);
  work_completed_.wait(lock, [&] { return IsDone(seq); });
}

void FakeGpu::WaitSpinning(Seq seq) const {
  while (!IsDone(seq)) CpuRelax();
}

void* FakeGpu::WorkerMain(void* self) {
  // Short kernels (tens of microseconds) need sleeps more precise than the default 50 us slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  static_cast<FakeGpu*>(self)->RunWorker();
  return nullptr;
}

void FakeGpu::RunWorker() {
  uint64_t busy_until_ns = 0;  // end of the last item on the virtual GPU clock
  std::unique_lock lock(mutex_);
  for (;;) {
    work_queued_.wait(lock, [&] { return !queue_.empty(); });
    const WorkItem item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // Start at the previous item's end, not at this thread's wake-up, so latency does not add up.
    const uint64_t start_ns = std::max(busy_until_ns, item.submit_ns);
    busy_until_ns = start_ns + item.duration_ns;
    // Not FUTEX_PRIVATE: the words may be in memory another process opens them from.
    auto* word = reinterpret_cast<uint32_t*>(item.gate.word);
    if (item.gate.arrivals != nullptr &&
        item.gate.arrivals->fetch_add(1, std::memory_order_acq_rel) + 1 == item.gate.parties) {
      item.gate.arrivals->store(0, std::memory_order_relaxed);
      item.gate.word->store(item.gate.open, std::memory_order_release);
      syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    }
    SleepUntil(busy_until_ns);
    if (item.gate.word != nullptr) {
      for (uint32_t seen;
           (seen = item.gate.word->load(std::memory_order_acquire)) != item.gate.open;)
        syscall(SYS_futex, word, FUTEX_WAIT, seen, nullptr, nullptr, 0);
      busy_until_ns = std::max(busy_until_ns, MonotonicNs());
    }
    if (item.on_run) item.on_run(start_ns, busy_until_ns);
    lock.lock();
    completed_.store(item.seq, std::memory_order_release);
    // Unlocked before waking, so a woken waiter does not then block on mutex_ as well.
    lock.unlock();
    work_completed_.notify_all();
    lock.lock();
  }
}

}  // namespace fake_cuda
