/* Python stacks: the frames of a CPython thread, read from its own memory in the context of the
 * thread itself (so they cannot change under the walk: only the thread moves its frame chain).
 * Part of kernel_events.bpf.c, included after its maps and helpers.
 *
 * Like bcc's pyperf and Parca's unwinder, and unlike py-spy (which reads another process and must
 * stop it or accept torn reads), the walk runs where the stack is wanted: at the thread's
 * switch-in after a long wait (its stack as it slept), in a waker at its wakeup (where it released
 * the waiter), at a sampling tick on CPU, and at a uprobe the injected library fires on a slow CUDA
 * call. Only raw frames go out: a code object's address and instruction offset each, plus two
 * fields of the code object that tell it from a later one at the same address; the loader names
 * code objects out of process, once each (python_stacks.cc, python_reader.cc).
 *
 * The thread's PyThreadState is the one in the interpreter's thread list whose thread_id (its
 * pthread_self(), which is the thread's fs base on x86_64) is the task's fs base: the same test for
 * every version, and it holds in a forked child too (the child's thread keeps its parent's thread
 * control block). Found once and kept per tid, checked at each use. Every read is a probe read that
 * fails rather than faults; every frame's code object must have PyCode_Type as its type and an
 * instruction offset inside its bytecode, or the walk stops there and the stack is marked
 * incomplete: a shorter stack, never a wrong frame. */

/* Set by the loader: 1 when Python stacks are wanted. */
const volatile __u32 capture_python = 0;

/* Processes of the tree that run a readable CPython, by tgid. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct gprof_python_target);
} python_targets SEC(".maps");

/* Each thread's PyThreadState as last found, by tid. LRU: threads of a Python process that never
 * run Python (a CUDA driver thread) keep a "none" entry, and the map must never fill up. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 32768);
  __type(key, __u32);
  __type(value, struct gprof_python_tstate);
} python_tstates SEC(".maps");

/* One walk's record and state. The record is built here and copied out with its real length
 * (bpf_ringbuf_output): most stacks are far shorter than the longest. One slot per kind of context
 * a walk can run in on a CPU, so that a walk interrupted by another uses another slot: scheduler
 * tracepoints (which do not preempt each other and never walk from an interrupt), the sampling
 * tick (an hrtimer interrupt, which can interrupt them), and the uprobe (a task trap). */
#define PY_SLOT_SCHED 0
#define PY_SLOT_SAMPLE 1
#define PY_SLOT_UPROBE 2

#define PY_SEEN_SLOTS 256

struct python_walk {
  struct gprof_python_stack rec;
  struct gprof_python_frame frames[GPROF_PYTHON_MAX_FRAMES];
  struct gprof_python_target target; /* a copy: the map entry may go meanwhile */
  __u64 frame;                       /* the next frame to read */
  __u64 tstate;                      /* the thread state being looked at */
  __u64 fsbase;                      /* the thread's: its PyThreadState's thread_id */
  __u64 found;
  __u32 new_code; /* a frame's code object is not in `seen`: wake the loader to name it now */
  __u32 reserved;
  /* Code objects this CPU's walks saw last (with the tgid in the top bits), by a hash of the
   * address: a stack that names one not among them wakes the loader at once, so that it names the
   * code object while the process still lives (a short-lived worker, a program's last waits).
   * Repeated stacks, the common case, name none and only add to the loader's next batch. */
  __u64 seen[PY_SEEN_SLOTS];
  __u8 buf[GPROF_PY_READ_BYTES];      /* the frame just read */
  __u8 code_buf[GPROF_PY_READ_BYTES]; /* its code object */
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 3);
  __type(key, __u32);
  __type(value, struct python_walk);
} python_walks SEC(".maps");

/* bpf_loop's context must be on the stack: it carries the walk. */
struct python_loop {
  struct python_walk* w;
};

/* A thread state found is looked for again after 1 s. */
#define PY_TSTATE_REFIND_NS 1000000000ull
/* A thread without one, after 10 ms; and every time while it is young: a new thread's state is in
 * the list before the thread names itself in it, and a sample or wait of that moment must not
 * hide the thread's first waits. */
#define PY_NO_TSTATE_REFIND_NS 10000000ull
#define PY_YOUNG_THREAD_NS 250000000ull
#define PY_MAX_INTERPRETERS 4
#define PY_MAX_THREADS 256

/* Fields of a block read from user memory, at an offset the loader gave: masked to stay inside
 * the block (and aligned as the field is), which is also what the verifier needs to see. */
static __always_inline __u64 py_u64(const __u8* block, __u32 offset) {
  return *(const __u64*)(block + (offset & (GPROF_PY_READ_BYTES - 8)));
}

static __always_inline __s32 py_s32(const __u8* block, __u32 offset) {
  return *(const __s32*)(block + (offset & (GPROF_PY_READ_BYTES - 4)));
}

static __always_inline __u8 py_u8(const __u8* block, __u32 offset) {
  return block[offset & (GPROF_PY_READ_BYTES - 1)];
}

