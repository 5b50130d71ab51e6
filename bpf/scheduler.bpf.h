/* Scheduler: the tree's threads switched out and in (off-CPU intervals, with their stacks) and
 * woken (the waker, its stacks). Part of kernel_events.bpf.c, included after its maps and helpers. */
#ifndef GPROF_SCHEDULER_BPF_H
#define GPROF_SCHEDULER_BPF_H

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
    /* Between capture windows no clock read, but the lookup stays: its else-branch clears the
     * start an interval inside the window left, which a wakeup would otherwise take for a wait
     * in progress and walk stacks for. */
    if (!window_shut) now = bpf_ktime_get_ns();
    struct gprof_offcpu_pending* entry = &prev->offcpu;
    if (!window_shut && in_window(now)) {
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
    /* Its quick page faults since it last switched out fell in the run that ends here: what a
     * page-fault storm cost is then known by run, not only by thread. Faults are counted inside
     * a window only; a run the window's end cut is flushed at its own end, outside. */
    flush_quick_faults(prev_tid, window_shut ? 0 : now);
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

#endif /* GPROF_SCHEDULER_BPF_H */
