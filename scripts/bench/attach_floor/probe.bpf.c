/* The least a futex call's timing can cost, by attach point (scripts/bench/attach_floor/run.sh).
 * Each variant does what timing a call needs at least, a lookup of the thread's entry and a clock
 * read at each end, and nothing else: rt_ and tb_ on the raw_syscalls tracepoints, as the recorder
 * attaches (raw_tp, tp_btf), fe_ on the futex system call itself (fentry/fexit), which would spare
 * every other system call of the machine; nn_ an empty sys_enter program alone: what a program on
 * that tracepoint costs before it does anything. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define NR_FUTEX 202

/* Made on a thread's first call (the recorder makes its entries at the thread's start). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 8192);
  __type(key, __u32);
  __type(value, __u64);
} threads SEC(".maps");

static __always_inline int time_call(void) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u64* last = bpf_map_lookup_elem(&threads, &tid);
  __u64 now = bpf_ktime_get_ns();
  if (last)
    *last = now;
  else
    bpf_map_update_elem(&threads, &tid, &now, BPF_ANY);
  return 0;
}

SEC("raw_tp/sys_enter")
int rt_enter(u64* ctx) { return (long)ctx[1] == NR_FUTEX ? time_call() : 0; }

SEC("raw_tp/sys_exit")
int rt_exit(u64* ctx) {
  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  return BPF_CORE_READ(regs, orig_ax) == NR_FUTEX ? time_call() : 0;
}

SEC("tp_btf/sys_enter")
int tb_enter(u64* ctx) { return (long)ctx[1] == NR_FUTEX ? time_call() : 0; }

SEC("tp_btf/sys_exit")
int tb_exit(u64* ctx) { return ((struct pt_regs*)ctx[0])->orig_ax == NR_FUTEX ? time_call() : 0; }

SEC("fentry/__x64_sys_futex")
int BPF_PROG(fe_enter, struct pt_regs* regs) { return time_call(); }

SEC("fexit/__x64_sys_futex")
int BPF_PROG(fe_exit, struct pt_regs* regs, long ret) { return time_call(); }

SEC("raw_tp/sys_enter")
int nn_enter(u64* ctx) { return 0; }
