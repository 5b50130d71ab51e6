/* Short waits counted, not recorded (included by kernel_events.bpf.c, after its maps and helpers).
 *
 * A switch-heavy program (a ping-pong, a lock convoy) hands over thousands of times a second, and
 * each hand-over left an off-CPU record and two futex records in the ring buffer: most of a long
 * run's trace, for waits far below anything the diagnosis explains. Waits shorter than
 * count_under_ns are added to per-thread, per-reason totals in the short_waits map instead, which
 * the loader reads about once a second (GPROF_REC_WAIT_COUNT records of the changes).
 *
 * A wait's length is known only when it ends, but the waker's futex call ends first, and it is
 * what names the releaser of a lock: a waker that wakes a thread that has slept count_under_ns or
 * more marks its call (futex.woke_long) so that it is recorded whatever its own length. So the
 * short path, a short wait's switch-in and the short futex calls on both sides, costs no
 * ring-buffer record, and no lookup beyond the thread's own entry while its reasons repeat (the
 * entry remembers where the totals of its last two of each kind are); a long wakee costs its
 * waker one more lookup. */
#ifndef GPROF_SHORT_WAITS_BPF_H
#define GPROF_SHORT_WAITS_BPF_H

/* Off-CPU intervals and futex calls shorter than this are counted (0: every one is recorded). */
const volatile __u64 count_under_ns = 20000;

/* Running totals by thread and reason since the recording started: the reason's slot in
 * short_wait_totals. When either is full, a short wait of a new reason is recorded as before. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768); /* the loader may change it */
  __type(key, struct gprof_short_wait_key);
  __type(value, __u32);
} short_waits SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 32768); /* the loader sizes it as short_waits */
  __type(key, __u32);
  __type(value, struct gprof_short_wait_counts);
} short_wait_totals SEC(".maps");

/* Slots are handed out without atomics (the programs are built for BPF v1, which has no
 * fetch-and-add): slot = (n * possible_cpus + cpu) * 2 + kind, n counted per CPU and kind. Each
 * kind takes slots in one program only (off-CPU intervals at sched_switch, futex calls at
 * sys_exit), and a program never runs nested on its own CPU (the kernel skips such a run), so
 * the per-CPU count needs no lock. */
const volatile __u32 possible_cpus = 1;

#define SHORT_WAIT_OFFCPU 0 /* the kinds' slot bit, and their half of counted[] */
#define SHORT_WAIT_FUTEX 1

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u32);
} short_wait_slots_taken SEC(".maps");

