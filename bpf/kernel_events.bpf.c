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

/* The tree's last writes to each pipe or socket end (struct gprof_stream_writes), by the receiving
 * end (stream_end): what a read after a wait that no thread of the tree ended names as the
 * writer. LRU: an end nobody writes to any more ages out. */
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

/* Writes the count of a thread's quick page faults and forgets it. */
static __always_inline void flush_quick_faults(__u32 tid) {
  struct gprof_fault_state* quick = bpf_map_lookup_elem(&fault_pending, &tid);
  if (!quick || quick->quick_count == 0) return;
  struct gprof_event_count* rec = reserve(sizeof(*rec), GPROF_REC_EVENT_COUNT);
  if (rec) {
    rec->kind = GPROF_COUNT_QUICK_PAGE_FAULTS;
    rec->cpu = GPROF_ALL_CPUS;
    rec->pid = quick->pid;
    rec->tid = tid;
    rec->count = quick->quick_count;
    rec->total_ns = quick->quick_total_ns;
    rec->limit_ns = slow_fault_ns;
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

/* Scheduler ------------------------------------------------------------------------------------ */

static __always_inline void submit_offcpu(const struct gprof_offcpu* record) {
  struct gprof_offcpu* rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
  if (!rec) {
    count_lost(GPROF_LOST_RINGBUF, GPROF_REC_OFFCPU);
    return;
  }
  __builtin_memcpy(rec, record, sizeof(*rec));
  submit(rec);
}

/* Ends the off-CPU interval of `thread` (`tid`) at `now`, as it runs again on this CPU: counts it
 * when short (false), else fills `rec` (true), its stacks still to take when it lasted
 * stack_min_ns, none otherwise. */
static __always_inline bool end_offcpu(struct gprof_thread_state* thread, __u32 tid, __u64 now,
                                       struct gprof_offcpu* rec) {
  struct gprof_offcpu_pending* entry = &thread->offcpu;
  entry->open = 0;
  if (count_short_offcpu(thread, tid, now)) return false;
  rec->hdr.size = sizeof(*rec);
  rec->hdr.type = GPROF_REC_OFFCPU;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->kstack_id = entry->kstack_id;
  rec->state = entry->state;
  rec->cpu = bpf_get_smp_processor_id();
  rec->user_stack_id = entry->user_stack_id;
  if (was_woken(entry)) {
    rec->wake_ns = entry->wake_ns;
    rec->waker_pid = entry->waker_pid;
    rec->waker_tid = entry->waker_tid;
    rec->waker_kstack_id = entry->waker_kstack_id;
    __builtin_memcpy(rec->waker_comm, entry->waker_comm, GPROF_COMM_LEN);
    rec->waker_user_stack_id = entry->waker_user_stack_id;
    if (entry->woken_to_die) rec->flags |= GPROF_OFFCPU_WOKEN_TO_DIE;
    /* Woken by an interrupt, a kernel thread or a task outside the tree ("[irq]" or their comm;
     * the tree's wakers have none): if data woke it, its next read of a pipe or socket names the
     * writer. */
    if (entry->waker_comm[0] != 0) {
      thread->unexplained_wait_start_ns = entry->start_ns;
      thread->unexplained_wake_ns = entry->wake_ns;
    }
  } else {
    rec->waker_kstack_id = -1;
    rec->waker_user_stack_id = -1;
  }
  if (now - rec->start_ns < stack_min_ns) {
    rec->kstack_id = -ENODATA;
    rec->user_stack_id = -ENODATA;
  }
  return true;
}

static __always_inline int on_sched_switch(u64* ctx, bool btf) {
  /* (bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state);
   * prev is still current here. */
  bool preempt = (bool)ctx[0];
  struct task_struct* next = (struct task_struct*)ctx[2];
  __u32 prev_state = (__u32)ctx[3];
  /* Read once a thread of the tree is involved (most switches of a busy machine are not): one
   * time ends the switch-in's interval and starts the switch-out's. */
  __u64 now = 0;

  /* An interval left waiting for a sched_exit_tp that never came on this CPU (the programs were
   * being attached): with every switch checking, one that runs there always belongs to the switch
   * just before it. Written without stacks. */
  struct gprof_switched_in* slot = NULL;
  if (stacks_at_switch_in) {
    __u32 zero = 0;
    slot = bpf_map_lookup_elem(&switched_in, &zero);
    if (slot && slot->tid != 0) {
      slot->tid = 0;
      count_lost(GPROF_LOST_STACK, GPROF_REC_OFFCPU);
      submit_offcpu(&slot->record);
    }
  }

  /* Switch-out. A dying thread's last switch (TASK_DEAD) never comes back: no interval. */
  __u64 prev_pid_tgid = bpf_get_current_pid_tgid();
  __u32 prev_tid = (__u32)prev_pid_tgid;
  struct gprof_thread_state* prev = NULL;
  if (prev_tid != 0 && !(prev_state & TASK_DEAD)) prev = bpf_map_lookup_elem(&threads, &prev_tid);
  if (prev) {
    now = bpf_ktime_get_ns();
    struct gprof_offcpu_pending* entry = &prev->offcpu;
    if (in_window(now)) {
      entry->pid = prev_pid_tgid >> 32;
      /* A preempted task may have set a sleeping state it had not acted on yet: it is runnable. */
      entry->state = preempt ? 0 : prev_state;
      entry->kstack_id = stacks_at_switch_in ? -ENODATA : kernel_stack(ctx, GPROF_REC_OFFCPU);
      entry->user_stack_id = stacks_at_switch_in ? -ENODATA : user_stack(ctx, GPROF_REC_OFFCPU);
      entry->cpu = bpf_get_smp_processor_id();
      entry->syscall_nr = ~0u;
      entry->object = 0;
      entry->woken_to_die = 0;
      if (entry->state) note_blocking_call(entry);
      entry->open = 1;
      /* Last: a wakeup on another CPU that sees the interval started sees it whole (x86 keeps
       * stores in order; the barrier keeps the compiler from moving them). */
      asm volatile("" ::: "memory");
      entry->start_ns = now;
    } else if (entry->start_ns) {
      /* No interval: none for a wakeup outside the window to take, none for a switch-in to end
       * (one whose own switch-in went unseen ends here, unrecorded). */
      entry->open = 0;
      entry->start_ns = 0;
    }
  }

  /* Switch-in: an interval started at the thread's switch-out ends, even if its process left the
   * tree meanwhile (nothing leaks). */
  __u32 next_tid = btf ? next->pid : BPF_CORE_READ(next, pid);
  if (slot) slot->switched_in_tid = next_tid;
  if (next_tid == 0) return 0;
  struct gprof_thread_state* next_thread = bpf_map_lookup_elem(&threads, &next_tid);
  if (!next_thread || !next_thread->offcpu.open) return 0;
  if (!now) now = bpf_ktime_get_ns();
  struct gprof_offcpu rec = {};
  if (!end_offcpu(next_thread, next_tid, now, &rec)) return 0;
  if (now - rec.start_ns >= stack_min_ns && slot && (capture_stacks || capture_user_stacks)) {
    /* Its stacks come at its sched_exit_tp, next on this CPU. */
    __builtin_memcpy(&slot->record, &rec, sizeof(rec));
    slot->tid = next_tid;
    return 0;
  }
  submit_offcpu(&rec);
  return 0;
}
TYPED_TRACEPOINT(sched_switch, on_sched_switch)

/* The stacks of an off-CPU interval that just ended, in its thread's context at the end of
 * __schedule: its kernel stack below __schedule and its user registers are still those it
 * switched out with. */
static __always_inline void take_switch_in_stacks(void* ctx, struct gprof_offcpu* rec) {
  rec->kstack_id = kernel_stack(ctx, GPROF_REC_OFFCPU);
  rec->user_stack_id = user_stack(ctx, GPROF_REC_OFFCPU);
  python_stack(PY_SLOT_SCHED, GPROF_PY_STACK_WAITER, rec->tid, rec->start_ns);
}

/* The end of __schedule, in the context of the thread that now runs (stacks_at_switch_in): one
 * whose interval on this CPU just ended with its stacks due takes them here. Runs after every
 * __schedule of the machine: one per-CPU lookup for all others. Only after a switch: a slot
 * still waiting after a __schedule that picked the running thread again is from an earlier
 * switch, never this thread's stack now.
 *
 * Some switches reach no sched_switch program: on this project's VMs, a switch away from a thread
 * of the VM's agent (pid 1) fires no sched_switch tracepoint, for ftrace either. The
 * thread switched in then finds another thread named in the slot, and its interval, had it one,
 * would never end: it ends here, as sched_switch would have ended it, this being the same moment
 * in the same thread. Never nested with sched_switch on one CPU (this runs with preemption off,
 * sched_switch with interrupts off), so the short-wait slots it may take need no lock. */
static __always_inline int on_sched_exit(u64* ctx) {
  /* (bool is_switch); 6.16 passes the caller's address after it */
  if (!(bool)ctx[0]) return 0;
  __u32 zero = 0;
  struct gprof_switched_in* slot = bpf_map_lookup_elem(&switched_in, &zero);
  if (!slot) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  if (slot->switched_in_tid != tid) {
    struct gprof_thread_state* thread = tid ? bpf_map_lookup_elem(&threads, &tid) : NULL;
    if (!thread || !thread->offcpu.open) return 0;
    __u64 now = bpf_ktime_get_ns();
    struct gprof_offcpu rec = {};
    if (!end_offcpu(thread, tid, now, &rec)) return 0;
    if (now - rec.start_ns >= stack_min_ns && (capture_stacks || capture_user_stacks))
      take_switch_in_stacks(ctx, &rec);
    submit_offcpu(&rec);
    return 0;
  }
  if (slot->tid == 0 || slot->tid != tid) return 0;
  take_switch_in_stacks(ctx, &slot->record);
  submit_offcpu(&slot->record);
  slot->tid = 0;
  return 0;
}
TRACEPOINT(sched_exit_tp, on_sched_exit)

/* Runs in the waker's context (sched_wakeup often runs from an IPI on the wakee's CPU, where
 * current is the idle task). The last waking before the switch-in wins. */
static __always_inline int on_sched_waking(u64* ctx, bool btf) {
  /* (struct task_struct *p) */
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 tid = btf ? p->pid : BPF_CORE_READ(p, pid);
  struct gprof_thread_state* wakee = bpf_map_lookup_elem(&threads, &tid);
  if (!wakee || wakee->offcpu.start_ns == 0) return 0;
  struct gprof_offcpu_pending* entry = &wakee->offcpu;
  __u64 now = bpf_ktime_get_ns();
  /* A wakee still on its CPU has not slept long: it has not gone to sleep yet, or is switching
   * out, and start_ns may still be its last interval's (was_woken tells at the switch-in). The
   * kernel reads on_cpu next, so this costs no cache miss of its own. */
  bool on_cpu = btf ? p->on_cpu : BPF_CORE_READ(p, on_cpu);
  __u64 slept_ns = on_cpu ? 0 : now - entry->start_ns;
  bool short_wait = slept_ns < stack_min_ns;
  char comm[GPROF_COMM_LEN] = {};
  if (in_interrupt(ctx)) {
    entry->waker_pid = 0;
    entry->waker_tid = 0;
    __builtin_memcpy(comm, "[irq]", 6);
    entry->waker_user_stack_id = -ENOENT; /* the interrupted task's user code is not the waker */
  } else {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    entry->waker_pid = pid_tgid >> 32;
    entry->waker_tid = (__u32)pid_tgid;
    /* A waker outside the tree is named (pid, tid, comm), but its user code is its own business:
     * no user stack. One in the tree is named by the collector from its threads' start and rename
     * records (no name here: a hand-over's wakeup is on the critical path). One of the wakee's own
     * process is in the tree without a lookup. */
    note_long_wakeup(slept_ns);
    if (in_kernel_thread() || (entry->waker_pid != entry->pid && !is_tracked(entry->waker_pid))) {
      bpf_get_current_comm(comm, sizeof(comm)); /* NUL-padded by the helper */
      entry->waker_user_stack_id = -ENOENT;
    } else if (short_wait)
      entry->waker_user_stack_id = -ENODATA;
    else {
      entry->waker_user_stack_id = user_stack(ctx, GPROF_REC_OFFCPU);
      python_stack(PY_SLOT_SCHED, GPROF_PY_STACK_WAKER, tid, entry->start_ns);
      if (waker_copy_min_ns != 0 && slept_ns >= waker_copy_min_ns)
        native_stack(NATIVE_SLOT_SCHED, GPROF_NATIVE_WAKER, tid, entry->start_ns, now, true);
    }
  }
  __builtin_memcpy(entry->waker_comm, comm, GPROF_COMM_LEN);
  entry->waker_kstack_id = short_wait ? -ENODATA : kernel_stack(ctx, GPROF_REC_OFFCPU);
  /* SIGKILL pending: the process is ending (zap_other_threads at exit_group or exec, a fatal
   * signal's complete_signal, a core dump's zap_process set it, then wake the thread), and the
   * thread will die without returning from its wait: its waker released nothing. No
   * signal_generate fires for those. */
  __u64 pending = btf ? p->pending.signal.sig[0] : BPF_CORE_READ(p, pending.signal.sig[0]);
  if (pending & (1ull << (SIGKILL - 1))) entry->woken_to_die = 1;
  asm volatile("" ::: "memory"); /* wake_ns last: it makes the fields above valid */
  entry->wake_ns = now;
  return 0;
}
TYPED_TRACEPOINT(sched_waking, on_sched_waking)

/* Processes and threads -------------------------------------------------------------------------
 */

static __always_inline int on_sched_process_fork(u64* ctx) {
  /* (struct task_struct *parent, struct task_struct *child); runs for threads too */
  struct task_struct* parent = (struct task_struct*)ctx[0];
  struct task_struct* child = (struct task_struct*)ctx[1];
  __u32 parent_tgid = BPF_CORE_READ(parent, tgid);
  __u8 state = tree_state(parent_tgid);
  if (state == 0) return 0;
  __u32 child_tid = BPF_CORE_READ(child, pid);
  __u32 child_tgid = BPF_CORE_READ(child, tgid);
  if (child_tgid == parent_tgid) {
    if (state == TREE_RECORDED) start_thread(child_tid, child_tgid);
    return 0;
  }
  forget_thread(child_tid);
  if (child_tgid == self_tgid) return 0;
  /* A hidden process's child has its privileges: hidden too, until an exec drops them. */
  if (bpf_map_update_elem(&tracked, &child_tgid, &state, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_TRACKED, GPROF_REC_TASK_NEW);
    return 0;
  }
  if (state != TREE_RECORDED) return 0; /* no threads entry: nothing of it is recorded */
  start_thread(child_tid, child_tgid);
  python_fork(parent_tgid, child_tgid);
  return 0;
}
TRACEPOINT(sched_process_fork, on_sched_process_fork)

/* `task`'s id in its own PID namespace, the innermost (task->thread_pid->numbers[level]), and
 * that namespace's inode. */
static __always_inline __u32 namespace_id(struct task_struct* task, __u32* pid_namespace) {
  struct pid* pid = BPF_CORE_READ(task, thread_pid);
  if (!pid) return 0;
  unsigned int level = BPF_CORE_READ(pid, level);
  struct upid innermost = {};
  const char* numbers = (const char*)pid + bpf_core_field_offset(struct pid, numbers);
  if (bpf_probe_read_kernel(&innermost, sizeof(innermost),
                            numbers + (__u64)(level & 63) * sizeof(struct upid)) != 0) {
    return 0;
  }
  *pid_namespace = BPF_CORE_READ(innermost.ns, ns.inum);
  return (__u32)innermost.nr;
}

/* First wakeup of a new task: fires in the forking thread, after sched_process_fork. */
static __always_inline int on_sched_wakeup_new(u64* ctx) {
  /* (struct task_struct *p) */
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 tgid = BPF_CORE_READ(p, tgid);
  __u8 state = tree_state(tgid);
  if (state == 0) return 0;
  struct gprof_task_new* rec = reserve(sizeof(*rec), GPROF_REC_TASK_NEW);
  if (!rec) return 0;
  __u64 parent = bpf_get_current_pid_tgid();
  rec->pid = tgid;
  rec->tid = BPF_CORE_READ(p, pid);
  rec->parent_pid = parent >> 32;
  rec->parent_tid = (__u32)parent;
  rec->time_ns = bpf_ktime_get_ns();
  rec->parent_kstack_id =
      state == TREE_HIDDEN ? -ENODATA : kernel_stack(ctx, GPROF_REC_TASK_NEW);
  rec->flags = (rec->parent_pid == tgid ? GPROF_TASK_NEW_THREAD : 0) |
               (state == TREE_HIDDEN ? GPROF_TASK_NEW_SECURE : 0);
  BPF_CORE_READ_STR_INTO(&rec->comm, p, comm);
  rec->pid_namespace = 0;
  rec->ns_tid = namespace_id(p, &rec->pid_namespace);
  __u32 leader_namespace = 0;
  rec->ns_pid = namespace_id(BPF_CORE_READ(p, group_leader), &leader_namespace);
  rec->reserved = 0;
  submit(rec);
  return 0;
}
TRACEPOINT(sched_wakeup_new, on_sched_wakeup_new)

static __always_inline void emit_rename(__u32 pid, __u32 tid, const char* comm, __u32 is_exec,
                                        __u32 exec_old_tid) {
  struct gprof_task_rename* rec = reserve(sizeof(*rec), GPROF_REC_TASK_RENAME);
  if (!rec) return;
  rec->pid = pid;
  rec->tid = tid;
  rec->time_ns = bpf_ktime_get_ns();
  rec->is_exec = is_exec;
  rec->exec_old_tid = exec_old_tid;
  /* Exec passes the whole file name: the kernel keeps 15 bytes and a NUL, and so does this. */
  bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), comm);
  /* Not a forced wakeup even for Python stacks: the maps snapshot an exec's record leads to must
   * come after the dynamic loader has mapped the program's libraries, or their addresses stay
   * unnamed until the next snapshot. The loader looks for a Python interpreter again on its own
   * (python_stacks.cc). */
  submit(rec);
}

