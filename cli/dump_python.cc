#include "cli/dump_python.h"

#include <linux/futex.h>

#include <algorithm>
#include <map>

#include "bpf/python_locks.h"
#include "bpf/python_threads.h"
#include "collector/symbols/python_lines.h"

namespace gprof::cli {
namespace {

using collector::live::HolderSource;
using collector::live::ProcessSnapshot;
using collector::live::ThreadSnapshot;

std::vector<collector::live::PythonFrameLine> FrameLines(const bpf::PythonThreadRead& thread,
                                                         uint32_t line_format) {
  std::vector<collector::live::PythonFrameLine> lines;
  for (const bpf::PythonFrameRead& frame : thread.frames) {
    collector::live::PythonFrameLine line;
    if (frame.code.error != 0) {
      line.file = "?";
      line.function = "(a code object that could not be read)";
    } else {
      line.file = frame.code.filename;
      line.function = frame.code.name;
      line.line = collector::PythonLine(line_format, frame.code.linetable, frame.key.firstlineno,
                                        frame.offset)
                      .value_or(0);
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

// The frame's function ends with `name` ("Condition.wait" from 3.11, "wait" before) in a file
// named `file`.
bool FrameIs(const bpf::PythonFrameRead& frame, const std::string& file, const std::string& name) {
  return frame.code.error == 0 && frame.code.filename.ends_with("/" + file) &&
         frame.code.name.ends_with(name);
}

bool WaitsOnFutexWord(const ThreadSnapshot& thread) {
  if (!thread.in_syscall || thread.syscall != collector::live::kFutexSystemCall) return false;
  unsigned command = static_cast<unsigned>(thread.args[1]) & FUTEX_CMD_MASK;
  return command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET;
}

// The threading lock `thread` waits for (found in its frames: python_locks.h), and its holder
// where the lock names it (an RLock) or one thread's `with` block says it (a Lock, inferred).
struct PythonThreads {
  std::map<pid_t, const bpf::PythonThreadRead*> read_of_tid;
  std::map<uint64_t, pid_t> tid_of_ident;  // thread_id (pthread_self()) -> tid
  // tid -> the locks it is inside `with` on, read at the first Lock a thread waits on.
  std::optional<std::map<pid_t, std::vector<uint64_t>>> inside_with;
};

void DescribePythonLock(const bpf::ProcessMemory& memory, const bpf::PythonInterpreter& python,
                        PythonThreads* threads, ProcessSnapshot* process, ThreadSnapshot* thread) {
  const auto& read_of_tid = threads->read_of_tid;
  const auto& tid_of_ident = threads->tid_of_ident;
  auto read = read_of_tid.find(thread->tid);
  if (read == read_of_tid.end()) return;
  const bpf::PythonThreadRead& waiter = *read->second;
  std::optional<bpf::PythonLock> lock =
      bpf::PythonLockWaitedOn(memory, python, waiter, thread->args[0]);
  if (!lock) return;
  thread->lock_address = lock->object;
  if (lock->type == bpf::PythonLockType::kRLock) {
    thread->lock_name = "the threading.RLock";
    auto owner = tid_of_ident.find(lock->owner);
    if (lock->owner == 0) {
      thread->holder_unknown = "the RLock had no owner when it was read (released meanwhile)";
    } else if (owner == tid_of_ident.end()) {
      thread->holder_unknown = "its owner field names no Python thread of the process";
    } else if (owner->second != thread->tid) {
      thread->holder = owner->second;
      thread->holder_source = HolderSource::kRlockOwner;
      thread->holder_note = "it has taken it " + std::to_string(lock->count) +
                            (lock->count == 1 ? " time" : " times");
    }
    return;
  }
  // Condition.wait sleeps on a lock of its own, which it took itself: the condition is the wait.
  const std::vector<bpf::PythonFrameRead>& frames = waiter.frames;
  if (FrameIs(frames[lock->frame], "threading.py", "wait") && lock->frame_first_local != 0) {
    thread->lock_name = "the threading.Condition";
    thread->lock_address = lock->frame_first_local;  // Condition.wait's self
    std::string caller;
    if (lock->frame + 1 < frames.size() && frames[lock->frame + 1].code.error == 0)
      caller = ", called from " + frames[lock->frame + 1].code.name;
    thread->holder_unknown = "it waits to be notified (Condition.wait" + caller +
                             "); which thread would notify it is not known";
    return;
  }
  thread->lock_name = "the threading.Lock";
  if (!threads->inside_with) {
    threads->inside_with.emplace();
    for (const auto& [tid, read] : read_of_tid)
      (*threads->inside_with)[tid] = bpf::InsideWithBlocks(memory, python, *read);
  }
  std::vector<pid_t> inside;
  for (const ThreadSnapshot& other : process->threads) {
    // A waiter in `with lock:` holds lock.__exit__ too.
    bool waits_too = WaitsOnFutexWord(other) && other.args[0] == thread->args[0];
    auto locks = threads->inside_with->find(other.tid);
    if (other.tid != thread->tid && !waits_too && locks != threads->inside_with->end() &&
        std::find(locks->second.begin(), locks->second.end(), lock->object) != locks->second.end())
      inside.push_back(other.tid);
  }
  if (inside.size() == 1) {
    thread->holder = inside.front();
    thread->holder_source = HolderSource::kInsideWithBlock;
  } else if (inside.empty()) {
    thread->holder_unknown =
        "a threading.Lock keeps no owner, and no thread is inside `with` on it (it was taken by "
        "acquire(), or by a thread that has ended)";
  } else {
    thread->holder_unknown = "a threading.Lock keeps no owner, and " +
                             std::to_string(inside.size()) +
                             " threads hold its __exit__ (one is inside `with` on it)";
  }
}

void AddToProcess(ProcessSnapshot* process) {
  bpf::PythonInterpreter python =
      bpf::FindPythonInterpreter(static_cast<uint32_t>(process->pid), process->maps_text);
  if (python.status == 0) return;
  process->python = "CPython " + bpf::PythonVersionText(python.version_hex);
  if (python.status != GPROF_PY_READABLE) {
    process->python += ", whose stacks cannot be read: " + python.why;
    return;
  }
  bpf::ProcessMemory memory(static_cast<uint32_t>(process->pid));
  std::vector<bpf::PythonThreadRead> reads = bpf::ReadPythonThreads(memory, python);
  // glibc's struct pthread holds the thread's id in its own PID namespace.
  std::map<pid_t, ThreadSnapshot*> by_tid;
  for (ThreadSnapshot& thread : process->threads) by_tid[thread.ns_tid] = &thread;
  std::map<uint64_t, pid_t> tid_of_tstate;
  PythonThreads python_threads;
  std::vector<uint64_t> tstates;
  for (const bpf::PythonThreadRead& read : reads) {
    tstates.push_back(read.tstate);
    auto thread = by_tid.find(static_cast<pid_t>(read.tid));
    if (thread == by_tid.end()) continue;  // not one of the threads read (or a torn read)
    tid_of_tstate[read.tstate] = thread->second->tid;
    python_threads.tid_of_ident[read.pthread] = thread->second->tid;
    python_threads.read_of_tid[thread->second->tid] = &read;
    thread->second->python_stack = FrameLines(read, python.objects.line_format);
    if (read.incomplete)
      thread->second->python_stack_cut = "incomplete: the thread moved while it was read";
    else if (read.truncated)
      thread->second->python_stack_cut = "truncated";
  }
  // The GIL: whichever futex the waiters sleep on that reads as one.
  for (ThreadSnapshot& thread : process->threads) {
    if (!WaitsOnFutexWord(thread)) continue;
    std::optional<bpf::PythonGil> gil = bpf::GilWaitedOn(memory, thread.args[0], tstates);
    if (!gil) continue;
    thread.lock_name = "the GIL";
    thread.lock_address = gil->address;
    auto holder = tid_of_tstate.find(gil->last_holder);
    if (gil->locked && holder != tid_of_tstate.end() && holder->second != thread.tid) {
      thread.holder = holder->second;
      thread.holder_source = HolderSource::kGilLastHolder;
    }
  }
  for (ThreadSnapshot& thread : process->threads)
    if (WaitsOnFutexWord(thread) && thread.lock_name.empty())
      DescribePythonLock(memory, python, &python_threads, process, &thread);
}

}  // namespace

void AddPythonStacks(collector::live::Snapshot* snapshot) {
  for (ProcessSnapshot& process : snapshot->processes) AddToProcess(&process);
}

}  // namespace gprof::cli
