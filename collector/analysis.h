// Explains slow CUDA calls with the kernel's record: where each call's time went (on CPU, waiting
// for a CPU, asleep on what), who woke it and what that thread was doing, which threads froze
// together behind one lock, and what the GPU of the process was doing meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "gpu_summary.h"
#include "model.h"

namespace gprof::collector {

struct AnalysisOptions {
  uint64_t threshold_ns = 1'000'000;  // CUDA calls at least this long are explained
};

// What a waiting thread was blocked on, as precisely as the kernel's record says.
enum class WaitKind : uint8_t {
  kKernelFunction,  // nothing more specific: the kernel function it slept in
  kFutex,           // a futex word of one process
  kKernelLock,      // a contended kernel lock (mutex, rwsem): a process's mmap_lock, or a lock
                    // all processes share
  kDevice,          // a system call on a GPU device file
  kPageFault,       // a slow page fault
};

struct WaitObject {
  WaitKind kind = WaitKind::kKernelFunction;
  uint32_t pid = 0;         // the process it belongs to; 0: a kernel lock that is not an mmap_lock
  uint64_t address = 0;     // futex: the word; kernel lock: the lock; page fault: the address
  uint32_t lock_flags = 0;  // kernel lock: gprof_lock_flags, as the waiter that saw it wanted it
  DeviceCall device_call = DeviceCall::kUnknown;  // device
  std::string device;                             // device: "nvidiactl"
  std::string kernel_function;  // where it slept: "futex_wait_queue", "do_nanosleep", ...
  std::string taken_in;         // kernel lock: the kernel function that took it ("fdget_pos")
  uint64_t seen_ns = 0;         // when: which of the process's maps names the address