/* __set_task_comm: prctl(PR_SET_NAME), writes to /proc/.../comm (pthread_setname_np of another
 * thread: `task` is then not current), and exec. */
static __always_inline int on_task_rename(u64* ctx) {
  /* (struct task_struct *task, const char *comm): comm is the new name, not yet copied */
  struct task_struct* task = (struct task_struct*)ctx[0];
  const char* comm = (const char*)ctx[1];
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!is_tracked(tgid)) return 0;
  /* exec renames the task before sched_process_exec fires, which reports it with is_exec. */
  __u32 tid = BPF_CORE_READ(task, pid);
  struct task_struct* current = bpf_get_current_task_btf();
  if (tid == (__u32)bpf_get_current_pid_tgid() &&
      BPF_CORE_READ_BITFIELD_PROBED(current, in_execve)) {
    return 0;
  }
  emit_rename(tgid, tid, comm, 0, 0);
  return 0;
}
TRACEPOINT(task_rename, on_task_rename)

/* The tracked map's values, for updates (the exec program has no stack to spare for them). */
static const __u8 tree_recorded = TREE_RECORDED;
static const __u8 tree_hidden = TREE_HIDDEN;

/* An exec's gprof_exec_flags: a set-user-ID (or -group-ID, or file-capability) program is a
 * secure execution, AT_SECURE in its auxv. Not inlined: a small frame of its own. */
