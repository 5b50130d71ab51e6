#include "collector/analysis/wait_reader.h"

#include <algorithm>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/kernel_stack.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

struct WaitReader::Index : ThreadIndex {
  using ThreadIndex::ThreadIndex;
};

WaitReader::WaitReader(const Session& session)
    : session_(session), index_(std::make_unique<Index>(session)) {
  if (!session.tcp_transfers.empty()) {
    const TcpStreams::Source source{&session, 0};
    tcp_ = std::make_unique<TcpStreams>(std::span(&source, 1));
  }
}
WaitReader::~WaitReader() = default;

const ApiCall* WaitReader::CallAt(uint32_t tid, uint64_t time_ns) const {
  return index_->calls.At(tid, time_ns);
}

FaultTime WaitReader::QuickFaultsDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const {
  FaultTime time;
  for (const QuickFaultRun* run : index_->quick_fault_runs.During(tid, start_ns, UINT64_MAX)) {
    const OffCpuInterval* before = index_->off_cpu.LastBefore(tid, run->end_ns);
    // Its first run without an interval before it: counted at its end only.
    const uint64_t from = before != nullptr ? std::min(before->end_ns, run->end_ns) : run->end_ns;
    if (from >= end_ns) break;
    const uint64_t first = std::max(from, start_ns), last = std::min(run->end_ns, end_ns);
    if (from == run->end_ns) {
      time.faults += run->count;
      time.ns += run->total_ns;
      continue;
    }
    if (last <= first) continue;
    const double share = static_cast<double>(last - first) / static_cast<double>(run->end_ns - from);
    time.faults += static_cast<uint64_t>(static_cast<double>(run->count) * share);
    time.ns += static_cast<uint64_t>(static_cast<double>(run->total_ns) * share);
  }
  return time;
}

CallTime WaitReader::CallTimeDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                                    const ApiCall* except) const {
  CallTime time;
  uint64_t covered_ns = start_ns;  // the calls so far, in start order, cover up to here
  auto add = [&](const ApiCall& call) {
    const uint64_t from = std::max(call.enter_ns, start_ns);
    const uint64_t to = std::min(call.exit_ns, end_ns);
    if (to <= from) return;
    if (to > covered_ns) {
      time.in_calls_ns += to - std::max(from, covered_ns);
      covered_ns = to;
    }
    const bool inside_except =
        except != nullptr && call.enter_ns >= except->enter_ns && call.exit_ns <= except->exit_ns;
    if (inside_except) return;
    ++time.other_calls;
    if (to - from > time.longest_other_ns) {
      time.longest_other = &call;
      time.longest_other_ns = to - from;
    }
  };
  for (const ApiCall* call : CallsDuring(tid, start_ns, end_ns)) add(*call);
  return time;
}

std::vector<const ApiCall*> WaitReader::CallsDuring(uint32_t tid, uint64_t start_ns,
                                                    uint64_t end_ns) const {
  std::vector<const ApiCall*> calls;
  const ApiCall* at_start = CallAt(tid, start_ns);
  if (at_start != nullptr) calls.push_back(at_start);
  for (const ApiCall* call : index_->calls.StartingIn(tid, start_ns, end_ns)) {
    if (call != at_start) calls.push_back(call);
  }
  return calls;
}

ThreadRecords<OffCpuInterval> WaitReader::OffCpuDuring(uint32_t tid, uint64_t start_ns,
                                                       uint64_t end_ns) const {
  return index_->off_cpu.During(tid, start_ns, end_ns);
}

const OffCpuInterval* WaitReader::OffCpuBefore(uint32_t tid, uint64_t time_ns) const {
  return index_->off_cpu.LastBefore(tid, time_ns);
}

const FutexCall* WaitReader::FutexAt(uint32_t tid, uint64_t time_ns) const {
  return index_->futex.At(tid, time_ns);
}

