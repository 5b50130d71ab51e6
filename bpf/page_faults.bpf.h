/* Page faults of the tree that took long, and the count of the quick ones. Part of
 * kernel_events.bpf.c, included after its maps and helpers. */
#ifndef GPROF_PAGE_FAULTS_BPF_H
#define GPROF_PAGE_FAULTS_BPF_H

/* A fault starts at the x86 exception tracepoints (exceptions:page_fault_user, and
 * page_fault_kernel for faults in kernel mode, on user memory inside a system call) and ends where
 * handle_mm_fault accounts it: the kernel raises the software perf event PAGE_FAULTS_MIN or
 * PAGE_FAULTS_MAJ there, after the fault is resolved (retries included), and the loader attaches
 * a program to each on every CPU. fentry/fexit on handle_mm_fault would be simpler, but kernels
 * in lockdown (this project's machines) refuse every fentry program, and have no kprobes. Faults
 * that fail (SIGSEGV), and faults the kernel takes on behalf of get_user_pages, raise no end event:
 * they are not recorded. */

#define X86_PF_WRITE 0x2 /* error_code bits (arch/x86/include/asm/trap_pf.h) */
#define X86_PF_USER 0x4
#define X86_PF_INSTR 0x10
#define FAULT_FLAG_WRITE 0x1 /* enum fault_flag (include/linux/mm_types.h) */
#define FAULT_FLAG_USER 0x40
#define FAULT_FLAG_INSTRUCTION 0x100
#define VM_FAULT_MAJOR 0x4

static __always_inline int on_page_fault(u64* ctx) {
  /* (unsigned long address, struct pt_regs *regs, unsigned long error_code) */
  if (window_shut) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  if (!is_tracked(pid_tgid >> 32)) return 0;
  __u64 start_ns = bpf_ktime_get_ns();
  if (!in_window(start_ns)) return 0;
  __u64 address = ctx[0];
  /* Faults the kernel fixes up without handling them: on kernel addresses, and those of accesses
   * made with page faults disabled (copy_from_user_nofault; the user-stack walks and probe reads
   * of these very programs, which would otherwise replace the pending fault they interrupt). */
  if ((long)address < 0) return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  /* A direct read: a probe read disables page faults itself while it copies. */
  if (task->pagefault_disabled != 0) return 0;
  __u32 tid = (__u32)pid_tgid;
  __u64 error_code = ctx[2];
  __u32 flags = (error_code & X86_PF_WRITE ? FAULT_FLAG_WRITE : 0) |
                (error_code & X86_PF_USER ? FAULT_FLAG_USER : 0) |
                (error_code & X86_PF_INSTR ? FAULT_FLAG_INSTRUCTION : 0);
  struct gprof_fault_state* kept = bpf_map_lookup_elem(&fault_pending, &tid);
  if (kept) {
    kept->start_ns = start_ns;
    kept->address = address;
    kept->flags = flags;
    return 0;
  }
  struct gprof_fault_state entry = {};
  entry.start_ns = start_ns;
  entry.address = address;
  entry.flags = flags;
  entry.pid = pid_tgid >> 32;
  if (bpf_map_update_elem(&fault_pending, &tid, &entry, BPF_ANY) != 0) {
    count_lost(GPROF_LOST_PENDING, GPROF_REC_PAGE_FAULT);
  }
  return 0;
}
static __always_inline int on_page_fault_user(u64* ctx) { return on_page_fault(ctx); }
TRACEPOINT(page_fault_user, on_page_fault_user)

static __always_inline int on_page_fault_kernel(u64* ctx) { return on_page_fault(ctx); }
TRACEPOINT(page_fault_kernel, on_page_fault_kernel)

static __always_inline int fault_done(struct bpf_perf_event_data* ctx, __u32 result) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  struct gprof_fault_state* entry = bpf_map_lookup_elem(&fault_pending, &tid);
  if (!entry || entry->start_ns == 0) return 0;
  /* The perf event carries the fault's address: a start left by a fault that failed is not
   * paired with a later one's end. */
  if (entry->address == ctx->addr) {
    __u64 now = bpf_ktime_get_ns();
    __u64 duration = now - entry->start_ns;
    if (duration >= slow_fault_ns) {
      struct gprof_page_fault* rec = reserve(sizeof(*rec), GPROF_REC_PAGE_FAULT);
      if (rec) {
        rec->pid = pid_tgid >> 32;
        rec->tid = tid;
        rec->start_ns = entry->start_ns;
        rec->end_ns = now;
        rec->address = entry->address;
        rec->flags = entry->flags;
        rec->result = result;
        submit(rec);
      }
    } else {
      /* Only this thread touches its entry: no atomics needed. */
      entry->quick_count += 1;
      entry->quick_total_ns += duration;
    }
  }
  entry->start_ns = 0;
  return 0;
}

/* Perf event programs return 0: nothing goes to the perf ring, only to ours. */
SEC("perf_event")
int on_minor_fault_done(struct bpf_perf_event_data* ctx) { return fault_done(ctx, 0); }

SEC("perf_event")
int on_major_fault_done(struct bpf_perf_event_data* ctx) { return fault_done(ctx, VM_FAULT_MAJOR); }

#endif /* GPROF_PAGE_FAULTS_BPF_H */
