// Unwinds the stack copies of slow CUDA calls (inject/format/session_format.h StackCopyRecord)
// after the run, with elfutils' libdwfl: the injected library only copies a thread's registers and
// the top of its stack (walking them in the process takes the dynamic loader's lock), and this
// follows each frame's DWARF call frame information (.eh_frame, else .debug_frame of the file's
// separate debug file) through the files the process had mapped at the time, as gdb or perf would.
// CFI, not frame pointers: glibc and most distributions' libraries keep none, and a frame-pointer
// walk through them skips the frame that called into them (qsort's callback's caller).
//
// Frames are found here and named elsewhere (NativeStackFrames, through the maps and the files'
// symbols): the files are the ones the maps name, opened only when they are still the file that
// was mapped (the same inode); nothing is looked up over the network (no debuginfod, whatever
// DEBUGINFOD_URLS says).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// A thread as the injected library copied it at a slow call's exit.
struct StackCopy {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t enter_ns = 0;    // the call
  uint64_t capture_ns = 0;  // the call's exit: the maps of that moment
  uint64_t rip = 0, rsp = 0, rbp = 0;
  // False where only rip and rsp are known (`gprof-run dump`'s threads blocked in a system call:
  // /proc/PID/task/TID/syscall gives those two): a frame whose caller is found through rbp ends
  // the unwinding, cut_short saying that it needed the frame pointer.
  bool rbp_known = true;
  uint32_t requested_bytes = 0;
  int32_t error = 0;           // errno of a copy that failed
  std::vector<uint8_t> bytes;  // from rsp up
  // The copy was taken inside the recording's own code (the injected library's, CUPTI's), whose
  // frames on top are left out; false for the kernel recorder's copies, which take none.
  bool own_frames_on_top = true;
};

// NativeStack::cut_short of a copy without rbp (rbp_known false) whose unwinding needed it.
inline constexpr char kNeededFramePointer[] =
    "the unwinding needed the frame pointer (rbp), which was not read";

class StackUnwinder {
 public:
  // Reads `session`'s processes' maps as they are when Unwind is called.
  explicit StackUnwinder(const Session& session);
  ~StackUnwinder();
  StackUnwinder(const StackUnwinder&) = delete;
  StackUnwinder& operator=(const StackUnwinder&) = delete;

  // The copy's stack, innermost first, the frames of the recording itself (the injected library's
  // and CUPTI's, on top, where own_frames_on_top) left out. nullopt when a frame lies in no mapping
  // of the maps recorded so far and `final` is false: a library mapped after the latest snapshot
  // read yet, to be unwound again once the process's later maps are read.
  std::optional<NativeStack> Unwind(const StackCopy& copy, bool final);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gprof::collector