static __noinline __u32 exec_flags(struct linux_binprm* bprm) {
  __u32 flags = GPROF_EXEC_PROGRAM;
  if (bprm && BPF_CORE_READ_BITFIELD_PROBED(bprm, secureexec))
    flags |= GPROF_EXEC_SECURE | (hide_secure_exec ? GPROF_EXEC_HIDDEN : 0);
  return flags;
}

static __always_inline int on_sched_process_exec(u64* ctx) {
  /* (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) */
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 old_tid = (__u32)ctx[1];
  struct linux_binprm* bprm = (struct linux_binprm*)ctx[2];
  __u32 tgid = BPF_CORE_READ(p, tgid);
  __u8 was = tree_state(tgid);
  if (was == 0) return 0;
  __u32 tid = BPF_CORE_READ(p, pid);
  __u32 flags = exec_flags(bprm);
  __u8 state = (flags & GPROF_EXEC_HIDDEN) ? TREE_HIDDEN : TREE_RECORDED;
  bpf_map_update_elem(&tracked, &tgid, state == TREE_HIDDEN ? &tree_hidden : &tree_recorded,
                      BPF_ANY);
  emit_rename(tgid, tid, p->comm, flags, old_tid);
  /* Another program: the loader looks for its interpreter anew. */
  bpf_map_delete_elem(&python_targets, &tgid);
  bpf_map_delete_elem(&python_tstates, &tid);
  /* A thread other than the leader took the leader's tid (de_thread): its old tid is free for
   * reuse from now on, and what it counted belongs to it. */
  if (old_tid != tid) {
    flush_quick_faults(old_tid);
    forget_thread(old_tid);
  }
  /* The leader's entry went with the leader's exit; a hidden process has none. */
  if (old_tid != tid || was != state) start_thread(tid, tgid);
  /* Its threads entry is what the scheduler and system call paths record by: none from now (the
   * page faults it only counted since its last record go with it). */
  if (state == TREE_HIDDEN) bpf_map_delete_elem(&threads, &tid);
  return 0;
}
TRACEPOINT(sched_process_exec, on_sched_process_exec)

static __always_inline int on_sched_process_exit(u64* ctx) {
  /* (struct task_struct *p, bool group_dead); p is current */
  struct task_struct* p = (struct task_struct*)ctx[0];
  bool group_dead = (bool)ctx[1];
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  if (tree_state(tgid) == 0) return 0;
  struct gprof_task_exit* rec = reserve(sizeof(*rec), GPROF_REC_TASK_EXIT);
  if (rec) {
    rec->pid = tgid;
    rec->tid = tid;
    rec->time_ns = bpf_ktime_get_ns();
    rec->exit_code = BPF_CORE_READ(p, exit_code);
    rec->flags = group_dead ? GPROF_TASK_EXIT_PROCESS : 0;
    submit(rec);
  }
  flush_quick_faults(tid);
  /* The thread is running, so it has no off-CPU entry, and the other entries end before it gets
   * here; forgetting them anyway keeps a missed event from leaking to a reused tid. */
  forget_thread(tid);
  /* The last thread of the process: the tgid may be reused by an unrelated process. */
  if (group_dead) {
    bpf_map_delete_elem(&tracked, &tgid);
    bpf_map_delete_elem(&python_targets, &tgid);
  }
  return 0;
}
TRACEPOINT(sched_process_exit, on_sched_process_exit)

/* System calls ------------------------------------------------------------------------------------
 */

/* The calls recorded at their return: kept to a switch on the number, the first thing both
 * syscall programs do, since they run for every system call of the machine. */
static __always_inline bool recorded_syscall(long nr) {
  switch (nr) {
    case NR_POLL:
    case NR_MMAP:
    case NR_MPROTECT:
    case NR_MUNMAP:
    case NR_IOCTL:
    case NR_SELECT:
    case NR_MREMAP:
    case NR_MADVISE:
    case NR_FUTEX:
    case NR_EPOLL_WAIT:
    case NR_PSELECT6:
    case NR_PPOLL:
    case NR_EPOLL_PWAIT:
    case NR_EPOLL_PWAIT2:
    case NR_FUTEX_WAITV:
    case NR_FUTEX_WAKE:
    case NR_FUTEX_WAIT:
    case NR_FUTEX_REQUEUE:
    case NR_READ:
    case NR_WRITE:
    case NR_READV:
    case NR_WRITEV:
    case NR_SENDTO:
    case NR_RECVFROM:
    case NR_SENDMSG:
    case NR_RECVMSG:
    case NR_RECVMMSG:
    case NR_SENDMMSG:
      return true;
    default:
      return false;
  }
}

static __always_inline bool is_stream_write(long nr) {
  return nr == NR_WRITE || nr == NR_WRITEV || nr == NR_SENDTO || nr == NR_SENDMSG ||
         nr == NR_SENDMMSG;
}

static __always_inline bool is_stream_read(long nr) {
  return nr == NR_READ || nr == NR_READV || nr == NR_RECVFROM || nr == NR_RECVMSG ||
         nr == NR_RECVMMSG;
}

