/* Records of the kernel recorder: written by the BPF programs into the ring buffer (and by
 * gprof-run's loader for stacks, symbols and loss counts), copied verbatim into the session's
 * kernel.gpr file, read by the collector.
 *
 * Each record starts with the same 8 bytes as gprof::format::RecordHeader
 * (inject/format/session_format.h) so a ring-buffer sample is already a file record. Fixed-width
 * fields, explicit padding, a size check on every struct, types that only grow at the end.
 * Ring-buffer reservations are not zeroed: the BPF side fills every field, padding included.
 * The layouts of the BPF maps, which no file holds, are bpf/kernel_maps.h. */
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
  GPROF_REC_LOCK_WAIT = 1008,
  GPROF_REC_DEVICE_WAIT = 1009,
  GPROF_REC_PAGE_FAULT = 1010,
  GPROF_REC_MEMORY_MAP = 1011,
  GPROF_REC_FUTEX_WAITV = 1012,
  GPROF_REC_USER_STACK = 1013,   /* written by the loader */
  GPROF_REC_PROCESS_MAPS = 1014, /* written by the loader */
  GPROF_REC_EVENT_COUNT = 1015,  /* by the BPF programs at a thread's exit, and by the loader */
  GPROF_REC_SIGNAL = 1016,

  /* Python stacks: the frames by the BPF programs, the rest by the loader. */
  GPROF_REC_PYTHON_STACK = 1017,
  GPROF_REC_PYTHON_PROCESS = 1018, /* the CPython a process runs */
  GPROF_REC_PYTHON_CODE = 1019,    /* a code object's names and line table */
  GPROF_REC_PYTHON_THREAD = 1020,  /* a thread's name in Python */

  GPROF_REC_WAIT_COUNT = 1021, /* written by the loader from the short_waits map */

  GPROF_REC_NATIVE_STACK = 1022, /* a thread's user registers and the top of its user stack */

  GPROF_REC_STREAM_READ = 1023, /* a read of a pipe or socket after a wait that no thread of the
                                   tree ended, with the tree's last writers to that end */
  GPROF_REC_LAUNCH_VARIABLES = 1024, /* written by the loader: a process's rank variables */
  GPROF_REC_TCP_TRANSFER = 1025, /* a read or write of a TCP socket: its connection and the bytes
                                    of the stream it moved */
  GPROF_REC_CUDA_PROBE_CALL =
      1026, /* a CUDA driver call seen by uprobes on libcuda (gprof-run -p) */
};

#define GPROF_COMM_LEN 16
#define GPROF_MAX_STACK_DEPTH 127

/* prev_state at switch-out, as the kernel defines it (include/linux/sched.h). */
#define GPROF_TASK_RUNNING 0x0000 /* preempted: runnable, waiting for a CPU */
#define GPROF_TASK_INTERRUPTIBLE 0x0001
#define GPROF_TASK_UNINTERRUPTIBLE 0x0002

enum gprof_offcpu_flags {
  GPROF_OFFCPU_UNFINISHED = 1u << 0, /* still off-CPU when recording stopped: end_ns is that time */
  GPROF_OFFCPU_WOKEN_TO_DIE = 1u << 1, /* its wakeup found SIGKILL pending for it: the kernel woke it
                                          only to end it with its process (exit_group, a fatal
                                          signal, an exec, a core dump), not for what it waited on */
};

/* Records added after the first version extend their struct at the end: a reader takes the part
 * it knows (sizeof what it was built with) and skips the rest. */

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
  __s32 kstack_id; /* kernel stack at switch-out; < 0: -errno, no stack (-ENODATA: stacks off,
                      or an interval shorter than the recorder's stack threshold, which a message
                      record of the file states) */
  __s32 waker_kstack_id; /* waker's kernel stack at the wakeup */
  __u32 state;           /* prev_state at switch-out */
  __u32 cpu;             /* CPU it was switched in on (GPROF_OFFCPU_UNFINISHED: the CPU it left) */
  __u32 flags;           /* enum gprof_offcpu_flags */
  __s32 user_stack_id;   /* user stack at switch-out (frame pointers); < 0: -errno, none (as
                            kstack_id) */
  char waker_comm[GPROF_COMM_LEN]; /* a waker outside the tree, or "[irq]"; all NUL for one in
                                      the tree: its start and rename records name it */
  __s32 waker_user_stack_id; /* the waker's user stack at the wakeup; < 0: none (a kernel thread,
                                an interrupt, a waker outside the tree: -ENOENT) */
  __u32 reserved;
};