static __always_inline __u64 py_read_pointer(__u64 address) {
  __u64 value = 0;
  if (address == 0 || bpf_probe_read_user(&value, sizeof(value), (const void*)address) != 0)
    return 0;
  return value;
}

static long py_thread_step(__u32 index, void* ctx) {
  struct python_walk* w = ((struct python_loop*)ctx)->w;
  const struct gprof_python_offsets* o = &w->target.offsets;
  if (w->tstate == 0) return 1;
  if (py_read_pointer(w->tstate + o->tstate_thread_id) == w->fsbase) {
    w->found = w->tstate;
    return 1;
  }
  w->tstate = py_read_pointer(w->tstate + o->tstate_next);
  return 0;
}

/* The current thread's PyThreadState, or 0 when it has none. */
static __always_inline __u64 py_find_tstate(struct python_walk* w, __u32 tid, __u64 now,
                                            bool young) {
  const struct gprof_python_offsets* o = &w->target.offsets;
  struct gprof_python_tstate* cached = bpf_map_lookup_elem(&python_tstates, &tid);
  if (cached) {
    __u64 age = now - cached->found_ns;
    if (cached->tstate == 0 && age < PY_NO_TSTATE_REFIND_NS && !young) return 0;
    if (cached->tstate != 0 && age < PY_TSTATE_REFIND_NS &&
        py_read_pointer(cached->tstate + o->tstate_thread_id) == w->fsbase)
      return cached->tstate;
  }
  w->found = 0;
  struct python_loop loop = {.w = w};
  __u64 interp = py_read_pointer(w->target.runtime + o->runtime_interpreters_head);
  for (int i = 0; i < PY_MAX_INTERPRETERS; ++i) {
    if (interp == 0 || w->found != 0) break;
    w->tstate = py_read_pointer(interp + o->interp_threads_head);
    bpf_loop(PY_MAX_THREADS, py_thread_step, &loop, 0);
    interp = py_read_pointer(interp + o->interp_next);
  }
  struct gprof_python_tstate entry = {.tstate = w->found, .found_ns = now};
  if (cached) {
    cached->tstate = entry.tstate;
    cached->found_ns = now;
  } else {
    bpf_map_update_elem(&python_tstates, &tid, &entry, BPF_ANY);
  }
  return w->found;
}

/* One frame of the chain, outward from w->frame: recorded (or skipped, a C-stack shim), or the
 * walk's end. */
static long py_frame_step(__u32 index, void* ctx) {
  struct python_walk* w = ((struct python_loop*)ctx)->w;
  const struct gprof_python_offsets* o = &w->target.offsets;
  if (w->frame == 0) return 1;
  __u32 depth = w->rec.depth;
  if (depth >= GPROF_PYTHON_MAX_FRAMES) {
    w->rec.flags |= GPROF_PY_STACK_TRUNCATED;
    return 1;
  }
  __u32 size = o->frame_read_size;
  if (size > GPROF_PY_READ_BYTES || bpf_probe_read_user(w->buf, size, (const void*)w->frame) != 0) {
    w->rec.flags |= GPROF_PY_STACK_INCOMPLETE;
    return 1;
  }
  __u64 code = py_u64(w->buf, o->frame_code);
  w->frame = py_u64(w->buf, o->frame_previous);
  __u32 flags = 0;
  if (o->frame_kind == GPROF_PY_FRAMES_OBJECTS) {
    flags = GPROF_PY_FRAME_ENTRY;
  } else {
    if (o->frame_owner != GPROF_PY_NONE && py_u8(w->buf, o->frame_owner) == o->owner_cstack) {
      /* The eval loop's entry shim (3.12 on): the frame recorded just before is the outermost
       * of that run of the loop. */
      if (depth > 0 && depth <= GPROF_PYTHON_MAX_FRAMES)
        w->frames[depth - 1].flags |= GPROF_PY_FRAME_ENTRY;
      return 0;
    }
    if (o->frame_is_entry != GPROF_PY_NONE && py_u8(w->buf, o->frame_is_entry) != 0)
      flags = GPROF_PY_FRAME_ENTRY;
  }

  size = o->code_read_size;
  if (code == 0 || size > GPROF_PY_READ_BYTES ||
      bpf_probe_read_user(w->code_buf, size, (const void*)code) != 0 ||
      py_u64(w->code_buf, 8) != w->target.code_type) { /* ob_type */
    w->rec.flags |= GPROF_PY_STACK_INCOMPLETE;
    return 1;
  }
  __s64 offset;
  if (o->frame_kind == GPROF_PY_FRAMES_OBJECTS) {
    __s32 lasti = py_s32(w->buf, o->frame_instr);
    offset = lasti < 0 ? -1 : (__s64)lasti * o->lasti_scale;
  } else {
    offset = (__s64)(py_u64(w->buf, o->frame_instr) - (code + o->code_adaptive));
    /* A frame not started yet points one code unit before its first. */
    if (offset == -2) offset = -1;
    __s64 units = (__s64)py_u64(w->code_buf, o->code_size);
    if (offset < -1 || offset >= units * 2) {
      w->rec.flags |= GPROF_PY_STACK_INCOMPLETE;
      return 1;
    }
  }
  if (offset > 0x7fffffff) {
    w->rec.flags |= GPROF_PY_STACK_INCOMPLETE;
    return 1;
  }
  struct gprof_python_frame* frame = &w->frames[depth];
  frame->code = code;
  frame->offset = (__s32)offset;
  frame->firstlineno = py_s32(w->code_buf, o->code_firstlineno);
  frame->tag = (__u32)(py_u64(w->code_buf, o->code_filename) ^ py_u64(w->code_buf, o->code_name));
  frame->flags = flags;
  w->rec.depth = depth + 1;
  __u64 seen = code ^ ((__u64)w->rec.pid << 48);
  __u64* slot = &w->seen[(code >> 4) & (PY_SEEN_SLOTS - 1)];
  if (*slot != seen) {
    *slot = seen;
    w->new_code = 1;
  }
  return 0;
}

