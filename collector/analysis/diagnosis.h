// The diagnosis: the article's method run over the merged record. For every long wait of every
// thread (inside a CUDA call or not): its class and identity, the thread that ended it and what
// that thread was doing, followed to the root; waits that overlap and share a cause are one
// freeze; every interval in which a GPU ran nothing is traced to the host thread it waited for
// and why that thread was late; causes are ranked by the GPU idle time they explain (each idle
// interval explained once, so they never add up to more than the GPUs' idle time), then by the
// thread time they blocked (a handoff's, of the threads the program's end waited for).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/on_cpu_samples.h"
#include "collector/analysis/user_lock.h"
#include "collector/analysis/wait_class.h"
#include "collector/analysis/wait_reader.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;
struct AnalysisOptions;

// What one thread was doing over a window: one link of a chain.
struct ChainLink {
  enum class State : uint8_t {
    kAsleep,    // slept most of the window on `object`
    kOnCpu,     // ran most of the window (working, or spinning while holding a lock)
    kRunnable,  // waited most of the window for a CPU
    kGpu,       // inside a CUDA call that waited for the GPU, which ran `gpu_activity`
    kExited,    // gone before the window ended
  };
  uint32_t pid = 0;
  uint32_t tid = 0;
  // Found as the holder the lock (a mutex, a rwlock's writer) named when the previous wait began,
  // not as the thread that ended it: nobody ended it (a deadlock, a timeout), or no thread of the
  // tree did. The window ends where it released the lock, or where the wait ended.
  bool owner = false;
  bool released = false;  // owner: it released the lock at end_ns, before the wait ended
  // The thread that created the previous link's thread, over the part of the window before that
  // thread existed (most of it): what it did until it created it.
  bool creator = false;
  uint64_t created_ns = 0;  // the thread was created inside the window, which starts there; 0: not
  uint64_t start_ns = 0;    // the window: the part of the previous wait this thread accounts for
  uint64_t end_ns = 0;
  State state = State::kOnCpu;
  uint64_t on_cpu_ns = 0;
  uint64_t asleep_ns = 0;
  uint64_t runnable_ns = 0;
  const ApiCall* call = nullptr;  // its CUDA call in progress at the window's end
  // Where the window went as CUDA calls go: the part inside `call`, and inside its other calls
  // (the rest was outside CUDA calls). "in X" is said only of time inside X.
  uint64_t call_ns = 0;
  uint64_t other_calls_ns = 0;
  uint32_t other_calls = 0;
  const ApiCall* longest_other_call = nullptr;
  // kAsleep: the longest sleep in the window, its object and class, and who ended it.
  std::optional<Wait> wait;
  WaitClass wait_class = WaitClass::kOther;
  const GpuActivity* gpu_activity = nullptr;   // kGpu: what the GPU ran longest meanwhile
  const MemoryMapCall* memory_call = nullptr;  // the memory map call it was in (a munmap)
  OnCpuActivity ran;  // kOnCpu: what it ran, from the samples of the window
  FaultTime faults;   // kOnCpu: its quick page faults in the window (a page-fault storm)
};

// A sleep of at least the threshold.
struct Stall {
  uint32_t pid = 0;
  uint32_t tid = 0;
  Wait wait;  // the off-CPU interval: start, wake, object, waker, owner
  WaitClass wait_class = WaitClass::kOther;
  const ApiCall* call = nullptr;  // the CUDA call it happened in, if any
  // [0]: what the thread that ended the wait (the waker, else the lock's owner) did from the
  // wait's start to the wake (an owner: to its release); each next link: the thread that ended
  // the previous link's sleep, or the creator of a thread that did not exist for most of it. The
  // last link is the root. Empty when nobody ended the wait (a timeout, a sleep) and its lock
  // named no owner that held it then.
  std::vector<ChainLink> chain;
  // The thread the chain came back to (the waiter itself, or a link) through a lock's owner: each
  // waits for a lock the next holds, the last for one this thread holds. A deadlock, unless a
  // timeout broke it. 0: no cycle.
  uint32_t deadlock_tid = 0;
  // One of gprof-run's own threads ended the wait, or a wait of its chain: gprof-run's own cost,
  // never a cause (the chain stops before that thread). 0: none.
  uint32_t profiler_tid = 0;
  // That thread held it up (a lock it held, its own signal): counted in gprof-run's own cost. A
  // wait it only ended (a condition it signalled) is neither a cost nor a cause.
  bool profiler_cost = false;
  // The program's critical path went through this wait into the thread that ended it: the
  // program's end waited for it (critical_path.h).
  bool on_critical_path = false;
  // The path went through this wait into the thread it waited for (a join, a wait for a child):
  // the program's end waited for that thread, whose own waits tell why.
  bool joined_on_critical_path = false;
  int cause = -1;   // into Analysis::causes
  int freeze = -1;  // into Analysis::freezes
  uint64_t asleep_ns() const { return wait.asleep_ns(); }
};