enum gprof_futex_flags {
  GPROF_FUTEX_UNFINISHED = 1u << 0, /* still inside futex() when recording stopped: end_ns is that
                                       time, ret is 0 */
  GPROF_FUTEX_FUTEX2 = 1u << 1,     /* a futex_wake/futex_wait/futex_requeue call (futex2), written
                                       as the futex(2) operation it equals:
                                       futex_wake(uaddr, mask, nr, flags): FUTEX_WAKE_BITSET,
                                         val = nr, val3 = mask;
                                       futex_wait(uaddr, val, mask, flags, timeout, clockid):
                                         FUTEX_WAIT_BITSET (| FUTEX_CLOCK_REALTIME for that
                                         clockid), val, val3 = mask, the absolute timeout;
                                       futex_requeue(waiters, flags, nr_wake, nr_requeue):
                                         FUTEX_CMP_REQUEUE, uaddr = waiters[0].uaddr, uaddr2 =
                                         waiters[1].uaddr, val = nr_wake, val3 = waiters[0].val;
                                       | FUTEX_PRIVATE_FLAG when the futex has FUTEX2_PRIVATE */
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
  /* Added after the first version (80 bytes). A wait on a contended glibc lock (FUTEX_WAIT or
     FUTEX_WAIT_BITSET): on the value 2, a mutex's __owner field (8 bytes past the word); on 3, a
     rwlock's __cur_writer (12 or 16 bytes past, for a writer's or a reader's word); as the
     waiter's call found it: the tid of the thread holding the lock. 0 for any other call, or when
     it could not be read. Read, not trusted: the collector checks it names a thread. */
  __u32 owner_tid;
  __u32 reserved;
};

enum gprof_task_new_flags {
  GPROF_TASK_NEW_THREAD = 1u << 0, /* same process as the parent (clone with CLONE_THREAD) */
  GPROF_TASK_NEW_SECURE = 1u << 1, /* forked by a secure-execution process that is recorded only
                                      as existing (see gprof_exec_flags): so is the child */
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
  /* Added later (a record without them: the initial namespace's). The task's pid and tid in its
   * own PID namespace, the innermost, where getpid() and gettid() answer them, and that
   * namespace's inode: how the records of an injected library inside a container (whose ids are
   * those) join the kernel's. Equal to pid and tid in the initial namespace. */
  __u32 ns_pid;
  __u32 ns_tid;
  __u32 pid_namespace;
  __u32 reserved;
};

/* gprof_task_rename's is_exec: 0 for a rename, else these bits. */
enum gprof_exec_flags {
  GPROF_EXEC_PROGRAM = 1u << 0, /* an exec */
  /* A secure execution (set-user-ID, set-group-ID, file capabilities: the new program's AT_SECURE,
   * linux_binprm's secureexec). The injected library records nothing in it. */
  GPROF_EXEC_SECURE = 1u << 1,
  /* ... and the session's owner is not root: its memory is a privileged program's, so the kernel
   * recorder keeps only its existence (starts, execs, exits, signals), no stacks, waits, faults
   * or maps, nor any of the processes it forks while it stays privileged. */
  GPROF_EXEC_HIDDEN = 1u << 2,
};

/* A thread's name changed (exec, prctl(PR_SET_NAME), pthread_setname_np). */
struct gprof_task_rename {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 time_ns;
  __u32 is_exec; /* enum gprof_exec_flags; 0: not an exec */
  __u32 exec_old_tid; /* exec: the thread's tid before it; a thread other than the leader that
                         execs takes the process's pid as its tid (tid == pid after), and this
                         old tid ends there without an exit record. 0 when not an exec. */
  char comm[GPROF_COMM_LEN];
};

enum gprof_task_exit_flags {
  GPROF_TASK_EXIT_PROCESS = 1u << 0, /* the last thread of its process: the process is gone (the
                                        leader may have exited before, its threads living on) */
};

/* A thread of the tree exited. */
struct gprof_task_exit {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 time_ns;
  __s32 exit_code; /* task->exit_code: (status << 8) | signal, as wait(2) encodes it */
  __u32 flags;     /* enum gprof_task_exit_flags */
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
  /* GPROF_LOST_STACK counts kernel and user stacks together, under the record type that
   * wanted them. */
  GPROF_LOST_KINDS = 6,
};

/* Events the kernel side could not record, by kind, record type and CPU: one record for each
 * (kind, record type, cpu) with a count. */
struct gprof_lost {
  struct gprof_rec_hdr hdr;
  __u32 kind;        /* enum gprof_lost_kind */
  __u32 record_type; /* enum gprof_kernel_record it would have been */
  __u64 count;
  __u32 cpu; /* the CPU the events were lost on; GPROF_ALL_CPUS: counted in user space */
  __u32 reserved;
};

#define GPROF_ALL_CPUS 0xffffffffu

/* The kind of a contended kernel lock, from the flags of the lock:contention_begin tracepoint
 * (LCB_F_* in include/trace/events/lock.h). */
