// Native stacks of slow CUDA calls. The calling thread captures only return addresses at the
// call's exit (libunwind's unw_backtrace: microseconds, and only for calls over the slow-call
// threshold); the writer thread names them. Internal to the injected library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gprof::inject {

inline constexpr uint32_t kMaxStackFrames = 48;

struct SlowCallStack {
  uint64_t enter_ns;  // identifies the call, with the tid
  uint32_t tid;
  uint32_t frame_count;
  uint64_t frames[kMaxStackFrames];  // innermost first, the recording's own frames left out
};

// Captures the calling thread's stack for the call of `tid` that entered at `enter_ns`.
void CaptureSlowCallStack(uint32_t tid, uint64_t enter_ns);

// Moves up to `capacity` captured stacks into `out`; returns how many. Writer thread.
size_t TakeSlowCallStacks(SlowCallStack* out, size_t capacity);

// Stacks that could not be kept (the queue was full), since the last call.
uint64_t TakeDroppedStacks();

// "symbol+0xoffset" of a return address, or "" where no symbol is known. Returns the length.
size_t SymbolizeReturnAddress(uint64_t address, char* out, size_t size);

// Forgets what the parent process captured (after fork, in the child).
void ResetStacksAfterFork();

}  // namespace gprof::inject
