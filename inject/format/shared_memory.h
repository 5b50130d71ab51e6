// Layouts of the shared memory of a session (System V segments, inject/shared/shared_segment.h):
// gprof-run makes them, every writer of the injected library attaches them, gprof-run's kernel
// recorder charges the size budget, and gprof-run reads both at the end (cli/session_closing.cc).
// They cross process boundaries as file records do, so they live beside them: fixed layouts and a
// size check on each; a change of layout changes the magic. The code that makes, attaches and
// reads them is inject/shared/ (recording_limits.h, session_control.h).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace gprof {

// The first bytes of every shared state.
struct SharedSegmentHeader {
  char magic[8];
  uint64_t token;
};
static_assert(sizeof(SharedSegmentHeader) == 16);

// The size budget (recording_limits.h), shared by every writer of the session.
struct SizeBudgetState {
  SharedSegmentHeader header;  // kSizeBudgetMagic
  uint64_t limit_bytes;        // --max-size: what the recording files may take together
  uint64_t data_limit_bytes;   // chunks stop here; the rest is left to closing records
  std::atomic<uint64_t> used_bytes;
  std::atomic<uint64_t> stopped_at_ns;  // CLOCK_MONOTONIC of the first refused chunk; 0: none
  std::atomic<uint64_t> refused_chunks;
  std::atomic<uint64_t> refused_records;
  std::atomic<uint64_t> refused_bytes;  // their records' bytes, uncompressed
};
static_assert(sizeof(SizeBudgetState) == 72);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");
inline constexpr char kSizeBudgetMagic[8] = {'G', 'P', 'R', 'B', 'U', 'D', 'G', '2'};

// The session's control (session_control.h).
inline constexpr char kSessionControlMagic[8] = {'G', 'P', 'R', 'C', 'T', 'R', 'L', '6'};

// The capture windows of --capture-range (inject/shared/capture_windows.h): what every recorder
// of the session keeps is what starts inside one of them.
struct CaptureWindowsState {
  struct Window {
    std::atomic<uint64_t> start_ns;  // CLOCK_MONOTONIC; 0: being opened
    std::atomic<uint64_t> end_ns;    // 0: open (or being closed)
    uint32_t opened_by_pid;          // in the opener's PID namespace; 0: gprof-run
    uint32_t open_cause;             // CaptureSwitch
    uint32_t closed_by_pid;
    uint32_t close_cause;
  };
  // --flight-recorder (cli/flight_recorder.h): one window from the start, closed for good a short
  // tail after the first trigger fires (or at `gprof-run stop`, or at the command's end).
  struct Flight {
    uint64_t keep_ns;                // --flight-recorder SEC: data older than this is trimmed
    uint64_t freeze_ns;              // --trigger freeze:MS; 0: none
    std::atomic<uint32_t> fired;     // CaptureSwitch of the first trigger; 0: none yet
    uint32_t pid;                    // what fired: the process (its own PID namespace's number)
    uint32_t tid;                    // and thread; 0 for a hang
    uint32_t api_id;                 // the CUDA call's (an ApiNameRecord's id); 0: not a call
    std::atomic<uint64_t> fired_ns;  // CLOCK_MONOTONIC when it fired; 0: not yet stored
    uint64_t duration_ns;            // the call's (freeze), or the silence's (hang)
    uint32_t freeze_kind;            // FreezeKind (capture_windows.h), with kFreezeTrigger
    uint32_t threads;                // kThreadsBlocked: how many were blocked together
    // When what froze ran again (the call returned, a blocked thread ran): the trigger's tail
    // counts from there. 0: not yet, or not known (gprof-run then ends the tail at its bound).
    std::atomic<uint64_t> released_ns;
  };
  static constexpr uint32_t kWindows = 1024;
  std::atomic<uint32_t> mode;            // CaptureRange; 0: none (everything is recorded)
  std::atomic<uint32_t> kernel_follows;  // 1: gprof-run's kernel recorder applies the windows
  // Every open and close adds one: odd while window (transitions - 1) / 2 is open.
  std::atomic<uint64_t> transitions;
  std::atomic<uint64_t> kernel_applied;  // the transitions the kernel recorder applies
  std::atomic<uint64_t> refused_opens;   // past kWindows: counted, not opened
  Flight flight;
  Window windows[kWindows];
};
static_assert(sizeof(CaptureWindowsState::Window) == 32);
static_assert(sizeof(CaptureWindowsState::Flight) == 64);
static_assert(sizeof(CaptureWindowsState) == 32 + 64 + 1024 * 32);