ThreadRecords<FutexCall> WaitReader::FutexDuring(uint32_t tid, uint64_t start_ns,
                                                 uint64_t end_ns) const {
  return index_->futex.During(tid, start_ns, end_ns);
}

const MemoryMapCall* WaitReader::MemoryCallAt(uint32_t tid, uint64_t time_ns) const {
  return index_->memory_map_calls.At(tid, time_ns);
}

// What a sleep that began at `interval.start_ns` was on: the innermost thing the kernel recorded
// the thread in, a kernel lock (taken in a page fault, taken in a system call) before the page
// fault before a device call before a futex wait; else the kernel function it slept in.
WaitObject WaitReader::ObjectOf(const OffCpuInterval& interval, const Wait& wait) const {
  WaitObject object;
  object.pid = interval.pid;
  object.seen_ns = interval.start_ns;
  object.kernel_function = BlockingKernelFunction(session_, interval.kstack_id);
  if (const LockWait* lock = wait.kernel_lock) {
    object.kind = WaitKind::kKernelLock;
    object.address = lock->lock_address;
    object.lock_flags = lock->flags;
    object.taken_in = LockTaker(session_.KernelStack(lock->kstack_id));
    if (!lock->is_mmap_lock()) object.pid = 0;  // a kernel lock is the same in every process
  } else if (const PageFault* fault = wait.page_fault) {
    object.kind = WaitKind::kPageFault;
    object.address = fault->address;
  } else if (const DeviceWait* device = wait.device_wait; device != nullptr && !device->device.empty()) {
    // Only a device file --device-prefix selects makes a device wait (an epoll wait names none).
    object.kind = WaitKind::kDevice;
    object.device_call = device->call;
    object.device = device->device;
  } else if (IsFileLockFunction(object.kernel_function)) {
    object.pid = 0;  // a file's lock is the same in every process
  } else if (const FutexCall* futex = index_->futex.At(interval.tid, interval.start_ns);
             futex != nullptr && futex->is_wait()) {
    object.kind = WaitKind::kFutex;
    object.address = futex->uaddr;
  } else if (const FutexWaitvCall* waitv = index_->futex_waitv.At(interval.tid, interval.start_ns);
             waitv != nullptr && !waitv->addresses.empty()) {
    // Of the words it waited on, the one whose wake ended the call stands for them all.
    object.kind = WaitKind::kFutex;
    object.address = waitv->woken_address().value_or(waitv->addresses.front());
  }
  return object;
}

bool WaitReader::OwnerHintStale(const LockWait& lock) const {
  const uint64_t at = lock.start_ns;
  const OffCpuInterval* asleep = index_->off_cpu.At(lock.owner_tid, at);
  if (asleep == nullptr || asleep->start_ns > at || asleep->state() == OffCpuState::kRunnable ||
      (asleep->wake_ns != 0 && asleep->wake_ns <= at))
    return false;  // on CPU, preempted, or woken: it may hold it
  if (const LockWait* own = index_->lock_waits.At(lock.owner_tid, at);
      own != nullptr && own->lock_address == lock.lock_address && own->start_ns <= at)
    return true;  // waiting for the same lock
  if (const FutexCall* futex = index_->futex.At(lock.owner_tid, at);
      futex != nullptr && futex->is_wait() && futex->start_ns <= asleep->start_ns)
    return true;
  const std::string function = BlockingKernelFunction(session_, asleep->kstack_id);
  for (std::string_view part : {"futex", "nanosleep", "poll", "select", "sigsuspend", "pause"}) {
    if (function.find(part) != std::string::npos) return true;
  }
  return false;
}

