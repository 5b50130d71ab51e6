// The merged model of one session: what the injected library and the kernel recorder saw, on one
// clock (CLOCK_MONOTONIC, nanoseconds). Readers fill it, the analysis and the writers read it.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "collector/model/elf_symbols.h"
#include "collector/model/python_model.h"
#include "collector/model/record_storage.h"

namespace gprof::collector {

// A name from the recorded program or its session files as the outputs can carry it: valid UTF-8
// kept, control characters and bytes that are not UTF-8 written as "\xNN", invisible format
// characters (a bidirectional override, a zero-width space) as "\u202e". A thread may name
// itself anything, and so may a kernel, a file or an argument; the report, report.json and the
// trace must stay readable and valid. The readers pass every name and path they keep through it.
std::string PrintableName(std::string_view raw);

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t file_offset = 0;
  std::string perms;   // "rw-p"
  std::string path;    // empty for anonymous memory
  uint64_t inode = 0;  // of the mapped file, to tell whether the file here is still that one
};

// One reading of /proc/PID/maps.
struct MapsSnapshot {
  uint64_t time_ns = 0;
  std::vector<Mapping> mappings;  // sorted by start
  // The mapping that holds `address`, or nullptr.
  const Mapping* Find(uint64_t address) const;
};

inline constexpr uint64_t kLatest = UINT64_MAX;  // a time after every snapshot

// How the injected library saw a process's CUDA calls.
enum class CaptureMode : uint8_t {
  kUnknown,        // no capture record: a library from before CUPTI capture, or none loaded
  kInterposition,  // CUDA runtime functions interposed: calls only, no GPU timeline
  kCupti,          // CUPTI callbacks and activity records: calls and the GPU timeline
  kNone,           // nothing could record its calls (format::CaptureMode::kNone): the note says why
};

struct Capture {
  CaptureMode mode = CaptureMode::kUnknown;
  uint32_t cupti_version = 0;  // cuptiGetVersion(), 0 without CUPTI
  std::string note;            // the libcupti in use, or why CUPTI is not
};

// CUPTI's activity clock minus CLOCK_MONOTONIC, measured at `time_ns` (CLOCK_MONOTONIC).
struct ClockOffset {
  uint64_t time_ns = 0;
  int64_t offset_ns = 0;
  uint64_t uncertainty_ns = 0;
};

// A file mapped executable into a process, as the kernel recorder saw the mmap: a library the
// dynamic loader or dlopen loaded. The file's name only, no directory, cut at 31 bytes.
struct LoadedFile {
  uint64_t time_ns = 0;
  std::string name;
};

// A process's place in a distributed job, from the variables its launcher set in its environment
// (RANK, LOCAL_RANK, WORLD_SIZE under torchrun; SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS under
// srun; Open MPI's, MPICH's: inject/format/rank_variables.h). Each part unset where no variable
// gave it.
struct RankIdentity {
  std::optional<uint32_t> rank;
  std::optional<uint32_t> local_rank;
  std::optional<uint32_t> world_size;
  std::string variable;  // the one the rank came from: "RANK", "SLURM_PROCID"...
  // No variable said it: the rank is the process's place in the order its parent started the
  // processes that exchange TCP data with each other (torch.multiprocessing.spawn's ranks).
  bool inferred = false;
  bool operator==(const RankIdentity&) const = default;
};

struct Process {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  std::string exe;
  std::vector<std::string> cmdline;
  // Every /proc/PID/maps snapshot (the injected library's and the kernel recorder's), sorted by
  // time: a process execs and loads libraries, so an address is named by the snapshots of its time.
  std::vector<MapsSnapshot> maps;
  std::vector<uint64_t> exec_ns;           // when it exec'ed a new program, sorted
  // Its first secure execution (a set-user-ID, set-group-ID or file-capability program), or its
  // fork from a process recorded only as existing: the injected library records nothing in such
  // a program. 0: none.
  uint64_t secure_ns = 0;
  uint32_t secure_forked_from = 0;  // the fork's parent, where that is how it became one
  bool secure_hidden = false;  // the kernel recorder kept only its existence (session not root's)
  std::vector<LoadedFile> loaded_files;    // sorted by time
  uint64_t dropped_records = 0;            // CUDA call records the injected library could not keep
  Capture capture;                         // the latest the process wrote
  std::vector<ClockOffset> clock_offsets;  // sorted by time_ns; applied to its GPU activities
  uint64_t gpu_dropped_records = 0;        // GPU activity records CUPTI could not keep
  // Its CUDA device ordinals as CUPTI named the GPUs behind them: "GPU-<uuid>", the same in every
  // process that uses the GPU (an ordinal is per process: CUDA_VISIBLE_DEVICES renumbers).
  std::map<uint32_t, std::string> device_uuids;
  // Its rank identity: read from its own environment at its last exec (environment_read_ns), else
  // its parent's (a fork copies the environment), else for the command's own process gprof-run's
  // (session.json's "rank"). Unset where none of the variables was set.
  std::optional<RankIdentity> rank;
  uint64_t environment_read_ns = 0;  // when the kernel recorder read it; 0: never (inherited)

