#include "collector/writers/dump_text.h"

#include <cstdio>
#include <map>

#include "collector/model/model.h"
#include "collector/writers/words/dump_words.h"

namespace gprof::collector {
namespace {

using live::HolderSource;
using live::ThreadSnapshot;

constexpr size_t kThreadsListedOneByOne = 3;  // larger groups show their first thread's stack
constexpr size_t kKernelFramesShown = 6;

class Writer {
 public:
  Writer(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis)
      : snapshot_(snapshot), analysis_(analysis) {
    for (const live::ProcessSnapshot& process : snapshot.processes)
      for (const ThreadSnapshot& thread : process.threads) threads_[thread.tid] = &thread;
  }

  std::string Text() {
    Header();
    Deadlocks();
    OddThreads();
    Chains();
    Groups();
    out_ += "Since when: unknown for every thread (/proc does not say when a wait began).\n";
    return out_;
  }

 private:
  std::string Named(pid_t tid) const {
    auto found = threads_.find(tid);
    if (found == threads_.end()) return std::to_string(tid);
    return std::to_string(tid) + " (" + PrintableName(found->second->name) + ")";
  }

  void Header() {
    size_t thread_count = 0;
    for (const live::ProcessSnapshot& process : snapshot_.processes)
      thread_count += process.threads.size();
    char line[200];
    snprintf(line, sizeof line, "gprof-run dump: %zu process%s, %zu thread%s, read in %.1f ms; ",
             snapshot_.processes.size(), snapshot_.processes.size() == 1 ? "" : "es", thread_count,
             thread_count == 1 ? "" : "s", static_cast<double>(snapshot_.read_ns) / 1e6);
    out_ += line;
    out_ += StoppedWords(snapshot_.stopped_ns, snapshot_.threads_stopped) + "\n";
    for (const live::ProcessSnapshot& process : snapshot_.processes) {
      out_ += "  process " + std::to_string(process.pid) + " (" + PrintableName(process.name) +
              "), parent " + std::to_string(process.ppid) + ", " +
              std::to_string(process.threads.size()) +
              (process.threads.size() == 1 ? " thread" : " threads");
      if (process.ns_pid != 0 && process.ns_pid != process.pid)
        out_ += ", pid " + std::to_string(process.ns_pid) +
                " in its own PID namespace (a container's; the ids shown are this one's)";
      if (!process.python.empty()) out_ += ", " + PrintableName(process.python);
      if (process.exited) out_ += ": it exited during the dump; what was read is kept";
      out_ += "\n";
    }
    out_ += "\n";
  }

  void Deadlocks() {
    for (const live::Deadlock& deadlock : analysis_.deadlocks) {
      out_ +=
          "DEADLOCK: " + std::to_string(deadlock.members.size()) + " threads wait for each other:";
      for (size_t i = 0; i < deadlock.members.size(); ++i) {
        pid_t next = deadlock.members[(i + 1) % deadlock.members.size()];
        const ThreadSnapshot* member = threads_.at(deadlock.members[i]);
        out_ += (i == 0 ? " " : "; ") + Named(member->tid) + " waits in " + DescribeWait(*member) +
                " " + HolderWords(std::to_string(next), member->holder_source, member->holder_note);
      }
      out_ += "\n";
    }
    if (!analysis_.deadlocks.empty()) out_ += "\n";
  }

  // The threads of one process that are not where their counterparts in the others are.
  void OddThreads() {
    if (analysis_.odd_threads.empty()) return;
    out_ += "Not where the others are (" + std::to_string(snapshot_.requested.size()) +
            " processes compared, threads matched by name):\n";
    for (const live::OddThread& odd : analysis_.odd_threads) {
      out_ += "  process " + std::to_string(odd.process) + ": " + Named(odd.thread->tid) + " in " +
              DescribeWait(*odd.thread) + WhereInCode(*odd.thread) + "; in " +
              std::to_string(odd.others) + " other processes, as " + Named(odd.usual->tid) +
              ", in " + DescribeWait(*odd.usual) + WhereInCode(*odd.usual) + "\n";
    }
    out_ += "\n";
  }

  // " at f+0x1c  at file.cc:12": the first line of its stack that is the program's own, or its
  // Python stack's innermost frame.
  std::string WhereInCode(const ThreadSnapshot& thread) const {
    if (!thread.python_stack.empty()) return " at " + PythonFrameText(thread.python_stack.front());
    for (const std::string& line : NativeStackLines(snapshot_, thread))
      if (!line.starts_with("...") && line.find(" in ") == std::string::npos) return " at " + line;
    return "";
  }

