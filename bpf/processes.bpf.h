/* Processes and threads of the tree: forks and thread starts (which extend the tree), renames,
 * execs and exits. Part of kernel_events.bpf.c, included after its maps and helpers. */
#ifndef GPROF_PROCESSES_BPF_H
#define GPROF_PROCESSES_BPF_H

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
    flush_quick_faults(old_tid, 0);
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
  flush_quick_faults(tid, 0);
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

#endif /* GPROF_PROCESSES_BPF_H */
