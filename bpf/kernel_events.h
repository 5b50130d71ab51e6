/* Records of the kernel recorder: written by the BPF programs into the ring buffer (and by
 * gprof-run's loader for stacks, symbols and loss counts), copied verbatim into the session's
 * kernel.gpr file, read by the collector.
 *
 * Each record starts with the same 8 bytes as gprof::format::RecordHeader (inject/session_format.h)
 * so a ring-buffer sample is already a file record. Fixed-width fields, explicit padding, a size
 * check on every struct, types that only grow at the end. Ring-buffer reservations are not zeroed:
 * the BPF side fills every field, padding included. */
#ifndef GPROF_KERNEL_EVENTS_H
#define GPROF_KERNEL_EVENTS_H

#ifndef __bpf__
#include <linux/types.h>
#endif

struct gprof_rec_hdr {
  __u32 size; /* whole record */
  __u16 type; /* enum gprof_kernel_record */
  __u16 reserved;
};

enum gprof_kernel_record {
  GPROF_REC_OFFCPU = 1000,
  GPROF_REC_FUTEX = 1001,
  GPROF_REC_TASK_NEW = 1002,
  GPROF_REC_TASK_RENAME = 1003,
  GPROF_REC_TASK_EXIT = 1004,
  GPROF_REC_KERNEL_STACK = 1005,  /* written by the loader */
  GPROF_REC_KERNEL_SYMBOL = 1006, /* written by the loader */
  GPROF_REC_LOST = 1007,          /* written by the loader */
};

#define GPROF_COMM_LEN 16
#define GPROF_MAX_STACK_DEPTH 127

/* prev_state at switch-out, as the kernel defines it (include/linux/sched.h). */
#define GPROF_TASK_RUNNING 0x0000 /* preempted: runnable, waiting for a CPU */
#define GPROF_TASK_INTERRUPTIBLE 0x0001
#define GPROF_TASK_UNINTERRUPTIBLE 0x0002

enum gprof_offcpu_flags {
  GPROF_OFFCPU_UNFINISHED = 1u << 0, /* still off-CPU when recording stopped: end_ns is that time */
};

/* One interval a thread of the tree spent off-CPU, emitted when it runs again. */
struct gprof_offcpu {
  struct gprof_rec_hdr hdr;
  __u32 pid; /* tgid */
  __u32 tid;
  __u64 start_ns;  /* switched out */
  __u64 end_ns;    /* switched in again */
  __u64 wake_ns;   /* sched_waking that made it runnable; 0 when preempted (never slept) */
  __u32 waker_pid; /* valid when wake_ns != 0; 0 for the idle task / interrupts */
  __u32 waker_tid; /* 0 for interrupts (timers, IPIs, softirqs on the irq stack): waker_comm is
                      then "[irq]" and waker_kstack_id shows which interrupt */
  __s32 kstack_id; /* kernel stack at switch-out; < 0: -errno, no stack (-ENODATA: stacks off) */
  __s32 waker_kstack_id; /* waker's kernel stack at the wakeup */
  __u32 state;           /* prev_state at switch-out */
  __u32 cpu;             /* CPU it was switched in on (GPROF_OFFCPU_UNFINISHED: the CPU it left) */
  __u32 flags;           /* enum gprof_offcpu_flags */
  __u32 reserved;
  char waker_comm[GPROF_COMM_LEN];
};

enum gprof_futex_flags {
  GPROF_FUTEX_UNFINISHED = 1u << 0, /* still inside futex() when recording stopped: end_ns is that
                                       time, ret is 0 */
};

/* One futex(2) call of a thread of the tree, emitted at its return. */
struct gprof_futex {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u64 uaddr;
  __u64 uaddr2;
  __u32 op; /* including FUTEX_PRIVATE_FLAG / FUTEX_CLOCK_REALTIME */
  __u32 val;
  __u32 val3;
  __u32 flags;      /* enum gprof_futex_flags */
  __s64 timeout_ns; /* relative or absolute as op says; -1: no timeout; -2: a timeout the probe
                       could not read (user page not resident) */
  __s64 ret;
};

enum gprof_task_new_flags {
  GPROF_TASK_NEW_THREAD = 1u << 0, /* same process as the parent (clone with CLONE_THREAD) */
};

/* A thread or process of the tree woken for the first time (sched_wakeup_new). */
struct gprof_task_new {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u32 parent_pid; /* the waker: the thread that called fork/clone */
  __u32 parent_tid;
  __u64 time_ns;
  __s32 parent_kstack_id;
  __u32 flags; /* enum gprof_task_new_flags */
  char comm[GPROF_COMM_LEN];
};

/* A thread's name changed (exec, prctl(PR_SET_NAME), pthread_setname_np). */
struct gprof_task_rename {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 time_ns;
  __u32 is_exec;
  __u32 reserved;
  char comm[GPROF_COMM_LEN];
};

/* A thread of the tree exited. */
struct gprof_task_exit {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 time_ns;
  __s32 exit_code; /* task->exit_code: (status << 8) | signal, as wait(2) encodes it */
  __u32 reserved;
};