// An interval in which a GPU ran nothing (no kernel, copy or memset of any stream or process on
// it), between two of its activities: GPU idle time, counted once however many streams were idle.
struct GpuGap {
  size_t device = 0;                     // into Analysis::devices
  uint32_t pid = 0;                      // of the work that ended it
  uint32_t device_id = 0;                // CUDA's ordinal for the GPU in that process
  uint32_t stream_id = 0;                // the stream of the work that ended it
  uint64_t start_ns = 0;                 // the end of `before`
  uint64_t end_ns = 0;                   // the start of `after`
  const GpuActivity* before = nullptr;   // the work that ended last before it (any stream)
  const GpuActivity* after = nullptr;    // the work that started first after it
  const ApiCall* before_call = nullptr;  // what launched them, when recorded
  const ApiCall* after_call = nullptr;
  // The host thread the GPU waited for (the one that launched `after`) and what it did from the
  // gap's start until it launched it; a GPU-side cause instead when the launch came in time and
  // the work was held on the GPU side.
  std::optional<ChainLink> late_thread;
  int stall = -1;  // the late thread's longest stall in the gap, into Analysis::stalls
  // Of the late thread's time, what the driver spent loading modules (a first launch's lazy
  // loading, as CUPTI reported it).
  uint64_t module_load_ns = 0;
  bool gpu_side = false;
  // The late thread slept most of the gap in a wait that gprof-run's own thread held up
  // (Stall::profiler_tid): gprof-run's own cost, no cause.
  bool profiler_cost = false;
  int cause = -1;
  // The NVTX ranges the thread that launched `after` was in meanwhile, outermost first.
  std::vector<uint32_t> nvtx_ranges;
  uint64_t duration() const { return end_ns - start_ns; }
};

// What gprof-run's own threads (the injected library's writer, CUPTI's threads under it) cost the
// program: the waits of its threads they ended or held up, and the GPU idle those explain. Said
// once, apart from the causes, which never count it.
struct ProfilerCost {
  std::vector<uint32_t> tids;  // gprof-run's threads in the session
  std::vector<int> stalls;     // the program's waits they held up, into Analysis::stalls
  uint64_t total_ns = 0;       // their time asleep, in all
  int longest = -1;            // into Analysis::stalls
  uint64_t gpu_idle_ns = 0;
  size_t gaps = 0;
};

// One thread's time ready to run without a CPU, and the time its own waits were held up by that.
struct CpuWait {
  uint32_t tid = 0;
  uint64_t runnable_ns = 0;  // in all: preempted, or woken and not yet run
  uint64_t life_ns = 0;      // from its first switch-out to its last switch-in
  // Of runnable_ns, woken and not yet run: each of its waits ended that much after its wake.
  uint64_t after_wakeup_ns = 0;
  uint64_t longest_after_wakeup_ns = 0;
  size_t wakeups = 0;  // wakeups it then waited for a CPU after
  // Of runnable_ns, while another thread's wait was held up by it (a link of that wait's chain).
  uint64_t awaited_ns = 0;
  // While it waited: the threads of its waits' chains were runnable this long (a handoff's
  // producer preempted), and which, longest first.
  uint64_t held_up_ns = 0;
  std::vector<std::pair<uint32_t, uint64_t>> held_up_by;
  // Runnable the threshold or more, for a share (5%) of its life or of the time others waited
  // for it: a thread of the CPU cause.
  bool short_of_cpu = false;
  // Its waits were held up the threshold or more for want of a CPU (its own after a wakeup, or
  // that of the threads it waited for), more than it was preempted itself: the lack of CPU made
  // it late, not only slower.
  bool latency_sensitive = false;
  uint64_t delayed_ns() const { return after_wakeup_ns + held_up_ns; }
};