static __always_inline bool is_memory_syscall(long nr) {
  return nr == NR_MMAP || nr == NR_MPROTECT || nr == NR_MUNMAP || nr == NR_MREMAP ||
         nr == NR_MADVISE;
}

static __always_inline bool is_futex_syscall(long nr) {
  return nr == NR_FUTEX || nr == NR_FUTEX_WAKE || nr == NR_FUTEX_WAIT || nr == NR_FUTEX_REQUEUE;
}

/* A struct __kernel_timespec in user memory as nanoseconds: -1 without one, -2 when unreadable
 * (a probe cannot fault a non-resident page in). */
static __always_inline __s64 read_timeout(__u64 user_timespec) {
  if (!user_timespec) return -1;
  struct {
    __s64 tv_sec;
    __s64 tv_nsec;
  } ts;
  if (bpf_probe_read_user(&ts, sizeof(ts), (const void*)user_timespec) != 0) return -2;
  return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static __always_inline bool futex_has_timeout(__u32 op) {
  __u32 cmd = op & FUTEX_CMD_MASK;
  return cmd == FUTEX_WAIT || cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2 ||
         cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_WAIT_REQUEUE_PI;
}

/* struct futex_waitv (include/uapi/linux/futex.h), as futex_waitv and futex_requeue take it. */
struct user_futex_waitv {
  __u64 val;
  __u64 uaddr;
  __u32 flags;
  __u32 reserved;
};

/* The futex family in futex(2) terms (the mapping of the futex2 calls is documented at
 * GPROF_FUTEX_FUTEX2 in kernel_events.h). */
static __always_inline void futex_call(struct gprof_syscall_pending* entry) {
  const __u64* args = entry->args;
  entry->futex.timeout_ns = -1;
  if (entry->nr == NR_FUTEX) {
    /* futex(uaddr, op, val, timeout or val2, uaddr2, val3) */
    entry->futex.uaddr = args[0];
    entry->futex.op = (__u32)args[1];
    entry->futex.val = (__u32)args[2];
    entry->futex.uaddr2 = args[4];
    entry->futex.val3 = (__u32)args[5];
    if (futex_has_timeout(entry->futex.op)) entry->futex.timeout_ns = read_timeout(args[3]);
    /* Read now, a lock's holder is named even if nobody ever wakes this wait (a deadlock, a
       timeout). glibc's mutex sleeps on its word at 2 ("locked, with waiters"), the holder's tid
       in __owner 8 bytes on. Its rwlock sleeps at 3 (waiting, futex used): a reader on
       __wrphase_futex, the writer's tid (__cur_writer) 16 bytes on; a writer on
       __writers_futex, __cur_writer 12 bytes on, where the reader's word has padding (0). */
    __u32 command = entry->futex.op & FUTEX_CMD_MASK;
    if (command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET) {
      __u32 owner[2] = {0, 0};
      if (entry->futex.val == 2) {
        if (bpf_probe_read_user(owner, sizeof(owner[0]), (const void*)(args[0] + 8)) == 0)
          entry->futex.owner_tid = owner[0];
      } else if (entry->futex.val == 3) {
        if (bpf_probe_read_user(owner, sizeof(owner), (const void*)(args[0] + 12)) == 0)
          entry->futex.owner_tid = owner[0] != 0 ? owner[0] : owner[1];
      }
    }
    return;
  }
  entry->futex.flags = GPROF_FUTEX_FUTEX2;
  if (entry->nr == NR_FUTEX_WAKE) {
    /* futex_wake(uaddr, mask, nr, flags) */
    entry->futex.uaddr = args[0];
    entry->futex.op = FUTEX_WAKE_BITSET | (args[3] & FUTEX2_PRIVATE);
    entry->futex.val = (__u32)args[2];
    entry->futex.val3 = (__u32)args[1];
  } else if (entry->nr == NR_FUTEX_WAIT) {
    /* futex_wait(uaddr, val, mask, flags, timeout, clockid) */
    entry->futex.uaddr = args[0];
    entry->futex.op = FUTEX_WAIT_BITSET | (args[3] & FUTEX2_PRIVATE);
    if (args[4] && args[5] == CLOCK_REALTIME_ID) entry->futex.op |= FUTEX_CLOCK_REALTIME;
    entry->futex.val = (__u32)args[1];
    entry->futex.val3 = (__u32)args[2];
    entry->futex.timeout_ns = read_timeout(args[4]);
  } else {
    /* futex_requeue(waiters[2], flags, nr_wake, nr_requeue): from waiters[0] to waiters[1] */
    struct user_futex_waitv waiters[2];
    entry->futex.op = FUTEX_CMP_REQUEUE;
    entry->futex.val = (__u32)args[2];
    if (bpf_probe_read_user(waiters, sizeof(waiters), (const void*)args[0]) == 0) {
      entry->futex.uaddr = waiters[0].uaddr;
      entry->futex.uaddr2 = waiters[1].uaddr;
      entry->futex.val3 = (__u32)waiters[0].val;
      entry->futex.op |= waiters[0].flags & FUTEX2_PRIVATE;
    }
  }
}

/* futex_waitv(waiters, nr_futexes, flags, timeout, clockid): the first GPROF_WAITV_MAX addresses.
 */
static __always_inline void futex_waitv_call(struct gprof_syscall_pending* entry) {
  const __u64* args = entry->args;
  entry->waitv.count = (__u32)args[1];
  entry->waitv.timeout_ns = read_timeout(args[3]);
  entry->waitv.flags = args[3] && args[4] == CLOCK_REALTIME_ID ? FUTEX_CLOCK_REALTIME : 0;
  const struct user_futex_waitv* waiters = (const struct user_futex_waitv*)args[0];
  for (__u32 i = 0; i < GPROF_WAITV_MAX; i++) {
    if (i >= entry->waitv.count) break;
    __u64 uaddr = 0;
    if (bpf_probe_read_user(&uaddr, sizeof(uaddr), &waiters[i].uaddr) != 0) break;
    entry->waitv.uaddr[i] = uaddr;
  }
}

/* The current task's open file `fd`, or NULL; found as the kernel finds it:
 * task->files->fdt->fd[fd], bounded by max_fds. */
static __always_inline struct file* fd_file(__s32 fd) {
  if (fd < 0) return NULL;
  struct task_struct* task = bpf_get_current_task_btf();
  struct fdtable* fdt = BPF_CORE_READ(task, files, fdt);
  if (!fdt || (__u32)fd >= BPF_CORE_READ(fdt, max_fds)) return NULL;
  struct file** files = BPF_CORE_READ(fdt, fd);
  struct file* file = NULL;
  if (bpf_probe_read_kernel(&file, sizeof(file), &files[fd]) != 0) return NULL;
  return file;
}

/* The name of the file `fd` (its dentry's: no directory), cut to fit and NUL-padded; all NUL when
 * there is none. */
static __always_inline void fd_file_name(__s32 fd, char name[GPROF_FILE_NAME_LEN]) {
  __builtin_memset(name, 0, GPROF_FILE_NAME_LEN);
  struct file* file = fd_file(fd);
  if (!file) return;
  const unsigned char* file_name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
  if (bpf_probe_read_kernel_str(name, GPROF_FILE_NAME_LEN, file_name) < 0)
    __builtin_memset(name, 0, GPROF_FILE_NAME_LEN);
}

/* Whether the current task's `fd` is a character device whose name starts with device_prefix.
 * Fills `name` (zeroed first: it is copied into a record). */
static __always_inline bool device_fd(__s32 fd, char name[GPROF_COMM_LEN]) {
  __builtin_memset(name, 0, GPROF_COMM_LEN);
  struct file* file = fd_file(fd);
  if (!file) return false;
  if ((BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFCHR) return false;
  const unsigned char* file_name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
  if (bpf_probe_read_kernel_str(name, GPROF_COMM_LEN, file_name) < 0) return false;
  for (__u32 i = 0; i < GPROF_COMM_LEN; i++) {
    if (i >= device_prefix_len) break;
    if (name[i] != device_prefix[i]) return false;
  }
  return true;
}

/* Pipes and sockets ---------------------------------------------------------------------------- */

/* The receiving end of the current task's pipe or socket `fd`, as a stream_writes key: the end
 * it reads (`reader`), or the one its writes reach; 0 when `fd` is neither (or a socket with no
 * peer). A pipe's two ends share its pipe_inode_info; a Unix socket's writes reach its peer; a
 * TCP or UDP socket is known by its addresses and ports, which its peer sees swapped: the key
 * hashes (receiver, sender) in that order, so both sides find one key. */
static __always_inline __u64 stream_end(__s32 fd, bool reader, __u32* kind) {
  struct file* file = fd_file(fd);
  if (!file) return 0;
  __u32 mode = BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT;
  if (mode == S_IFIFO) {
    *kind = GPROF_STREAM_PIPE;
    return (__u64)BPF_CORE_READ(file, private_data);
  }
  if (mode != S_IFSOCK) return 0;
  struct socket* sock = BPF_CORE_READ(file, private_data);
  struct sock* sk = sock ? BPF_CORE_READ(sock, sk) : NULL;
  if (!sk) return 0;
  __u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
  if (family == AF_UNIX) {
    *kind = GPROF_STREAM_UNIX;
    return reader ? (__u64)sk : (__u64)BPF_CORE_READ((struct unix_sock*)sk, peer);
  }
  if (family != AF_INET && family != AF_INET6) return 0;
  *kind = GPROF_STREAM_INET;
  __u64 local = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr) |
                (__u64)BPF_CORE_READ(sk, __sk_common.skc_num) << 32;
  __u64 remote = BPF_CORE_READ(sk, __sk_common.skc_daddr) |
                 (__u64)bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport)) << 32;
  if (family == AF_INET6 && bpf_core_field_exists(sk->__sk_common.skc_v6_daddr)) {
    __u64 words[2] = {};
    BPF_CORE_READ_INTO(&words, sk, __sk_common.skc_v6_rcv_saddr);
    local ^= words[0] * 0x9e3779b97f4a7c15ull ^ words[1];
    BPF_CORE_READ_INTO(&words, sk, __sk_common.skc_v6_daddr);
    remote ^= words[0] * 0x9e3779b97f4a7c15ull ^ words[1];
  }
  __u64 receiver = reader ? local : remote, sender = reader ? remote : local;
  return (receiver * 0xc2b2ae3d27d4eb4full ^ sender) | 1;
}