enum gprof_lock_flags {
  GPROF_LOCK_SPIN = 1u << 0,
  GPROF_LOCK_READ = 1u << 1,
  GPROF_LOCK_WRITE = 1u << 2,
  GPROF_LOCK_RT = 1u << 3,
  GPROF_LOCK_PERCPU = 1u << 4,
  GPROF_LOCK_MUTEX = 1u << 5,
  GPROF_LOCK_MMAP_LOCK = 1u << 16,    /* the lock is the process's mm->mmap_lock */
  GPROF_LOCK_READER_OWNED = 1u << 17, /* an rwsem held for reading when the thread went to sleep
                                         (a munmap holds the mmap_lock so while it frees the
                                         pages): owner_* is then the kernel's hint, the last reader
                                         to take it, one holder of possibly several */
};

/* A thread of the tree waited for a kernel lock (mutex, rwsem, rt_mutex...): from
 * lock:contention_begin to lock:contention_end. */
struct gprof_lock_wait {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u64 lock_address;
  __u32 flags;     /* enum gprof_lock_flags */
  __s32 ret;       /* contention_end's: 0, or -EINTR when interrupted */
  __u32 owner_pid; /* the holder when the thread went to sleep, where the kernel records one:
                      mutex, rt_mutex, rwsem held for writing, and for an rwsem held for reading
                      the last reader (GPROF_LOCK_READER_OWNED: a hint, named only while that task
                      lives; for the mmap_lock only a thread of the same process); else 0
                      (percpu-rwsem and semaphore keep none) */
  __u32 owner_tid;
  __s32 kstack_id; /* where the thread went to sleep */
  __s32 user_stack_id;
  char owner_comm[GPROF_COMM_LEN]; /* empty when owner_tid is 0 */
};

enum gprof_device_wait_kind {
  GPROF_DEVICE_IOCTL = 1,
  GPROF_DEVICE_POLL = 2,  /* poll/ppoll/select/pselect6 with at least one fd on the device */
  GPROF_DEVICE_EPOLL = 3, /* epoll_wait/epoll_pwait/epoll_pwait2 (the fds inside are not seen) */
  GPROF_DEVICE_MMAP = 4,
};

/* A system call of a thread of the tree on a device file of interest (the GPU driver's
 * /dev/nvidia*, by default), or an epoll wait. */
struct gprof_device_wait {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u32 kind;    /* enum gprof_device_wait_kind */
  __s32 fd;      /* the device's fd (poll: the first on the device; epoll: the epoll fd) */
  __u64 request; /* ioctl: the request; poll, select: number of fds (nfds); mmap: the length;
                    epoll: maxevents */
  __s64 ret;
  char device[GPROF_COMM_LEN]; /* the file's name: "nvidiactl", "nvidia0", "nvidia-uvm"; empty
                                  for epoll */
};

/* A page fault of a thread of the tree that took at least the recorder's threshold (faults
 * that wait for I/O or for the mmap_lock; the many quick ones are only counted). Faults that
 * failed (SIGSEGV) and those taken by get_user_pages (MAP_POPULATE, pinning) are not seen. */
struct gprof_page_fault {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u64 address;
  __u32 flags;  /* FAULT_FLAG_* known when the fault starts: 0x1 write, 0x40 user (the fault came
                   from user mode; else from a system call touching user memory), 0x100
                   instruction fetch */
  __u32 result; /* 0x4 (VM_FAULT_MAJOR): major, as the kernel counts it (I/O, or a fault that had
                   to be retried, after waiting for a lock or a page); else 0 */
};

#define GPROF_FILE_NAME_LEN 32

/* mmap, munmap, mprotect, mremap or madvise of a thread of the tree. */
struct gprof_memory_map {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u32 syscall_nr; /* 9 mmap, 10 mprotect, 11 munmap, 25 mremap, 28 madvise (x86_64) */
  __u32 prot;       /* mmap, mprotect: PROT_*; madvise: the advice; mremap: its MREMAP_* flags */
  __u64 address;    /* the argument; mmap: the mapping made (ret) when it succeeded */
  __u64 length;
  __u64 flags; /* mmap: MAP_*; mremap: the new length */
  __s64 ret;
  /* Added after the first version (72 bytes). mmap of a file: its name, as the kernel's dentry
     has it (no directory; a link resolved: "libcudart.so.13", "libcuda.so.580.95.05"), cut to
     GPROF_FILE_NAME_LEN - 1 bytes, NUL-padded; else all NUL. What says which libraries a
     process loaded, by the dynamic loader or dlopen, however short it lived. */
  char file[GPROF_FILE_NAME_LEN];
};

#define GPROF_WAITV_MAX 4

/* A futex_waitv(2) call: the first GPROF_WAITV_MAX of its futexes. */
struct gprof_futex_waitv {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 end_ns;
  __u32 count;      /* futexes in the call */
  __u32 flags;      /* FUTEX_CLOCK_REALTIME (256) when the timeout is on CLOCK_REALTIME, else 0 (the
                       call's own flags argument must be 0) */
  __s64 timeout_ns; /* absolute, as futex_waitv takes it; -1: none; -2: not readable */
  __s64 ret;        /* the index of the futex that woke it, or -errno */
  __u64 uaddr[GPROF_WAITV_MAX];
};

