// SPDX-License-Identifier: GPL-2.0
/* gprof-run's kernel recorder: what the kernel did with every thread of the target's process tree.
 *
 * Filtering happens here, not in user space: scheduler events can exceed a million a second
 * machine-wide, and only the tree's share may reach the ring buffer. The tree is the `tracked`
 * map of tgids (the loader adds the root; fork adds children), and the `threads` map of its
 * threads' state by tid (an entry from a thread's start to its exit): the scheduler and system
 * call programs, which run at every hand-over, find in one lookup both whether a thread is
 * tracked and its state. Other per-thread state lives in hash maps keyed by tid; a record is
 * emitted when an interval ends (switch-in, syscall return, lock acquired, fault handled). Every
 * program looks at one of those maps before it does anything else.
 *
 * Each tracepoint handler is built twice (TRACEPOINT below): as tp_btf, and as raw_tp for kernels
 * where the tp_btf program cannot load or attach; the loader picks one per tracepoint. Both kinds
 * pass the arguments as an array of u64, and the handlers read through the pointers with CO-RE
 * probe reads, which the verifier accepts for both. The argument lists match Linux 6.18 (checked
 * with `bpftool btf dump file /sys/kernel/btf/vmlinux`, btf_trace_<name>); sched_switch has had its
 * prev_state argument since 5.18, lock:contention_begin/end exist since 5.19. */
// clang-format off: vmlinux.h defines the kernel's types that everything after it uses.
#include "vmlinux.h"
// clang-format on

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/kernel_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* x86_64 system call numbers; 32-bit (compat) tasks use other numbers and are not seen. */
#define NR_READ 0
#define NR_WRITE 1
#define NR_POLL 7
#define NR_MMAP 9
#define NR_MPROTECT 10
#define NR_MUNMAP 11
#define NR_IOCTL 16
#define NR_SELECT 23
#define NR_MREMAP 25
#define NR_MADVISE 28
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_RECVMMSG 299
#define NR_SENDMMSG 307
#define NR_FUTEX 202
#define NR_EPOLL_WAIT 232
#define NR_PSELECT6 270
#define NR_PPOLL 271
#define NR_EPOLL_PWAIT 281
#define NR_EPOLL_PWAIT2 441
#define NR_FUTEX_WAITV 449
#define NR_FUTEX_WAKE 454
#define NR_FUTEX_WAIT 455
#define NR_FUTEX_REQUEUE 456

#define FUTEX_WAIT 0
#define FUTEX_CMP_REQUEUE 4
#define FUTEX_LOCK_PI 6
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2 13
#define FUTEX_PRIVATE_FLAG 128
#define FUTEX_CLOCK_REALTIME 256
#define FUTEX_CMD_MASK (~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME))
#define FUTEX2_PRIVATE FUTEX_PRIVATE_FLAG
#define CLOCK_REALTIME_ID 0

#define MAP_ANONYMOUS 0x20
#define S_IFMT 00170000
#define S_IFCHR 0020000
#define S_IFIFO 0010000
#define S_IFSOCK 0140000
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10

#define TASK_DEAD 0x80        /* include/linux/sched.h */
#define SIGKILL 9             /* include/uapi/asm-generic/signal.h */
#define PF_KTHREAD 0x00200000 /* include/linux/sched.h */

/* Flags of lock:contention_begin (include/trace/events/lock.h), the same bits as gprof_lock_flags.
 */
#define LCB_F_SPIN GPROF_LOCK_SPIN
#define LCB_F_READ GPROF_LOCK_READ
#define LCB_F_WRITE GPROF_LOCK_WRITE
#define LCB_F_RT GPROF_LOCK_RT
#define LCB_F_PERCPU GPROF_LOCK_PERCPU
#define LCB_F_MUTEX GPROF_LOCK_MUTEX

/* Flag bits in the low bits of lock owner words
 * (kernel/locking/{mutex.h,rwsem.c,rtmutex_common.h}). */
#define MUTEX_FLAGS 0x07
#define RWSEM_READER_OWNED 0x1
#define RWSEM_OWNER_FLAGS_MASK 0x3
#define RT_MUTEX_HAS_WAITERS 0x1

#define ENOENT 2
#define ENODATA 61