struct SessionControlState {
  struct Writer {
    std::atomic<uint32_t> pid;          // 0: free; in the writer's PID namespace
    uint32_t pid_namespace;             // its inode (inject/shared/namespaces.h); 0: unknown
    std::atomic<uint64_t> start_ticks;  // /proc/<pid>/stat's start time; 0: not written yet
  };
  struct Note {
    std::atomic<uint32_t> ready;  // 1 once the fields below are written
    uint32_t pid;
    uint64_t time_ns;
    uint32_t cause;  // format::StopCause
    int32_t error;   // errno, or 0
    uint64_t records_lost;
    char file[32];  // the session file's name, NUL-terminated
  };
  // One counter on a cache line of its own.
  struct CallCounter {
    std::atomic<uint64_t> count;
    uint8_t pad[56];
  };
  // A writer's count of its process's CUDA calls, where gprof-run reads it after the process is
  // gone: a process killed by SIGKILL takes the records still in its rings along, and the
  // difference says how many. `submitted` is added to on the program's CUDA call path, each
  // thread on the stripe of its ring (no two threads of a few fight over one cache line);
  // `accounted` by the writer.
  static constexpr uint32_t kCallStripes = 16;
  struct WriterCalls {
    CallCounter submitted[kCallStripes];  // calls the process recorded, dropped ones too
    CallCounter accounted;                // of those, written to its file or counted there as lost
  };
  // A gprof-run started inside this session's command (gprof-run -- gprof-run -- CMD): its
  // command's calls are recorded in its own session directory, which it names here.
  struct NestedSession {
    std::atomic<uint32_t> ready;  // 1 once the fields below are written
    uint32_t pid;                 // the nested gprof-run's
    uint64_t calls;               // the CUDA calls its session holds; UINT64_MAX: unknown
    char directory[4096];         // its session directory, NUL-terminated (cut to fit)
  };
  static constexpr uint32_t kWriters = 512;
  static constexpr uint32_t kNotes = 64;
  static constexpr uint32_t kNestedSessions = 16;

  SharedSegmentHeader header;               // kSessionControlMagic
  pthread_mutex_t profiler_alive;           // held by gprof-run's main thread (above)
  std::atomic<uint64_t> closing_at_ns;      // CLOCK_MONOTONIC when gprof-run closed it; 0: open
  std::atomic<uint64_t> unslotted_writers;  // open writers that found every slot taken
  std::atomic<uint64_t> notes_taken;        // may pass kNotes: the rest are counted only
  Writer writers[kWriters];
  Note notes[kNotes];
  WriterCalls writer_calls[kWriters];  // by the writer's slot
  std::atomic<uint64_t> nested_taken;  // may pass kNestedSessions: the rest are counted only
  NestedSession nested[kNestedSessions];
  CaptureWindowsState capture;
};
static_assert(sizeof(SessionControlState::Writer) == 16);
static_assert(sizeof(SessionControlState::Note) == 64);
static_assert(sizeof(pthread_mutex_t) == 40, "glibc's x86-64 layout");
static_assert(sizeof(SessionControlState::WriterCalls) == 17 * 64);
static_assert(sizeof(SessionControlState::NestedSession) == 4112);
static_assert(sizeof(SessionControlState) == 40 + 40 + 512 * 16 + 64 * 64 + 512 * 17 * 64 + 8 +
                                                 16 * 4112 + sizeof(CaptureWindowsState));
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

}  // namespace gprof