/* Loader records. A kernel stack by id: `depth` return addresses follow, innermost first. */
struct gprof_kernel_stack {
  struct gprof_rec_hdr hdr;
  __s32 stack_id;
  __u32 depth;
};

/* The symbol of one kernel address that appears in a stack: `name_len` bytes follow. */
struct gprof_kernel_symbol {
  struct gprof_rec_hdr hdr;
  __u64 address;
  __u32 offset; /* address - start of the function */
  __u32 name_len;
};

enum gprof_lost_kind {
  GPROF_LOST_RINGBUF = 0,   /* ring buffer full: event not recorded */
  GPROF_LOST_STACK = 1,     /* stack id unavailable (map full or hash collision) */
  GPROF_LOST_PENDING = 2,   /* per-thread state map full: interval not tracked */
  GPROF_LOST_TRACKED = 3,   /* process map full: a forked process of the tree is not followed
                               (record_type GPROF_REC_TASK_NEW) */
  GPROF_LOST_MALFORMED = 4, /* loader: ring-buffer sample with a bad size or unknown type, skipped
                               (record_type as the sample claimed) */
  GPROF_LOST_WRITE = 5,     /* loader: records it could not write to kernel.gpr (a failed chunk
                               write, or no memory to stage them; record_type 0: any type) */
  GPROF_LOST_KINDS = 6,
};

/* Events the kernel side could not record, by kind and record type. */
struct gprof_lost {
  struct gprof_rec_hdr hdr;
  __u32 kind;        /* enum gprof_lost_kind */
  __u32 record_type; /* enum gprof_kernel_record it would have been */
  __u64 count;
};

/* ---- Map layouts shared by the BPF programs and the loader (not file records) ---- */

/* The per-CPU `lost` array: one counter per (kind, record type) the BPF side counts. */
#define GPROF_LOST_BPF_KINDS 4  /* GPROF_LOST_RINGBUF .. GPROF_LOST_TRACKED */
#define GPROF_LOST_TYPE_SLOTS 8 /* record types GPROF_REC_OFFCPU .. GPROF_REC_OFFCPU + 7 */
#define GPROF_LOST_SLOT(kind, type) ((kind)*GPROF_LOST_TYPE_SLOTS + ((type)-GPROF_REC_OFFCPU))
#define GPROF_LOST_SLOTS (GPROF_LOST_BPF_KINDS * GPROF_LOST_TYPE_SLOTS)

/* Value of the `offcpu_pending` map (key: tid): a thread of the tree that is off-CPU now. The
 * loader reads what is left at the end to emit GPROF_OFFCPU_UNFINISHED intervals. */
struct gprof_offcpu_pending {
  __u64 start_ns;
  __u64 wake_ns;
  __u32 pid; /* tgid */
  __u32 state;
  __s32 kstack_id;
  __s32 waker_kstack_id;
  __u32 waker_pid;
  __u32 waker_tid;
  __u32 cpu; /* switched out on */
  __u32 reserved;
  char waker_comm[GPROF_COMM_LEN];
};

/* Value of the `futex_pending` map (key: tid): a futex() call of the tree in progress. */
struct gprof_futex_pending {
  __u64 start_ns;
  __u64 uaddr;
  __u64 uaddr2;
  __s64 timeout_ns;
  __u32 pid; /* tgid */
  __u32 op;
  __u32 val;
  __u32 val3;
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_rec_hdr) == 8, "");
static_assert(sizeof(struct gprof_offcpu_pending) == 64, "");
static_assert(sizeof(struct gprof_futex_pending) == 48, "");
static_assert(sizeof(struct gprof_offcpu) == 88, "");
static_assert(sizeof(struct gprof_futex) == 80, "");
static_assert(sizeof(struct gprof_task_new) == 56, "");
static_assert(sizeof(struct gprof_task_rename) == 48, "");
static_assert(sizeof(struct gprof_task_exit) == 32, "");
static_assert(sizeof(struct gprof_kernel_stack) == 16, "");
static_assert(sizeof(struct gprof_kernel_symbol) == 24, "");
static_assert(sizeof(struct gprof_lost) == 24, "");
#else
_Static_assert(sizeof(struct gprof_offcpu) == 88, "gprof_offcpu layout");
_Static_assert(sizeof(struct gprof_futex) == 80, "gprof_futex layout");
_Static_assert(sizeof(struct gprof_task_new) == 56, "gprof_task_new layout");
_Static_assert(sizeof(struct gprof_task_rename) == 48, "gprof_task_rename layout");
_Static_assert(sizeof(struct gprof_task_exit) == 32, "gprof_task_exit layout");
_Static_assert(sizeof(struct gprof_offcpu_pending) == 64, "gprof_offcpu_pending layout");
_Static_assert(sizeof(struct gprof_futex_pending) == 48, "gprof_futex_pending layout");
#endif

#endif /* GPROF_KERNEL_EVENTS_H */
