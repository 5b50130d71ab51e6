// Each thread's native stack for `gprof-run dump`, read with as little stopping as the kernel
// allows. A thread blocked in a system call (or off the CPU outside one) needs no stop:
// /proc/PID/task/TID/syscall ends with its user stack pointer and program counter, its stack is
// copied from there with process_vm_readv, and the collector's CFI unwinder (stack_unwind.h)
// walks the copy. Only where that cannot work is the one thread stopped, briefly, with ptrace
// (seize, interrupt, its registers, the copy, detach): a thread on a CPU ("running": the kernel
// gives no registers of a running thread), one whose stack moved while it was copied, and one
// whose unwinding needed the frame pointer (rbp), which /proc does not give.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "collector/live/proc_snapshot.h"
#include "collector/symbols/stack_unwind.h"

namespace gprof::collector::live {

// How much of a thread's stack is copied from its stack pointer up: deep enough for the frames of
// a Python interpreter's C stack, small enough for 500 threads in a few milliseconds.
inline constexpr size_t kStackCopyBytes = 64 << 10;

// Reads `thread`'s native stack (its user_sp/user_pc from /proc where it has them) into
// thread->native_stack, thread->stack_path and thread->stopped_ns. `unwinder` knows the
// process's maps.
void ReadNativeStack(StackUnwinder& unwinder, ThreadSnapshot* thread);

}  // namespace gprof::collector::live
