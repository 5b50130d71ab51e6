/* Signals generated for the tree (and for gprof-run itself). Part of kernel_events.bpf.c, included
 * after its maps and helpers. */
#ifndef GPROF_SIGNALS_BPF_H
#define GPROF_SIGNALS_BPF_H

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

#endif /* GPROF_SIGNALS_BPF_H */
