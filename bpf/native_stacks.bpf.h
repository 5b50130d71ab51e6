/* Native stacks: the user registers of a thread and a copy of the top of its user stack, unwound
 * after the run by the collector with the files' DWARF call-frame information (as perf's dwarf
 * mode does): a frame-pointer walk stops at the first frame of code built without frame pointers
 * (glibc's __lll_lock_wake_private, libcuda, libtorch). Part of kernel_events.bpf.c, included
 * after its maps, its helpers and python_stacks.bpf.h.
 *
 * Taken at the sampling tick on CPU (with the Python stack, where the thread runs Python) and, for
 * a wakeup that ends a long wait, in the waker. The registers are the task's user registers
 * (bpf_task_pt_regs): where it was in user code, also when the tick or the wakeup finds it in a
 * system call. The copy reads page by page from the stack pointer up and stops at the first page
 * it cannot read (the top of the stack's mapping): a shorter copy, never a failed one. */

/* Set by the loader: bytes of user stack each copy takes (at most GPROF_NATIVE_STACK_MAX_BYTES);
 * 0: no native stacks are copied. */
const volatile __u32 native_copy_bytes = 0;
/* The waker's stack is copied at a wakeup that ends a wait at least this long (and only then: a
 * copy costs a few microseconds in the waker's critical path); 0: never. */
const volatile __u64 waker_copy_min_ns = 0;

#define NATIVE_SLOT_SCHED 0  /* sched_waking: interrupts are off there */
#define NATIVE_SLOT_SAMPLE 1 /* the cpu-clock tick (an hrtimer interrupt) */
#define NATIVE_SLOT_UPROBE 2 /* a slow CUDA call's return (cuda_probes.bpf.h): a task trap */
#define NATIVE_SLOTS 3
#define NATIVE_PAGE 4096

/* One copy's record, built here and written with its real length (bpf_ringbuf_output). A page
 * more than a copy takes: a page read at any offset below the most stays inside, which is what
 * the verifier checks. */
struct native_copy {
  struct gprof_native_stack rec;
  __u8 bytes[GPROF_NATIVE_STACK_MAX_BYTES + NATIVE_PAGE];
};

/* NATIVE_SLOTS slots per CPU, at cpu * NATIVE_SLOTS + slot: a per-CPU array's values are limited to
 * 32 KiB. The loader sizes it (NATIVE_SLOTS * possible_cpus). */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, struct native_copy);
} native_copies SEC(".maps");

struct native_loop {
  struct native_copy* copy;
  __u64 sp;
  __u32 copied;
  __u32 limit;
};

/* One page (the first: up to the page's end) of the user stack, or the copy's end. */
static long native_copy_step(__u32 index, void* ctx) {
  struct native_loop* loop = ctx;
  __u32 copied = loop->copied;
  if (copied >= loop->limit || copied >= GPROF_NATIVE_STACK_MAX_BYTES) return 1;
  __u64 at = loop->sp + copied;
  /* 64-bit throughout: a 32-bit size is zero-extended for the check and passed unextended. */
  __u64 chunk = NATIVE_PAGE - (at & (NATIVE_PAGE - 1));
  __u64 left = (__u64)loop->limit - copied;
  if (chunk > left) chunk = left;
  if (chunk > NATIVE_PAGE) return 1;
  if (bpf_probe_read_user(&loop->copy->bytes[copied], chunk, (const void*)at) != 0) return 1;
  loop->copied = copied + chunk;
  return 0;
}

/* Copies the current thread's user registers and stack top as a gprof_native_stack of `kind`
 * keyed by (key_tid, key_ns), taken at `now`. `in_kernel`: the thread is in the kernel. */
static __always_inline void native_stack(__u32 slot, __u32 kind, __u32 key_tid, __u64 key_ns,
                                         __u64 now, bool in_kernel) {
  if (native_copy_bytes == 0) return;
  struct task_struct* task = bpf_get_current_task_btf();
  if (task->flags & PF_KTHREAD) return;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  if (!regs) return;
  __u32 index = bpf_get_smp_processor_id() * NATIVE_SLOTS + slot;
  struct native_copy* copy = bpf_map_lookup_elem(&native_copies, &index);
  if (!copy) return;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  struct gprof_native_stack* rec = &copy->rec;
  rec->hdr.type = GPROF_REC_NATIVE_STACK;
  rec->hdr.reserved = 0;
  rec->pid = pid_tgid >> 32;
  rec->tid = (__u32)pid_tgid;
  rec->time_ns = now;
  rec->key_ns = key_ns;
  rec->key_tid = key_tid;
  rec->kind = kind;
  rec->ip = BPF_CORE_READ(regs, ip);
  rec->sp = BPF_CORE_READ(regs, sp);
  rec->bp = BPF_CORE_READ(regs, bp);
  rec->requested_bytes = native_copy_bytes;
  rec->cpu = bpf_get_smp_processor_id();
  rec->flags = in_kernel ? GPROF_NATIVE_IN_KERNEL : 0;
  /* The main thread's stack ends where the process started (mm->start_stack): above it lie argc,
   * argv, the environment and the auxiliary vector, often the command's secrets, never a frame:
   * the copy stops there, as the injected library's does (inject/native_stack.cc). */
  __u32 limit = native_copy_bytes;
  __u64 start_stack = BPF_CORE_READ(task, mm, start_stack);
  if (rec->sp < start_stack && start_stack - rec->sp < limit) limit = start_stack - rec->sp;
  struct native_loop loop = {.copy = copy, .sp = rec->sp, .copied = 0, .limit = limit};
  bpf_loop(GPROF_NATIVE_STACK_MAX_BYTES / NATIVE_PAGE + 1, native_copy_step, &loop, 0);
  __u32 copied = loop.copied;
  if (copied > GPROF_NATIVE_STACK_MAX_BYTES) return;
  rec->copied_bytes = copied;
  __u32 size = sizeof(*rec) + copied;
  rec->hdr.size = size;
  if (bpf_ringbuf_output(&events, copy, size, wakeup_flags()) != 0)
    count_lost(GPROF_LOST_RINGBUF, GPROF_REC_NATIVE_STACK);
}

/* The sampling tick on every CPU (cpu-clock, gprof-run --sample-hz): what a thread of the tree
 * that runs there was running, natively and in Python. */
SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data* ctx) {
  if (window_shut) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (!in_window(now)) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  if (tid == 0 || !is_tracked(pid_tgid >> 32)) return 0;
  /* cs is 16 bits of its word, which the context lets a program read only whole. */
  __u64 cs = *(__u64*)((char*)ctx + __builtin_offsetof(struct bpf_perf_event_data, regs) +
                       __builtin_offsetof(struct pt_regs, cs));
  bool in_kernel = (cs & 3) != 3;
  native_stack(NATIVE_SLOT_SAMPLE, GPROF_NATIVE_SAMPLE, tid, now, now, in_kernel);
  python_stack(PY_SLOT_SAMPLE, GPROF_PY_STACK_SAMPLE, tid, now);
  return 0;
}