Wait WaitReader::ReadWait(const OffCpuInterval& interval) const {
  Wait wait;
  wait.start_ns = interval.start_ns;
  wait.end_ns = interval.end_ns;
  wait.pid = interval.pid;
  wait.state = interval.state();
  wait.kstack_id = interval.kstack_id;
  wait.user_stack_id = interval.user_stack_id;
  if (!session_.python.empty())
    wait.python_stack = session_.python.Waiter(interval.tid, interval.start_ns);
  if (wait.state == OffCpuState::kRunnable) {
    wait.object.pid = interval.pid;
    wait.object.seen_ns = interval.start_ns;
    wait.object.kernel_function = BlockingKernelFunction(session_, interval.kstack_id);
    if (wait.object.kernel_function.empty()) wait.object.kernel_function = "preempted";
    wait.wait_class = WaitClass::kCpu;
    return wait;
  }
  wait.kernel_lock = index_->lock_waits.At(interval.tid, interval.start_ns);
  wait.page_fault = index_->page_faults.At(interval.tid, interval.start_ns);
  wait.device_wait = index_->device_waits.At(interval.tid, interval.start_ns);
  wait.object = ObjectOf(interval, wait);
  if (const LockWait* lock = wait.kernel_lock; lock != nullptr && lock->owner_tid != 0) {
    wait.owner_hint_stale = OwnerHintStale(*lock);
    if (!wait.owner_hint_stale) {
      wait.owner_memory_call = index_->memory_map_calls.At(lock->owner_tid, lock->start_ns);
      wait.owner_call = index_->calls.At(lock->owner_tid, lock->start_ns);
    }
  }
  if (interval.wake_ns != 0 && interval.wake_ns <= interval.end_ns &&
      (interval.flags & GPROF_OFFCPU_WOKEN_TO_DIE) != 0) {
    // The process's exit woke it to end it: its waker released nothing it waited for.
    wait.wake_ns = interval.wake_ns;
    wait.ended_by_exit = true;
    wait.exit_tid = interval.waker_tid;
    wait.exit_comm = session_.WakerComm(interval);
  } else if (interval.wake_ns != 0 && interval.wake_ns <= interval.end_ns) {
    wait.wake_ns = interval.wake_ns;
    wait.waker_pid = interval.waker_pid;
    wait.waker_tid = interval.waker_tid;
    wait.waker_comm = session_.WakerComm(interval);
    wait.waker_user_stack_id = interval.waker_user_stack_id;
    if (!session_.python.empty())
      wait.waker_python_stack =
          session_.python.Waker(interval.tid, interval.start_ns, interval.wake_ns);
    if (!session_.native.wakers.empty())
      wait.waker_native_stack =
          session_.native.Waker(interval.tid, interval.start_ns, interval.wake_ns);
    if (interval.waker_tid != 0)
      wait.waker_call = index_->calls.At(interval.waker_tid, interval.wake_ns);
  }
  wait.wait_class = WaitClassifier(session_, *index_).Classify(interval.tid, wait);
  FollowTheData(interval, wait);
  return wait;
}

// A wait that an interrupt, a kernel thread or a task outside the tree ended, whose thread then
// read a pipe or socket that a thread of the tree had written to while it slept, was ended by
// that writer: its data (loopback TCP wakes the reader from softirq; a socket's data may be
// handed on by ksoftirqd). The write is the latest of the end's last four made while it slept;
// where all four came after the wakeup (a message written in parts, the first of which woke it,
// is gone from the four) and from one thread, that thread, its writes begun by the wakeup.
void WaitReader::FollowTheData(const OffCpuInterval& interval, Wait& wait) const {
  if (wait.wake_ns == 0 || wait.ended_by_exit ||
      (wait.waker_tid != 0 && session_.threads.contains(wait.waker_tid)))
    return;
  if (FollowTheBytes(interval, wait)) return;
  auto read = session_.stream_reads.find({interval.tid, interval.start_ns});
  if (read == session_.stream_reads.end() || read->second.wake_ns != interval.wake_ns) return;
  const StreamRead::Writer* found = nullptr;
  uint64_t written_ns = 0;
  bool one_writer_after = true;
  for (const StreamRead::Writer& writer : read->second.writers) {
    if (writer.tid == 0 || writer.tid == interval.tid || !session_.threads.contains(writer.tid)) {
      one_writer_after = false;
      continue;
    }
    if (writer.time_ns <= wait.wake_ns) {
      // Written while it waited: data written before it slept did not end its sleep.
      if (writer.time_ns >= interval.start_ns) found = &writer, written_ns = writer.time_ns;
      one_writer_after = false;
      break;
    }
    if (writer.tid != read->second.writers[0].tid) one_writer_after = false;
  }
  if (found == nullptr && one_writer_after) {
    found = &read->second.writers[0];
    written_ns = wait.wake_ns;
  }
  if (found == nullptr) return;
  wait.waker_pid = found->pid;
  wait.waker_tid = found->tid;
  wait.waker_comm.clear();
  wait.waker_user_stack_id = -1;
  wait.waker_python_stack = nullptr;
  wait.waker_native_stack = nullptr;
  wait.waker_call = index_->calls.At(found->tid, written_ns);
  wait.data_written_ns = written_ns;
}