enum gprof_user_stack_flags {
  GPROF_USER_STACK_TRUNCATED = 1u << 0, /* the walk hit the depth limit: the stack filled every
                                           slot the kernel allows (GPROF_MAX_STACK_DEPTH, or
                                           kernel.perf_event_max_stack if lower) */
};

/* Loader record: a user stack by id, `depth` return addresses follow, innermost first. The ips
 * belong to the address space of the process whose record names the id. */
struct gprof_user_stack {
  struct gprof_rec_hdr hdr;
  __s32 stack_id;
  __u32 depth;
  __u32 flags; /* enum gprof_user_stack_flags */
  __u32 reserved;
};

/* Loader record: /proc/PID/maps of a process of the tree, to name user addresses; `text_len`
 * bytes follow. Taken when the loader learns of the process (it may have run a little by then),
 * after each exec, and at the end for processes still alive; time_ns is when it was read. */
struct gprof_process_maps {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 text_len;
  __u64 time_ns;
};

/* Loader record: the variables a launcher sets to tell a process its rank (RANK, LOCAL_RANK,
 * WORLD_SIZE, SLURM_PROCID...: inject/format/rank_variables.h lists them), read from
 * /proc/PID/environ (the environment the program was started with) after each exec. Nothing else
 * of the environment is kept: `text_len` bytes of "NAME=value" strings follow, each ended by a NUL,
 * only of those variables, only with values of at most kMaxRankValueBytes. Written for each exec
 * whose environment could be read, with no strings when it holds none of them. */
struct gprof_launch_variables {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 text_len;
  __u64 time_ns; /* when it was read */
};

/* What gprof_event_count counts. */
enum gprof_event_count_kind {
  GPROF_COUNT_QUICK_PAGE_FAULTS = 1, /* page faults of one thread under the slow-fault threshold
                                        (limit_ns): not recorded one by one */
  GPROF_COUNT_SPIN_CONTENTION = 2,   /* contended spinning locks (spinlocks, rwlocks, and mutexes
                                        taken while spinning) of the tree, on one CPU: not
                                        recorded one by one; total_ns is 0 (not measured) */
};

/* Events counted rather than recorded. Quick page faults: one record per run on CPU of a thread
 * that had some, written when it switches out, exits (or execs as another thread, see
 * exec_old_tid), and by the loader at the end for threads still alive (time_ns 0 there). Spin contention: one record per CPU, by the loader at the end (pid and
 * tid 0: the whole tree). */
struct gprof_event_count {
  struct gprof_rec_hdr hdr;
  __u32 kind; /* enum gprof_event_count_kind */
  __u32 cpu;  /* GPROF_ALL_CPUS when counted per thread */
  __u32 pid;
  __u32 tid;
  __u64 count;
  __u64 total_ns; /* their summed duration */
  __u64 limit_ns; /* quick page faults: the threshold they stayed under */
  /* Added later (gprof_event_count_first_size before): when they were counted up to. Quick page
   * faults are written at each switch-out of a thread that had some, so they fell in its run on
   * CPU that ended then; 0 from an older recorder. */
  __u64 time_ns;
};
#define GPROF_EVENT_COUNT_FIRST_SIZE 48

enum gprof_signal_flags {
  GPROF_SIGNAL_TO_THREAD = 1u << 0, /* to one thread (tgkill, a fault's SIGSEGV); else to the
                                       process, whichever thread takes it (tid: the one named) */
  GPROF_SIGNAL_TO_MANY = 1u << 1,   /* one of several that one call generated: kill() of a process
                                       group or of every process (pid <= 0, killpg), or
                                       pidfd_send_signal with PIDFD_SIGNAL_PROCESS_GROUP */
  GPROF_SIGNAL_FROM_INTERRUPT = 1u << 2, /* generated in interrupt context (a timer): sender_* 0,
                                            sender_comm "[irq]" */
};

/* What the kernel did with it (enum trace_signal_result of include/trace/events/signal.h). */
enum gprof_signal_result {
  GPROF_SIGNAL_DELIVERED = 0,       /* made pending (and the target woken) */
  GPROF_SIGNAL_IGNORED = 1,         /* ignored by the target's disposition, or its state */
  GPROF_SIGNAL_ALREADY_PENDING = 2, /* merged into the same signal still pending */
  GPROF_SIGNAL_OVERFLOW_FAIL = 3,
  GPROF_SIGNAL_LOSE_INFO = 4,
};

/* A signal generated for a thread of the tree (signal:signal_generate), or for gprof-run itself
 * (pid is then the recorder's own, the file header's pid: what gprof-run's forwarding of signals
 * to the command decides by; the collector shows only the tree's). Recorded whatever the
 * recording window: like thread starts and exits, they are few and say what happened to the
 * program. */