/* Settings, written by the loader between open and load. */
const volatile __u32 self_tgid = 0; /* the recorder's own process: never tracked */
/* Wake the consumer only once this much is waiting (0: the kernel's default of waking on every
 * record that finds the consumer caught up). The loader polls with a timeout anyway, so batching
 * costs latency only, and saves a wakeup of gprof-run per event on a busy machine. */
const volatile __u64 wakeup_bytes = 0;
/* Kernel stacks cost an unwind each (about 2-3 us on the project's VMs, most of a switch's cost);
 * with 0 every kernel stack id is -ENODATA and nothing is counted as lost. */
const volatile __u32 capture_stacks = 1;
/* User stacks: a frame-pointer walk of the user stack (cheaper, but a copy from user memory per
 * frame); with 0 every user stack id is -ENODATA. */
const volatile __u32 capture_user_stacks = 1;
/* Character devices whose system calls are recorded as device waits, by the start of their name
 * (the GPU driver's nvidiactl, nvidia0, nvidia-uvm). An empty prefix matches every device. */
const volatile char device_prefix[GPROF_COMM_LEN] = "nvidia";
const volatile __u32 device_prefix_len = 6;
/* Page faults that take at least this long are recorded; the others only counted per thread. */
const volatile __u64 slow_fault_ns = 50000;
/* Stacks are taken only for off-CPU intervals that last at least this long: the thread's own for
 * an interval that long, the waker's for a wakee that had slept that long when woken. The unwinds
 * are most of the cost of a switch and of a wakeup, and a wait that short is never one the
 * diagnosis explains (its ids are then -ENODATA, like stacks that are off). */
const volatile __u64 stack_min_ns = 20000;
/* Where the thread's own stacks are taken. 1: when it runs again, in its own context at the end
 * of __schedule (the sched_exit_tp tracepoint, Linux 6.16 on), where its kernel stack below
 * __schedule and its user registers are still those it switched out with, and the interval's
 * length is known. 0 (no such tracepoint): at every switch-out, before the length is known, and
 * dropped at the switch-in for a short interval. */
const volatile __u32 stacks_at_switch_in = 1;
/* 1 when the session's owner is not root: a secure-execution process (set-user-ID, set-group-ID,
 * file capabilities) is then kept in the tree as existing only (GPROF_EXEC_HIDDEN). */
const volatile __u32 hide_secure_exec = 0;

/* The recording window (gprof-run --delay, --duration; inject/shared/recording_limits.h): an interval is
 * recorded when it starts in [window_start_ns, window_start_ns + window_length_ns), and kept whole.
 * Mutable data, not rodata: the loader writes it after load, once gprof-run knows when the target
 * starts. Checked before any stack walk, map update or ring-buffer reservation, so what starts
 * outside costs one compare. Threads' starts, names and exits are recorded regardless: they name
 * what the window holds. */
__u64 window_start_ns SEC(".data") = 0; /* with its length: one section to write */
__u64 window_length_ns = ~0ull;

static __always_inline bool in_window(__u64 now) {
  return now - window_start_ns < window_length_ns;
}
/* 1 while the window has closed and no other is open (a capture range between its windows, the
 * flight recorder once ended; KernelRecorder::SetWindow): a program that only starts intervals
 * returns on it, first thing, before any lookup or clock read, so that outside every window the
 * kernel recorder costs little more than its attachment; the switch-out still looks its thread up
 * (no clock read) to clear what an interval inside the window left. Those that end an interval
 * (which may have started inside the window, and is kept whole) still look. */
__u32 window_shut SEC(".data") = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 << 20); /* the loader sets the real size */
} events SEC(".maps");

/* The target's process tree, by tgid: TREE_RECORDED, or TREE_HIDDEN for a secure-execution
 * process recorded only as existing. Entries leave when the last thread of the process exits. */
#define TREE_RECORDED 1
#define TREE_HIDDEN 2
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u8);
} tracked SEC(".maps");

/* Kernel and user stacks by id, one map each. No BPF_F_REUSE_STACKID: an id in a record must keep
 * meaning its stack until the loader has read it; a bucket collision fails the new stack instead
 * (counted). */
struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(max_entries, 16384); /* the loader may change it */
  __uint(key_size, sizeof(__u32));
  __uint(value_size, GPROF_MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(max_entries, 16384); /* the loader may change it */
  __uint(key_size, sizeof(__u32));
  __uint(value_size, GPROF_MAX_STACK_DEPTH * sizeof(__u64));
} user_stacks SEC(".maps");

/* Every thread of the tree, by tid (struct gprof_thread_state): whether it is off-CPU now
 * (offcpu.open), and the system call in progress that is recorded at its return
 * (syscall.start_ns 0: none; a thread is in one system call at a time). Made at the thread's
 * start (sched_process_fork, or the loader's Track for threads it finds running), so the hot
 * programs never insert: rewriting an entry in place costs a lookup, where inserting and deleting
 * one at every switch cost a third of the switch's BPF time. A thread of the tree without one
 * (the map was full when it started) is not recorded on these paths, and counted as lost. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct gprof_thread_state);
} threads SEC(".maps");

/* Intervals whose stacks are due at their thread's sched_exit_tp (stacks_at_switch_in). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct gprof_switched_in);
} switched_in SEC(".maps");

/* A contended kernel lock a thread of the tree is waiting for, by tid. start_ns 0: none; a thread
 * keeps its entry until it exits. */
struct lock_pending {
  __u64 start_ns;
  __u64 lock;
  __u32 pid;
  __u32 flags; /* gprof_lock_flags; LCB_F_SPIN while a mutex is still spinning, not asleep */
  __u32 owner_pid;
  __u32 owner_tid;
  __s32 kstack_id;
  __s32 user_stack_id;
  char owner_comm[GPROF_COMM_LEN];
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct lock_pending);
} lock_pending SEC(".maps");

/* Page faults of the tree, by tid: the one being handled, and those under slow_fault_ns counted
 * until the thread exits (or the loader ends). Separate from syscall_pending: faults happen inside
 * system calls too (a copy to or from user memory). A thread keeps its entry until it exits, as in
 * the threads map: faults come by the million. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct gprof_fault_state);
} fault_pending SEC(".maps");

/* The tree's last writes to each pipe or non-TCP socket end (struct gprof_stream_writes), by the
 * receiving end (stream_end): what a read after a wait that no thread of the tree ended names as
 * the writer. LRU: an end nobody writes to any more ages out. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 8192);
  __type(key, __u64);
  __type(value, struct gprof_stream_writes);
} stream_writes SEC(".maps");

/* Everything the programs could not record, by GPROF_LOST_SLOT(kind, record type). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, GPROF_LOST_SLOTS);
  __type(key, __u32);
  __type(value, __u64);
} lost SEC(".maps");

/* Events counted rather than recorded, by enum gprof_event_count_kind (per CPU ones only). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, GPROF_COUNT_SLOTS);
  __type(key, __u32);
  __type(value, __u64);
} counts SEC(".maps");

static __always_inline void count_in(void* map, __u32 slot) {
  __u64* counter = bpf_map_lookup_elem(map, &slot);
  if (counter) __sync_fetch_and_add(counter, 1); /* per-CPU, but an NMI may nest */
}

static __always_inline void count_lost(__u32 kind, __u32 type) {
  count_in(&lost, GPROF_LOST_SLOT(kind, type));
}

/* Recorded in full: everything but starts, execs, exits and signals asks this. */
static __always_inline bool is_tracked(__u32 tgid) {
  __u8* value = bpf_map_lookup_elem(&tracked, &tgid);
  return value != NULL && *value == TREE_RECORDED;
}

/* In the tree, recorded in full or as existing only. */
static __always_inline __u8 tree_state(__u32 tgid) {
  __u8* value = bpf_map_lookup_elem(&tracked, &tgid);
  return value != NULL ? *value : 0;
}

/* The current task's kernel stack id, or -errno (counted as lost: a bucket collision, -EEXIST,
 * or a full map, -ENOMEM, in practice). */
static __always_inline __s32 kernel_stack(void* ctx, __u32 record_type) {
  if (!capture_stacks) return -ENODATA;
  long id = bpf_get_stackid(ctx, &stacks, 0);
  if (id < 0) count_lost(GPROF_LOST_STACK, record_type);
  return (__s32)id;
}

