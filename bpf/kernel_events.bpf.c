// SPDX-License-Identifier: GPL-2.0
/* gprof-run's kernel recorder: what the kernel did with every thread of the target's process tree.
 *
 * Filtering happens here, not in user space: scheduler events can exceed a million a second
 * machine-wide, and only the tree's share may reach the ring buffer. The tree is the `tracked`
 * map of tgids (the loader adds the root; fork adds children). Per-thread state lives in hash maps
 * keyed by tid; a record is emitted when an interval ends (switch-in, futex return).
 *
 * All programs are tp_btf (BTF-typed raw tracepoints): no tracefs needed, typed arguments. The
 * argument lists match Linux 6.18 (checked with `bpftool btf dump file /sys/kernel/btf/vmlinux`,
 * btf_trace_<name>); sched_switch has had its prev_state argument since 5.18. */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "kernel_events.h"

char LICENSE[] SEC("license") = "GPL";

#define NR_FUTEX 202 /* x86_64; 32-bit (compat) tasks use other numbers and are not seen */

#define FUTEX_WAIT 0
#define FUTEX_LOCK_PI 6
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2 13
#define FUTEX_CMD_MASK (~(128 | 256)) /* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) */

#define TASK_DEAD 0x80 /* include/linux/sched.h */

/* Settings, written by the loader between open and load. */
const volatile __u32 self_tgid = 0; /* the recorder's own process: never tracked */
/* Wake the consumer only once this much is waiting (0: the kernel's default of waking on every
 * record that finds the consumer caught up). The loader polls with a timeout anyway, so batching
 * costs latency only, and saves a wakeup of gprof-run per event on a busy machine. */
const volatile __u64 wakeup_bytes = 0;
/* Kernel stacks cost an unwind each (about 2-3 us on the project's VMs, most of a switch's cost);
 * with 0 every stack id is -ENODATA and nothing is counted as lost. */
const volatile __u32 capture_stacks = 1;

#define ENODATA 61

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 << 20); /* the loader sets the real size */
} events SEC(".maps");

/* The target's process tree, by tgid. Entries leave when the last thread of the process exits. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u8);
} tracked SEC(".maps");

/* Kernel stacks by id. No BPF_F_REUSE_STACKID: an id in a record must keep meaning its stack until
 * the loader has read it; a bucket collision fails the new stack instead (counted). */
struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(max_entries, 16384); /* the loader may change it */
  __uint(key_size, sizeof(__u32));
  __uint(value_size, GPROF_MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/* Threads of the tree that are off-CPU now, by tid. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct gprof_offcpu_pending);
} offcpu_pending SEC(".maps");

/* futex() calls of the tree in progress, by tid. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct gprof_futex_pending);
} futex_pending SEC(".maps");

/* Everything the programs could not record, by GPROF_LOST_SLOT(kind, record type). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, GPROF_LOST_SLOTS);
  __type(key, __u32);
  __type(value, __u64);
} lost SEC(".maps");

static __always_inline void count_lost(__u32 kind, __u32 type) {
  __u32 slot = GPROF_LOST_SLOT(kind, type);
  __u64* counter = bpf_map_lookup_elem(&lost, &slot);
  if (counter) __sync_fetch_and_add(counter, 1); /* per-CPU, but an NMI may nest */
}