struct gprof_signal {
  struct gprof_rec_hdr hdr;
  __u32 pid; /* the target's tgid */
  __u32 tid; /* the target thread (for a signal to the process, the one the sender named) */
  __u64 time_ns;
  __s32 signal;
  __s32 code;       /* si_code: 0 SI_USER (kill), 0x80 SI_KERNEL (the terminal's Ctrl-C,
                       a hangup), -6 SI_TKILL, -1 SI_QUEUE, > 0 the kernel's own (a fault,
                       SIGCHLD's CLD_*) */
  __u32 sender_pid; /* the task that generated it: the killer, or the thread whose action made it
                       (a fault, an exit's SIGCHLD); 0 with GPROF_SIGNAL_FROM_INTERRUPT */
  __u32 sender_tid;
  __u32 flags;  /* enum gprof_signal_flags */
  __u32 result; /* enum gprof_signal_result */
  char sender_comm[GPROF_COMM_LEN];
};

/* ---- Python stacks (CPython 3.9 to 3.13) ----
 *
 * The BPF programs read a thread's frames where its native stacks are taken (at the switch-in
 * after a long wait, at the wakeup a thread makes after one, at a slow CUDA call) and at a sampling
 * tick on CPU, and write only raw frames: each code object's address and instruction offset. The
 * loader names the code objects out of process (gprof_python_code), once per code object. */

#define GPROF_PYTHON_MAX_FRAMES 96

/* Where a Python stack was taken, and what key_tid/key_ns name. */
enum gprof_python_stack_kind {
  GPROF_PY_STACK_WAITER = 1,    /* the thread's own, as it slept: key = its off-CPU interval
                                   (key_tid = tid, key_ns = the interval's start_ns); read when it
                                   ran again, before it returned to user code */
  GPROF_PY_STACK_WAKER = 2,     /* the waker's at the wakeup (time_ns): key = the wakee's off-CPU
                                   interval (key_tid = the wakee, key_ns = its start_ns) */
  GPROF_PY_STACK_SAMPLE = 3,    /* sampled on CPU: key_tid = tid, key_ns = time_ns */
  GPROF_PY_STACK_CUDA_CALL = 4, /* at the exit of a slow CUDA call: key_tid = tid, key_ns = the
                                   call's enter_ns */
};

enum gprof_python_stack_flags {
  GPROF_PY_STACK_TRUNCATED =
      1u << 0, /* deeper than GPROF_PYTHON_MAX_FRAMES: outer frames left out */
  GPROF_PY_STACK_INCOMPLETE = 1u << 1, /* the walk stopped at a frame it could not read or that
                                          failed a check (not a code object, an offset out of its
                                          code): the frames outside it are unknown */
};

enum gprof_python_frame_flags {
  GPROF_PY_FRAME_ENTRY = 1u << 0, /* the outermost Python frame of one run of the eval loop (one
                                     _PyEval_EvalFrameDefault C frame): every frame before 3.11;
                                     3.11 is_entry; 3.12 on, the frame just inside a C-stack shim */
};

struct gprof_python_frame {
  __u64 code;   /* the code object (PyCodeObject *) */
  __s32 offset; /* byte offset of the instruction in the code's bytecode; -1: before the first */
  __s32 firstlineno; /* co_firstlineno as read with the frame */
  __u32 tag;         /* low 32 bits of (co_filename ^ co_qualname) (co_name before 3.11) as read:
                        with firstlineno, tells this code object from a later one at its address */
  __u32 flags;       /* enum gprof_python_frame_flags */
};

/* `depth` gprof_python_frame follow, innermost first. */
struct gprof_python_stack {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid; /* whose frames */
  __u64 time_ns;
  __u64 key_ns;
  __u32 key_tid;
  __u32 kind; /* enum gprof_python_stack_kind */
  __u32 depth;
  __u32 flags; /* enum gprof_python_stack_flags */
};

enum gprof_python_status {
  GPROF_PY_READABLE = 1,    /* its frames are read */
  GPROF_PY_UNSUPPORTED = 2, /* a version (or build, free-threaded) gprof-run cannot read */
  GPROF_PY_NO_LAYOUT = 3,   /* 3.13 on: the interpreter's own offsets (_Py_DebugOffsets) could
                               not be read or made no sense */
};

/* Loader record: the CPython interpreter of a process (the file defining _PyRuntime); `path_len`
 * bytes of that file's path follow. Written when first found, again after an exec. */
struct gprof_python_process {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 version_hex; /* PY_VERSION_HEX (0x030b07f0: 3.11.7); major and minor only when it came from
                        the file's name (3.9, 3.10 without Py_Version) */
  __u64 runtime;     /* _PyRuntime's address */
  __u64 time_ns;
  __u32 status; /* enum gprof_python_status */
  __u32 path_len;
};

