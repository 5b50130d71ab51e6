// What bounds a recording (gprof-run --delay, --duration, --max-size), as every recorder of a
// session applies it: the injected library in each process, and gprof-run's kernel recorder.
//
// The window is two absolute CLOCK_MONOTONIC times that gprof-run passes in the environment. An
// interval (a CUDA call, an off-CPU interval, a GPU kernel) belongs to the window when it STARTS in
// it: it is then kept whole, even when it ends after the window. Nothing that starts outside costs
// more than one compare, and what is kept is never cut.
//
// The size budget is one small segment of shared memory (shared_segment.h) that every writer
// attaches and charges each chunk to before writing it, so that all the session's recording files
// together stay within --max-size however many processes write. Once a chunk is refused,
// recording stops for good (no later chunk is written, even one that would fit): what is missing
// is everything after one time.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "inject/format/shared_memory.h"
#include "inject/shared/shared_segment.h"

namespace gprof {

// Environment of the target: the window, in CLOCK_MONOTONIC ns ([start, end)); unset: unbounded.
inline constexpr char kWindowStartEnv[] = "GPROF_WINDOW_START_NS";
inline constexpr char kWindowEndEnv[] = "GPROF_WINDOW_END_NS";
// Environment of the target: the size budget to charge (its segment's handle); unset: no
// --max-size.
inline constexpr char kSizeBudgetEnv[] = "GPROF_SIZE_BUDGET";

// A window as one subtraction and one unsigned compare: `ns - start < length`.
struct RecordingWindow {
  uint64_t start_ns = 0;
  uint64_t length_ns = UINT64_MAX;  // UINT64_MAX with start 0: everything

  bool Contains(uint64_t ns) const { return ns - start_ns < length_ns; }
  // From the environment's decimal values (absent or unparsable: unbounded on that side).
  static RecordingWindow FromEnvironment();
  static RecordingWindow Between(uint64_t start_ns, uint64_t end_ns);  // end 0: no end
};

// One writer's (or gprof-run's) attachment of the budget. Not copyable; no exceptions.
class SizeBudget {
 public:
  SizeBudget() = default;
  ~SizeBudget();
  SizeBudget(const SizeBudget&) = delete;
  SizeBudget& operator=(const SizeBudget&) = delete;

  // gprof-run: makes the budget for a cap of `limit_bytes`, owned by `uid`:`gid` (-1: this
  // process's), and attaches it; handle() names it for the others. It lasts while one process
  // holds it. Returns 0 or an errno.
  int Create(uint64_t limit_bytes, int uid = -1, int gid = -1);
  const std::string& handle() const { return handle_; }
  // Attaches the budget `handle` names. Returns 0 or an errno (then every charge succeeds: no
  // cap).
  int Attach(const char* handle);
  bool attached() const { return state_ != nullptr; }

  // Charges a chunk of `bytes` on disk holding `records` records of `raw_bytes`. False: refused,
  // and counted; the first refusal stops the recording. `closing` chunks (the last records of a
  // writer: maps, symbols, loss counts) may use the room kept back, up to the limit itself, and
  // are refused without stopping anything.
  bool Charge(uint64_t bytes, uint64_t raw_bytes, uint32_t records, bool closing);
  // Gives back a charge whose write did not happen.
  void Refund(uint64_t bytes);
  // True once a chunk was refused: writers stop writing data.
  bool stopped() const;
  // The counters now (zeroes when not attached).
  struct Counts {
    uint64_t limit_bytes, used_bytes, stopped_at_ns, refused_chunks, refused_records, refused_bytes;
  };
  Counts Read() const;

 private:
  SizeBudgetState* state_ = nullptr;
  std::string handle_;
};

}  // namespace gprof