// A TCP read's first byte was queued by one send: the connection and the byte position name it,
// whichever thread wrote last. Data written before the wait began may still be what ended it
// (a long send whose last part arrived while it slept).
bool WaitReader::FollowTheBytes(const OffCpuInterval& interval, Wait& wait) const {
  if (tcp_ == nullptr) return false;
  const TcpTransfer* receive = tcp_->ReceiveAfterWait(0, interval.tid, interval.start_ns);
  if (receive == nullptr || receive->wake_ns != interval.wake_ns) return false;
  const std::optional<TcpSendRef> sent = tcp_->SenderOf(0, *receive);
  if (!sent || sent->send->tid == interval.tid || !session_.threads.contains(sent->send->tid))
    return false;
  const TcpTransfer& send = *sent->send;
  wait.waker_pid = send.pid;
  wait.waker_tid = send.tid;
  wait.waker_comm.clear();
  wait.waker_user_stack_id = -1;
  wait.waker_python_stack = nullptr;
  wait.waker_native_stack = nullptr;
  wait.data_written_ns = std::min(send.start_ns, wait.wake_ns);
  wait.waker_call = index_->calls.At(send.tid, wait.data_written_ns);
  wait.data_send = &send;
  return true;
}

namespace {

// The interpreter's own loop between two sleeps of one wait for the GIL (retake the GIL's mutex,
// ask the holder to drop it, sleep again) runs for microseconds; a thread that got the GIL holds
// it a switch interval (5 ms) unless it blocks on something else. More time on CPU than this
// between two sleeps on the GIL, and they are two waits.
constexpr uint64_t kGilLoopNs = 200'000;
// Preemptions in the loop, between two sleeps of one wait, looked past.
constexpr int kPreemptionsLooked = 4;

}  // namespace

const Wait& WaitReader::PieceOf(size_t index) const {
  auto [entry, inserted] = read_.try_emplace(index);
  if (inserted) entry->second = ReadWait(session_.off_cpu[index]);
  return entry->second;
}

bool WaitReader::IsGilSleep(size_t index) const {
  const Wait& piece = PieceOf(index);
  return piece.state != OffCpuState::kRunnable && piece.wait_class == WaitClass::kPythonGil;
}