enum gprof_python_line_format {
  GPROF_PY_LINES_LNOTAB = 1,    /* 3.9: co_lnotab (byte offset, line deltas) */
  GPROF_PY_LINES_310 = 2,       /* 3.10: co_linetable (PEP 626 ranges) */
  GPROF_PY_LINES_LOCATIONS = 3, /* 3.11 on: the location table (co_linetable, PEP 657) */
};

enum gprof_python_code_flags {
  GPROF_PY_CODE_QUALNAME = 1u << 0,   /* name is co_qualname (3.11 on), else co_name */
  GPROF_PY_CODE_UNREADABLE = 1u << 1, /* not read: `error` says why (ESRCH: the process had exited;
                                         EFAULT: its memory was gone; EINVAL: no longer a code
                                         object matching the frames' firstlineno and tag) */
};

/* Loader record: one code object of a process, as the frames name it by (code, firstlineno, tag);
 * filename_len bytes of co_filename, name_len of the function's name (UTF-8) and linetable_len of
 * its line table follow. */
struct gprof_python_code {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __s32 firstlineno;
  __u64 code;
  __u32 tag;
  __u32 line_format; /* enum gprof_python_line_format */
  __u32 code_bytes;  /* the bytecode's length: offsets beyond it are not this code's */
  __u32 flags;       /* enum gprof_python_code_flags */
  __u32 error;       /* errno, with GPROF_PY_CODE_UNREADABLE */
  __u32 filename_len;
  __u32 name_len;
  __u32 linetable_len;
};

/* Loader record: the name a thread has in Python (threading.Thread.name); name_len bytes follow. */
struct gprof_python_thread {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 time_ns;
  __u32 name_len;
  __u32 reserved;
};

/* What gprof_wait_count counts. */
enum gprof_wait_count_kind {
  GPROF_WAIT_COUNT_OFFCPU = 1, /* off-CPU intervals shorter than limit_ns */
  GPROF_WAIT_COUNT_FUTEX = 2,  /* futex(2) calls shorter than limit_ns that woke no thread that
                                  had slept that long */
};

/* Short waits, counted rather than recorded (gprof-run --count-under): one record per thread and
 * reason, per period of about a second in which it had some (the loader reads the short_waits map
 * that often, and once more at the end). Counts are of that period only. */
struct gprof_wait_count {
  struct gprof_rec_hdr hdr;
  __u32 kind; /* enum gprof_wait_count_kind */
  __u32 how;  /* OFFCPU: prev_state at switch-out (0: preempted); FUTEX: the op, as gprof_futex */
  __u32 pid;
  __u32 tid;
  __u32 syscall_nr; /* OFFCPU: the system call it slept in (~0: none, or preempted); FUTEX: the
                       call's number */
  __u32 waker_pid;  /* OFFCPU: the thread that woke it (0: none seen, or an interrupt); else 0 */
  __u32 waker_tid;
  __u32 reserved;
  __u64 object;   /* the futex word (OFFCPU: when it slept in a futex call); else 0 */
  __u64 start_ns; /* the period: from its first counted wait's start, or the period's start */
  __u64 end_ns;   /* to its last counted wait's end */
  __u64 count;
  __u64 total_ns;    /* summed duration */
  __u64 runnable_ns; /* OFFCPU: summed time runnable (from the wakeup, or preempted: all of it) */
  __u64 woken;       /* OFFCPU: waits that ended after a wakeup and some time runnable */
  __u64 limit_ns;    /* the threshold they stayed under */
};

/* ---- Native stacks copied for unwinding after the run ----
 *
 * A frame-pointer walk (bpf_get_stack) stops at the first frame of code built without frame
 * pointers (glibc, libcuda, libtorch). Instead, as perf's dwarf mode does, the programs copy the
 * thread's user registers and the top of its user stack, and the collector unwinds the copy with
 * the files' DWARF call-frame information (collector/symbols/stack_unwind.cc, the same unwinder as
 * the injected library's stack copies), through the process's maps snapshots. */

#define GPROF_NATIVE_STACK_MAX_BYTES 32768 /* the largest copy a record holds */

/* Where a native stack copy was taken, and what key_tid/key_ns name. */
enum gprof_native_stack_kind {
  GPROF_NATIVE_SAMPLE = 1, /* sampled on CPU (the cpu-clock tick): key_tid = tid, key_ns =
                              time_ns */
  GPROF_NATIVE_WAKER = 2,  /* the waker's at a wakeup (time_ns is the wakee's wake_ns): key = the
                              wakee's off-CPU interval (key_tid = the wakee, key_ns = its start) */
  GPROF_NATIVE_CUDA_CALL =
      3, /* at the return of a slow CUDA call seen by uprobes
            (GPROF_REC_CUDA_PROBE_CALL): key_tid = tid, key_ns = its enter_ns */
};

