// Native stacks of slow CUDA calls, taken as copies. At a slow call's exit the calling thread
// copies its registers and the top of its stack into a preallocated slot (one process_vm_readv:
// no lock, no allocation, no signal); the writer thread writes the copy out as it is, and the
// collector unwinds and names it. Walking a stack in the process would look up each frame's
// unwind tables through the dynamic loader (dl_iterate_phdr, under its lock), the lock the
// program's own dlopen/dladdr take; naming a frame (dladdr) takes it too. Internal to the
// injected library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inject/format/session_format.h"

namespace gprof::inject {

// Bytes of a thread's stack copied at a slow call's exit (from its stack pointer up): enough for
// a deep Python and PyTorch stack. Settable, within the bounds below.
inline constexpr char kStackCopyBytesEnv[] = "GPROF_STACK_COPY_BYTES";
inline constexpr size_t kDefaultStackCopyBytes = 32 * 1024;
inline constexpr size_t kMinStackCopyBytes = 4 * 1024;
inline constexpr size_t kMaxStackCopyBytes = 512 * 1024;

// The copy size, from GPROF_STACK_COPY_BYTES (clamped to the bounds; unset or unreadable: the
// default). Called once, before any stack is copied.
void ConfigureStackCopies(const char* bytes_setting);
size_t StackCopyBytes();

// Copies the calling thread's registers and stack for the call of `tid` that entered at
// `enter_ns` and left at `exit_ns`. Drops and counts when every slot is taken.
void CaptureSlowCallStack(uint32_t tid, uint64_t enter_ns, uint64_t exit_ns);

// Writer thread: hands each copied stack (its record, then its bytes) to `write`, frees its slot;
// returns how many.
using StackCopyWriter = void (*)(void* context, const format::StackCopyRecord& record,
                                 const uint8_t* bytes);
size_t DrainStackCopies(StackCopyWriter write, void* context);

// Stacks that could not be kept (every slot was taken), since the last call.
uint64_t TakeDroppedStacks();

// Forgets what the parent process captured (after fork, in the child).
void ResetStacksAfterFork();

}  // namespace gprof::inject