/* The current task's user stack id (from its user registers, also inside a system call), or
 * -errno as kernel_stack. The walk follows frame pointers: it ends early in code built without
 * them, and at GPROF_MAX_STACK_DEPTH frames (the loader flags such stacks as truncated). */
static __always_inline __s32 user_stack(void* ctx, __u32 record_type) {
  if (!capture_user_stacks) return -ENODATA;
  long id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
  if (id < 0) count_lost(GPROF_LOST_STACK, record_type);
  return (__s32)id;
}

/* A zeroed record with its header filled, or NULL (counted). Reservations are not zeroed by the
 * kernel: the memset keeps padding and unused bytes from leaking kernel memory. */
static __always_inline void* reserve(__u32 size, __u16 type) {
  struct gprof_rec_hdr* hdr = bpf_ringbuf_reserve(&events, size, 0);
  if (!hdr) {
    count_lost(GPROF_LOST_RINGBUF, type);
    return NULL;
  }
  __builtin_memset(hdr, 0, size);
  hdr->size = size;
  hdr->type = type;
  return hdr;
}

/* The ring buffer's wakeup flags for a record written now (see wakeup_bytes). */
static __always_inline __u64 wakeup_flags(void) {
  if (!wakeup_bytes) return 0;
  return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                       : BPF_RB_NO_WAKEUP;
}

static __always_inline void submit(void* record) { bpf_ringbuf_submit(record, wakeup_flags()); }

#define USER_DS 0x2b /* __USER_DS: the stack segment of every user-mode entry frame */

/* Whether the program runs in interrupt context (hardirq, softirq run at irq exit, NMI), where
 * `current` is whatever task the interrupt hit and must not be named as the waker.
 *
 * The preempt count would say so directly, but it is a per-CPU variable that a program can only
 * reach as a ksym, and kernels without CONFIG_KALLSYMS_ALL (this project's machines) cannot
 * resolve those. So, x86_64 specifics instead:
 *  - an interrupt that hits kernel mode runs on the per-CPU irq stack (NMIs on their own IST
 *    stack): the tracepoint's arguments (ctx), which the kernel puts on the stack it runs on, are
 *    outside the current task's stack. Not the address of one of the program's own locals: since
 *    6.13 the JIT gives a tracing program of 64 bytes of stack or more a private per-CPU stack,
 *    which is never the task's;
 *  - an interrupt that hits user mode runs on the task stack, which then holds just the entry
 *    frame at its top, and interrupt entries store orig_ax = -1 where a syscall stores its number
 *    and an exception its error code (kernel threads have a zeroed frame).
 * Softirqs run by ksoftirqd and threaded irq handlers are task context: their thread is named. */
static __always_inline bool in_interrupt(void* ctx) {
  /* The task's fields are read directly (a trusted pointer: plain loads), not through probe
   * reads: this runs at every wakeup of the tree's threads, in the waker's critical path. */
  struct task_struct* task = bpf_get_current_task_btf();
  __u64 base = (__u64)task->stack;
  __u64 size = 16384; /* THREAD_SIZE without KASAN */
  if (bpf_core_field_exists(task->stack_vm_area)) {
    struct vm_struct* area = task->stack_vm_area;
    if (area) {
      __u32 pages = area->nr_pages; /* VMAP_STACK: the exact size, KASAN or not */
      if (pages) size = (__u64)pages * 4096;
    }
  }
  __u64 here = (__u64)ctx;
  if (here < base || here >= base + size) return true;

  /* The user entry frame sits at the top of the stack, or 16 bytes lower on FRED kernels. Only the
   * right position shows a user CS and SS: read 16 bytes off, the SS slot holds RFLAGS, which
   * always has IF (0x200) set in user mode. The frame's last six words are x86_64's entry frame
   * (orig_ax, then what the CPU pushes: ip, cs, flags, sp, ss), taken in one read. cs and ss are
   * 16 bits (FRED keeps more in the words above them). */
  for (int padding = 0; padding <= 16; padding += 16) {
    __u64 frame[6];
    if (bpf_probe_read_kernel(frame, sizeof(frame), (void*)(base + size - padding - sizeof(frame))))
      continue;
    if ((frame[2] & 3) == 3 && (__u16)frame[5] == USER_DS) return (long)frame[0] == -1;
  }
  return false;
}

