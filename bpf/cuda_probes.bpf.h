/* CUDA driver calls without the injected library (gprof-run -p): a uprobe and a uretprobe on each
 * cu* entry point of the libcuda that a process of the tree maps, attached per binary by the loader
 * (cuda_probes.cc) with the function's index into cuda_probe_names as the probe's cookie. A
 * thread's outermost cu* call is recorded at its return (a cu* function that calls another is one
 * call); a return without a recorded entry (the call was in progress when the probes came) is
 * ignored. Included by kernel_events.bpf.c after its maps and helpers, and after
 * python_stacks.bpf.h, whose walker takes a slow call's Python stack as it does for the injected
 * library's marker. */

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, GPROF_CUDA_PROBE_MAX_FUNCTIONS);
  __type(key, __u32);
  __type(value, struct gprof_cuda_probe_name);
} cuda_probe_names SEC(".maps");

/* A thread's cu* call in progress, by tid. LRU: a thread that ends inside a call leaves its entry,
 * which ages out. */
struct cuda_probe_pending {
  __u64 enter_ns;
  __u32 function;
  __u32 depth; /* cu* calls nested in the outermost, itself included; 0: none */
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct cuda_probe_pending);
} cuda_probe_pending SEC(".maps");

/* Set by the loader: a call at least this long gets its user stack and (where Python stacks are on)
 * its Python stack. */
const volatile __u64 cuda_probe_stack_min_ns = 1000000;

SEC("uprobe")
int on_cuda_enter(struct pt_regs* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  if (!is_tracked(pid_tgid >> 32)) return 0;
  struct cuda_probe_pending* pending = bpf_map_lookup_elem(&cuda_probe_pending, &tid);
  if (pending && pending->depth > 0) {
    pending->depth++;
    return 0;
  }
  __u64 now = bpf_ktime_get_ns();
  if (!in_window(now)) return 0;
  struct cuda_probe_pending fresh = {};
  fresh.enter_ns = now;
  fresh.function = (__u32)bpf_get_attach_cookie(ctx);
  fresh.depth = 1;
  if (bpf_map_update_elem(&cuda_probe_pending, &tid, &fresh, BPF_ANY) != 0)
    count_lost(GPROF_LOST_PENDING, GPROF_REC_CUDA_PROBE_CALL);
  return 0;
}

SEC("uretprobe")
int on_cuda_exit(struct pt_regs* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  __u32 tgid = pid_tgid >> 32;
  struct cuda_probe_pending* pending = bpf_map_lookup_elem(&cuda_probe_pending, &tid);
  if (!pending || pending->depth == 0) return 0;
  if (--pending->depth > 0) return 0;
  __u64 now = bpf_ktime_get_ns();
  __u64 enter_ns = pending->enter_ns;
  __u32 function = pending->function;
  if (!is_tracked(tgid)) return 0;
  /* A slow call's stacks, taken at its return (the caller's frames are as they were at the entry):
   * a copy at every call would cost most of the probes' time for stacks no report shows. The
   * native copy (unwound after the run through code without frame pointers, as libcuda's callers
   * are) where copies are on; else a frame-pointer walk. */
  const bool slow = now - enter_ns >= cuda_probe_stack_min_ns;
  __s32 user_stack_id =
      slow && native_copy_bytes == 0 ? user_stack(ctx, GPROF_REC_CUDA_PROBE_CALL) : -ENODATA;
  struct gprof_cuda_probe_call* rec = reserve(sizeof(*rec), GPROF_REC_CUDA_PROBE_CALL);
  if (!rec) return 0;
  rec->pid = tgid;
  rec->tid = tid;
  rec->enter_ns = enter_ns;
  rec->exit_ns = now;
  rec->return_value = (__s32)PT_REGS_RC(ctx);
  rec->user_stack_id = user_stack_id;
  struct gprof_cuda_probe_name* name = bpf_map_lookup_elem(&cuda_probe_names, &function);
  if (name) __builtin_memcpy(rec->name, name->name, sizeof(rec->name));
  submit(rec);
  if (slow) native_stack(NATIVE_SLOT_UPROBE, GPROF_NATIVE_CUDA_CALL, tid, enter_ns, now, false);
  /* Python is still inside the call at its return: its frames are the caller's. */
  if (capture_python && slow) python_stack(PY_SLOT_UPROBE, GPROF_PY_STACK_CUDA_CALL, tid, enter_ns);
  return 0;
}