/* Reads the current thread's Python stack and writes it as a gprof_python_stack of `kind` keyed
 * by (key_tid, key_ns). Nothing when the process runs no readable CPython or the thread has no
 * Python frames. */
static __always_inline void python_stack(__u32 slot, __u32 kind, __u32 key_tid, __u64 key_ns) {
  if (!capture_python) return;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  struct gprof_python_target* target = bpf_map_lookup_elem(&python_targets, &tgid);
  if (!target) return;
  struct python_walk* w = bpf_map_lookup_elem(&python_walks, &slot);
  if (!w) return;
  __builtin_memcpy(&w->target, target, sizeof(w->target));
  const struct gprof_python_offsets* o = &w->target.offsets;
  struct task_struct* task = bpf_get_current_task_btf();
  w->fsbase = BPF_CORE_READ(task, thread.fsbase);
  __u64 now = bpf_ktime_get_ns();
  bool young = now - BPF_CORE_READ(task, start_time) < PY_YOUNG_THREAD_NS;
  __u64 tstate = py_find_tstate(w, tid, now, young);
  if (tstate == 0) return;
  __u64 frame = py_read_pointer(tstate + o->tstate_frame);
  if (o->cframe_current_frame != GPROF_PY_NONE)
    frame = py_read_pointer(frame + o->cframe_current_frame);
  if (frame == 0) return;

  w->frame = frame;
  w->rec.hdr.type = GPROF_REC_PYTHON_STACK;
  w->rec.hdr.reserved = 0;
  w->rec.pid = tgid;
  w->rec.tid = tid;
  w->rec.time_ns = now;
  w->rec.key_ns = key_ns;
  w->rec.key_tid = key_tid;
  w->rec.kind = kind;
  w->rec.depth = 0;
  w->rec.flags = 0;
  w->new_code = 0;
  /* Shims take iterations too: at most one per frame. */
  struct python_loop loop = {.w = w};
  bpf_loop(2 * GPROF_PYTHON_MAX_FRAMES, py_frame_step, &loop, 0);
  __u32 depth = w->rec.depth;
  if (w->frame != 0 && !(w->rec.flags & GPROF_PY_STACK_INCOMPLETE))
    w->rec.flags |= GPROF_PY_STACK_TRUNCATED;
  if (depth == 0 || depth > GPROF_PYTHON_MAX_FRAMES) return;
  __u32 size = sizeof(w->rec) + depth * sizeof(struct gprof_python_frame);
  w->rec.hdr.size = size;
  __u64 wakeup = w->new_code ? BPF_RB_FORCE_WAKEUP : wakeup_flags();
  if (bpf_ringbuf_output(&events, &w->rec, size, wakeup) != 0)
    count_lost(GPROF_LOST_RINGBUF, GPROF_REC_PYTHON_STACK);
}

/* A fork's child runs its parent's interpreter at the same addresses. */
static __always_inline void python_fork(__u32 parent_tgid, __u32 child_tgid) {
  struct gprof_python_target* parent = bpf_map_lookup_elem(&python_targets, &parent_tgid);
  if (!parent) return;
  struct gprof_python_target copy;
  __builtin_memcpy(&copy, parent, sizeof(copy));
  bpf_map_update_elem(&python_targets, &child_tgid, &copy, BPF_ANY);
}

/* The slow-call marker of the injected library (inject/python_marker.cc), attached by path: a
 * slow CUDA call's Python stack, keyed by the call's (tid, enter_ns). */
SEC("uprobe")
int BPF_KPROBE(on_python_call_point, __u32 tid, __u64 enter_ns) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  if ((__u32)pid_tgid != tid || !is_tracked(pid_tgid >> 32)) return 0;
  python_stack(PY_SLOT_UPROBE, GPROF_PY_STACK_CUDA_CALL, tid, enter_ns);
  return 0;
}

/* The sampling tick's program, on_cpu_sample, is native_stacks.bpf.h's: one tick for both. */