  void Chains() {
    if (analysis_.chains.empty()) return;
    out_ += "Chains, from the waiters through the holders to the root:\n";
    for (const live::WaitChain& chain : analysis_.chains) {
      const ThreadSnapshot* first = threads_.at(chain.waiters.front());
      out_ += "  " +
              (chain.waiters.size() == 1 ? Named(first->tid)
                                         : std::to_string(chain.waiters.size()) + " threads (" +
                                               TidList(chain.waiters) + ")") +
              " in " + DescribeWait(*first);
      const ThreadSnapshot* waiter = first;
      for (pid_t holder : chain.path) {
        out_ += " " +
                HolderWords(std::to_string(holder), waiter->holder_source, waiter->holder_note) +
                " -> ";
        auto link = threads_.find(holder);
        if (link == threads_.end()) {  // a file lock's holder outside the dumped trees
          out_ += "process " + std::to_string(holder) + ", not dumped (the root)\n";
          waiter = nullptr;
          break;
        }
        waiter = link->second;
        out_ += Named(holder) + " in " + DescribeWait(*waiter);
      }
      if (waiter != nullptr)
        out_ += waiter->holder == 0 ? " (the root)\n" : " (in the deadlock above)\n";
    }
    out_ += "\n";
  }

  static std::string TidList(const std::vector<pid_t>& tids) {
    std::string list;
    for (size_t i = 0; i < tids.size(); ++i) {
      size_t run_end = i;
      while (run_end + 1 < tids.size() && tids[run_end + 1] == tids[run_end] + 1) ++run_end;
      if (!list.empty()) list += ",";
      list += std::to_string(tids[i]);
      if (run_end > i) list += "-" + std::to_string(tids[run_end]);
      i = run_end;
    }
    return list;
  }

  void KernelStack(const ThreadSnapshot& thread) {
    if (!thread.kernel_stack_unreadable.empty()) {
      out_ += "      kernel stack " + thread.kernel_stack_unreadable + "\n";
      return;
    }
    if (thread.kernel_stack.empty()) return;
    out_ += "      kernel stack:";
    for (size_t i = 0; i < thread.kernel_stack.size() && i < kKernelFramesShown; ++i)
      out_ += (i == 0 ? " " : " < ") + thread.kernel_stack[i];
    if (thread.kernel_stack.size() > kKernelFramesShown) out_ += " < ...";
    out_ += "\n";
  }

  void NativeStack(const ThreadSnapshot& thread) {
    if (thread.native_stack.ips.empty()) {
      const std::string& why = thread.native_stack.cut_short;
      out_ += "      native stack unknown: " + (why.empty() ? std::string("no frame") : why) + "\n";
      return;
    }
    out_ += "      native stack (" + StackPathWords(thread) + "):\n";
    for (const std::string& line : NativeStackLines(snapshot_, thread))
      out_ += "        " + line + "\n";
  }

  void PythonStack(const ThreadSnapshot& thread) {
    if (thread.python_stack.empty()) return;
    out_ += "      Python stack:\n";
    for (const live::PythonFrameLine& frame : thread.python_stack)
      out_ += "        " + PythonFrameText(frame) + "\n";
    if (!thread.python_stack_cut.empty()) out_ += "        ... (" + thread.python_stack_cut + ")\n";
  }

  void Stacks(const ThreadSnapshot& thread) {
    KernelStack(thread);
    PythonStack(thread);
    NativeStack(thread);
  }

  void Groups() {
    out_ += "Threads by what they wait on:\n";
    for (const live::WaitGroup& group : analysis_.groups) {
      const ThreadSnapshot& first = *group.threads.front();
      std::vector<pid_t> tids;
      for (const ThreadSnapshot* thread : group.threads) tids.push_back(thread->tid);
      std::string holder;
      if (group.holder != 0)
        holder = " " + HolderWords(Named(group.holder), group.holder_source, first.holder_note);
      else if (!first.holder_unknown.empty())
        holder = " (" + HolderUnknownWords(first.holder_unknown) + ")";
      size_t count = group.threads.size();
      out_ += "  " + std::to_string(count) + (count == 1 ? " thread in " : " threads in ") +
              DescribeWait(first) + holder + ": " + TidList(tids) + "\n";
      if (count <= kThreadsListedOneByOne) {
        for (const ThreadSnapshot* thread : group.threads) {
          out_ += "    " + Named(thread->tid) + ", " + StateWord(thread->state);
          if (thread->exited) out_ += ", exited during the dump";
          out_ += "\n";
          Stacks(*thread);
        }
      } else {
        out_ += "    the first, " + Named(first.tid) + ", " + StateWord(first.state) + "\n";
        Stacks(first);
      }
    }
  }

  const live::Snapshot& snapshot_;
  const live::DumpAnalysis& analysis_;
  std::map<pid_t, const ThreadSnapshot*> threads_;
  std::string out_;
};

}  // namespace

std::string DumpText(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis) {
  return Writer(snapshot, analysis).Text();
}

}  // namespace gprof::collector