/* A write of a thread of the tree to a pipe or socket: the last writer of the end it reaches. */
static __always_inline void note_stream_write(__s32 fd, __u32 pid, __u32 tid, __u64 now) {
  __u32 kind = 0;
  __u64 end = stream_end(fd, false, &kind);
  if (end == 0) return;
  struct gprof_stream_writes* writes = bpf_map_lookup_elem(&stream_writes, &end);
  if (writes) {
    writes->last[3] = writes->last[2];
    writes->last[2] = writes->last[1];
    writes->last[1] = writes->last[0];
    writes->last[0].time_ns = now;
    writes->last[0].pid = pid;
    writes->last[0].tid = tid;
    return;
  }
  struct gprof_stream_writes fresh = {};
  fresh.last[0].time_ns = now;
  fresh.last[0].pid = pid;
  fresh.last[0].tid = tid;
  bpf_map_update_elem(&stream_writes, &end, &fresh, BPF_ANY);
}

/* The return of a read: the first that got data after a wait nobody of the tree ended names the
 * tree's last writers to the end it read, when it is a pipe or socket. */
static __always_inline void stream_read_done(struct gprof_thread_state* thread,
                                             const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret) {
  if (thread->unexplained_wake_ns == 0 || ret <= 0) return;
  __u64 wait_start_ns = thread->unexplained_wait_start_ns;
  __u64 wake_ns = thread->unexplained_wake_ns;
  thread->unexplained_wake_ns = 0;
  __u32 kind = 0;
  __u64 end = stream_end((__s32)entry->args[0], true, &kind);
  if (end == 0) return;
  struct gprof_stream_writes* writes = bpf_map_lookup_elem(&stream_writes, &end);
  if (!writes) return;
  struct gprof_stream_read* rec = reserve(sizeof(*rec), GPROF_REC_STREAM_READ);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->wait_start_ns = wait_start_ns;
  rec->wake_ns = wake_ns;
  rec->ret = ret;
  rec->syscall_nr = entry->nr;
  rec->kind = kind;
  rec->fd = (__s32)entry->args[0];
  rec->reserved = 0;
  __builtin_memcpy(rec->writers, writes->last, sizeof(rec->writers));
  submit(rec);
}

/* How many fds of a poll or select call are looked at for a device: a GPU driver's poll is on a
 * few fds, and the cost of a call must stay bounded. */
#define DEVICE_SCAN_FDS 16
#define SELECT_SCAN_WORDS 16 /* fd_set words: fds below 1024, FD_SETSIZE */

/* The state of a scan of a poll or select call's fds. Plain numbers only (the call's arguments as
 * it passed them, user addresses read with probe reads): a global function sees its memory as
 * numbers. */
struct fd_scan {
  __u64 count;   /* poll: nfds; select: nfds (fds below it) */
  __u64 sets[3]; /* poll: the pollfd array in sets[0]; select: readfds, writefds, exceptfds */
  __u32 checked; /* fds looked up so far, at most DEVICE_SCAN_FDS */
  __s32 found_fd; /* the first fd on a device of interest, or -1 */
  char name[GPROF_COMM_LEN];
};

/* One struct pollfd of poll(fds, nfds, timeout) or ppoll(fds, nfds, tmo_p, sigmask, size): a
 * bpf_loop step, so that the verifier checks one step instead of every iteration. */
static long scan_pollfd(__u32 index, void* context) {
  struct fd_scan* scan = context;
  const struct {
    __s32 fd;
    __s16 events;
    __s16 revents;
  }* fds = (const void*)scan->sets[0];
  __s32 fd = -1;
  if (bpf_probe_read_user(&fd, sizeof(fd), &fds[index].fd) != 0) return 1;
  if (!device_fd(fd, scan->name)) return 0;
  scan->found_fd = fd;
  return 1;
}

/* The index of the one bit set in `bit`. */
static __always_inline __u32 bit_index(__u64 bit) {
  __u32 index = 0;
  if (bit & 0xffffffff00000000ull) index += 32;
  if (bit & 0xffff0000ffff0000ull) index += 16;
  if (bit & 0xff00ff00ff00ff00ull) index += 8;
  if (bit & 0xf0f0f0f0f0f0f0f0ull) index += 4;
  if (bit & 0xccccccccccccccccull) index += 2;
  if (bit & 0xaaaaaaaaaaaaaaaaull) index += 1;
  return index;
}

/* One word of the fd sets of select(nfds, readfds, writefds, exceptfds, timeout) or pselect6 (the
 * same, and a sigmask): the fds set in any of the three; 1 to end the scan. A global function,
 * verified once on its own: inlined in a bpf_loop step, its loop over the word's fds made the
 * verifier follow every count of fds checked through every step, past its million instructions
 * on Linux 6.18 builds of December 2026. */
__noinline int scan_select_word(struct fd_scan* scan, __u32 word) {
  if (!scan || word >= SELECT_SCAN_WORDS) return 1;
  __u64 bits = 0;
  for (__u32 set = 0; set < 3; set++) {
    const __u64* fds = (const __u64*)scan->sets[set];
    __u64 part = 0;
    if (fds && bpf_probe_read_user(&part, sizeof(part), &fds[word]) == 0) bits |= part;
  }
  __u64 below = scan->count - word * 64;
  if (below < 64) bits &= (1ull << below) - 1;
  for (__u32 i = 0; i < DEVICE_SCAN_FDS; i++) {
    if (!bits) return 0;
    if (scan->checked >= DEVICE_SCAN_FDS) return 1;
    __u64 lowest = bits & -bits;
    bits ^= lowest;
    scan->checked++;
    __s32 fd = (__s32)(word * 64 + bit_index(lowest));
    if (device_fd(fd, scan->name)) {
      scan->found_fd = fd;
      return 1;
    }
  }
  return 0;
}

static long scan_fdset_word(__u32 word, void* context) {
  return scan_select_word(context, word) ? 1 : 0; /* a step returns 0 or 1, as the verifier checks */
}

