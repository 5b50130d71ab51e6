/* Layouts of the BPF maps that the programs of kernel_events.bpf.c and their loader
 * (kernel_recorder.cc and its parts, python_stacks.cc) share: not file records (those are
 * inject/format/kernel_events.h, the contract with the collector), only this directory's business.
 * Fixed widths and a size check on each, as the records have. */
#ifndef GPROF_KERNEL_MAPS_H
#define GPROF_KERNEL_MAPS_H

#include "inject/format/kernel_events.h"

/* Value of the `stream_writes` map, keyed by the receiving end of a pipe or socket (a number only
 * the BPF programs read: a pipe's or a Unix socket's kernel address, a hash of a TCP or UDP
 * socket's addresses and ports as its receiver sees them): the tree's last four writes to it
 * (a message is often written in parts, after the first woke the reader). */
struct gprof_stream_writes {
  struct gprof_stream_writer last[4];
};

/* ---- Map layouts shared by the BPF programs and the loader (not file records) ---- */

/* Value of the `cuda_probe_names` array (bpf/cuda_probes.bpf.h): a probed cu* function's name, at
 * the index its uprobes carry as their cookie. The loader fills it as it attaches them. */
#define GPROF_CUDA_PROBE_MAX_FUNCTIONS 2048
struct gprof_cuda_probe_name {
  char name[GPROF_CUDA_PROBE_NAME_LEN];
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_cuda_probe_name) == 48, "");
#else
_Static_assert(sizeof(struct gprof_cuda_probe_name) == 48, "gprof_cuda_probe_name layout");
#endif

/* Key of the `short_waits` hash map (bpf/short_waits.bpf.h), whose value is the reason's slot
 * (__u32) in the `short_wait_totals` array: the gprof_wait_count fields that name a reason. The
 * array's value: its running totals since the start. */
struct gprof_short_wait_key {
  __u32 pid;
  __u32 tid;
  __u32 kind;
  __u32 how;
  __u32 syscall_nr;
  __u32 waker_pid;
  __u32 waker_tid;
  __u32 reserved;
  __u64 object;
};

struct gprof_short_wait_counts {
  __u64 count;
  __u64 total_ns;
  __u64 runnable_ns;
  __u64 woken;
  __u64 first_ns; /* start of the first wait counted */
  __u64 last_ns;  /* end of the last */
};

/* The per-CPU `lost` array: one counter per (kind, record type) the BPF side counts. */
#define GPROF_LOST_BPF_KINDS 4   /* GPROF_LOST_RINGBUF .. GPROF_LOST_TRACKED */
#define GPROF_LOST_TYPE_SLOTS 32 /* record types GPROF_REC_OFFCPU .. GPROF_REC_OFFCPU + 31 */
#define GPROF_LOST_SLOT(kind, type) ((kind)*GPROF_LOST_TYPE_SLOTS + ((type)-GPROF_REC_OFFCPU))
#define GPROF_LOST_SLOTS (GPROF_LOST_BPF_KINDS * GPROF_LOST_TYPE_SLOTS)

/* A thread's off-CPU interval, in its `threads` entry. The first 64 bytes, one cache line of the
 * entry, are what the thread writes at its switch-out and its waker reads and writes in another
 * CPU's context; the rest is the thread's own. The waker's fields are valid when wake_ns >=
 * start_ns (a waker writes wake_ns last): nothing resets them, and the switch-in that ends the
 * interval writes only `open`, in the next line, so that no hand-over makes a CPU pull back a
 * line it has just given away. The loader reads what is left at the end to emit
 * GPROF_OFFCPU_UNFINISHED intervals. */
struct gprof_offcpu_pending {
  __u64 start_ns; /* last switched out; 0: never, or outside the recording window */
  __u64 wake_ns;
  __u32 pid; /* tgid */
  __u32 state;
  __s32 kstack_id;
  __s32 waker_kstack_id;
  __u32 waker_pid;
  __u32 waker_tid;
  __u32 cpu; /* switched out on */
  __s32 waker_user_stack_id;
  char waker_comm[GPROF_COMM_LEN];
  __s32 user_stack_id;
  __u32 syscall_nr; /* the system call it slept in (orig_ax; ~0: none, or preempted) */
  __u64 object;     /* in a futex call: its word (the call's first argument); else 0 */
  __u32 open;       /* 1 from its switch-out to the switch-in that ends it */
  __u32 woken_to_die; /* 1: a wakeup found SIGKILL pending for it (GPROF_OFFCPU_WOKEN_TO_DIE);
                         reset at its switch-out, written by a waker only then: rare */
};

/* Value of the per-CPU `switched_in` array (one entry): an off-CPU interval that lasted at least
 * the stack threshold, ended by a switch-in on that CPU, whose thread takes its stacks at its
 * sched_exit_tp, next on that CPU. tid 0: none. The loader writes what is left at the end
 * without stacks. */