  // The snapshot that names `address` as it was at `time_ns` (kLatest: at the end): of the
  // snapshots of the program that ran then (none across an exec), the latest taken at or before
  // `time_ns` if it holds `address`, else the next later one that does (a library loaded after
  // that snapshot), else the latest earlier one that does; nullptr when none does.
  const MapsSnapshot* MapsHolding(uint64_t address, uint64_t time_ns) const;
  // What MapsHolding's answers depend on besides the address: the snapshot taken last at or before
  // `time_ns` (none: -1) and the program image (execs at or before it).
  std::pair<int64_t, size_t> MapsEpoch(uint64_t time_ns) const;
};

struct Thread {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;
  uint64_t exit_ns = 0;   // 0: not seen exiting
  uint64_t start_ns = 0;  // created (its first wakeup); 0: not seen starting, it was there before
  // Page faults quicker than Session::quick_page_fault_limit_ns: the kernel recorder counts them
  // per thread instead of recording each.
  uint64_t quick_page_faults = 0;
  uint64_t quick_page_fault_ns = 0;  // their summed duration
};

// Short waits of one thread for one reason over a period (about a second): counted by the
// kernel recorder instead of recorded (gprof-run --count-under; a GPROF_REC_WAIT_COUNT record).
struct CountedWaits {
  enum class Kind : uint32_t { kOffCpu = 1, kFutex = 2 };  // gprof_wait_count_kind
  Kind kind = Kind::kOffCpu;
  uint32_t how = 0;  // kOffCpu: the state at switch-out (0: preempted); kFutex: the op
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t syscall_nr = 0;  // the system call it slept in (~0u: none), or the futex call's
  uint32_t waker_pid = 0;   // kOffCpu: the thread that woke it; 0: none seen, or an interrupt
  uint32_t waker_tid = 0;
  uint64_t object = 0;  // the futex word (kOffCpu: when it slept in a futex call); else 0
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t runnable_ns = 0;  // kOffCpu: time runnable, after a wakeup or preempted
  uint64_t woken = 0;        // kOffCpu: waits that ended after a wakeup and time runnable
};

// CountedWaits summed, by kind (all threads, or one).
struct CountedWaitTotals {
  uint64_t off_cpu = 0, off_cpu_ns = 0;
  uint64_t futex = 0, futex_ns = 0;
  void Add(const CountedWaits& counted) {
    if (counted.kind == CountedWaits::Kind::kOffCpu) {
      off_cpu += counted.count, off_cpu_ns += counted.total_ns;
    } else {
      futex += counted.count, futex_ns += counted.total_ns;
    }
  }
};

struct ApiCall {
  uint64_t enter_ns = 0;
  uint64_t exit_ns = 0;
  uint64_t stream = 0;
  uint64_t correlation_id = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t name_index = 0;  // into Session::api_names
  int32_t return_code = 0;
  uint32_t flags = 0;  // format::ApiCallFlags
  uint64_t duration() const { return exit_ns - enter_ns; }
};

// What one GPU activity was. CUPTI's enum values are kept as CUPTI numbers them
// (gpu_vocabulary.h names them).
struct GpuKernel {
  uint32_t name_index = 0;  // into Session::kernel_names
  std::array<int32_t, 3> grid{};
  std::array<int32_t, 3> block{};
  uint32_t shared_memory_bytes = 0;  // static + dynamic
  uint32_t registers_per_thread = 0;
};

struct GpuMemcpy {
  uint64_t bytes = 0;
  uint8_t copy_kind = 0;  // CUpti_ActivityMemcpyKind
  uint8_t src_kind = 0;   // CUpti_ActivityMemoryKind
  uint8_t dst_kind = 0;
  bool async = false;
};

struct GpuMemset {
  uint64_t bytes = 0;
  uint32_t value = 0;
  uint8_t memory_kind = 0;  // CUpti_ActivityMemoryKind
  bool async = false;
};

// The host waited for the GPU (it does not occupy the GPU itself).
struct GpuSync {
  uint32_t type = 0;  // CUpti_ActivitySynchronizationType
  uint32_t event_id = 0;
};

inline constexpr uint32_t kNoStream = 0xffffffff;  // GpuSync: not a stream synchronization

// One record of the GPU timeline, on CLOCK_MONOTONIC (CUPTI's clock offsets already applied).
struct GpuActivity {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t correlation_id = 0;  // = ApiCall::correlation_id of the call that caused it
  uint64_t graph_node_id = 0;   // 0: not launched from a CUDA graph
  uint32_t pid = 0;
  uint32_t device_id = 0;  // 0 for a GpuSync, which names no device
  uint32_t context_id = 0;
  uint32_t stream_id = 0;  // CUPTI's stream id; kNoStream for a sync that is not on a stream
  uint32_t graph_id = 0;   // 0: not launched from a CUDA graph
  std::variant<GpuKernel, GpuMemcpy, GpuMemset, GpuSync> detail;

  // Kernels, copies and memsets keep the GPU busy; a synchronization is the host waiting.
  bool occupies_gpu() const { return !std::holds_alternative<GpuSync>(detail); }
  uint64_t duration() const { return end_ns - start_ns; }
};

// Host time the CUDA driver spent inside a call loading a module on the first launch of one of its
// kernels (CUDA's lazy loading), as CUPTI reported it; on CLOCK_MONOTONIC.
struct ModuleLoad {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t correlation_id = 0;  // the call it happened in (0: not named)
  uint32_t pid = 0;
  uint32_t tid = 0;            // 0: CUPTI named no thread
  uint32_t overhead_kind = 0;  // CUpti_ActivityOverheadKind
};