  // Waits are on one object when their keys agree: the kernel function counts only when it is all
  // that is known; how a lock was wanted and when the object was seen do not count.
  auto Key() const {
    return std::make_tuple(
        kind, pid, address, device_call, std::string_view(device),
        kind == WaitKind::kKernelFunction ? std::string_view(kernel_function) : std::string_view());
  }
  bool operator==(const WaitObject& other) const { return Key() == other.Key(); }
  bool is_futex() const { return kind == WaitKind::kFutex; }
};

// What kind of wait a sleep was, in the terms of the diagnosis (wait_class.h classifies).
enum class WaitClass : uint8_t {
  kUserLock,    // a futex used as a lock: a pthread mutex (FUTEX_WAIT on a contended word, PI)
  kCondition,   // a futex used as an event: condition variable, join, semaphore
  kPythonGil,   // a futex word inside CPython's runtime state (_PyRuntime): the GIL
  kKernelLock,  // a kernel mutex or rwsem (the mmap_lock)
  kGpuDriver,   // a system call on a GPU device file
  kPageFault,   // a slow page fault
  kIo,          // waiting for I/O or for input: disk, pipes, sockets, poll
  kSleep,       // asked to sleep: nanosleep, a timed wait that nobody ended
  kCpu,         // runnable: waiting for a CPU
  kOther,
};

// One off-CPU interval inside a slow call.
struct Wait {
  uint64_t start_ns = 0;  // clipped to the call
  uint64_t wake_ns = 0;   // 0: never woken inside the call (preempted, or woken after it);
                          // start_ns when woken before it (runnable in it throughout)
  uint64_t end_ns = 0;    // clipped to the call
  uint32_t pid = 0;       // the waiting thread's process
  OffCpuState state = OffCpuState::kSleeping;
  WaitObject object;
  WaitClass wait_class = WaitClass::kOther;
  uint32_t waker_pid = 0;
  uint32_t waker_tid = 0;  // 0: no waker (preempted) or an interrupt
  std::string waker_comm;  // the kernel's name for the waker, also when it is outside the tree
  const ApiCall* waker_call = nullptr;  // the waker's CUDA call in progress when it woke us
  int32_t kstack_id = -1;
  int32_t user_stack_id = -1;        // the thread's user stack at the switch-out
  int32_t waker_user_stack_id = -1;  // the waker's at the wakeup (process waker_pid)
  // What the kernel recorded the thread to be in when it slept (into the Session), innermost
  // first: the kernel lock it waited for, the slow page fault, the system call on a GPU device.
  const LockWait* kernel_lock = nullptr;
  const PageFault* page_fault = nullptr;
  const DeviceWait* device_wait = nullptr;
  // What the lock's owner was in when the wait for it began: a memory map call (a munmap holds
  // the mmap_lock throughout) and a CUDA call.
  const MemoryMapCall* owner_memory_call = nullptr;
  const ApiCall* owner_call = nullptr;
  uint64_t asleep_ns() const { return (wake_ns != 0 ? wake_ns : end_ns) - start_ns; }
};

// What the GPU of a call's process did during the call (or during a hold), when the process's GPU
// timeline was recorded.
struct GpuDuringCall {
  uint64_t window_ns = 0;  // the interval looked at
  uint64_t busy_ns = 0;    // the process's kernels, copies and memsets in it, overlaps counted once
  const GpuActivity* main_activity = nullptr;  // what the GPU ran longest meanwhile; null: idle
  uint64_t main_overlap_ns = 0;
  const ApiCall* main_launcher = nullptr;    // the call that launched it, when it was recorded
  std::vector<const GpuActivity*> own_work;  // kernels, copies, memsets the call itself caused
};

struct BlockedCall {
  const ApiCall* call = nullptr;
  uint64_t on_cpu_ns = 0;    // running: working or spinning inside the call
  uint64_t runnable_ns = 0;  // ready but waiting for a CPU (preempted, or woken and not yet run)
  uint64_t asleep_ns = 0;    // blocked: the sum of the waits' sleeping parts
  std::vector<Wait> waits;   // in time order
  std::optional<WaitObject> main_object;  // the object it slept on longest
  uint64_t main_object_ns = 0;
  int freeze = -1;                   // index into Analysis::freezes, when it froze with others
  std::optional<GpuDuringCall> gpu;  // none: the process's GPU timeline was not recorded
};

// What a lock holder did while others waited for it.
struct HolderActivity {
  uint32_t tid = 0;
  const ApiCall* call = nullptr;  // its CUDA call in progress when it released the others
  uint64_t hold_start_ns = 0;     // since when it held the object (or the freeze's start)
  uint64_t release_ns = 0;        // the release that ended its hold
  uint64_t on_cpu_ns = 0;         // while it held it
  uint64_t asleep_ns = 0;
  uint64_t runnable_ns = 0;
  std::optional<WaitObject> own_wait;  // what it slept on longest meanwhile, if it slept
  uint32_t own_waker_tid = 0;          // who ended that sleep
  std::string own_waker_comm;
  int blocked_call = -1;  // index into Analysis::blocked_calls when its call is slow too
  // The GPU during its call (during the hold when it was in none); none: not recorded.
  std::optional<GpuDuringCall> gpu;
};

struct FreezeMember {
  int blocked_call = -1;      // index into Analysis::blocked_calls
  uint32_t woken_by_tid = 0;  // who ended its wait on the lock
  bool passed_on = false;     // woken by another waiter of the same lock (a convoy), not the holder
};

// Threads blocked at the same time on the same object, with one cause.
struct Freeze {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  WaitObject object;
  std::vector<FreezeMember> members;  // one per blocked call, in order of the wait's start
  std::optional<HolderActivity> holder;
  size_t thread_count = 0;  // distinct threads among the members
};

// How a thread spent [start, end): asleep, runnable, on CPU; and the waits inside. Time before
// the thread was created or after it exited is none of them.
struct TimeSplit {
  uint64_t on_cpu_ns = 0;
  uint64_t runnable_ns = 0;
  uint64_t asleep_ns = 0;
  std::vector<Wait> waits;
};

// How much of an interval a thread spent inside CUDA calls.
struct CallTime {
  uint64_t in_calls_ns = 0;  // inside any of its calls (nested ones counted once)
  // Of its calls other than the one asked about (and those nested in it): how many overlap the
  // interval, and the one that covers most of it.
  uint32_t other_calls = 0;
  const ApiCall* longest_other = nullptr;
  uint64_t longest_other_ns = 0;
};

// Some records of one thread, in time order, as pointers into the session's vector.
template <typename Record>
class ThreadRecords {
 public:
  class iterator {
   public:
    iterator(const Record* records, const uint32_t* at) : records_(records), at_(at) {}
    const Record* operator*() const { return records_ + *at_; }
    iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const iterator& other) const { return at_ == other.at_; }

