// A snapshot of running process trees read from /proc alone, without stopping them (issue 38,
// `gprof-run dump`): each thread's state, the system call it is in and on what, its kernel stack,
// its native stack (native_stacks.h: a thread is stopped only where /proc cannot give it), and
// the owner a glibc mutex or a PI futex names.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/model/model.h"
#include "inject/shared/status.h"

namespace gprof::collector::live {

// Where a futex's holder came from: the lock's own memory, read as it was at the snapshot.
enum class HolderSource : uint8_t {
  kNone,
  kMutexOwnerField,   // pthread_mutex_t's __owner (the int 8 bytes after the futex word)
  kPiFutexWord,       // a PI futex word's low 30 bits
  kFileLock,          // /proc/locks: the process holding a lock on the file the fd names
  kRwlockWriter,      // pthread_rwlock_t's __cur_writer, for a reader or writer waiting on it
  kGilLastHolder,     // CPython's GIL: locked, and its last_holder's thread
  kRlockOwner,        // a Python threading.RLock's rlock_owner
  kInsideWithBlock,   // inferred: the one thread inside `with` on a Python threading.Lock
  kInsideCudaDriver,  // inferred: the one thread working inside the CUDA driver
};

// A holder that the lock's memory does not name, but that is inferred from what threads do.
inline bool Inferred(HolderSource source) {
  return source == HolderSource::kInsideWithBlock || source == HolderSource::kInsideCudaDriver;
}

// A Python frame, as the thread's interpreter has it.
struct PythonFrameLine {
  std::string file;
  int line = 0;  // 0: unknown
  std::string function;
};

// How a thread's native stack was read.
enum class StackPath : uint8_t {
  kNotRead,          // not at all: native_stack.cut_short says why
  kWithoutStopping,  // copied from the stack pointer /proc gave, the thread left running
  kStopped,          // the thread stopped (ptrace) for stopped_ns to take its registers and stack
};

struct ThreadSnapshot {
  pid_t tid = 0;     // in gprof-run's PID namespace
  pid_t ns_tid = 0;  // in its own (a container's): what its process's memory names it by
  pid_t pid = 0;     // its process
  std::string name;  // comm
  char state = '?';  // /proc/.../stat's state letter: R, S, D, T, t, Z, X, I
  bool in_syscall = false;
  bool running = false;  // /proc/.../syscall said "running"
  int64_t syscall = -1;  // the system call number, when in_syscall
  std::array<uint64_t, 6> args{};
  std::string object;  // what an fd argument names: "pipe:[12]", "socket:[34]", a path
  std::optional<uint32_t> futex_word;  // the futex word's value, read with process_vm_readv
  pid_t holder = 0;  // the lock's holder, 0 when unknown; a process id for kFileLock
  HolderSource holder_source = HolderSource::kNone;
  std::string holder_note;                // more of the holder: "it has taken it 2 times"
  std::string holder_unknown;             // why a lock that is known has no holder named
  std::vector<std::string> kernel_stack;  // function names, innermost first
  std::string kernel_stack_unreadable;    // why it is empty, when it could not be read
  std::string syscall_unreadable;         // why the system call is unknown
  bool exited = false;                    // gone while it was read: what was read is kept
  // The user stack pointer and program counter /proc/.../syscall ends with (when not running).
  bool user_registers = false;
  uint64_t user_sp = 0, user_pc = 0;
  NativeStack native_stack;  // innermost first; named through Snapshot::maps
  StackPath stack_path = StackPath::kNotRead;
  uint64_t stopped_ns = 0;  // how long it was stopped to read it (kStopped)
  // Its Python stack, innermost first (empty: no Python frames, or no readable CPython), and why
  // it ends early where it does ("incomplete", "truncated").
  std::vector<PythonFrameLine> python_stack;
  std::string python_stack_cut;
  // The lock its futex wait is known to be, and the lock's address: "the GIL",
  // "the threading.RLock" (the Python object's address).
  std::string lock_name;
  uint64_t lock_address = 0;
};

struct ProcessSnapshot {
  pid_t pid = 0;
  pid_t ns_pid = 0;    // its pid in its own PID namespace (a container's); = pid in ours
  std::string python;  // the CPython it runs ("CPython 3.11"), or why it cannot be read; "" none
  std::string maps_text;  // /proc/PID/maps as read (the frames' names and the Python reader's)
  pid_t ppid = 0;
  std::string name;
  std::vector<ThreadSnapshot> threads;
  bool exited = false;  // exited while it was read
};

struct Snapshot {
  std::vector<pid_t> requested;
  std::vector<ProcessSnapshot> processes;  // each requested process, then its descendants
  uint64_t read_ns = 0;                    // how long the reading took
  uint64_t stopped_ns = 0;                 // the time threads were stopped, all of them together
  size_t threads_stopped = 0;
  // Each process's maps and executable as they were read, to name the native stacks' frames.
  Session maps;
};

// Reads each of `pids` and its descendants. Fails, with a line naming the problem, when a pid is
// not a process that can be dumped: none such, a zombie, a kernel thread, or one whose /proc
// entries this process may not read (naming the privilege and Yama's ptrace_scope).
Expected<Snapshot> ReadProcessTrees(const std::vector<pid_t>& pids);

// The futex system call's number on this architecture (x86-64's; -1 elsewhere, where the
// objects of system calls are not decoded yet).
#if defined(__x86_64__)
inline constexpr int64_t kFutexSystemCall = 202;
#else
inline constexpr int64_t kFutexSystemCall = -1;
#endif

// The x86-64 name of system call `number` ("futex", "read"), or "" when this table lacks it.
std::string SystemCallName(int64_t number);

}  // namespace gprof::collector::live