// The native stack of a thread at the exit of a slow CUDA call, innermost frame first: where the
// thread was, then return addresses.
struct NativeStack {
  uint32_t pid = 0;
  std::vector<uint64_t> ips;
  // One per ip as older injected libraries named them: demangled "symbol+0xoffset", empty where
  // the symbol was unknown. Empty for a stack unwound here: named from the maps.
  std::vector<std::string> symbols;
  uint64_t time_ns = kLatest;  // when it was taken: its addresses are named by the maps of then
  // Why the stack ends before the thread's first frame, when it does: "truncated: ...".
  std::string cut_short;
};

// An on-CPU sample of a thread (the kernel recorder's sampling tick), its native stack unwound
// from the copy the recorder took.
struct NativeSample {
  uint64_t time_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t stack = 0;      // into Session::native_stack_set
  bool in_kernel = false;  // in a system call or fault: the stack is where it entered the kernel
};

// Native stacks the kernel recorder copied (samples, wakers), unwound when the session is read.
struct NativeStackRecord {
  std::vector<NativeStack> stack_set;  // each distinct (pid, frames) once
  std::vector<NativeSample> samples;   // sorted by (tid, time_ns)
  // A waker's stack at the wakeup that ended an off-CPU interval: by (the wakee's tid, the
  // interval's start_ns, the wakeup's wake_ns), into stack_set.
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, uint32_t> wakers;
  // tid's samples in [start_ns, end_ns), in time order.
  std::span<const NativeSample> Samples(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  // The waker's stack at the wakeup at wake_ns that ended tid's interval from start_ns, or nullptr.
  const NativeStack* Waker(uint32_t tid, uint64_t start_ns, uint64_t wake_ns) const;
  const NativeStack& StackOf(const NativeSample& sample) const { return stack_set[sample.stack]; }
  // What unwinding the copies cost the collector: copies unwound, and the time it took.
  uint64_t unwound = 0;
  uint64_t unwind_ns = 0;
  uint64_t record_bytes = 0;  // of the records in kernel.gpr, headers and stack bytes
};

// What one of gprof-run's own threads in a process is (format::ProfilerThreadRole).
enum class ProfilerRole : uint8_t { kWriter, kCupti, kOther };

// Thread state at switch-out, from the kernel's prev_state.
enum class OffCpuState : uint8_t { kRunnable, kSleeping, kDiskSleep, kOther };
// "runnable", "sleeping", "uninterruptible", "other".
const char* StateName(OffCpuState state);

struct OffCpuInterval {
  uint64_t start_ns = 0;  // switched out
  uint64_t end_ns = 0;    // switched in
  uint64_t wake_ns = 0;   // made runnable; 0 when preempted
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t waker_pid = 0;
  uint32_t waker_tid = 0;
  int32_t kstack_id = -1;
  int32_t waker_kstack_id = -1;
  int32_t user_stack_id = -1;        // the thread's user stack at the switch-out; < 0: none
  int32_t waker_user_stack_id = -1;  // the waker's at the wakeup (process waker_pid); < 0: none
  uint32_t raw_state = 0;            // prev_state as the kernel gave it
  uint32_t cpu = 0;
  uint32_t flags = 0;  // gprof_offcpu_flags
  // The kernel's name of the waker: into Session::comms (0: none). An index, not the text:
  // sessions hold millions of intervals and a few names.
  uint32_t waker_comm = 0;
  OffCpuState state() const;
  uint64_t duration() const { return end_ns - start_ns; }
};

// The 32-bit fields together, so that the struct has no padding: sessions hold millions.
struct FutexCall {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t uaddr = 0;
  uint64_t uaddr2 = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t op = 0;  // with FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
  uint32_t val = 0;
  uint32_t val3 = 0;
  uint32_t flags = 0;  // gprof_futex_flags: GPROF_FUTEX_UNFINISHED when still waiting at the end
  int64_t timeout_ns = -1;  // -1: none; -2: set, but the recorder could not read it
  int32_t ret = 0;          // futex(2) returns an int: a count, or -errno
  // A wait on a contended glibc mutex or rwlock: the tid its holder field (__owner,
  // __cur_writer) named at the call (unchecked: the word may be another lock's); 0: not such a
  // wait, or unread.
  uint32_t owner_tid = 0;
  uint32_t command() const { return op & 0x7f; }  // FUTEX_CMD_MASK
  bool is_wait() const;
  bool is_wake() const;
  uint64_t duration() const { return end_ns - start_ns; }
};
static_assert(sizeof(FutexCall) == 72, "FutexCall grew: sessions hold millions");

// A futex_waitv(2) call: a wait on several futex words at once.
struct FutexWaitvCall {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t count = 0;  // futexes in the call; only the first `addresses` were recorded
  std::vector<uint64_t> addresses;
  int64_t timeout_ns = -1;  // absolute; -1: none
  int64_t ret = 0;          // the index of the futex that woke it, or -errno
  // The word whose wake ended the call, when the recorded ones say.
  std::optional<uint64_t> woken_address() const;
  uint64_t duration() const { return end_ns - start_ns; }
};

// A wait for a contended kernel lock (lock:contention_begin to contention_end).
struct LockWait {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t lock_address = 0;  // a kernel address
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t flags = 0;      // gprof_lock_flags
  int32_t ret = 0;         // 0, or -EINTR
  uint32_t owner_pid = 0;  // the holder, where the kernel records one; 0: unknown
  uint32_t owner_tid = 0;
  std::string owner_comm;
  bool owner_inferred = false;  // the kernel named none: found from the record (lock_owners.h)
  int32_t kstack_id = -1;
  int32_t user_stack_id = -1;
  bool is_mmap_lock() const;  // the waiting process's mm->mmap_lock
  uint64_t duration() const { return end_ns - start_ns; }
};

enum class DeviceCall : uint8_t { kUnknown, kIoctl, kPoll, kEpoll, kMmap };

// A system call on a GPU device file (/dev/nvidia*), or an epoll wait.
struct DeviceWait {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  DeviceCall call = DeviceCall::kUnknown;
  int32_t fd = -1;
  uint64_t request = 0;  // ioctl: the request; poll: number of fds; epoll: maxevents; mmap: length
  int64_t ret = 0;
  std::string device;  // "nvidiactl", "nvidia0", "nvidia-uvm"
  uint64_t duration() const { return end_ns - start_ns; }
};

// The first read of a pipe or socket after a wait that no thread of the tree ended (an
// interrupt, a kernel thread or a task outside the tree woke it: loopback TCP data arrives in
// softirq), with the tree's last writers to the end it read: whose data ended the wait.
struct StreamRead {
  struct Writer {
    uint64_t time_ns = 0;  // the write call's start
    uint32_t pid = 0;
    uint32_t tid = 0;  // 0: none
  };
  uint64_t start_ns = 0;  // the read call
  uint64_t end_ns = 0;
  uint64_t wait_start_ns = 0;  // the off-CPU interval it followed or slept in
  uint64_t wake_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  int32_t fd = -1;
  uint32_t kind = 0;  // gprof_stream_kind
  Writer writers[4];  // the tree's last writes to the end it read, the latest first
};

// One end of a TCP connection as a host sees it: an IPv6 address (IPv4 as ::ffff:a.b.c.d) and a
// port. The peer sees the two ends swapped.
struct TcpEndpoint {
  std::array<uint8_t, 16> address{};
  uint16_t port = 0;
  auto operator<=>(const TcpEndpoint&) const = default;
};

// A read or write of a TCP socket by a thread of the tree that moved bytes: a send's queued bytes
// or a receive's consumed ones, [seq_start, seq_end) in the sequence numbers both ends of the
// connection share (they wrap at 2^32): a receiver's bytes were queued by the send that holds
// them, recorded on this host or another (collector/analysis/tcp_streams.h finds it).
struct TcpTransfer {
  uint64_t start_ns = 0;  // the system call
  uint64_t end_ns = 0;
  // A receive that was the first read after an off-CPU interval of its thread that an interrupt,
  // a kernel thread or a task outside the tree ended: that interval's start and wake; else 0.
  uint64_t wait_start_ns = 0;
  uint64_t wake_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  TcpEndpoint local;
  TcpEndpoint remote;
  uint32_t seq_start = 0;
  uint32_t seq_end = 0;
  bool is_send = false;  // else a receive
  uint16_t syscall_nr = 0;
  int32_t fd = -1;
  uint32_t bytes() const { return seq_end - seq_start; }
  // Whether byte `seq` of the stream is one of its bytes.
  bool Holds(uint32_t seq) const { return seq - seq_start < bytes(); }
};

// A page fault that took at least the recorder's threshold.
struct PageFault {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t address = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t flags = 0;                             // FAULT_FLAG_*
  uint32_t result = 0;                            // vm_fault_t
  bool is_write() const { return flags & 0x1; }   // FAULT_FLAG_WRITE
  bool is_major() const { return result & 0x4; }  // VM_FAULT_MAJOR
  uint64_t duration() const { return end_ns - start_ns; }
};

// Quick page faults of one thread (under Session::quick_page_fault_limit_ns) in its run on CPU
// that ended at time_ns, its switch-out, where the kernel recorder wrote them (a run's start is
// the end of the thread's off-CPU interval before). start_ns and end_ns are both time_ns, for the
// per-thread index.
struct QuickFaultRun {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t count = 0;
  uint64_t total_ns = 0;  // their summed duration
};

// A signal the kernel generated for a thread of the tree (gprof_signal of
// inject/format/kernel_events.h).
struct SignalSent {
  uint64_t time_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;  // for a signal to the process, the thread its sender named
  int32_t signal = 0;
  int32_t code = 0;          // si_code
  uint32_t sender_pid = 0;   // 0: generated in an interrupt
  uint32_t sender_comm = 0;  // Session::comms index
  uint32_t flags = 0;        // gprof_signal_flags
  uint32_t result = 0;       // gprof_signal_result
};

enum class MemorySyscall : uint8_t { kUnknown, kMmap, kMprotect, kMunmap, kMremap, kMadvise };

// mmap, munmap, mprotect, mremap or madvise.
struct MemoryMapCall {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  MemorySyscall syscall = MemorySyscall::kUnknown;
  uint32_t prot = 0;  // mmap, mprotect: PROT_*; madvise: the advice
  uint64_t address = 0;
  uint64_t length = 0;
  uint64_t flags = 0;  // mmap: MAP_*; mremap: the new length
  int64_t ret = 0;
  uint64_t duration() const { return end_ns - start_ns; }
};

// A user stack by id: return addresses in the address space of the process that names the id.
struct UserStack {
  std::vector<uint64_t> ips;  // innermost first
  bool truncated = false;     // the walk hit its depth limit
};

struct TaskStart {
  uint64_t time_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t parent_pid = 0;
  uint32_t parent_tid = 0;
  int32_t parent_kstack_id = -1;
  bool is_thread = false;
  // Its ids in its own PID namespace and that namespace's inode (0: not recorded, as by recorders
  // before they were): pid_namespaces.h joins an injected library's records from inside it.
  uint32_t ns_pid = 0;
  uint32_t ns_tid = 0;
  uint32_t pid_namespace = 0;
};

// Something a reader had to say about the input: a damaged chunk, a truncated file.
struct Diagnostic {
  std::string file;
  uint64_t offset = 0;
  std::string message;
};

inline constexpr uint32_t kAllCpus = UINT32_MAX;  // counted for no CPU in particular

struct LostEvents {
  std::string what;  // "kernel ring buffer: off-CPU", "CUDA calls (pid 123)"
  uint64_t count = 0;
  std::map<uint32_t, uint64_t> by_cpu;  // where the kernel recorder counted per CPU (kAllCpus: not)
  // False where nothing could count them (a file that cannot be read, calls nothing could see):
  // `count` is then 0 and the report says "an unknown number of".
  bool count_known = true;