void WaitReader::FindRun(size_t index) const {
  const OffCpuInterval* all = session_.off_cpu.data();
  const OffCpuInterval& at = all[index];
  // Whether the GIL sleep `next` continues the wait of the GIL sleep `previous` of the thread.
  auto continues = [&](size_t previous, size_t next) {
    if (!IsGilSleep(previous) || !IsGilSleep(next)) return false;
    const Wait& before = PieceOf(previous);
    return !before.ended_by_exit && PieceOf(next).object.pid == before.object.pid;
  };
  auto walk = [&](bool forward) {
    size_t last_sleep = index;
    const OffCpuInterval* current = &at;
    uint64_t on_cpu_ns = 0;
    int preemptions = 0;
    while (true) {
      const OffCpuInterval* next = nullptr;
      if (forward) {
        auto later = index_->off_cpu.StartingIn(at.tid, current->start_ns + 1, UINT64_MAX);
        if (!later.empty()) next = *later.begin();
      } else {
        next = index_->off_cpu.LastBefore(at.tid, current->start_ns);
      }
      if (next == nullptr) break;
      const OffCpuInterval& earlier = forward ? *current : *next;
      const OffCpuInterval& later = forward ? *next : *current;
      if (later.start_ns < earlier.end_ns) break;
      on_cpu_ns += later.start_ns - earlier.end_ns;
      if (on_cpu_ns > kGilLoopNs) break;
      const size_t next_index = static_cast<size_t>(next - all);
      current = next;
      if (next->state() == OffCpuState::kRunnable) {
        if (++preemptions > kPreemptionsLooked) break;
        continue;
      }
      if (forward ? !continues(last_sleep, next_index) : !continues(next_index, last_sleep)) break;
      last_sleep = next_index;
      on_cpu_ns = 0;
      preemptions = 0;
    }
    return last_sleep;
  };
  const size_t first = walk(false);
  const size_t last = walk(true);
  if (first == last) {
    run_first_[index] = index;
    return;
  }
  Run& run = runs_[first];
  run.first = first;
  run.last = last;
  for (const OffCpuInterval* piece :
       index_->off_cpu.StartingIn(at.tid, all[first].start_ns, all[last].start_ns + 1))
    run_first_[static_cast<size_t>(piece - all)] = first;
  // The first piece's start, object and stacks (the first that has them: short sleeps carry
  // none); the last's wake, end and waker.
  Wait& wait = run.wait;
  wait = PieceOf(first);
  for (size_t i = first; i <= last && (wait.python_stack == nullptr || wait.user_stack_id < 0);
       ++i) {
    if (all[i].tid != at.tid || all[i].state() == OffCpuState::kRunnable) continue;
    const Wait& piece = PieceOf(i);
    if (wait.python_stack == nullptr) wait.python_stack = piece.python_stack;
    if (wait.user_stack_id < 0) {
      wait.user_stack_id = piece.user_stack_id;
      wait.kstack_id = piece.kstack_id;
    }
  }
  const Wait& end = PieceOf(last);
  wait.end_ns = end.end_ns;
  wait.wake_ns = end.wake_ns;
  wait.waker_pid = end.waker_pid;
  wait.waker_tid = end.waker_tid;
  wait.waker_comm = end.waker_comm;
  wait.waker_call = end.waker_call;
  wait.ended_by_exit = end.ended_by_exit;
  wait.exit_tid = end.exit_tid;
  wait.exit_comm = end.exit_comm;
  wait.waker_user_stack_id = end.waker_user_stack_id;
  wait.waker_python_stack = end.waker_python_stack;
  wait.waker_native_stack = end.waker_native_stack;
  wait.data_written_ns = end.data_written_ns;
  wait.data_send = end.data_send;
}

size_t WaitReader::RunFirst(size_t index) const {
  if (auto known = run_first_.find(index); known != run_first_.end()) return known->second;
  const OffCpuInterval& interval = session_.off_cpu[index];
  if (interval.state() != OffCpuState::kRunnable) {
    if (!IsGilSleep(index)) return index;
    FindRun(index);
    return run_first_[index];
  }
  // A preemption inside a run: the run of the GIL sleep before it, if it reaches this far.
  const OffCpuInterval* before = &interval;
  for (int looked = 0; looked <= kPreemptionsLooked; ++looked) {
    before = index_->off_cpu.LastBefore(interval.tid, before->start_ns);
    if (before == nullptr || interval.start_ns - before->end_ns > kGilLoopNs) break;
    if (before->state() == OffCpuState::kRunnable) continue;
    const size_t sleep = static_cast<size_t>(before - session_.off_cpu.data());
    if (IsGilSleep(sleep)) {
      RunFirst(sleep);
      if (auto known = run_first_.find(index); known != run_first_.end()) return known->second;
    }
    break;
  }
  run_first_[index] = index;
  return index;
}

