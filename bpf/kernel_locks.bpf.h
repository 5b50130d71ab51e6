/* Kernel locks: a thread of the tree waiting for a contended mutex, rwsem or rt_mutex, and who
 * held it. Part of kernel_events.bpf.c, included after its maps and helpers. */
#ifndef GPROF_KERNEL_LOCKS_BPF_H
#define GPROF_KERNEL_LOCKS_BPF_H

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

#endif /* GPROF_KERNEL_LOCKS_BPF_H */