  // Whether this says that something was lost.
  bool Any() const { return count > 0 || !count_known; }
  // "1,234 what" or "an unknown number of what", for the report.
  std::string Text() const;
};

// A recording file that stopped taking records before the run ended: what came after in that
// stream (one process's CUDA calls, or the kernel's events) is missing from the session.
struct RecordingStop {
  std::string file;  // its name in the session directory: "inject-123.gpr", "kernel.gpr"
  uint32_t pid = 0;  // the process it recorded; 0 for kernel.gpr
  uint64_t time_ns = 0;
  // "write_failed", "session_full", "profiler_ended", "disk_room", "file_lost", "session_closed",
  // "directory_lost", "shared_memory_unreachable", "file_size_limit", "memory_limit",
  // "thread_limit", "file_not_created"
  std::string cause;
  std::string description;
  uint64_t records_lost = 0;  // ready to be written when it stopped (the rest were never made)
};

// A process of the tree that loaded a CUDA library without gprof-run's injected one: its CUDA
// calls, if it made any, are not in the session (unrecorded_processes.h).
struct UnrecordedProcess {
  uint32_t pid = 0;
  std::string name;          // the kernel's name of it; empty: unknown
  std::string cuda_library;  // "libcudart.so.13"
  uint64_t seen_ns = 0;      // when the record shows it loaded (or holding) that library
  uint32_t forked_from = 0;  // the process it inherited the library from by fork; 0: its own
  std::string evidence;      // "memory_map" (the kernel saw the mmap), "maps_snapshot",
                             // "secure_exec" (a secure execution: nothing of it is recorded)
  std::string reason;        // in words, for the report
};

// What gprof-run wrote in session.json about the run itself.
// Outside SessionMeta: Clang cannot default-construct a nested struct with member initializers
// inside std::optional before the enclosing class is complete.
struct RecordingWindow {
  double delay_s = 0;
  double duration_s = 0;  // 0: to the end of the run
  uint64_t start_monotonic_ns = 0;
  uint64_t end_monotonic_ns = 0;
};
// A gprof-run started inside the command (gprof-run -- gprof-run -- CMD): what it recorded is in
// its own session directory, not this one.
struct NestedSession {
  uint32_t pid = 0;       // the nested gprof-run's
  std::string directory;  // its session directory, printable
  std::optional<uint64_t> calls;  // the CUDA calls its session holds; unset: unknown
};
// --capture-range: the windows every recorder kept (inject/shared/capture_windows.h).
struct CaptureWindow {
  uint64_t start_monotonic_ns = 0;
  uint64_t end_monotonic_ns = 0;  // 0: open when gprof-run ended
  std::string opened_by;          // "cudaProfilerStart", "gprof-run start"
  std::string closed_by;          // "cudaProfilerStop", "gprof-run stop", "the command's end"
  uint32_t open_pid = 0;          // 0: gprof-run
  uint32_t close_pid = 0;
};
// --flight-recorder: the one window it records in, the seconds it keeps, and what ended it.
struct FlightRecording {
  uint64_t keep_ns = 0;    // --flight-recorder SEC
  uint64_t freeze_ns = 0;  // --trigger freeze:MS; 0: none
  uint64_t hang_ns = 0;    // --trigger hang:SEC; 0: none
  // What ended the recording: "freeze", "hang" (a trigger), "stop" (gprof-run stop), "end" (the
  // command's end).
  std::string ended_by;
  uint64_t fired_monotonic_ns = 0;  // when the trigger fired; 0: none fired
  uint64_t duration_ns = 0;         // the call's (so far), the block's, the silence's
  uint32_t pid = 0, tid = 0;        // the call's process and thread (freeze)
  uint32_t api_id = 0;              // the call's, in that process's names
  // With "freeze": "call" (the call returned), "running" (still running when it fired), "threads"
  // (`threads` threads doing CUDA work blocked together; pid and tid: the first of them).
  std::string freeze_kind = "call";
  uint32_t threads = 0;
};
struct CaptureRanges {
  std::string range;  // "cudaProfilerApi", "manual", "flight"
  std::vector<CaptureWindow> windows;
  uint64_t refused_opens = 0;  // windows not opened: past the room for them
  std::optional<FlightRecording> flight;
};
// gprof-run -p: running processes recorded for a while, not a command gprof-run started.
struct AttachedRecording {
  std::vector<uint32_t> pids;  // as given
  uint32_t processes = 0;      // with their descendants at the start
  std::string ended;           // "duration", "signal", "exited", "max_size"; empty: unknown
};
struct RecordingSizeCap {
  uint64_t limit_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t stopped_at_monotonic_ns = 0;  // 0: the cap was not reached
  uint64_t refused_records = 0;
  uint64_t refused_bytes = 0;  // uncompressed
};

// CLOCK_REALTIME and the recording clock (the kernel's CLOCK_MONOTONIC, which BPF's timestamps
// use) read at one moment, give or take uncertainty_ns: what lines sessions of several hosts up.
struct ClockAnchor {
  uint64_t monotonic_ns = 0;
  uint64_t realtime_ns = 0;  // ns since the epoch
  uint64_t boottime_ns = 0;  // the kernel's CLOCK_BOOTTIME
  uint64_t uncertainty_ns = 0;
  // How far REALTIME itself may be from the true time (the kernel's maxerror); 0: not recorded.
  uint64_t realtime_max_error_ns = 0;
};

struct SessionMeta {
  // session.json was read; false when it is missing, unreadable or damaged, and then every field
  // below is unknown (kernel_recording is then inferred from kernel.gpr).
  bool known = false;
  std::string tool_version;
  std::vector<std::string> command;
  uint32_t root_pid = 0;
  std::string inject_library;  // the path gprof-run preloaded; empty: unknown
  std::string cuda_mode;       // --cuda: "auto", "cupti", "preload", "off"; empty: unknown
  std::string nvtx_tool;       // the user's own NVTX tool, forwarded to; empty: none
  std::string nccl_plugin;     // the user's own NCCL profiler plugin, chained; empty: none
  uint64_t start_monotonic_ns = 0;
  uint64_t end_monotonic_ns = 0;
  uint64_t start_realtime_ns = 0;
  uint64_t start_boottime_ns = 0;
  std::optional<int> exit_code;    // CMD exited normally with this status
  std::optional<int> exit_signal;  // CMD died of this signal
  bool kernel_recording = false;
  std::string kernel_recording_note;  // why it is off, when it is
  // Off-CPU intervals shorter than this have no stacks, nor have the wakeups that end them
  // (0: every interval has them, or a session from before the threshold).
  uint64_t kernel_stack_min_ns = 0;