const Wait& WaitReader::WaitOf(const OffCpuInterval& interval) const {
  const size_t index = static_cast<size_t>(&interval - session_.off_cpu.data());
  const size_t first = RunFirst(index);
  if (auto run = runs_.find(first); run != runs_.end()) return run->second.wait;
  return PieceOf(index);
}

bool WaitReader::BeginsWait(const OffCpuInterval& interval) const {
  const size_t index = static_cast<size_t>(&interval - session_.off_cpu.data());
  return RunFirst(index) == index;
}

std::pair<size_t, size_t> WaitReader::PiecesOf(const OffCpuInterval& interval) const {
  const size_t index = static_cast<size_t>(&interval - session_.off_cpu.data());
  const size_t first = RunFirst(index);
  if (auto run = runs_.find(first); run != runs_.end()) return {run->second.first, run->second.last};
  return {index, index};
}

Wait WaitReader::MakeWait(const OffCpuInterval& interval, uint64_t start, uint64_t end) const {
  Wait wait = WaitOf(interval);
  wait.start_ns = start;
  wait.end_ns = end;
  if (wait.wake_ns == 0) return wait;
  if (wait.wake_ns > end) {
    // Woken after the window: in it, nobody ended the wait.
    wait.wake_ns = 0;
    wait.ended_by_exit = false;
    wait.exit_tid = 0;
    wait.exit_comm.clear();
    wait.waker_pid = wait.waker_tid = 0;
    wait.waker_comm.clear();
    wait.waker_user_stack_id = -1;
    wait.waker_python_stack = nullptr;
    wait.waker_native_stack = nullptr;
    wait.waker_call = nullptr;
    wait.data_written_ns = 0;
    wait.data_send = nullptr;
    return wait;
  }
  // Woken before `start` (the interval clipped to a window it began before): runnable from the
  // window's start, not asleep in it.
  wait.wake_ns = std::max(wait.wake_ns, start);
  return wait;
}

TimeSplit WaitReader::Split(uint32_t tid, uint64_t start, uint64_t end) const {
  TimeSplit split;
  // Before the thread was created, and after it exited, it did nothing at all.
  if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
    if (thread->second.start_ns > start) start = std::min(thread->second.start_ns, end);
    if (thread->second.exit_ns != 0 && thread->second.exit_ns < end)
      end = std::max(thread->second.exit_ns, start);
  }
  const Wait* previous = nullptr;  // the pieces of one wait (a GIL run) are one wait
  for (const OffCpuInterval* interval : index_->off_cpu.During(tid, start, end)) {
    const Wait& whole = WaitOf(*interval);
    if (&whole == previous) continue;
    previous = &whole;
    uint64_t clipped_start = std::max(whole.start_ns, start);
    uint64_t clipped_end = std::min(whole.end_ns, end);
    Wait wait = MakeWait(*interval, clipped_start, clipped_end);
    if (wait.state == OffCpuState::kRunnable) {
      split.runnable_ns += clipped_end - clipped_start;
    } else {
      split.asleep_ns += wait.asleep_ns();
      if (wait.wake_ns != 0) split.runnable_ns += clipped_end - wait.wake_ns;
    }
    split.waits.push_back(std::move(wait));
  }
  uint64_t off_cpu = split.asleep_ns + split.runnable_ns;
  split.on_cpu_ns = end - start > off_cpu ? end - start - off_cpu : 0;
  return split;
}

std::string BlockingKernelFunction(const Session& session, int32_t stack_id) {
  return BlockingFunction(session.KernelStack(stack_id));
}

}  // namespace gprof::collector