struct gprof_switched_in {
  __u32 tid;
  /* The thread the last sched_switch on this CPU switched in, whichever it was: a thread that
   * finds another at its sched_exit_tp was switched in without a sched_switch the programs saw. */
  __u32 switched_in_tid;
  struct gprof_offcpu record;
};

/* The per-CPU `counts` array, by enum gprof_event_count_kind (slot 0 unused). */
#define GPROF_COUNT_SLOTS 3

/* Value of the `fault_pending` map (key: tid): the page fault a thread of the tree is in, and
 * its faults under the slow-fault threshold so far, counted rather than recorded. One entry for
 * both: a fault's end finds where to count it in the same lookup. */
struct gprof_fault_state {
  __u64 start_ns; /* 0: not in a fault (the map keeps the thread's entry until it exits) */
  __u64 address;
  __u32 flags; /* FAULT_FLAG_* */
  __u32 pid;   /* tgid */
  __u64 quick_count;
  __u64 quick_total_ns;
};

/* Value of the `syscall_pending` map (key: tid): a system call of the tree in progress that will
 * be recorded at its return (futex family, device waits, memory maps, reads of pipes and sockets,
 * writes of TCP sockets). */
struct gprof_syscall_pending {
  __u64 start_ns; /* 0: no call in progress (the map keeps the thread's entry) */
  __u64 args[6];  /* as the thread passed them */
  __u32 pid;      /* tgid */
  __u32 nr;       /* x86_64 syscall number */
  union {
    struct { /* futex, futex_wake, futex_wait, futex_requeue, as gprof_futex holds them */
      __u64 uaddr;
      __u64 uaddr2;
      __s64 timeout_ns;
      __u32 op;
      __u32 val;
      __u32 val3;
      __u32 flags; /* enum gprof_futex_flags */
      __u32 owner_tid;
      __u32 woke_long; /* it woke a thread that had slept at least count_under_ns: recorded */
    } futex;
    struct { /* futex_waitv */
      __s64 timeout_ns;
      __u32 count;
      __u32 flags;
      __u64 uaddr[GPROF_WAITV_MAX];
    } waitv;
    struct { /* reads and writes of pipes and sockets (the fd is args[0]) */
      __u64 file;     /* struct file *, found at entry */
      __u64 tcp_sock; /* its struct sock when a TCP socket; else 0 (a write is then not pending) */
      __u32 seq;      /* write_seq (a write) or copied_seq (a read) at entry */
      __u32 reserved;
    } stream;
    struct { /* ioctl, poll, select, epoll, and mmap (of a device: a device wait too) */
      __s32 fd;
      __u32 kind; /* enum gprof_device_wait_kind; 0: not a device of interest */
      char name[GPROF_COMM_LEN];
      char file[GPROF_FILE_NAME_LEN]; /* mmap: gprof_memory_map's file */
    } device;
  };
};

/* A reason of short waits (a short_waits key) and its slot in short_wait_totals. */
struct gprof_short_wait_slot {
  struct gprof_short_wait_key key;
  __u32 slot; /* + 1; 0: none */
  __u32 reserved;
};

/* Value of the `threads` map (key: tid): one entry for every thread of the tree, made when the
 * thread starts (or when the loader starts tracking its process) and dropped when it exits. That
 * an entry exists is what says a thread is tracked on the scheduler and system call paths: one
 * lookup finds both that and the thread's state. The loader reads what is left at the end. */
struct gprof_thread_state {
  /* Unchanged after the entry is made: with the map's key, it fills the element's first cache
   * line (a hash element's header is 48 bytes on Linux 6.x, its 4-byte key takes 8), which every
   * lookup reads, the waker's in another CPU's context included. */
  __u64 reserved;
  struct gprof_offcpu_pending offcpu; /* its shared 64 bytes: the element's second line */
  struct gprof_syscall_pending syscall;
  /* Where the totals of the thread's last two reasons of short off-CPU intervals ([0], [1]) and
   * of short futex calls ([2], [3]) are, most recent first: a hand-over's wait counts without a
   * lookup in short_waits (a hash of a 40-byte key). */
  struct gprof_short_wait_slot counted[4];
  /* Its last off-CPU interval that an interrupt, a kernel thread or a task outside the tree ended
   * (start, wake), until its next read of a pipe or socket: 0 when none is waiting for one. */
  __u64 unexplained_wait_start_ns;
  __u64 unexplained_wake_ns;
  /* To 64n + 8 bytes: with its 56 bytes of header and key, every element fills whole lines. */
  __u8 padding[32];
};

/* ---- Python stacks: what the walker needs to know of one process's interpreter ---- */

enum gprof_python_frame_kind {
  GPROF_PY_FRAMES_OBJECTS = 1,     /* 3.9, 3.10: PyFrameObject from tstate->frame; f_lasti an int */
  GPROF_PY_FRAMES_INTERPRETER = 2, /* 3.11 on: _PyInterpreterFrame; a pointer to the instruction */
};

#define GPROF_PY_NONE 0xffff    /* an offset the version does not have */
#define GPROF_PY_READ_BYTES 256 /* the most of a frame or code object one read takes */