/* Whether a poll or select call waits on a device of interest: fills the device part. */
static __always_inline bool device_in_fds(struct gprof_syscall_pending* entry, bool select) {
  struct fd_scan scan = {};
  scan.found_fd = -1;
  if (select) {
    scan.count = entry->args[0];
    scan.sets[0] = entry->args[1];
    scan.sets[1] = entry->args[2];
    scan.sets[2] = entry->args[3];
    __u64 words = (scan.count + 63) / 64;
    bpf_loop(words < SELECT_SCAN_WORDS ? words : SELECT_SCAN_WORDS, scan_fdset_word, &scan, 0);
  } else {
    scan.count = entry->args[1];
    scan.sets[0] = entry->args[0];
    bpf_loop(scan.count < DEVICE_SCAN_FDS ? scan.count : DEVICE_SCAN_FDS, scan_pollfd, &scan, 0);
  }
  if (scan.found_fd < 0) return false;
  entry->device.fd = scan.found_fd;
  __builtin_memcpy(entry->device.name, scan.name, GPROF_COMM_LEN);
  return true;
}

/* Fills the device part of a device wait; false when the call is not one to record. */
static __always_inline bool device_call(struct gprof_syscall_pending* entry) {
  switch (entry->nr) {
    case NR_IOCTL:
      entry->device.kind = GPROF_DEVICE_IOCTL;
      entry->device.fd = (__s32)entry->args[0];
      return device_fd(entry->device.fd, entry->device.name);
    case NR_POLL:
    case NR_PPOLL:
      entry->device.kind = GPROF_DEVICE_POLL;
      return device_in_fds(entry, false);
    case NR_SELECT:
    case NR_PSELECT6:
      entry->device.kind = GPROF_DEVICE_POLL;
      return device_in_fds(entry, true);
    case NR_EPOLL_WAIT:
    case NR_EPOLL_PWAIT:
    case NR_EPOLL_PWAIT2:
      entry->device.kind = GPROF_DEVICE_EPOLL;
      entry->device.fd = (__s32)entry->args[0];
      return true;
    default:
      return false;
  }
}

static __always_inline int on_sys_enter(u64* ctx, bool btf) {
  /* (struct pt_regs *regs, long id) */
  long nr = (long)ctx[1];
  if (!recorded_syscall(nr)) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  struct gprof_thread_state* thread = bpf_map_lookup_elem(&threads, &tid);
  if (!thread) return 0;
  __u64 start_ns = bpf_ktime_get_ns();
  if (!in_window(start_ns)) return 0;

  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  if (is_stream_write(nr) || is_stream_read(nr)) {
    __s32 fd = btf ? (__s32)regs->di : (__s32)BPF_CORE_READ(regs, di);
    if (is_stream_write(nr)) {
      note_stream_write(fd, pid_tgid >> 32, tid, start_ns);
      return 0;
    }
    /* A read: its fd and start, for its return (nothing else of the entry is read then). */
    struct gprof_syscall_pending* entry = &thread->syscall;
    entry->pid = pid_tgid >> 32;
    entry->nr = (__u32)nr;
    entry->args[0] = (__u64)fd;
    entry->device.kind = 0;
    entry->start_ns = start_ns;
    return 0;
  }
  /* Written in place; start_ns last, once the call is known to be one to record (a system call's
   * programs run in its own thread: nothing else writes the entry meanwhile). All of it, the
   * union's every byte included. */
  struct gprof_syscall_pending* entry = &thread->syscall;
  __builtin_memset(entry, 0, sizeof(*entry));
  entry->pid = pid_tgid >> 32;
  entry->nr = (__u32)nr;
  /* The x86_64 system call convention: di, si, dx, r10, r8, r9. */
  if (btf) {
    entry->args[0] = regs->di;
    entry->args[1] = regs->si;
    entry->args[2] = regs->dx;
    entry->args[3] = regs->r10;
    entry->args[4] = regs->r8;
    entry->args[5] = regs->r9;
  } else {
    entry->args[0] = BPF_CORE_READ(regs, di);
    entry->args[1] = BPF_CORE_READ(regs, si);
    entry->args[2] = BPF_CORE_READ(regs, dx);
    entry->args[3] = BPF_CORE_READ(regs, r10);
    entry->args[4] = BPF_CORE_READ(regs, r8);
    entry->args[5] = BPF_CORE_READ(regs, r9);
  }

  if (is_futex_syscall(nr)) {
    futex_call(entry);
  } else if (nr == NR_FUTEX_WAITV) {
    futex_waitv_call(entry);
  } else if (nr == NR_MMAP) {
    /* Every mmap is a memory map, with the name of the file it maps; one of a device file is a
     * device wait as well. */
    if (!(entry->args[3] & MAP_ANONYMOUS)) {
      fd_file_name((__s32)entry->args[4], entry->device.file);
      if (device_fd((__s32)entry->args[4], entry->device.name)) {
        entry->device.kind = GPROF_DEVICE_MMAP;
        entry->device.fd = (__s32)entry->args[4];
      }
    }
  } else if (is_memory_syscall(nr)) {
  } else if (!device_call(entry)) {
    return 0;
  }
  entry->start_ns = start_ns;
  return 0;
}
TYPED_TRACEPOINT(sys_enter, on_sys_enter)

static __always_inline void emit_futex(const struct gprof_syscall_pending* entry, __u32 tid,
                                       __u64 now, long ret) {
  struct gprof_futex* rec = reserve(sizeof(*rec), GPROF_REC_FUTEX);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->uaddr = entry->futex.uaddr;
  rec->uaddr2 = entry->futex.uaddr2;
  rec->op = entry->futex.op;
  rec->val = entry->futex.val;
  rec->val3 = entry->futex.val3;
  rec->flags = entry->futex.flags;
  rec->timeout_ns = entry->futex.timeout_ns;
  rec->ret = ret;
  rec->owner_tid = entry->futex.owner_tid;
  rec->reserved = 0;
  submit(rec);
}

static __always_inline void emit_futex_waitv(const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret) {
  struct gprof_futex_waitv* rec = reserve(sizeof(*rec), GPROF_REC_FUTEX_WAITV);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->count = entry->waitv.count;
  rec->flags = entry->waitv.flags;
  rec->timeout_ns = entry->waitv.timeout_ns;
  rec->ret = ret;
  __builtin_memcpy(rec->uaddr, entry->waitv.uaddr, sizeof(rec->uaddr));
  submit(rec);
}

static __always_inline void emit_device_wait(const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret) {
  struct gprof_device_wait* rec = reserve(sizeof(*rec), GPROF_REC_DEVICE_WAIT);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->kind = entry->device.kind;
  rec->fd = entry->device.fd;
  /* ioctl: the request; poll: nfds; mmap: the length; epoll: maxevents */
  rec->request = entry->device.kind == GPROF_DEVICE_EPOLL ? entry->args[2] : entry->args[1];
  if (entry->nr == NR_SELECT || entry->nr == NR_PSELECT6) rec->request = entry->args[0];
  rec->ret = ret;
  __builtin_memcpy(rec->device, entry->device.name, GPROF_COMM_LEN);
  submit(rec);
}

static __always_inline void emit_memory_map(const struct gprof_syscall_pending* entry, __u32 tid,
                                            __u64 now, long ret) {
  struct gprof_memory_map* rec = reserve(sizeof(*rec), GPROF_REC_MEMORY_MAP);
  if (!rec) return;
  const __u64* args = entry->args;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->syscall_nr = entry->nr;
  rec->address = args[0];
  rec->length = args[1];
  rec->ret = ret;
  switch (entry->nr) {
    case NR_MMAP: /* (addr, length, prot, flags, fd, offset) */
      if (ret >= 0 || ret < -4095) rec->address = (__u64)ret;
      rec->prot = (__u32)args[2];
      rec->flags = args[3];
      break;
    case NR_MPROTECT: /* (addr, length, prot) */
    case NR_MADVISE:  /* (addr, length, advice) */
      rec->prot = (__u32)args[2];
      break;
    case NR_MREMAP: /* (old_address, old_size, new_size, flags, new_address) */
      rec->flags = args[2];
      rec->prot = (__u32)args[3];
      break;
    default: /* munmap (addr, length) */
      break;
  }
  /* All NUL but for an mmap of a file: the entry starts zeroed, and only mmap fills it. */
  __builtin_memcpy(rec->file, entry->device.file, sizeof(rec->file));
  submit(rec);
}