static __always_inline bool same_reason(const struct gprof_short_wait_key* a,
                                        const struct gprof_short_wait_key* b) {
  const __u64* x = (const __u64*)a;
  const __u64* y = (const __u64*)b;
  return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

/* The totals of `key` (of `kind`, counted for `thread`), created on its first wait; NULL when
 * the maps are full. */
static __always_inline struct gprof_short_wait_counts* short_wait_totals_of(
    struct gprof_thread_state* thread, __u32 kind, const struct gprof_short_wait_key* key,
    __u64 start_ns) {
  struct gprof_short_wait_slot* last = &thread->counted[kind * 2];
  __u32 slot;
  if (last[0].slot && same_reason(&last[0].key, key)) {
    slot = last[0].slot - 1;
  } else if (last[1].slot && same_reason(&last[1].key, key)) {
    slot = last[1].slot - 1;
  } else {
    __u32* known = bpf_map_lookup_elem(&short_waits, key);
    if (known) {
      slot = *known;
    } else {
      __u32* taken = bpf_map_lookup_elem(&short_wait_slots_taken, &kind);
      if (!taken) return NULL;
      slot = (*taken * possible_cpus + bpf_get_smp_processor_id()) * 2 + kind;
      struct gprof_short_wait_counts* fresh = bpf_map_lookup_elem(&short_wait_totals, &slot);
      if (!fresh) return NULL; /* this CPU's share of the slots is used up */
      *taken += 1;
      fresh->first_ns = start_ns; /* before the key makes it visible to the loader */
      if (bpf_map_update_elem(&short_waits, key, &slot, BPF_NOEXIST) != 0) return NULL;
    }
    __builtin_memcpy(&last[1], &last[0], sizeof(last[0]));
    __builtin_memcpy(&last[0].key, key, sizeof(*key));
    last[0].slot = slot + 1;
  }
  return bpf_map_lookup_elem(&short_wait_totals, &slot);
}

/* At switch-out of a thread going to sleep: the system call it sleeps in, and a futex call's
 * word, from its user registers (plain loads: no map, no probe read). */
static __always_inline void note_blocking_call(struct gprof_offcpu_pending* entry) {
  entry->syscall_nr = ~0u;
  entry->object = 0;
  if (!count_under_ns) return;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(bpf_get_current_task_btf());
  if (!regs) return;
  long nr = (long)regs->orig_ax;
  entry->syscall_nr = (__u32)nr;
  if (nr == NR_FUTEX || nr == NR_FUTEX_WAIT) entry->object = regs->di;
}

/* At switch-in, with `now`: counts the interval of `entry` if it was short. Returns whether it
 * did (the caller then records nothing). */
static __always_inline bool count_short_offcpu(struct gprof_thread_state* thread, __u32 tid,
                                               __u64 now) {
  const struct gprof_offcpu_pending* entry = &thread->offcpu;
  __u64 duration = now - entry->start_ns;
  if (duration >= count_under_ns) return false;
  struct gprof_short_wait_key key = {};
  key.pid = entry->pid;
  key.tid = tid;
  key.kind = GPROF_WAIT_COUNT_OFFCPU;
  key.how = entry->state;
  key.syscall_nr = entry->state ? entry->syscall_nr : ~0u;
  key.object = entry->state ? entry->object : 0;
  bool woke = entry->state && was_woken(entry) && entry->wake_ns <= now;
  if (woke) {
    key.waker_pid = entry->waker_pid;
    key.waker_tid = entry->waker_tid;
  }
  struct gprof_short_wait_counts* totals =
      short_wait_totals_of(thread, SHORT_WAIT_OFFCPU, &key, entry->start_ns);
  if (!totals) return false;
  /* Only this thread's switch-in adds to its keys, one at a time: no atomics needed. */
  totals->count += 1;
  totals->total_ns += duration;
  if (!entry->state) {
    totals->runnable_ns += duration;
  } else if (woke) {
    totals->runnable_ns += now - entry->wake_ns;
    if (now > entry->wake_ns) totals->woken += 1;
  }
  totals->last_ns = now;
  return true;
}

/* At a futex call's return: counts it if it was short and woke no long sleeper. */
static __always_inline bool count_short_futex(struct gprof_thread_state* thread, __u32 tid,
                                              __u64 now) {
  const struct gprof_syscall_pending* entry = &thread->syscall;
  __u64 duration = now - entry->start_ns;
  if (duration >= count_under_ns || entry->futex.woke_long) return false;
  struct gprof_short_wait_key key = {};
  key.pid = entry->pid;
  key.tid = tid;
  key.kind = GPROF_WAIT_COUNT_FUTEX;
  key.how = entry->futex.op;
  key.syscall_nr = entry->nr;
  key.object = entry->futex.uaddr;
  struct gprof_short_wait_counts* totals =
      short_wait_totals_of(thread, SHORT_WAIT_FUTEX, &key, entry->start_ns);
  if (!totals) return false;
  totals->count += 1;
  totals->total_ns += duration;
  totals->last_ns = now;
  return true;
}

/* At a wakeup in the waker's context, when the wakee had slept (`slept_ns`) at least
 * count_under_ns: the waker's futex call, if it is in one, is recorded (it may release a lock the
 * diagnosis names). */
static __always_inline void note_long_wakeup(__u64 slept_ns) {
  if (!count_under_ns || slept_ns < count_under_ns) return;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct gprof_thread_state* waker = bpf_map_lookup_elem(&threads, &tid);
  if (!waker) return;
  struct gprof_syscall_pending* call = &waker->syscall;
  if (call->start_ns != 0 &&
      (call->nr == NR_FUTEX || call->nr == NR_FUTEX_WAKE || call->nr == NR_FUTEX_REQUEUE))
    call->futex.woke_long = 1;
}

#endif /* GPROF_SHORT_WAITS_BPF_H */