/* Offsets (bytes) into CPython's structures, from gprof-run's tables (3.9-3.12) or the
 * interpreter's own _Py_DebugOffsets (3.13). */
struct gprof_python_offsets {
  __u32 version_hex;
  __u16 frame_kind;  /* enum gprof_python_frame_kind */
  __u16 lasti_scale; /* GPROF_PY_FRAMES_OBJECTS: bytes per f_lasti unit (3.9: 1, 3.10: 2) */
  __u16 runtime_interpreters_head;
  __u16 interp_next;
  __u16 interp_threads_head;
  __u16 tstate_next;
  __u16 tstate_thread_id;     /* pthread_self() of its thread: the thread's fs base on x86_64 */
  __u16 tstate_frame;         /* 3.9/3.10: frame; 3.11/3.12: cframe; 3.13: current_frame */
  __u16 cframe_current_frame; /* 3.11/3.12; GPROF_PY_NONE: tstate_frame is the frame pointer */
  __u16 frame_code;           /* f_code (f_executable in 3.13) */
  __u16 frame_previous;       /* f_back, previous */
  __u16 frame_instr;          /* f_lasti, prev_instr, instr_ptr */
  __u16 frame_owner;          /* GPROF_PY_NONE before 3.11 */
  __u16 frame_is_entry;       /* 3.11 only */
  __u16 frame_read_size;      /* bytes read of each frame (covers the fields above) */
  __u16 code_size;            /* ob_size: code units (3.11 on); GPROF_PY_NONE before */
  __u16 code_firstlineno;
  __u16 code_filename;
  __u16 code_name;      /* co_qualname from 3.11, co_name before */
  __u16 code_adaptive;  /* 3.11 on: where the bytecode starts in the code object */
  __u16 code_read_size; /* bytes read of each code object (covers the fields above) */
  __u8 owner_cstack;    /* 3.12 on: the owner of C-stack shim frames (3); 0xff: none */
  __u8 reserved;
};

/* Value of the `python_targets` map (key: tgid): a process of the tree that runs a readable
 * CPython. The loader adds it; a fork copies it to the child (same addresses); exec and exit drop
 * it. */
struct gprof_python_target {
  __u64 runtime;   /* _PyRuntime */
  __u64 code_type; /* PyCode_Type */
  struct gprof_python_offsets offsets;
};

/* Value of the `python_tstates` map (key: tid): the thread's PyThreadState as last found (0: it
 * had none), and when: re-found after a second, and checked at every use. */
struct gprof_python_tstate {
  __u64 tstate;
  __u64 found_ns;
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_stream_writes) == 64, "");
static_assert(sizeof(struct gprof_python_offsets) == 48, "");
static_assert(sizeof(struct gprof_python_target) == 64, "");
static_assert(sizeof(struct gprof_offcpu_pending) == 88, "");
static_assert(sizeof(struct gprof_short_wait_key) == 40, "");
static_assert(sizeof(struct gprof_short_wait_counts) == 48, "");
static_assert(sizeof(struct gprof_switched_in) == 104, "");
static_assert(sizeof(struct gprof_syscall_pending) == 120, "");
static_assert(sizeof(struct gprof_short_wait_slot) == 48, "");
static_assert(sizeof(struct gprof_thread_state) == 456, "");
static_assert(__builtin_offsetof(struct gprof_thread_state, offcpu) == 8, "its own line");
static_assert(__builtin_offsetof(struct gprof_offcpu_pending, user_stack_id) == 64, "the shared line");
static_assert(sizeof(struct gprof_fault_state) == 40, "");
#else
_Static_assert(sizeof(struct gprof_stream_writes) == 64, "gprof_stream_writes layout");
_Static_assert(sizeof(struct gprof_python_offsets) == 48, "gprof_python_offsets layout");
_Static_assert(sizeof(struct gprof_python_target) == 64, "gprof_python_target layout");
_Static_assert(sizeof(struct gprof_offcpu_pending) == 88, "gprof_offcpu_pending layout");
_Static_assert(sizeof(struct gprof_short_wait_key) == 40, "gprof_short_wait_key layout");
_Static_assert(sizeof(struct gprof_short_wait_counts) == 48, "gprof_short_wait_counts layout");
_Static_assert(sizeof(struct gprof_switched_in) == 104, "gprof_switched_in layout");
_Static_assert(sizeof(struct gprof_syscall_pending) == 120, "gprof_syscall_pending layout");
_Static_assert(sizeof(struct gprof_short_wait_slot) == 48, "gprof_short_wait_slot layout");
_Static_assert(sizeof(struct gprof_thread_state) == 456, "gprof_thread_state layout");
_Static_assert(__builtin_offsetof(struct gprof_thread_state, offcpu) == 8, "its own line");
_Static_assert(__builtin_offsetof(struct gprof_offcpu_pending, user_stack_id) == 64,
               "the shared line");
#endif

#endif /* GPROF_KERNEL_MAPS_H */
