// The session's control: one small segment of shared memory (shared_segment.h) that gprof-run
// makes for every run and that each writer of the injected library attaches, like the size budget
// in recording_limits.h. Through it:
//
// - gprof-run closes the session once the command's own process has ended. A writer sees that on
//   its next pass (at most its flush interval later), writes what it holds and a
//   RecordingStoppedRecord (StopCause::kSessionClosed), and closes its file; a process that starts
//   recording later sees it before it creates a file and records nothing. So nothing is written
//   into the session after gprof-run has collected it, and no line reaches the program's stderr
//   when gprof-run ended normally (only a gprof-run that is gone without closing is reported so).
// - gprof-run knows which writers still have their file open: each holds a slot (its pid and start
//   time) from before it creates its file until after it has closed it. The slot is taken before
//   the closing flag is read and the flag is set before the slots are read, so either gprof-run
//   sees the writer or the writer sees the flag.
// - a writer knows whether gprof-run is still there: gprof-run's main thread holds a robust,
//   process-shared mutex in the segment from Create on and never lets go of it while the session
//   is open. When gprof-run ends by any means (SIGKILL, a crash), the kernel walks that thread's
//   robust list and sets FUTEX_OWNER_DIED in the mutex's word, which a writer reads with a plain
//   load: no pid (which another PID namespace does not see, or names another process), no
//   descriptor (which the program could close), no /proc. fork() gives the child none of it
//   (glibc empties the child's robust list, the kernel gives it none), and exec drops the mapping.
// - a writer leaves a note where its own file cannot hold why it stopped (no room even for the
//   stop record, or the file could not be created or reopened); gprof-run puts those in
//   session.json.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "inject/format/session_format.h"
#include "inject/format/shared_memory.h"
#include "inject/shared/shared_segment.h"

namespace gprof {

// Environment of the target: the control's segment handle; unset: the library runs without
// gprof-run.
inline constexpr char kSessionControlEnv[] = "GPROF_SESSION_CONTROL";

// One mapping of the control file. Not copyable; no exceptions, no allocation.
class SessionControl {
 public:
  SessionControl() = default;
  ~SessionControl();
  SessionControl(const SessionControl&) = delete;
  SessionControl& operator=(const SessionControl&) = delete;

  // gprof-run: makes the control, owned by `uid`:`gid` (-1: this process's), attaches it and
  // takes profiler_alive on the calling thread, which must live as long as gprof-run does (the
  // main thread); handle() names it for the writers. It lasts while one process holds it.
  // Returns 0 or an errno.
  int Create(int uid = -1, int gid = -1);
  const std::string& handle() const { return handle_; }
  // A writer: attaches the control `handle` names. Returns 0 or an errno.
  int Attach(const char* handle);
  bool attached() const { return state_ != nullptr; }

  // --- a writer ---
  static constexpr int kClosed = -2;  // Register: the session is closed; nothing was taken
  static constexpr int kUnslotted = -1;
  // Before the file is created: a slot index, kUnslotted (counted), or kClosed.
  int Register(uint32_t pid, uint64_t start_ticks, uint32_t pid_namespace);
  // After the file is closed (or was never created).
  void Unregister(int slot);
  // A slot registered with start time 0 (before the process could read it) gets it.
  void SetStartTicks(int slot, uint64_t start_ticks);
  bool closing() const;
  // True once the process that made the control has ended (FUTEX_OWNER_DIED, above).
  bool profiler_ended() const;
  // A stop that the writer's own file does not hold.
  void Note(uint32_t pid, const char* file, format::StopCause cause, int error, uint64_t time_ns,
            uint64_t records_lost);
  // The call counters of the writer in `slot` (WriterCalls::submitted, kCallStripes of them);
  // nullptr for no slot.
  SessionControlState::CallCounter* SubmittedCalls(int slot);
  void AccountCalls(int slot, uint64_t calls);

  // --- a nested gprof-run, in the session it runs in ---
  // Names its own session `directory`, holding `calls` CUDA calls (UINT64_MAX: unknown).
  void NoteNestedSession(uint32_t pid, const char* directory, uint64_t calls);

  // The capture windows of --capture-range (capture_windows.h); nullptr when not attached.
  CaptureWindowsState* capture() const { return state_ != nullptr ? &state_->capture : nullptr; }

  // --- gprof-run ---
  void Close(uint64_t now_ns);
  uint64_t closing_at_ns() const;
  // Calls `f(pid, start_ticks, pid_namespace)` for each slot taken now.
  template <typename F>
  void ForEachWriter(F f) const {
    if (state_ == nullptr) return;
    for (auto& writer : state_->writers) {
      uint32_t pid = writer.pid.load(std::memory_order_seq_cst);
      if (pid != 0) {
        f(pid, writer.start_ticks.load(std::memory_order_acquire), writer.pid_namespace);
      }
    }
  }
  uint64_t unslotted_writers() const;
  // Calls `f(pid, start_ticks, submitted, accounted)` for each slot taken now.
  template <typename F>
  void ForEachWriterCalls(F f) const {
    if (state_ == nullptr) return;
    for (uint32_t i = 0; i < SessionControlState::kWriters; ++i) {
      uint32_t pid = state_->writers[i].pid.load(std::memory_order_seq_cst);
      if (pid == 0) continue;
      const auto& calls = state_->writer_calls[i];
      uint64_t submitted = 0;
      for (const auto& stripe : calls.submitted)
        submitted += stripe.count.load(std::memory_order_acquire);
      f(pid, state_->writers[i].start_ticks.load(std::memory_order_acquire), submitted,
        calls.accounted.count.load(std::memory_order_acquire));
    }
  }
  // Calls `f(nested)` for each nested session noted.
  template <typename F>
  void ForEachNestedSession(F f) const {
    if (state_ == nullptr) return;
    uint64_t taken = state_->nested_taken.load(std::memory_order_acquire);
    for (uint64_t i = 0; i < taken && i < SessionControlState::kNestedSessions; ++i) {
      if (state_->nested[i].ready.load(std::memory_order_acquire) == 1) f(state_->nested[i]);
    }
  }
  // Calls `f(note)` for each note written; returns how many more were taken than kept.
  template <typename F>
  uint64_t ForEachNote(F f) const {
    if (state_ == nullptr) return 0;
    uint64_t taken = state_->notes_taken.load(std::memory_order_acquire);
    for (uint64_t i = 0; i < taken && i < SessionControlState::kNotes; ++i) {
      if (state_->notes[i].ready.load(std::memory_order_acquire) == 1) f(state_->notes[i]);
    }
    return taken > SessionControlState::kNotes ? taken - SessionControlState::kNotes : 0;
  }

 private:
  SessionControlState* state_ = nullptr;
  std::string handle_;
  bool holds_profiler_alive_ = false;
};

}  // namespace gprof
