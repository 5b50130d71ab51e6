// gprof-run's kernel recorder: loads the BPF programs of kernel_events.bpf.c, follows one process
// tree in the kernel, and drains what they record into `<session dir>/kernel.gpr` (the chunked
// session format of inject/format/session_format.h; records of inject/format/kernel_events.h).
//
// Use from one thread: Start, Track the root, Poll in a loop while the target runs, Finish.
// No exceptions escape; errors are returned as a Status (inject/shared/status.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inject/shared/status.h"

namespace gprof::bpf {

struct KernelRecorderOptions {
  // Ring buffer between the BPF programs and the loader. 0: 2 MiB per possible CPU, at least
  // 16 MiB. Rounded up to a power of two of at least a page; at most 1 GiB.
  uint64_t ring_buffer_bytes = 0;
  // Distinct stacks each stack map (kernel, user) can hold; each takes GPROF_MAX_STACK_DEPTH * 8
  // bytes of kernel memory. A stack that finds its hash bucket taken is lost (counted), so this
  // should be well above the number of distinct stacks expected.
  uint32_t stack_map_entries = 16384;
  // Kernel stacks at switch-out, wakeup, lock waits and thread creation. Each costs an unwind in
  // the kernel, most of the per-event cost on a switch-heavy target; off, every kernel stack id in
  // the records is -ENODATA.
  bool kernel_stacks = true;
  // User stacks (frame-pointer walks) at switch-out, wakeup and lock waits; off: -ENODATA.
  bool user_stacks = true;
  // System calls on character devices whose name starts with this (at most 15 characters) are
  // recorded as device waits: the GPU driver's /dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm.
  // Empty: every character device.
  std::string device_prefix = "nvidia";
  // Page faults that take at least this long are recorded one by one; quicker ones are counted
  // per thread.
  uint64_t slow_page_fault_ns = 50000;
  // An off-CPU interval gets stacks only when it lasts at least this long: the thread's own (taken
  // when it runs again, as they were at the switch-out, where the kernel has the sched_exit_tp
  // tracepoint; else taken at every switch-out and dropped), and the waker's when the thread had
  // slept that long when woken. The unwinds are most of a switch's and a wakeup's cost, spent on
  // the many short waits of a switch-heavy program that no report explains. 0: every interval.
  uint64_t stack_min_ns = 20000;
  // Off-CPU intervals and futex calls shorter than this are counted per thread and reason (the
  // futex word or system call it slept in, the waker) instead of recorded one by one
  // (GPROF_REC_WAIT_COUNT records, about once a second); a futex call that woke a thread that
  // had slept this long is recorded whatever its length. 0: every one is recorded.
  uint64_t count_under_ns = 20000;
  // Take a thread's stacks at every switch-out, as kernels without sched_exit_tp must, even where
  // they could be taken when it runs again (to compare the two).
  bool stacks_at_switch_out = false;
  // Python stacks (CPython 3.9-3.13, bpf/python_stacks.bpf.h): read where the user stacks are
  // (after a long wait, at the wakeup that ends one), at a sampling tick on CPU, and at slow CUDA
  // calls; the code objects they name are named from the process's memory. Needs the thread's own
  // stacks at switch-in (sched_exit_tp) for waiters' stacks.
  bool python_stacks = true;
  // The sampling rate per CPU of on-CPU samples (a cpu-clock event on every CPU): at each tick, the
  // native stack of the tree's thread that runs there and, where it runs Python, its Python
  // stack; 0: none.
  uint32_t sample_hz = 99;
  // Bytes of user stack each native stack copy takes (bpf/native_stacks.bpf.h; at most
  // GPROF_NATIVE_STACK_MAX_BYTES); 0: no native stacks in samples or at wakeups.
  uint32_t native_stack_bytes = 8192;
  // A waker's native stack is copied at a wakeup that ends a wait at least this long (on top of
  // its frame-pointer walk, which stops in code built without frame pointers); 0: never.
  uint64_t waker_stack_min_ns = 1000000;
  // libgprof_inject.so as the target loads it: its slow-call marker is where slow CUDA calls'
  // Python stacks are taken (a uprobe). Empty: none.
  std::string python_marker_library;
  // CUDA driver calls recorded by uprobes on the cu* entry points of the libcuda each process of
  // the tree maps (bpf/cuda_probes.h): for processes no injected library records (gprof-run -p).
  // A call at least cuda_probe_stack_min_ns long gets its user and Python stacks.
  bool cuda_probes = false;
  uint64_t cuda_probe_stack_min_ns = 1000000;
  // Attach every tracepoint program as raw_tp instead of tp_btf (GPROF_BPF_RAW_TP=1 in the
  // environment does the same). Without it, raw_tp is only the fallback of a tracepoint whose
  // tp_btf program cannot load or attach.
  bool force_raw_tracepoints = false;
  // The handle of the session's --max-size budget (inject/shared/recording_limits.h) that
  // kernel.gpr is charged to; empty: no cap.
  std::string size_budget;
  // --flight-recorder: kernel.gpr's data chunks may be punched out later (TrimBefore).
  bool trimmed = false;
  // kernel.gpr is made with these file-system ids (inject/shared/file_owner.h): under sudo, the
  // invoking user's, so that it is theirs from its first moment. -1: this process's.
  int file_uid = -1;
  int file_gid = -1;
};

// A signal the kernel generated for a process of the tree or for this process (a GPROF_REC_SIGNAL
// record of inject/format/kernel_events.h), as the recorder drained it.
struct SignalRecord {
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC
  int signal = 0;
  int target_pid = 0;    // the process it was for
  int sender_pid = 0;    // the process that sent it; 0: generated in an interrupt
  bool to_many = false;  // one of several one call made: kill() of a process group, killpg
  // What the kernel did with it: made it pending (the target's handler runs once for it and for
  // those merged into it), or merged it into the same signal still pending (no run of its own).
  bool made_pending = false;
  bool merged = false;
  bool to_thread = false;  // for one thread (tgkill), pending in its own set, taken first
  int code = 0;            // si_code: SI_USER (kill), SI_KERNEL, SI_TKILL, SI_QUEUE ...
};

struct KernelRecorderStats {
  uint64_t records_written = 0;  // records in chunks kernel.gpr took, loader records included
  uint64_t lost = 0;             // sum over lost kinds (kernel counters, malformed, write failures)
};

class KernelRecorder {
 public:
  // Opens, loads and attaches the programs and creates `<session_dir>/kernel.gpr`. Records nothing
  // until Track(). On failure the error names what failed in one line. Its code is
  // kPermissionDenied only when the cause is missing privileges (EPERM/EACCES without
  // CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN), so the caller can say which would do and go on without
  // kernel recording; kUnsupported for a kernel without BTF, or one that would not take the
  // programs; kInvalid for options they cannot run with; kIo when kernel.gpr cannot be made;
  // kOutOfMemory.
  static Expected<std::unique_ptr<KernelRecorder>> Start(const std::string& session_dir,
                                                         const KernelRecorderOptions& options);