// What a cause is, for the writers to name it.
enum class CauseKind : uint8_t {
  kObject,      // waits on one object: `object`, of `wait_class`
  kCpu,         // too few CPUs for the threads ready to run
  kGpuSide,     // work queued in time started late, with the GPU idle
  kModuleLoad,  // `thread` loading a CUDA module in or before `launch`, at its first use
  kLateHost,    // `thread` late to launch the next GPU work: the GPU waited for the host
  kHandoff,     // waits on `object` that another thread ended (a condition signalled, a pipe or
                // socket written, a child's exit) while the waiter held up the program: on its
                // critical path (critical_path.h), or late to feed the GPU
};

// One root cause, with everything it explains.
struct Cause {
  CauseKind kind = CauseKind::kObject;
  WaitClass wait_class = WaitClass::kOther;
  WaitObject object;  // what the threads waited on (the first link's object)
  // kObject, a futex: the variable that holds its word, when a symbol names it (the GIL's
  // _PyRuntime); its module. Empty otherwise.
  std::string symbol;
  std::string symbol_module;
  // kObject, a futex in memory no module names: the lock as most of its waiters' code names it.
  std::optional<UserNamedLock> user_named;
  // kObject, a futex: the Python lock its waiters' frames show it is ("queue.Queue.mutex in
  // queue.py:171"), which names it first; empty otherwise.
  std::string python_lock;
  uint32_t thread_tid = 0;          // kModuleLoad, kLateHost: the late thread
  const ApiCall* launch = nullptr;  // kModuleLoad: the launch it loaded a module for
  bool loaded_in_launch = false;    // kModuleLoad: inside that launch, not before it
  std::optional<ChainLink> root;    // the root of its longest wait's chain
  uint32_t holder_tid = 0;   // the thread that ended most of its waiting (0: none, a timeout)
  uint64_t blocked_ns = 0;   // thread time asleep on it (or runnable, for kCpu)
  // The part of it the program's critical path waited (critical_path.h). Causes are ranked by
  // blocked_ns, thread time that wanted to run: a lock's or a CPU's waiters always did, a
  // handoff's only on the critical path (elsewhere a thread waits for work by design), so a
  // handoff's blocked_ns is this.
  uint64_t held_up_ns = 0;
  uint64_t gpu_idle_ns = 0;  // GPU idle time it explains (its gaps' durations)
  uint64_t longest_ns = 0;   // its longest single wait
  size_t wait_count = 0;
  std::vector<uint32_t> tids;  // threads that waited on it (kCpu: by runnable time, longest first)
  std::vector<int> stalls, freezes, gaps;
  size_t number = 0;  // its rank, 1 first, in every output (numbering.h)
  // The waits every output tells of it (report_view.h): its longest wait, the wait whose release
  // is shown (the longest the holder ended where its stack was read, else the longest), its
  // longest GPU gap; -1: none.
  int longest_stall = -1;
  int told_release = -1;
  int longest_gap = -1;
  // The NVTX ranges its longest wait (else its longest gap) happened in, outermost first.
  std::vector<uint32_t> nvtx_ranges;
};

// The pipeline's steps over the waits (analysis.h): fills analysis.stalls, causes, gaps,
// devices, cpu_waits, profiler_cost and lock_users.
void DiagnoseWaits(const Session& session, const WaitReader& waits,
                   const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                   Analysis& analysis);

// What held a thread up over a window, link by link to the root, as a stall's chain is followed
// from the thread that ended it: for a wait that a thread of another session ended (a rank on
// another host that sent the bytes it read: collector/job/).
class ChainFollower {
 public:
  ChainFollower(const Session& session, const WaitReader& waits, const AnalysisOptions& options);
  ~ChainFollower();
  std::vector<ChainLink> From(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

// Whether a long wait is the thread's idle state rather than contention: a handoff (a condition
// variable, join or event), or a poll on the GPU driver's device outside any CUDA call (the
// driver's own event thread, waiting for the GPU to signal). Such waits are never contention
// causes; a handoff is a cause of its own only where it held the program up (IsCostlyHandoff).
bool IsIdleWait(const Stall& stall);

// Whether a long wait is a handoff that cost the program time: not contention, ended by another
// thread of the tree (its chain's first link, not a lock's owner), and on the program's critical
// path. An idle pool thread's wait for work, or a thread that waits by design, is on no path:
// what ended it was handed to no thread the program waited for.
bool IsCostlyHandoff(const Stall& stall);

// Whether the stall's thread is itself in the cycle its chain came back around (not only blocked
// behind one).
bool InDeadlock(const Stall& stall);

}  // namespace gprof::collector
