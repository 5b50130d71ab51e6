// The simulated GPU behind the fake CUDA runtime: one in-order queue run by the "fake-gpu" thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

namespace fake_cuda {

// CLOCK_MONOTONIC in nanoseconds: the clock of every time the fake GPU keeps.
uint64_t MonotonicNs();

// What an item runs until after its duration: `*word` holding `open` (another process may set it,
// in memory both map: a process-shared futex wakes the GPU), as NCCL's kernels wait for the other
// ranks. No word: nothing more. With `arrivals`, the item counts itself there as it starts; the
// last of `parties` sets `open` and wakes the others.
struct GpuGate {
  std::atomic<uint32_t>* word = nullptr;
  uint32_t open = 0;
  std::atomic<uint32_t>* arrivals = nullptr;
  uint32_t parties = 0;
};

class FakeGpu {
 public:
  // Items are numbered from 1 in submission order and complete in that order, so "item N is done"
  // means everything submitted before it is done too; 0 names "nothing", always done.
  using Seq = uint64_t;

  // Called on the fake-gpu thread once an item has run, with its start and end on the virtual GPU
  // clock (CLOCK_MONOTONIC), before it counts as done: a host that waited for it finds it reported.
  using OnRun = std::function<void(uint64_t start_ns, uint64_t end_ns)>;

  using Gate = GpuGate;

  // Queues an item that keeps the GPU busy for `duration_ns` (and, with a gate, until it opens).
  // Starts the fake-gpu thread on first use; returns nullopt only if that thread cannot be created.
  std::optional<Seq> Submit(uint64_t duration_ns, OnRun on_run = {}, Gate gate = {});

  Seq LastSubmitted() const;
  bool IsDone(Seq seq) const { return completed_.load(std::memory_order_acquire) >= seq; }

  // Blocks off-CPU until `seq` is done; the fake-gpu thread wakes the caller.
  void WaitSleeping(Seq seq);
  // Busy-waits on-CPU until `seq` is done, like a driver polling a GPU semaphore.
  void WaitSpinning(Seq seq) const;

 private:
  struct WorkItem {
    Seq seq;
    uint64_t submit_ns;  // CLOCK_MONOTONIC
    uint64_t duration_ns;
    OnRun on_run;
    Gate gate;
  };

  static void* WorkerMain(void* self);
  void RunWorker();

  mutable std::mutex mutex_;  // guards everything below but completed_
  std::condition_variable work_queued_;
  std::condition_variable work_completed_;
  std::deque<WorkItem> queue_;
  Seq last_submitted_ = 0;
  bool worker_started_ = false;
  std::atomic<Seq> completed_{0};  // written under mutex_ so sleeping waiters miss no wake-up
};

}  // namespace fake_cuda