enum gprof_native_stack_flags {
  GPROF_NATIVE_IN_KERNEL = 1u << 0, /* the thread was in the kernel (a system call, a fault): the
                                       registers are those it entered with */
};

/* `copied_bytes` bytes of the user stack follow, from `sp` up: fewer than `requested_bytes` where
 * the stack's mapping ended first (a read stops at the first page it cannot read). x86-64. */
struct gprof_native_stack {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid; /* whose stack */
  __u64 time_ns;
  __u64 key_ns;
  __u32 key_tid;
  __u32 kind; /* enum gprof_native_stack_kind */
  __u64 ip;
  __u64 sp;
  __u64 bp;
  __u32 copied_bytes;
  __u32 requested_bytes;
  __u32 cpu;
  __u32 flags; /* enum gprof_native_stack_flags */
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_native_stack) == 80, "");
#else
_Static_assert(sizeof(struct gprof_native_stack) == 80, "gprof_native_stack layout");
#endif

/* Data through a pipe or a local socket. When an interrupt wakes a reader (a loopback TCP
 * segment arrives in softirq, on the irq stack), a kernel thread (ksoftirqd) or a task outside
 * the tree, the wakeup does not name the thread whose data it was: the writes do. */
enum gprof_stream_kind {
  GPROF_STREAM_PIPE = 1,
  GPROF_STREAM_UNIX = 2, /* a connected Unix socket */
  GPROF_STREAM_INET = 3, /* a TCP or UDP socket, IPv4 or IPv6 (loopback: both ends in the tree) */
};

/* A write of a thread of the tree to a pipe or socket. */
struct gprof_stream_writer {
  __u64 time_ns; /* the write call's start */
  __u32 pid;
  __u32 tid; /* 0: none */
};

/* The first read (of at least one byte) of a pipe or a socket other than TCP (a TCP read's
 * gprof_tcp_transfer says it) by a thread of the tree after an off-CPU interval of at least the
 * stack threshold that an interrupt, a kernel thread or a task outside the tree ended, with the
 * tree's last four writes to the end it read (most recent first), as the writers' system calls
 * found it: what ended the wait, when it was data. */
struct gprof_stream_read {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;      /* the read call */
  __u64 end_ns;
  __u64 wait_start_ns; /* the interval it followed (or slept in): its start_ns */
  __u64 wake_ns;       /* and its wake_ns */
  __s64 ret;           /* bytes read */
  __u32 syscall_nr;
  __u32 kind; /* enum gprof_stream_kind */
  __s32 fd;
  __u32 reserved;
  struct gprof_stream_writer writers[4];
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_stream_writer) == 16, "");
static_assert(sizeof(struct gprof_stream_read) == 136, "");
#else
_Static_assert(sizeof(struct gprof_stream_read) == 136, "gprof_stream_read layout");
#endif

/* Data through TCP, on this host or between two: both ends number the bytes of one direction of a
 * connection alike (the sequence numbers, from the sender's initial one), so a receiver's bytes
 * [a, b) were queued by the send whose [seq_start, seq_end) holds them, whichever host recorded
 * it. Addresses and ports as this end sees them: the peer's record has them swapped. */
enum gprof_tcp_direction {
  GPROF_TCP_SEND = 1,    /* write, writev, send, sendto, sendmsg, sendmmsg */
  GPROF_TCP_RECEIVE = 2, /* read, readv, recv, recvfrom, recvmsg, recvmmsg */
};

/* A system call of a thread of the tree on a TCP socket (IPv4 or IPv6) that moved bytes through
 * it: a send's queued bytes (the tcp_sock's write_seq at entry and at exit), a receive's consumed
 * ones (copied_seq at entry and exit; a peek moves none and is not recorded). Sequence numbers
 * wrap at 2^32. Where the call is the first receive that moved bytes after an off-CPU interval
 * that an interrupt, a kernel thread or a task outside the tree ended (for a pipe or another
 * socket, gprof_stream_read says it), that interval's start and wake; else 0. */
struct gprof_tcp_transfer {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 start_ns; /* the call */
  __u64 end_ns;
  __u64 wait_start_ns;
  __u64 wake_ns;
  __u8 local_addr[16]; /* IPv6, network order; IPv4 as ::ffff:a.b.c.d */
  __u8 remote_addr[16];
  __u16 local_port; /* host order */
  __u16 remote_port;
  __u32 seq_start;
  __u32 seq_end;
  __u16 direction; /* enum gprof_tcp_direction */
  __u16 syscall_nr;
  __s32 fd;
  __u32 reserved;
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_tcp_transfer) == 104, "");
#else
_Static_assert(sizeof(struct gprof_tcp_transfer) == 104, "gprof_tcp_transfer layout");
#endif


