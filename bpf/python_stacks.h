// The kernel recorder's Python part on the loader's side: finds the CPython each process of the
// tree runs and tells the BPF walker where its runtime is and how it is laid out (the
// python_targets map), names the code objects that the walker's stacks name (gprof_python_code
// records), and the threads that Python's threading module names (gprof_python_thread). Internal
// to gprof_kernel_recorder; used from the recorder's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bpf/python_reader.h"

namespace gprof::bpf {

class PythonStacks {
 public:
  // `append` writes one record (its bytes, header first) to kernel.gpr; `targets_fd` is the
  // python_targets map.
  PythonStacks(int targets_fd, std::function<void(const void*, size_t)> append)
      : targets_fd_(targets_fd), append_(std::move(append)) {}

  // A /proc/PID/maps snapshot of a process of the tree (after it appeared or exec'd).
  void OnMaps(uint32_t pid, const std::string& maps_text);
  // A gprof_python_stack record of the ring buffer (size checked by the caller): names the code
  // objects its frames name that are not named yet.
  void OnStack(const gprof_python_stack& stack, const gprof_python_frame* frames);
  // Process `pid` was forked by `parent_pid`: until it execs, it runs the parent's code objects
  // at the same addresses.
  void OnFork(uint32_t pid, uint32_t parent_pid) { fork_parents_[pid] = parent_pid; }
  // Process `pid` exec'd: its code objects are its own from now on.
  void OnExec(uint32_t pid) { fork_parents_.erase(pid); }
  // A process of the tree is gone.
  void OnExit(uint32_t pid);
  // Called from the recorder's poll loop: reads thread names where stacks of unnamed threads came,
  // and looks again at processes in which no interpreter was found yet (one starting up may not
  // have mapped it when its maps were read). `read_maps` reads a process's maps.
  void Tick(uint64_t now_ns, const std::function<bool(uint32_t, std::string*)>& read_maps);
  // When Tick should run next to look at a process again (CLOCK_MONOTONIC; UINT64_MAX: none due).
  uint64_t NextLookNs() const;
  // At the end: thread names of the processes still alive.
  void Finish();

 private:
  struct Process {
    PythonInterpreter interpreter;
    std::set<std::tuple<uint64_t, int32_t, uint32_t>> named;  // code, firstlineno, tag
    std::map<uint32_t, std::string> thread_names;
    bool names_due = false;
    uint64_t names_read_ns = 0;
  };
  // `last_look`: a Python named but not found is declared unsupported now.
  void Detect(uint32_t pid, const std::string& maps_text, bool last_look);
  // Writes what a process still looked at was found to be, if anything, and stops looking.
  void DeclarePending(uint32_t pid);
  void ReadThreadNames(uint32_t pid, Process& process, uint64_t now_ns);
  void EmitProcess(uint32_t pid, const PythonInterpreter& interpreter);
  // Code object `key` of process `pid`, read from the process or, where it is gone by the time its
  // stack is read (a DataLoader worker that ended), from a live fork ancestor that runs the same
  // interpreter: ReadPythonCode's checks (type, firstlineno, tag) refuse an object that is not
  // the one the frame saw, as one created after the fork would be.
  PythonCode ReadCode(uint32_t pid, const PythonInterpreter& interpreter, const PythonCodeKey& key);

  int targets_fd_;
  std::function<void(const void*, size_t)> append_;
  std::map<uint32_t, Process> processes_;  // processes that run a CPython (any status)
  // Processes where none was found yet: when to look again, and how many looks are left.
  struct Pending {
    uint64_t next_ns = 0;
    int looks_left = 0;
    PythonInterpreter named;  // a Python by its file's name only (status GPROF_PY_UNSUPPORTED)
  };
  std::map<uint32_t, Pending> pending_;
  // Process -> the process that forked it, while it has not exec'd since.
  std::map<uint32_t, uint32_t> fork_parents_;
  std::vector<uint8_t> buffer_;
};

}  // namespace gprof::bpf