static __always_inline int on_sys_exit(u64* ctx, bool btf) {
  /* (struct pt_regs *regs, long ret); the syscall number is in orig_ax. This runs at the end of
   * every system call of the machine: the number is a plain load where the type allows. */
  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  long nr = btf ? (long)regs->orig_ax : (long)BPF_CORE_READ(regs, orig_ax);
  if (!recorded_syscall(nr)) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct gprof_thread_state* thread = bpf_map_lookup_elem(&threads, &tid);
  if (!thread || thread->syscall.start_ns == 0) return 0;
  struct gprof_syscall_pending* entry = &thread->syscall;
  /* An entry of another call: its return was missed (it cannot happen today; no record). */
  if (entry->nr == nr) {
    long ret = (long)ctx[1];
    __u64 now = bpf_ktime_get_ns();
    if (is_stream_read(nr)) {
      stream_read_done(thread, entry, tid, now, ret);
    } else if (is_futex_syscall(nr)) {
      if (!count_short_futex(thread, tid, now)) emit_futex(entry, tid, now, ret);
    } else if (nr == NR_FUTEX_WAITV) {
      emit_futex_waitv(entry, tid, now, ret);
    } else {
      if (is_memory_syscall(nr)) emit_memory_map(entry, tid, now, ret);
      if (entry->device.kind != 0) emit_device_wait(entry, tid, now, ret);
    }
  }
  entry->start_ns = 0;
  return 0;
}
TYPED_TRACEPOINT(sys_exit, on_sys_exit)

/* Kernel locks --------------------------------------------------------------------------------- */

/* The task that holds `lock` as the lock's owner word says (a task pointer with flag bits in its
 * low bits), or NULL where the kind of lock keeps no owner. An rwsem held for reading keeps the
 * last reader to take it (*reader_owned is then set): a hint, one holder among possibly several,
 * which may have released it since. */
static __always_inline struct task_struct* lock_owner(void* lock, __u32 flags, bool* reader_owned) {
  __u64 owner = 0;
  *reader_owned = false;
  if (flags & LCB_F_MUTEX) {
    if (bpf_core_field_exists(struct mutex, owner)) { /* not on PREEMPT_RT */
      owner = BPF_CORE_READ((struct mutex*)lock, owner.counter) & ~(__u64)MUTEX_FLAGS;
    }
  } else if (flags & LCB_F_RT) {
    if (!(flags & (LCB_F_READ | LCB_F_WRITE))) { /* rwbase_rt locks keep readers uncounted */
      owner =
          (__u64)BPF_CORE_READ((struct rt_mutex_base*)lock, owner) & ~(__u64)RT_MUTEX_HAS_WAITERS;
    }
  } else if ((flags & (LCB_F_READ | LCB_F_WRITE)) && !(flags & LCB_F_PERCPU)) {
    __u64 word = BPF_CORE_READ((struct rw_semaphore*)lock, owner.counter);
    *reader_owned = (word & RWSEM_READER_OWNED) != 0;
    owner = word & ~(__u64)RWSEM_OWNER_FLAGS_MASK;
  }
  return (struct task_struct*)owner;
}

/* The thread goes to sleep on the lock: who holds it, and where the thread waits. */
static __always_inline void note_lock_sleep(void* ctx, struct lock_pending* entry, void* lock,
                                            __u32 flags, struct mm_struct* mm) {
  entry->flags = (entry->flags & GPROF_LOCK_MMAP_LOCK) | flags;
  entry->owner_pid = 0;
  entry->owner_tid = 0;
  __builtin_memset(entry->owner_comm, 0, GPROF_COMM_LEN);
  bool reader_owned = false;
  struct task_struct* owner = lock_owner(lock, flags, &reader_owned);
  if (reader_owned) {
    entry->flags |= GPROF_LOCK_READER_OWNED;
    /* A reader hint is named only while that task lives, and for an mmap_lock only if it is a
     * thread of the same address space (a downgraded munmap, typically). */
    if (owner && (BPF_CORE_READ(owner, exit_state) != 0 ||
                  ((entry->flags & GPROF_LOCK_MMAP_LOCK) && BPF_CORE_READ(owner, mm) != mm))) {
      owner = NULL;
    }
  }
  if (owner) {
    entry->owner_tid = BPF_CORE_READ(owner, pid);
    entry->owner_pid = BPF_CORE_READ(owner, tgid);
    BPF_CORE_READ_STR_INTO(&entry->owner_comm, owner, comm);
  }
  entry->kstack_id = kernel_stack(ctx, GPROF_REC_LOCK_WAIT);
  entry->user_stack_id = user_stack(ctx, GPROF_REC_LOCK_WAIT);
}

/* A mutex first spins (contention_begin with LCB_F_MUTEX | LCB_F_SPIN), and only if that fails
 * goes to sleep (a second contention_begin with LCB_F_MUTEX): the wait starts at the first and is
 * recorded only if the second came. Other spinning locks (spinlocks, rwlocks) are many and short:
 * only counted, per CPU. rwsem, rt_mutex, percpu-rwsem and semaphore waits sleep right away. */
static __always_inline int on_contention_begin(u64* ctx) {
  /* (void *lock, unsigned int flags) */
  void* lock = (void*)ctx[0];
  __u32 flags = (__u32)ctx[1];
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  if (!is_tracked(tgid)) return 0;
  __u64 now = bpf_ktime_get_ns();
  bool spinning = (flags & LCB_F_SPIN) != 0;
  if (spinning && !(flags & LCB_F_MUTEX)) {
    if (in_window(now)) count_in(&counts, GPROF_COUNT_SPIN_CONTENTION);
    return 0;
  }
  struct mm_struct* mm = BPF_CORE_READ((struct task_struct*)bpf_get_current_task_btf(), mm);
  struct lock_pending* entry = bpf_map_lookup_elem(&lock_pending, &tid);
  if (entry && entry->start_ns != 0 && entry->lock == (__u64)lock) {
    if (!spinning) note_lock_sleep(ctx, entry, lock, flags, mm); /* the mutex stopped spinning */
    return 0;
  }

  if (!in_window(now)) return 0;
  struct lock_pending fresh = {};
  fresh.start_ns = now;
  fresh.lock = (__u64)lock;
  fresh.pid = tgid;
  fresh.flags = flags;
  fresh.kstack_id = -ENODATA;
  fresh.user_stack_id = -ENODATA;
  if (mm && (__u64)lock == (__u64)mm + bpf_core_field_offset(struct mm_struct, mmap_lock)) {
    fresh.flags |= GPROF_LOCK_MMAP_LOCK;
  }
  if (!spinning) note_lock_sleep(ctx, &fresh, lock, flags, mm);
  if (entry) {
    __builtin_memcpy(entry, &fresh, sizeof(fresh));
  } else if (bpf_map_update_elem(&lock_pending, &tid, &fresh, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_PENDING, GPROF_REC_LOCK_WAIT);
  }
  return 0;
}
TRACEPOINT(contention_begin, on_contention_begin)

static __always_inline int on_contention_end(u64* ctx) {
  /* (void *lock, int ret) */
  __u64 lock = ctx[0];
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct lock_pending* entry = bpf_map_lookup_elem(&lock_pending, &tid);
  /* No entry: not a thread of the tree, or a spinning lock; another lock: a spinlock taken while
   * waiting for a sleeping one. */
  if (!entry || entry->start_ns == 0 || entry->lock != lock) return 0;
  if (entry->flags & LCB_F_SPIN) {
    count_in(&counts, GPROF_COUNT_SPIN_CONTENTION); /* a mutex taken while spinning */
  } else {
    struct gprof_lock_wait* rec = reserve(sizeof(*rec), GPROF_REC_LOCK_WAIT);
    if (rec) {
      rec->pid = entry->pid;
      rec->tid = tid;
      rec->start_ns = entry->start_ns;
      rec->end_ns = bpf_ktime_get_ns();
      rec->lock_address = entry->lock;
      rec->flags = entry->flags;
      rec->ret = (__s32)ctx[1];
      rec->owner_pid = entry->owner_pid;
      rec->owner_tid = entry->owner_tid;
      rec->kstack_id = entry->kstack_id;
      rec->user_stack_id = entry->user_stack_id;
      __builtin_memcpy(rec->owner_comm, entry->owner_comm, GPROF_COMM_LEN);
      submit(rec);
    }
  }
  entry->start_ns = 0;
  return 0;
}
TRACEPOINT(contention_end, on_contention_end)