  // --delay / --duration: every recorder kept only what started in [start, end) (end 0: none).
  using Window = RecordingWindow;
  std::optional<Window> window;
  // --max-size: the cap on the recording files, and what it cut.
  using MaxSize = RecordingSizeCap;
  std::optional<MaxSize> max_size;
  // --capture-range: recorded only inside these windows.
  using Capture = CaptureRanges;
  std::optional<Capture> capture;
  // gprof-run -p: the processes ran before and after the recording; none has an exit status.
  std::optional<AttachedRecording> attach;
  // Why the record ends before the command's own end, when it does: "killed_by_signal" (the
  // command died of exit_signal), "gprof_run_ended" (gprof-run died first: no exit status),
  // "still_recording" (its gprof-run still runs: the session was read while being recorded).
  // Empty: the command ran to its end, or there is no session.json to say.
  std::string cut_short;
  std::string cut_short_text;  // the same in words, for the report
  // Processes of the tree still running when gprof-run ended the recording, after the command's
  // own process had ended: what they did after is not in the session. `still_writing`: the
  // injected library had its file open then, so the file may change after the report.
  struct Running {
    uint32_t pid = 0;
    bool still_writing = false;
  };
  std::vector<Running> running_at_end;
  std::vector<NestedSession> nested_sessions;
  // Where it was recorded: the host's name, and its boot (/proc/sys/kernel/random/boot_id):
  // sessions of one boot share the kernel's CLOCK_MONOTONIC. Empty: unknown (an older session).
  std::string host_name;
  std::string boot_id;
  std::optional<ClockAnchor> start_anchor;  // at the recording's start
  std::optional<ClockAnchor> end_anchor;    // at its end
  // gprof-run's own time namespace's offsets, already taken off every time it wrote.
  int64_t time_namespace_monotonic_ns = 0;
  int64_t time_namespace_boottime_ns = 0;
  int64_t test_realtime_skew_ns = 0;  // GPROF_TEST_REALTIME_SKEW_NS, in every REALTIME reading
  // The rank the launcher gave gprof-run's environment, which the command inherited.
  std::optional<RankIdentity> rank;
};

// One event of NCCL's profiler plugin in the program (inject/nccl_profiler.cc): a collective or
// send/receive enqueued, or a communicator's start. Times are the host's. NCCL starts a
// collective's event on the thread that launched its kernel, just after the launch (2.24-2.30:
// hostStreamPlanTask, after ncclLaunchKernel), and stops it at once.
struct NcclEvent {
  static constexpr uint32_t kNoName = UINT32_MAX;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t stop_ns = 0;
  // Its NCCL kernel, where the GPU timeline has it (nccl_collectives.h's PlaceNcclKernels): the
  // launch call's start on the host; the kernel's run on the GPU; its name. 0, kNoName: unknown.
  uint64_t launch_ns = 0;
  uint64_t launch_end_ns = 0;
  uint64_t gpu_start_ns = 0;
  uint64_t gpu_end_ns = 0;
  uint32_t kernel = kNoName;         // Session::nccl_names
  uint32_t queued_behind = kNoName;  // Session::nccl_names: the GPU work that ran longest
                                     // between the launch and the kernel's start
  uint64_t comm_hash = 0;
  uint64_t seq_number = 0;
  uint64_t count = 0;
  int32_t rank = -1;
  int32_t n_ranks = 0;
  int32_t peer = -1;
  uint16_t kind = 0;     // format::NcclEventKind
  uint16_t flags = 0;    // format::NcclEventFlags
  uint16_t version = 0;  // of the plugin interface NCCL used
  uint32_t func = 0;     // Session::nccl_names: "AllReduce"; kCommInit: the chained plugin
  uint32_t datatype = 0; // Session::nccl_names: "ncclFloat32"; kCommInit: the communicator's name
};

// An NVTX range of the program (docs/nvtx.md). Push/pop ranges nest on their thread; a start/end
// range stays on the thread that started it, wherever it ended.
struct NvtxRange {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // the recording's end where it never closed (`open`)
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t name = 0;      // Session::nvtx_strings: the message ("" when it had none)
  uint32_t domain = 0;    // Session::nvtx_strings: the domain's name; 0 ("") the default domain
  uint32_t category = 0;  // Session::nvtx_strings: the category's name, or its number; 0: none
  uint16_t depth = 0;     // open push/pop ranges of its thread around it (any domain)
  uint8_t start_end = 0;  // 1: nvtxRangeStart/End, 0: push/pop
  uint8_t open = 0;       // 1: still open when the recording ended
};

// An NVTX mark: an instant.
struct NvtxMark {
  uint64_t time_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t name = 0;    // Session::nvtx_strings
  uint32_t domain = 0;  // Session::nvtx_strings
};

struct Session {
  std::string directory;
  SessionMeta meta;
  std::map<uint32_t, Process> processes;  // by pid
  std::map<uint32_t, Thread> threads;     // by tid
  std::vector<std::string> api_names;
  RecordVector<ApiCall> api_calls;                 // sorted by enter_ns
  RecordVector<OffCpuInterval> off_cpu;            // sorted by start_ns
  RecordVector<FutexCall> futex_calls;             // sorted by start_ns
  RecordVector<FutexWaitvCall> futex_waitv_calls;  // sorted by start_ns
  RecordVector<LockWait> lock_waits;               // sorted by start_ns
  RecordVector<DeviceWait> device_waits;           // sorted by start_ns
  // By (reader's tid, the start of the wait it followed).
  std::map<std::pair<uint32_t, uint64_t>, StreamRead> stream_reads;
  RecordVector<TcpTransfer> tcp_transfers;         // sorted by start_ns
  RecordVector<PageFault> page_faults;             // sorted by start_ns
  RecordVector<QuickFaultRun> quick_fault_runs;    // sorted by start_ns
  RecordVector<MemoryMapCall> memory_map_calls;    // sorted by start_ns
  RecordVector<TaskStart> task_starts;             // sorted by time_ns
  std::vector<SignalSent> signals;                 // as recorded: by time on each CPU
  std::vector<std::string> kernel_names;     // demangled; as recorded when they do not demangle
  RecordVector<GpuActivity> gpu_activities;  // sorted by start_ns
  std::vector<ModuleLoad> module_loads;      // few; in no particular order
  std::map<std::pair<uint32_t, uint64_t>, NativeStack> call_stacks;  // by (tid, call's enter_ns)
  // gprof-run's own threads in the processes, as the injected library named them (by tid).
  std::map<uint32_t, ProfilerRole> profiler_threads;
  std::unordered_map<int32_t, std::vector<uint64_t>> kernel_stacks;  // innermost frame first
  std::unordered_map<uint64_t, std::string> kernel_symbols;          // address -> "function+0x1a"
  std::unordered_map<int32_t, UserStack> user_stacks;                // by stack id
  std::vector<LostEvents> lost;
  // What the kernel recorder counted rather than recorded: page faults under this threshold
  // (per thread: Thread::quick_page_faults; 0: none counted), and contended spinning locks of the
  // tree, by CPU.
  uint64_t quick_page_fault_limit_ns = 0;
  std::map<uint32_t, uint64_t> spin_contention_by_cpu;
  // Off-CPU intervals and futex calls under counted_waits_limit_ns (0: none counted), by thread,
  // reason and period, as the recorder wrote them.
  std::vector<CountedWaits> counted_waits;
  uint64_t counted_waits_limit_ns = 0;
  // The trace's long-run guard (perfetto_writer.h, TraceDetailFor): recorded off-CPU intervals and
  // futex calls under this are only counted in the trace, which at full detail would have taken
  // trace_full_bytes (an estimate). 0: full detail.
  uint64_t trace_detail_under_ns = 0;
  uint64_t trace_full_bytes = 0;
  std::vector<RecordingStop> recording_stops;           // sorted by time_ns
  std::vector<UnrecordedProcess> unrecorded_processes;  // by pid
  uint64_t memory_map_calls_lost = 0;  // the kernel recorder's, counted in `lost` too
  // --flight-recorder: the chunks of data older than the seconds kept, which the recorders
  // punched out of their files (chunk_reader.h), and their bytes.
  uint64_t trimmed_chunks = 0;
  uint64_t trimmed_bytes = 0;
  std::vector<Diagnostic> diagnostics;
  std::vector<std::string> messages;  // from the injected library: "pid 12: ..."
  std::vector<std::string> nvtx_strings{std::string()};  // printable; [0] is ""
  RecordVector<NvtxRange> nvtx_ranges;                   // sorted by start_ns
  RecordVector<NvtxMark> nvtx_marks;                     // sorted by time_ns
  std::vector<NcclEvent> nccl_events;  // NCCL's plugin events (nccl_records.h), by start_ns
  std::vector<std::string> nccl_names{std::string()};  // NcclEvent's texts, printable; [0] is ""
  // The collector's outputs that could not be written (a full disk): the reports that could be
  // name them.
  struct UnwrittenOutput {
    std::string file;    // "trace.perfetto-trace"
    std::string reason;  // "No space left on device"
  };
  std::vector<UnwrittenOutput> outputs_not_written;
  PythonRecord python;                // Python stacks, their code objects, Python thread names
  NativeStackRecord native;           // native stacks of on-CPU samples and wakers
  // Names the kernel gave tasks (OffCpuInterval::waker_comm), printable; [0] is "".
  std::vector<std::string> comms{std::string()};
  // The symbols of the files the processes mapped, read from this machine on first use.
  mutable ElfSymbolCache elf_symbols;
  // The processes' Python roles (ProcessRole), found on first use; and whether there were
  // several processes then.
  mutable std::optional<std::map<uint32_t, std::string>> process_roles;
  mutable bool several_processes = false;