static __always_inline bool is_tracked(__u32 tgid) {
  return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/* The current task's kernel stack id, or -errno (counted as lost: a bucket collision, -EEXIST,
 * or a full map, -ENOMEM, in practice). */
static __always_inline __s32 kernel_stack(void* ctx, __u32 record_type) {
  if (!capture_stacks) return -ENODATA;
  long id = bpf_get_stackid(ctx, &stacks, 0);
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

static __always_inline void submit(void* record) {
  __u64 flags = 0;
  if (wakeup_bytes) {
    flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                            : BPF_RB_NO_WAKEUP;
  }
  bpf_ringbuf_submit(record, flags);
}

#define USER_DS 0x2b /* __USER_DS: the stack segment of every user-mode entry frame */

/* Whether the program runs in interrupt context (hardirq, softirq run at irq exit, NMI), where
 * `current` is whatever task the interrupt hit and must not be named as the waker.
 *
 * The preempt count would say so directly, but it is a per-CPU variable that a program can only
 * reach as a ksym, and kernels without CONFIG_KALLSYMS_ALL (this project's machines) cannot
 * resolve those. So, x86_64 specifics instead:
 *  - an interrupt that hits kernel mode runs on the per-CPU irq stack (NMIs on their own IST
 *    stack): the program's stack is outside the current task's stack;
 *  - an interrupt that hits user mode runs on the task stack, which then holds just the entry
 *    frame at its top, and interrupt entries store orig_ax = -1 where a syscall stores its number
 *    and an exception its error code (kernel threads have a zeroed frame).
 * Softirqs run by ksoftirqd and threaded irq handlers are task context: their thread is named. */
static __always_inline bool in_interrupt(void) {
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
  volatile char marker = 0; /* an object on this program's stack */
  __u64 here = (__u64)&marker;
  if (here < base || here >= base + size) return true;

  /* The user entry frame sits at the top of the stack, or 16 bytes lower on FRED kernels. Only the
   * right position shows a user CS and SS: read 16 bytes off, the SS slot holds RFLAGS, which
   * always has IF (0x200) set in user mode. */
  __u64 regs_size = bpf_core_type_size(struct pt_regs);
  for (int padding = 0; padding <= 16; padding += 16) {
    struct pt_regs* regs = (struct pt_regs*)(base + size - padding - regs_size);
    __u64 cs = BPF_CORE_READ(regs, cs);
    __u64 ss = BPF_CORE_READ(regs, ss);
    if ((cs & 3) == 3 && ss == USER_DS) return (long)BPF_CORE_READ(regs, orig_ax) == -1;
  }
  return false;
}

/* Scheduler ------------------------------------------------------------------------------------ */

SEC("tp_btf/sched_switch")
int on_sched_switch(u64* ctx) {
  /* (bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) */
  bool preempt = (bool)ctx[0];
  struct task_struct* prev = (struct task_struct*)ctx[1];
  struct task_struct* next = (struct task_struct*)ctx[2];
  __u32 prev_state = (__u32)ctx[3];
  __u64 now = bpf_ktime_get_ns();

  /* Switch-out. A dying thread's last switch (TASK_DEAD) never comes back: no entry for it. */
  __u32 prev_tid = prev->pid;
  if (prev_tid != 0 && !(prev_state & TASK_DEAD) && is_tracked(prev->tgid)) {
    struct gprof_offcpu_pending entry = {};
    entry.start_ns = now;
    entry.pid = prev->tgid;
    /* A preempted task may have set a sleeping state it had not acted on yet: it is runnable. */
    entry.state = preempt ? 0 : prev_state;
    entry.kstack_id = kernel_stack(ctx, GPROF_REC_OFFCPU);
    entry.waker_kstack_id = -1;
    entry.cpu = bpf_get_smp_processor_id();
    if (bpf_map_update_elem(&offcpu_pending, &prev_tid, &entry, BPF_ANY) != 0) {
      count_lost(GPROF_LOST_PENDING, GPROF_REC_OFFCPU);
    }
  }

  /* Switch-in. Only threads that were tracked at switch-out have an entry, so no tracked lookup:
   * an interval still ends when its process left the tree meanwhile (nothing leaks). */
  __u32 next_tid = next->pid;
  if (next_tid == 0) return 0;
  struct gprof_offcpu_pending* entry = bpf_map_lookup_elem(&offcpu_pending, &next_tid);
  if (!entry) return 0;
  struct gprof_offcpu* rec = reserve(sizeof(*rec), GPROF_REC_OFFCPU);
  if (rec) {
    rec->pid = entry->pid;
    rec->tid = next_tid;
    rec->start_ns = entry->start_ns;
    rec->end_ns = now;
    rec->wake_ns = entry->wake_ns;
    rec->waker_pid = entry->waker_pid;
    rec->waker_tid = entry->waker_tid;
    rec->kstack_id = entry->kstack_id;
    rec->waker_kstack_id = entry->waker_kstack_id;
    rec->state = entry->state;
    rec->cpu = bpf_get_smp_processor_id();
    __builtin_memcpy(rec->waker_comm, entry->waker_comm, GPROF_COMM_LEN);
    submit(rec);
  }
  bpf_map_delete_elem(&offcpu_pending, &next_tid);
  return 0;
}

/* Runs in the waker's context (sched_wakeup often runs from an IPI on the wakee's CPU, where
 * current is the idle task). The last waking before the switch-in wins. */
SEC("tp_btf/sched_waking")
int on_sched_waking(u64* ctx) {
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 tid = p->pid;
  struct gprof_offcpu_pending* entry = bpf_map_lookup_elem(&offcpu_pending, &tid);
  if (!entry) return 0;
  entry->wake_ns = bpf_ktime_get_ns();
  char comm[GPROF_COMM_LEN] = {};
  if (in_interrupt()) {
    entry->waker_pid = 0;
    entry->waker_tid = 0;
    __builtin_memcpy(comm, "[irq]", 6);
  } else {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    entry->waker_pid = pid_tgid >> 32;
    entry->waker_tid = (__u32)pid_tgid;
    bpf_get_current_comm(comm, sizeof(comm)); /* NUL-padded by the helper */
  }
  __builtin_memcpy(entry->waker_comm, comm, GPROF_COMM_LEN);
  entry->waker_kstack_id = kernel_stack(ctx, GPROF_REC_OFFCPU);
  return 0;
}

/* Processes and threads ------------------------------------------------------------------------- */

SEC("tp_btf/sched_process_fork")
int on_sched_process_fork(u64* ctx) {
  /* (struct task_struct *parent, struct task_struct *child); runs for threads too */
  struct task_struct* parent = (struct task_struct*)ctx[0];
  struct task_struct* child = (struct task_struct*)ctx[1];
  __u32 parent_tgid = parent->tgid;
  __u32 child_tgid = child->tgid;
  if (child_tgid == parent_tgid || child_tgid == self_tgid) return 0;
  if (!is_tracked(parent_tgid)) return 0;
  __u8 one = 1;
  if (bpf_map_update_elem(&tracked, &child_tgid, &one, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_TRACKED, GPROF_REC_TASK_NEW);
  }
  return 0;
}

/* First wakeup of a new task: fires in the forking thread, after sched_process_fork. */
SEC("tp_btf/sched_wakeup_new")
int on_sched_wakeup_new(u64* ctx) {
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 tgid = p->tgid;
  if (!is_tracked(tgid)) return 0;
  struct gprof_task_new* rec = reserve(sizeof(*rec), GPROF_REC_TASK_NEW);
  if (!rec) return 0;
  __u64 parent = bpf_get_current_pid_tgid();
  rec->pid = tgid;
  rec->tid = p->pid;
  rec->parent_pid = parent >> 32;
  rec->parent_tid = (__u32)parent;
  rec->time_ns = bpf_ktime_get_ns();
  rec->parent_kstack_id = kernel_stack(ctx, GPROF_REC_TASK_NEW);
  rec->flags = rec->parent_pid == tgid ? GPROF_TASK_NEW_THREAD : 0;
  bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), p->comm);
  submit(rec);
  return 0;
}