#include "bpf/python_stacks.bpf.h"
#include "bpf/native_stacks.bpf.h"
#include "bpf/cuda_probes.bpf.h"

/* Whether the current task is a kernel thread: it has no user stack. */
static __always_inline bool in_kernel_thread(void) {
  return (bpf_get_current_task_btf()->flags & PF_KTHREAD) != 0;
}

/* One handler, two programs: tp_btf and raw_tp. The loader loads one of them per tracepoint. */
#define TRACEPOINT(name, handler)                      \
  SEC("tp_btf/" #name)                                 \
  int handler##_btf(u64* ctx) { return handler(ctx); } \
  SEC("raw_tp/" #name)                                 \
  int handler##_raw(u64* ctx) { return handler(ctx); }

/* The same for a handler told which it is (`btf`, a constant the compiler folds): in a tp_btf
 * program the tracepoint's pointer arguments are typed, and their fields are plain loads rather
 * than probe reads. */
#define TYPED_TRACEPOINT(name, handler)                      \
  SEC("tp_btf/" #name)                                       \
  int handler##_btf(u64* ctx) { return handler(ctx, true); } \
  SEC("raw_tp/" #name)                                       \
  int handler##_raw(u64* ctx) { return handler(ctx, false); }

/* Whether the waker's fields of a thread's interval are this interval's: a waker writes wake_ns
 * last, and nothing resets them at the switch-out (gprof_offcpu_pending). */
static __always_inline bool was_woken(const struct gprof_offcpu_pending* entry) {
  return entry->wake_ns >= entry->start_ns;
}

#include "bpf/short_waits.bpf.h"

/* Per-thread state --------------------------------------------------------------------------- */

/* Writes the count of a thread's quick page faults, counted up to `now` (0: read the clock, only
 * where there is a count), and forgets it. */
static __always_inline void flush_quick_faults(__u32 tid, __u64 now) {
  struct gprof_fault_state* quick = bpf_map_lookup_elem(&fault_pending, &tid);
  if (!quick || quick->quick_count == 0) return;
  if (!now) now = bpf_ktime_get_ns();
  struct gprof_event_count* rec = reserve(sizeof(*rec), GPROF_REC_EVENT_COUNT);
  if (rec) {
    rec->kind = GPROF_COUNT_QUICK_PAGE_FAULTS;
    rec->cpu = GPROF_ALL_CPUS;
    rec->pid = quick->pid;
    rec->tid = tid;
    rec->count = quick->quick_count;
    rec->total_ns = quick->quick_total_ns;
    rec->limit_ns = slow_fault_ns;
    rec->time_ns = now;
    submit(rec);
  }
  quick->quick_count = 0;
  quick->quick_total_ns = 0;
}

/* Drops whatever a tid has in the per-thread maps: at a thread's end, and at the start of a new
 * thread, so that a reused tid never inherits state that a missed event left behind. */
static __always_inline void forget_thread(__u32 tid) {
  bpf_map_delete_elem(&threads, &tid);
  bpf_map_delete_elem(&lock_pending, &tid);
  bpf_map_delete_elem(&fault_pending, &tid);
  bpf_map_delete_elem(&python_tstates, &tid);
}

/* A thread of the tree starts (or takes a new tid): a fresh entry in the threads map, which is
 * what makes it tracked on the scheduler and system call paths. */
/* A fresh entry, from read-only data: the 456 bytes are not taken from a program's stack. */
static const struct gprof_thread_state fresh_thread = {};

static __always_inline void start_thread(__u32 tid, __u32 tgid) {
  forget_thread(tid);
  if (bpf_map_update_elem(&threads, &tid, &fresh_thread, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_PENDING, GPROF_REC_OFFCPU);
    return;
  }
  /* The thread is not running yet (fork), or is the one running this (exec). */
  struct gprof_thread_state* entry = bpf_map_lookup_elem(&threads, &tid);
  if (!entry) return;
  entry->offcpu.pid = tgid;
  entry->syscall.pid = tgid;
}

/* The programs, by what they trace. */
#include "bpf/scheduler.bpf.h"
#include "bpf/processes.bpf.h"
#include "bpf/system_calls.bpf.h"
#include "bpf/kernel_locks.bpf.h"
#include "bpf/page_faults.bpf.h"
#include "bpf/signals.bpf.h"