   private:
    const Record* records_;
    const uint32_t* at_;
  };
  ThreadRecords(const Record* records, std::span<const uint32_t> indices)
      : records_(records), indices_(indices) {}
  iterator begin() const { return {records_, indices_.data()}; }
  iterator end() const { return {records_, indices_.data() + indices_.size()}; }
  size_t size() const { return indices_.size(); }
  bool empty() const { return indices_.empty(); }

 private:
  const Record* records_;
  std::span<const uint32_t> indices_;
};

// Reads what a thread did from the kernel's record: each off-CPU interval as a Wait (on what, woken
// by whom, the owner of the lock), and how it spent an interval.
class WaitReader {
 public:
  explicit WaitReader(const Session& session);
  ~WaitReader();
  WaitReader(const WaitReader&) = delete;
  WaitReader& operator=(const WaitReader&) = delete;

  // `interval` as a wait, clipped to [start, end).
  Wait MakeWait(const OffCpuInterval& interval, uint64_t start, uint64_t end) const;
  TimeSplit Split(uint32_t tid, uint64_t start, uint64_t end) const;
  // The CUDA call of `tid` in progress at `time_ns` (the innermost), or nullptr.
  const ApiCall* CallAt(uint32_t tid, uint64_t time_ns) const;
  // The time `tid` spent inside CUDA calls during [start_ns, end_ns); `except` is the call asked
  // about, kept out of CallTime's other calls. (A call in progress at start_ns whose nested call
  // ended before it is missed, as CallAt misses it: only activity records nest calls.)
  CallTime CallTimeDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                          const ApiCall* except) const;
  // The futex call of `tid` in progress at `time_ns`, or nullptr.
  const FutexCall* FutexAt(uint32_t tid, uint64_t time_ns) const;
  ThreadRecords<FutexCall> FutexDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // The memory map call (mmap, munmap, ...) of `tid` in progress at `time_ns`, or nullptr.
  const MemoryMapCall* MemoryCallAt(uint32_t tid, uint64_t time_ns) const;
  ThreadRecords<OffCpuInterval> OffCpuDuring(uint32_t tid, uint64_t start_ns,
                                             uint64_t end_ns) const;

 private:
  struct Index;
  WaitObject ObjectOf(const OffCpuInterval& interval, const Wait& wait) const;
  const Session& session_;
  std::unique_ptr<Index> index_;
};

struct Analysis {
  AnalysisOptions options;
  std::vector<BlockedCall> blocked_calls;  // slow calls, in time order
  std::vector<Freeze> freezes;             // in time order
  GpuSummary gpu;
  uint64_t slow_call_count() const { return blocked_calls.size(); }
};

Analysis Analyze(const Session& session, const AnalysisOptions& options);
// The same with an index of the session's waits made once for the analysis and the diagnosis.
Analysis Analyze(const Session& session, const AnalysisOptions& options, const WaitReader& waits);

// The longest sleep on `object` among `waits`, or nullptr.
const Wait* LongestWaitOn(const std::vector<Wait>& waits, const WaitObject& object);

// The kernel function a thread slept in: the innermost frame of its switch-out stack that is not
// the scheduler itself ("futex_wait_queue", "do_nanosleep", ...); empty without a stack.
std::string BlockingKernelFunction(const Session& session, int32_t stack_id);

}  // namespace gprof::collector