static __always_inline void emit_rename(__u32 pid, __u32 tid, const char* comm, __u32 is_exec) {
  struct gprof_task_rename* rec = reserve(sizeof(*rec), GPROF_REC_TASK_RENAME);
  if (!rec) return;
  rec->pid = pid;
  rec->tid = tid;
  rec->time_ns = bpf_ktime_get_ns();
  rec->is_exec = is_exec;
  /* Exec passes the whole file name: the kernel keeps 15 bytes and a NUL, and so does this. */
  bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), comm);
  submit(rec);
}

/* __set_task_comm: prctl(PR_SET_NAME), writes to /proc/.../comm (pthread_setname_np of another
 * thread: `task` is then not current), and exec. */
SEC("tp_btf/task_rename")
int on_task_rename(u64* ctx) {
  /* (struct task_struct *task, const char *comm): comm is the new name, not yet copied */
  struct task_struct* task = (struct task_struct*)ctx[0];
  const char* comm = (const char*)ctx[1];
  __u32 tgid = task->tgid;
  if (!is_tracked(tgid)) return 0;
  /* exec renames the task before sched_process_exec fires, which reports it with is_exec. */
  struct task_struct* current = bpf_get_current_task_btf();
  if (task->pid == current->pid && BPF_CORE_READ_BITFIELD(current, in_execve)) return 0;
  emit_rename(tgid, task->pid, comm, 0);
  return 0;
}