#ifdef __cplusplus
static_assert(sizeof(struct gprof_python_frame) == 24, "");
static_assert(sizeof(struct gprof_python_stack) == 48, "");
static_assert(sizeof(struct gprof_python_process) == 40, "");
static_assert(sizeof(struct gprof_python_code) == 56, "");
static_assert(sizeof(struct gprof_python_thread) == 32, "");
#else
_Static_assert(sizeof(struct gprof_python_frame) == 24, "gprof_python_frame layout");
_Static_assert(sizeof(struct gprof_python_stack) == 48, "gprof_python_stack layout");
#endif

#ifdef __cplusplus
static_assert(sizeof(struct gprof_rec_hdr) == 8, "");
static_assert(sizeof(struct gprof_wait_count) == 104, "");
static_assert(sizeof(struct gprof_event_count) == 56, "");
static_assert(__builtin_offsetof(struct gprof_event_count, time_ns) ==
                  GPROF_EVENT_COUNT_FIRST_SIZE, "the older records end where time_ns begins");
static_assert(sizeof(struct gprof_offcpu) == 96, "");
static_assert(sizeof(struct gprof_lock_wait) == 80, "");
static_assert(sizeof(struct gprof_device_wait) == 72, "");
static_assert(sizeof(struct gprof_page_fault) == 48, "");
static_assert(sizeof(struct gprof_memory_map) == 104, "");
static_assert(sizeof(struct gprof_futex_waitv) == 88, "");
static_assert(sizeof(struct gprof_user_stack) == 24, "");
static_assert(sizeof(struct gprof_process_maps) == 24, "");
static_assert(sizeof(struct gprof_launch_variables) == 24, "");
static_assert(sizeof(struct gprof_futex) == 88, "");
static_assert(sizeof(struct gprof_task_new) == 72, "");
static_assert(sizeof(struct gprof_task_rename) == 48, "");
static_assert(sizeof(struct gprof_task_exit) == 32, "");
static_assert(sizeof(struct gprof_kernel_stack) == 16, "");
static_assert(sizeof(struct gprof_kernel_symbol) == 24, "");
static_assert(sizeof(struct gprof_lost) == 32, "");
static_assert(sizeof(struct gprof_signal) == 64, "");
#else
_Static_assert(sizeof(struct gprof_offcpu) == 96, "gprof_offcpu layout");
_Static_assert(sizeof(struct gprof_lock_wait) == 80, "gprof_lock_wait layout");
_Static_assert(sizeof(struct gprof_device_wait) == 72, "gprof_device_wait layout");
_Static_assert(sizeof(struct gprof_page_fault) == 48, "gprof_page_fault layout");
_Static_assert(sizeof(struct gprof_memory_map) == 104, "gprof_memory_map layout");
_Static_assert(sizeof(struct gprof_futex_waitv) == 88, "gprof_futex_waitv layout");
_Static_assert(sizeof(struct gprof_futex) == 88, "gprof_futex layout");
_Static_assert(sizeof(struct gprof_task_new) == 72, "gprof_task_new layout");
_Static_assert(sizeof(struct gprof_task_rename) == 48, "gprof_task_rename layout");
_Static_assert(sizeof(struct gprof_task_exit) == 32, "gprof_task_exit layout");
_Static_assert(sizeof(struct gprof_event_count) == 56, "gprof_event_count layout");
_Static_assert(__builtin_offsetof(struct gprof_event_count, time_ns) ==
                   GPROF_EVENT_COUNT_FIRST_SIZE, "the older records end where time_ns begins");
_Static_assert(sizeof(struct gprof_signal) == 64, "gprof_signal layout");
_Static_assert(sizeof(struct gprof_wait_count) == 104, "gprof_wait_count layout");
#endif

#define GPROF_CUDA_PROBE_NAME_LEN 48

/* A CUDA driver call (a cu* entry point of libcuda), seen by a uprobe at its entry and a uretprobe
 * at its return where no injected library records CUDA calls (gprof-run -p, bpf/cuda_probes.bpf.h):
 * the outermost cu* call of a thread, a cu* function that calls another being one call. `name`:
 * the function's, NUL-padded; return_value: its CUresult; user_stack_id: the thread's user stack
 * at the return of a slow call, from the caller's frame on (a frame-pointer walk; < 0: none). */
struct gprof_cuda_probe_call {
  struct gprof_rec_hdr hdr;
  __u32 pid;
  __u32 tid;
  __u64 enter_ns;
  __u64 exit_ns;
  __s32 return_value;
  __s32 user_stack_id;
  char name[GPROF_CUDA_PROBE_NAME_LEN];
};

#ifdef __cplusplus
static_assert(sizeof(struct gprof_cuda_probe_call) == 88, "");
#else
_Static_assert(sizeof(struct gprof_cuda_probe_call) == 88, "gprof_cuda_probe_call layout");
#endif

#endif /* GPROF_KERNEL_EVENTS_H */