  const std::string& ApiName(const ApiCall& call) const { return api_names[call.name_index]; }
  const std::string& KernelName(const GpuKernel& kernel) const {
    return kernel_names[kernel.name_index];
  }
  // The native stack recorded at the exit of `call`, or nullptr.
  const NativeStack* CallStackOf(const ApiCall& call) const;
  const std::string& WakerComm(const OffCpuInterval& interval) const {
    return interval.waker_comm < comms.size() ? comms[interval.waker_comm] : comms.front();
  }
  // The index of `name` (printable) in comms, added when it is not there.
  uint32_t CommIndex(std::string_view name);
  // "name (tid)" or "tid" when the thread has no known name. The name is the kernel's, or the
  // one Python's threading module gives the thread where the kernel's is just the interpreter's
  // ("python3.11"), the kernel's then beside it: "qprod (python3, 12345)".
  // Where the session has more than one process, the thread's process after it: "pt_data_pin
  // (python3, 17150) of DataLoader worker 1 (pid 17141)" (ProcessLabel; a main thread's without
  // the pid its tid is: "MainThread (python3, 17141) of DataLoader worker 1"). Every writer's
  // label of a thread is this one (report.txt quotes the name: report_words.h, QuotedThread).
  std::string ThreadLabel(uint32_t tid) const;
  // " of DataLoader worker 1 (pid 17141)" where the session has more than one process (" of
  // DataLoader worker 1" for its main thread); else empty.
  std::string OfProcess(uint32_t tid) const;
  // What a process is, in a few words: "rank 1" for the process a launcher started as rank 1 (its
  // rank identity differs from its parent's); else its Python role where its Python stacks show
  // one ("DataLoader worker 1", "Pool worker 0", "multiprocessing child 2": numbered among its
  // parent's children of that role, in order of creation), else its executable's name
  // ("python3"), with " of rank 1" for a process of rank 1's; then "(pid N)".
  std::string ProcessLabel(uint32_t pid) const;
  // The processes recorded, as every report counts them: not the entry for pid 0 (records that
  // named no process).
  size_t RecordedProcessCount() const;
  // The role alone ("rank 1", "DataLoader worker 1", "DataLoader worker 1 of rank 1"); empty
  // where neither a rank nor a Python role is known.
  std::string ProcessRole(uint32_t pid) const;
  // Its Python role alone, numbered ("multiprocessing child 2"); empty where its stacks show none.
  std::string PythonRole(uint32_t pid) const;
  // "rank 1" for the process a launcher started as rank 1; " of rank 1" (`of` true) for one it
  // started; empty where the process has no rank, or is not of the kind asked.
  std::string RankWords(uint32_t pid, bool of) const;
  // The thread's name as ThreadLabel shows it (empty when none is known).
  std::string ThreadName(uint32_t tid) const;
  // The kernel's name of the thread where ThreadName shows another (Python's), else empty.
  std::string NativeNameBeside(uint32_t tid) const;
  // Whether `tid` is one of gprof-run's own threads (the injected library's writer, CUPTI's
  // threads under it), not the program's: by the tids the injected library recorded, never by a
  // name (a program's thread may call itself "gprof-writer").
  bool IsProfilerThread(uint32_t tid) const;
  // Kernel stack as symbols, innermost first; "0x..." where no symbol is known.
  std::vector<std::string> KernelStack(int32_t stack_id) const;
  // The mapping that holds `address` in process `pid` at `time_ns`, if its maps were recorded.
  const Mapping* FindMapping(uint32_t pid, uint64_t address, uint64_t time_ns = kLatest) const;
  // A word in memory that processes share (a MAP_SHARED mapping: a file, POSIX shared memory, or
  // anonymous memory shared over fork) is one futex in each process that maps it, at whatever
  // address: named by its file and offset ("path|inode|offset"). Empty for a process's own memory.
  std::string SharedWordKey(uint32_t pid, uint64_t address, uint64_t time_ns) const;
};

}  // namespace gprof::collector