SEC("tp_btf/sched_process_exec")
int on_sched_process_exec(u64* ctx) {
  /* (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) */
  struct task_struct* p = (struct task_struct*)ctx[0];
  __u32 tgid = p->tgid;
  if (!is_tracked(tgid)) return 0;
  emit_rename(tgid, p->pid, p->comm, 1);
  return 0;
}

SEC("tp_btf/sched_process_exit")
int on_sched_process_exit(u64* ctx) {
  /* (struct task_struct *p, bool group_dead); p is current */
  struct task_struct* p = (struct task_struct*)ctx[0];
  bool group_dead = (bool)ctx[1];
  __u32 tgid = p->tgid;
  __u32 tid = p->pid;
  if (!is_tracked(tgid)) return 0;
  struct gprof_task_exit* rec = reserve(sizeof(*rec), GPROF_REC_TASK_EXIT);
  if (rec) {
    rec->pid = tgid;
    rec->tid = tid;
    rec->time_ns = bpf_ktime_get_ns();
    rec->exit_code = p->exit_code;
    submit(rec);
  }
  /* The thread is running, so it has no off-CPU entry, and futex entries end at syscall exit;
   * deleting both anyway keeps a missed event from leaking an entry to a reused tid. */
  bpf_map_delete_elem(&futex_pending, &tid);
  bpf_map_delete_elem(&offcpu_pending, &tid);
  /* The last thread of the process: the tgid may be reused by an unrelated process. */
  if (group_dead) bpf_map_delete_elem(&tracked, &tgid);
  return 0;
}

/* futex ------------------------------------------------------------------------------------------ */

static __always_inline bool futex_has_timeout(__u32 op) {
  __u32 cmd = op & FUTEX_CMD_MASK;
  return cmd == FUTEX_WAIT || cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2 ||
         cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_WAIT_REQUEUE_PI;
}

SEC("tp_btf/sys_enter")
int on_sys_enter(u64* ctx) {
  /* (struct pt_regs *regs, long id) */
  if ((long)ctx[1] != NR_FUTEX) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  if (!is_tracked(tgid)) return 0;
  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  /* futex(uaddr, op, val, timeout or val2, uaddr2, val3): di, si, dx, r10, r8, r9 */
  struct gprof_futex_pending entry = {};
  entry.start_ns = bpf_ktime_get_ns();
  entry.pid = tgid;
  entry.uaddr = regs->di;
  entry.op = (__u32)regs->si;
  entry.val = (__u32)regs->dx;
  entry.uaddr2 = regs->r8;
  entry.val3 = (__u32)regs->r9;
  entry.timeout_ns = -1;
  const void* timeout = (const void*)regs->r10;
  if (timeout && futex_has_timeout(entry.op)) {
    struct {
      __s64 tv_sec;
      __s64 tv_nsec;
    } ts;
    /* Cannot fault here: a timespec on a page not resident reads as "unreadable" (-2). */
    if (bpf_probe_read_user(&ts, sizeof(ts), timeout) == 0) {
      entry.timeout_ns = ts.tv_sec * 1000000000ll + ts.tv_nsec;
    } else {
      entry.timeout_ns = -2;
    }
  }
  if (bpf_map_update_elem(&futex_pending, &tid, &entry, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_PENDING, GPROF_REC_FUTEX);
  }
  return 0;
}

SEC("tp_btf/sys_exit")
int on_sys_exit(u64* ctx) {
  /* (struct pt_regs *regs, long ret); the syscall number is in orig_ax */
  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  if (regs->orig_ax != NR_FUTEX) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct gprof_futex_pending* entry = bpf_map_lookup_elem(&futex_pending, &tid);
  if (!entry) return 0;
  struct gprof_futex* rec = reserve(sizeof(*rec), GPROF_REC_FUTEX);
  if (rec) {
    rec->pid = entry->pid;
    rec->tid = tid;
    rec->start_ns = entry->start_ns;
    rec->end_ns = bpf_ktime_get_ns();
    rec->uaddr = entry->uaddr;
    rec->uaddr2 = entry->uaddr2;
    rec->op = entry->op;
    rec->val = entry->val;
    rec->val3 = entry->val3;
    rec->timeout_ns = entry->timeout_ns;
    rec->ret = (long)ctx[1];
    submit(rec);
  }
  bpf_map_delete_elem(&futex_pending, &tid);
  return 0;
}