/* Page faults ------------------------------------------------------------------------------------
 */

/* A fault starts at the x86 exception tracepoints (exceptions:page_fault_user, and
 * page_fault_kernel for faults in kernel mode, on user memory inside a system call) and ends where
 * handle_mm_fault accounts it: the kernel raises the software perf event PAGE_FAULTS_MIN or
 * PAGE_FAULTS_MAJ there, after the fault is resolved (retries included), and the loader attaches
 * a program to each on every CPU. fentry/fexit on handle_mm_fault would be simpler, but kernels
 * in lockdown (this project's machines) refuse every fentry program, and have no kprobes. Faults
 * that fail (SIGSEGV), and faults the kernel takes on behalf of get_user_pages, raise no end event:
 * they are not recorded. */

#define X86_PF_WRITE 0x2 /* error_code bits (arch/x86/include/asm/trap_pf.h) */
#define X86_PF_USER 0x4
#define X86_PF_INSTR 0x10
#define FAULT_FLAG_WRITE 0x1 /* enum fault_flag (include/linux/mm_types.h) */
#define FAULT_FLAG_USER 0x40
#define FAULT_FLAG_INSTRUCTION 0x100
#define VM_FAULT_MAJOR 0x4

static __always_inline int on_page_fault(u64* ctx) {
  /* (unsigned long address, struct pt_regs *regs, unsigned long error_code) */
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  if (!is_tracked(pid_tgid >> 32)) return 0;
  __u64 start_ns = bpf_ktime_get_ns();
  if (!in_window(start_ns)) return 0;
  __u64 address = ctx[0];
  /* Faults the kernel fixes up without handling them: on kernel addresses, and those of accesses
   * made with page faults disabled (copy_from_user_nofault; the user-stack walks and probe reads
   * of these very programs, which would otherwise replace the pending fault they interrupt). */
  if ((long)address < 0) return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  /* A direct read: a probe read disables page faults itself while it copies. */
  if (task->pagefault_disabled != 0) return 0;
  __u32 tid = (__u32)pid_tgid;
  __u64 error_code = ctx[2];
  __u32 flags = (error_code & X86_PF_WRITE ? FAULT_FLAG_WRITE : 0) |
                (error_code & X86_PF_USER ? FAULT_FLAG_USER : 0) |
                (error_code & X86_PF_INSTR ? FAULT_FLAG_INSTRUCTION : 0);
  struct gprof_fault_state* kept = bpf_map_lookup_elem(&fault_pending, &tid);
  if (kept) {
    kept->start_ns = start_ns;
    kept->address = address;
    kept->flags = flags;
    return 0;
  }
  struct gprof_fault_state entry = {};
  entry.start_ns = start_ns;
  entry.address = address;
  entry.flags = flags;
  entry.pid = pid_tgid >> 32;
  if (bpf_map_update_elem(&fault_pending, &tid, &entry, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_PENDING, GPROF_REC_PAGE_FAULT);
  }
  return 0;
}
static __always_inline int on_page_fault_user(u64* ctx) { return on_page_fault(ctx); }
TRACEPOINT(page_fault_user, on_page_fault_user)

static __always_inline int on_page_fault_kernel(u64* ctx) { return on_page_fault(ctx); }
TRACEPOINT(page_fault_kernel, on_page_fault_kernel)

static __always_inline int fault_done(struct bpf_perf_event_data* ctx, __u32 result) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  struct gprof_fault_state* entry = bpf_map_lookup_elem(&fault_pending, &tid);
  if (!entry || entry->start_ns == 0) return 0;
  /* The perf event carries the fault's address: a start left by a fault that failed is not
   * paired with a later one's end. */
  if (entry->address == ctx->addr) {
    __u64 now = bpf_ktime_get_ns();
    __u64 duration = now - entry->start_ns;
    if (duration >= slow_fault_ns) {
      struct gprof_page_fault* rec = reserve(sizeof(*rec), GPROF_REC_PAGE_FAULT);
      if (rec) {
        rec->pid = pid_tgid >> 32;
        rec->tid = tid;
        rec->start_ns = entry->start_ns;
        rec->end_ns = now;
        rec->address = entry->address;
        rec->flags = entry->flags;
        rec->result = result;
        submit(rec);
      }
    } else {
      /* Only this thread touches its entry: no atomics needed. */
      entry->quick_count += 1;
      entry->quick_total_ns += duration;
    }
  }
  entry->start_ns = 0;
  return 0;
}

/* Perf event programs return 0: nothing goes to the perf ring, only to ours. */
SEC("perf_event")
int on_minor_fault_done(struct bpf_perf_event_data* ctx) { return fault_done(ctx, 0); }

SEC("perf_event")
int on_major_fault_done(struct bpf_perf_event_data* ctx) { return fault_done(ctx, VM_FAULT_MAJOR); }

/* Signals ---------------------------------------------------------------------------------------
 */

#define SI_USER 0
#define NR_KILL 62
#define NR_PIDFD_SEND_SIGNAL 424
#define PIDFD_SIGNAL_PROCESS_GROUP 4 /* include/uapi/linux/pidfd.h, Linux 6.9 on */

/* Whether the system call that generated a signal with si_code SI_USER, the current task's, sends
 * it to many processes at once: kill() with pid <= 0 (a process group, killpg; or every process),
 * pidfd_send_signal to the pidfd's process group. The tracepoint's `group` argument says only that
 * the signal is for a whole process, as kill(pid) makes it too. The task's user registers hold the
 * call's number and arguments (x86_64: pid in di, the flags of pidfd_send_signal in r10). */
static __always_inline bool sent_to_many(void) {
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(bpf_get_current_task_btf());
  if (!regs) return false;
  long nr = BPF_CORE_READ(regs, orig_ax);
  if (nr == NR_KILL) return (int)BPF_CORE_READ(regs, di) <= 0;
  if (nr == NR_PIDFD_SEND_SIGNAL)
    return (BPF_CORE_READ(regs, r10) & PIDFD_SIGNAL_PROCESS_GROUP) != 0;
  return false;
}

/* Every signal the kernel generates runs this (SIGCHLD at each exit of the machine's processes):
 * one lookup for those whose target is neither in the tree nor gprof-run. */
static __always_inline int on_signal_generate(u64* ctx) {
  /* (int sig, struct kernel_siginfo *info, struct task_struct *task, int group, int result) */
  struct task_struct* task = (struct task_struct*)ctx[2];
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (tgid != self_tgid && tree_state(tgid) == 0) return 0;
  struct gprof_signal* rec = reserve(sizeof(*rec), GPROF_REC_SIGNAL);
  if (!rec) return 0;
  rec->pid = tgid;
  rec->tid = BPF_CORE_READ(task, pid);
  rec->time_ns = bpf_ktime_get_ns();
  rec->signal = (__s32)ctx[0];
  /* SEND_SIG_NOINFO (0) and SEND_SIG_PRIV (1) stand for a siginfo the kernel fills itself. */
  __u64 info = ctx[1];
  rec->code = info == 0   ? SI_USER
              : info == 1 ? 0x80 /* SI_KERNEL */
                          : BPF_CORE_READ((struct kernel_siginfo*)info, si_code);
  rec->flags = (int)ctx[3] ? 0 : GPROF_SIGNAL_TO_THREAD;
  rec->result = (__u32)ctx[4];
  if (in_interrupt(ctx)) {
    rec->flags |= GPROF_SIGNAL_FROM_INTERRUPT;
    __builtin_memcpy(rec->sender_comm, "[irq]", 6);
  } else {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    rec->sender_pid = pid_tgid >> 32;
    rec->sender_tid = (__u32)pid_tgid;
    bpf_get_current_comm(rec->sender_comm, sizeof(rec->sender_comm));
    if (rec->code == SI_USER && !in_kernel_thread() && sent_to_many())
      rec->flags |= GPROF_SIGNAL_TO_MANY;
  }
  submit(rec);
  return 0;
}
TRACEPOINT(signal_generate, on_signal_generate)