  // Adds a process: its threads, and the processes it forks from now on, are recorded. Children
  // it forked before the call are not (gprof-run tracks its child before releasing it).
  // kInvalid for this process, or once the recorder is finished.
  Status Track(int pid);

  // Records only intervals that start in [start_ns, end_ns) on CLOCK_MONOTONIC (end 0: no end;
  // inject/shared/recording_limits.h). Before the target runs; the caller Finishes at the end.
  void SetWindow(uint64_t start_ns, uint64_t end_ns);

  // --flight-recorder (options.trimmed): punches out of kernel.gpr the chunks of data written
  // before `before_ns`; the chunks of state (stacks, processes, threads, maps) stay.
  void TrimBefore(uint64_t before_ns);

  // True once the session's size budget refused a chunk: the caller may Finish early.
  bool size_budget_stopped() const;

  // Waits up to timeout_ms (< 0: no limit), but at most ~100 ms, for records and drains the ring
  // buffer into kernel.gpr. Returns the ring-buffer records drained, or -errno. A signal during
  // the wait (SIGCHLD, SIGINT) ends it at once: a clean return of what was drained, 0 when
  // nothing. Call it in a loop that checks the caller's own state in between (the short wait
  // bounds how late that loop sees a signal that arrived outside the wait). Records are written
  // in chunks at least every ~250 ms or ~1 MiB, so a killed gprof-run loses little. Processes of
  // the tree that appeared or exec'd since the last call get a /proc/PID/maps snapshot.
  int Poll(int timeout_ms);

  // Stops recording: detaches (all but the signals' program), drains what is left, emits
  // GPROF_OFFCPU_UNFINISHED intervals and GPROF_FUTEX_UNFINISHED calls for threads still off-CPU
  // / inside a futex call, the counts of quick page faults of threads still alive and of
  // spinning-lock contention per CPU, a maps snapshot of every process of the tree still alive,
  // the symbols of the kernel stacks (the stacks themselves are written as they first appear), a
  // gprof_lost record for every non-zero loss counter (per CPU), and closes the file. Idempotent.
  void Finish();

  KernelRecorderStats stats() const;

  // Whether signals are recorded (the kernel could attach the program); then TakeSignals returns
  // every signal generated for a process of the tree or for this process, in the order the ring
  // buffer held them, since the last call (Poll and Finish drain them; at most a few thousand are
  // kept for a caller that never takes them). They are recorded on after Finish, until the
  // recorder is destroyed: Poll then drains only them, and kernel.gpr is closed.
  bool records_signals() const;
  std::vector<SignalRecord> TakeSignals();
  // When Poll last drained the ring buffer (CLOCK_MONOTONIC): every signal generated before then
  // (less the few ms between a program's clock and its record) is in what TakeSignals returned.
  uint64_t signals_drained_ns() const;

  // How the programs were attached, and what the kernel could not record (tracepoints attached
  // as raw_tp and why, page faults through kprobes, a feature left out): one line each, for the
  // session to say. kernel.gpr holds the same lines as message records.
  const std::vector<std::string>& notes() const;

  // The first error that cost records after Start (a failed chunk write), empty when none.
  const std::string& last_error() const;
  // When kernel.gpr stopped taking records (CLOCK_MONOTONIC ns; a write failed, or the next
  // chunk would have passed the disk margin, disk_room.h): what came after is only counted. 0: it
  // did not. The cause as session.json words it: "write_failed", "disk_room", "file_lost".
  uint64_t writes_stopped_ns() const;
  const char* writes_stopped_cause() const;
  // The processes of the tree that had not ended when the recorder finished: no exit seen, and
  // /proc still names the same process. After Finish.
  std::vector<uint32_t> RunningProcesses() const;

  ~KernelRecorder();
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  struct State;  // libbpf objects and buffers; recorder_state.h

 private:
  explicit KernelRecorder(std::unique_ptr<State> state);
  static Expected<std::unique_ptr<KernelRecorder>> StartOrThrow(
      const std::string& session_dir, const KernelRecorderOptions& options);
  void FinishRecording();
  std::unique_ptr<State> state_;
};

}  // namespace gprof::bpf
