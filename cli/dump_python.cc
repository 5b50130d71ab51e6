#include "cli/dump_python.h"

#include <linux/futex.h>

#include <fstream>
#include <map>

#include "bpf/python_threads.h"
#include "collector/symbols/python_lines.h"

namespace gprof::cli {
namespace {

using collector::live::HolderSource;
using collector::live::ProcessSnapshot;
using collector::live::ThreadSnapshot;

// /proc/PID/maps, at most 16 MiB of it.
std::string MapsText(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string text;
  char buffer[8192];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > (16u << 20)) break;
  }
  return text;
}

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

bool WaitsOnFutexWord(const ThreadSnapshot& thread) {
  if (!thread.in_syscall || thread.syscall != collector::live::kFutexSystemCall) return false;
  unsigned command = static_cast<unsigned>(thread.args[1]) & FUTEX_CMD_MASK;
  return command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET;
}

void AddToProcess(ProcessSnapshot* process) {
  std::string maps = MapsText(process->pid);
  bpf::PythonInterpreter python =
      bpf::FindPythonInterpreter(static_cast<uint32_t>(process->pid), maps);
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
  std::vector<uint64_t> tstates;
  for (const bpf::PythonThreadRead& read : reads) {
    tstates.push_back(read.tstate);
    auto thread = by_tid.find(static_cast<pid_t>(read.tid));
    if (thread == by_tid.end()) continue;  // not one of the threads read (or a torn read)
    tid_of_tstate[read.tstate] = thread->second->tid;
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
}

}  // namespace

void AddPythonStacks(collector::live::Snapshot* snapshot) {
  for (ProcessSnapshot& process : snapshot->processes) AddToProcess(&process);
}

}  // namespace gprof::cli
