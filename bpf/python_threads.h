// Every thread's Python stack, read out of process without stopping it (`gprof-run dump`): the
// interpreters' thread states and their frame chains, followed as the BPF walker follows them
// (python_stacks.bpf.h, the same offsets), with each read bounded and checked. A thread that runs
// on meanwhile may tear a stack: each frame's code object is checked to be a code object (its
// type) with the instruction inside its bytecode, and a walk that meets anything else ends there,
// marked incomplete: a shorter stack, never a wrong frame.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bpf/python_reader.h"

namespace gprof::bpf {

struct PythonFrameRead {
  uint64_t address = 0;  // the frame: a PyFrameObject (3.9, 3.10), an interpreter frame after
  PythonCodeKey key;
  int32_t offset = -1;  // the instruction's byte offset in the code; -1: not started
  PythonCode code;      // its file, name and line table (code.error: not read)
};

struct PythonThreadRead {
  uint64_t tstate = 0;
  uint64_t pthread = 0;  // its thread_id: pthread_self() of its thread
  // The thread's kernel id: glibc's struct pthread's tid field (x86-64); 0 when unreadable.
  uint32_t tid = 0;
  std::vector<PythonFrameRead> frames;  // innermost first
  bool incomplete = false;              // the walk met something it could not read or check
  bool truncated = false;               // deeper than the frames read
};

// The thread states of every interpreter of the process that `interpreter` (READABLE) describes,
// each with its frames.
std::vector<PythonThreadRead> ReadPythonThreads(const ProcessMemory& memory,
                                                const PythonInterpreter& interpreter);

// CPython's GIL (struct _gil_runtime_state, the same head in 3.9 to 3.13: interval,
// last_holder, locked, switch_number, then at 32 the condition variable its waiters sleep on and
// its mutex): the one a thread waits for when it waits on futex `address`, the word glibc's
// pthread_cond_t (48 bytes, its two __g_signals words at 40 and 44) sleeps on for the GIL's
// cond. Found when the words there read as a GIL whose last holder is one of `tstates`.
struct PythonGil {
  uint64_t address = 0;
  uint64_t last_holder = 0;  // a thread state
  bool locked = false;
};
std::optional<PythonGil> GilWaitedOn(const ProcessMemory& memory, uint64_t address,
                                     const std::vector<uint64_t>& tstates);

}  // namespace gprof::bpf
