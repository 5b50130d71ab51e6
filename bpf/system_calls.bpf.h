/* System calls of the tree recorded at their return: futex calls, waits on devices (ioctl, poll,
 * select, epoll), memory maps, the reads and writes of pipes and sockets that tell who ended a
 * wait, and the bytes each read and write of a TCP socket moved. Part of kernel_events.bpf.c,
 * included after its maps and helpers. */
#ifndef GPROF_SYSTEM_CALLS_BPF_H
#define GPROF_SYSTEM_CALLS_BPF_H

/* The calls recorded at their return: kept to a switch on the number, the first thing both
 * syscall programs do, since they run for every system call of the machine. */
static __always_inline bool recorded_syscall(long nr) {
  switch (nr) {
    case NR_POLL:
    case NR_MMAP:
    case NR_MPROTECT:
    case NR_MUNMAP:
    case NR_IOCTL:
    case NR_SELECT:
    case NR_MREMAP:
    case NR_MADVISE:
    case NR_FUTEX:
    case NR_EPOLL_WAIT:
    case NR_PSELECT6:
    case NR_PPOLL:
    case NR_EPOLL_PWAIT:
    case NR_EPOLL_PWAIT2:
    case NR_FUTEX_WAITV:
    case NR_FUTEX_WAKE:
    case NR_FUTEX_WAIT:
    case NR_FUTEX_REQUEUE:
    case NR_READ:
    case NR_WRITE:
    case NR_READV:
    case NR_WRITEV:
    case NR_SENDTO:
    case NR_RECVFROM:
    case NR_SENDMSG:
    case NR_RECVMSG:
    case NR_RECVMMSG:
    case NR_SENDMMSG:
      return true;
    default:
      return false;
  }
}

static __always_inline bool is_stream_write(long nr) {
  return nr == NR_WRITE || nr == NR_WRITEV || nr == NR_SENDTO || nr == NR_SENDMSG ||
         nr == NR_SENDMMSG;
}

static __always_inline bool is_stream_read(long nr) {
  return nr == NR_READ || nr == NR_READV || nr == NR_RECVFROM || nr == NR_RECVMSG ||
         nr == NR_RECVMMSG;
}

static __always_inline bool is_memory_syscall(long nr) {
  return nr == NR_MMAP || nr == NR_MPROTECT || nr == NR_MUNMAP || nr == NR_MREMAP ||
         nr == NR_MADVISE;
}

static __always_inline bool is_futex_syscall(long nr) {
  return nr == NR_FUTEX || nr == NR_FUTEX_WAKE || nr == NR_FUTEX_WAIT || nr == NR_FUTEX_REQUEUE;
}

/* A struct __kernel_timespec in user memory as nanoseconds: -1 without one, -2 when unreadable
 * (a probe cannot fault a non-resident page in). */
static __always_inline __s64 read_timeout(__u64 user_timespec) {
  if (!user_timespec) return -1;
  struct {
    __s64 tv_sec;
    __s64 tv_nsec;
  } ts;
  if (bpf_probe_read_user(&ts, sizeof(ts), (const void*)user_timespec) != 0) return -2;
  return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static __always_inline bool futex_has_timeout(__u32 op) {
  __u32 cmd = op & FUTEX_CMD_MASK;
  return cmd == FUTEX_WAIT || cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2 ||
         cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_WAIT_REQUEUE_PI;
}

/* struct futex_waitv (include/uapi/linux/futex.h), as futex_waitv and futex_requeue take it. */
struct user_futex_waitv {
  __u64 val;
  __u64 uaddr;
  __u32 flags;
  __u32 reserved;
};

/* The futex family in futex(2) terms (the mapping of the futex2 calls is documented at
 * GPROF_FUTEX_FUTEX2 in kernel_events.h). */
static __always_inline void futex_call(struct gprof_syscall_pending* entry) {
  const __u64* args = entry->args;
  entry->futex.timeout_ns = -1;
  if (entry->nr == NR_FUTEX) {
    /* futex(uaddr, op, val, timeout or val2, uaddr2, val3) */
    entry->futex.uaddr = args[0];
    entry->futex.op = (__u32)args[1];
    entry->futex.val = (__u32)args[2];
    entry->futex.uaddr2 = args[4];
    entry->futex.val3 = (__u32)args[5];
    if (futex_has_timeout(entry->futex.op)) entry->futex.timeout_ns = read_timeout(args[3]);
    /* Read now, a lock's holder is named even if nobody ever wakes this wait (a deadlock, a
       timeout). glibc's mutex sleeps on its word at 2 ("locked, with waiters"), the holder's tid
       in __owner 8 bytes on. Its rwlock sleeps at 3 (waiting, futex used): a reader on
       __wrphase_futex, the writer's tid (__cur_writer) 16 bytes on; a writer on
       __writers_futex, __cur_writer 12 bytes on, where the reader's word has padding (0). */
    __u32 command = entry->futex.op & FUTEX_CMD_MASK;
    if (command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET) {
      __u32 owner[2] = {0, 0};
      if (entry->futex.val == 2) {
        if (bpf_probe_read_user(owner, sizeof(owner[0]), (const void*)(args[0] + 8)) == 0)
          entry->futex.owner_tid = owner[0];
      } else if (entry->futex.val == 3) {
        if (bpf_probe_read_user(owner, sizeof(owner), (const void*)(args[0] + 12)) == 0)
          entry->futex.owner_tid = owner[0] != 0 ? owner[0] : owner[1];
      }
    }
    return;
  }
  entry->futex.flags = GPROF_FUTEX_FUTEX2;
  if (entry->nr == NR_FUTEX_WAKE) {
    /* futex_wake(uaddr, mask, nr, flags) */
    entry->futex.uaddr = args[0];
    entry->futex.op = FUTEX_WAKE_BITSET | (args[3] & FUTEX2_PRIVATE);
    entry->futex.val = (__u32)args[2];
    entry->futex.val3 = (__u32)args[1];
  } else if (entry->nr == NR_FUTEX_WAIT) {
    /* futex_wait(uaddr, val, mask, flags, timeout, clockid) */
    entry->futex.uaddr = args[0];
    entry->futex.op = FUTEX_WAIT_BITSET | (args[3] & FUTEX2_PRIVATE);
    if (args[4] && args[5] == CLOCK_REALTIME_ID) entry->futex.op |= FUTEX_CLOCK_REALTIME;
    entry->futex.val = (__u32)args[1];
    entry->futex.val3 = (__u32)args[2];
    entry->futex.timeout_ns = read_timeout(args[4]);
  } else {
    /* futex_requeue(waiters[2], flags, nr_wake, nr_requeue): from waiters[0] to waiters[1] */
    struct user_futex_waitv waiters[2];
    entry->futex.op = FUTEX_CMP_REQUEUE;
    entry->futex.val = (__u32)args[2];
    if (bpf_probe_read_user(waiters, sizeof(waiters), (const void*)args[0]) == 0) {
      entry->futex.uaddr = waiters[0].uaddr;
      entry->futex.uaddr2 = waiters[1].uaddr;
      entry->futex.val3 = (__u32)waiters[0].val;
      entry->futex.op |= waiters[0].flags & FUTEX2_PRIVATE;
    }
  }
}

/* futex_waitv(waiters, nr_futexes, flags, timeout, clockid): the first GPROF_WAITV_MAX addresses.
 */
static __always_inline void futex_waitv_call(struct gprof_syscall_pending* entry) {
  const __u64* args = entry->args;
  entry->waitv.count = (__u32)args[1];
  entry->waitv.timeout_ns = read_timeout(args[3]);
  entry->waitv.flags = args[3] && args[4] == CLOCK_REALTIME_ID ? FUTEX_CLOCK_REALTIME : 0;
  const struct user_futex_waitv* waiters = (const struct user_futex_waitv*)args[0];
  for (__u32 i = 0; i < GPROF_WAITV_MAX; i++) {
    if (i >= entry->waitv.count) break;
    __u64 uaddr = 0;
    if (bpf_probe_read_user(&uaddr, sizeof(uaddr), &waiters[i].uaddr) != 0) break;
    entry->waitv.uaddr[i] = uaddr;
  }
}

/* The socket path runs at every read and write of the tree, so in a tp_btf program (`btf`, a
 * constant the compiler folds) it reads the kernel's objects with plain loads, which the verifier
 * allows on pointers whose type it knows (a load that faults reads 0, as a failed probe read leaves
 * it), instead of a probe read per field (a helper call each, tens of ns). A pointer the program
 * holds as a number (read from an array of pointers, kept in a map, a void *) is given its type by
 * bpf_rdonly_cast, which the verifier turns into a plain move (weak: on a kernel without it, before
 * 6.2, the tp_btf programs that call it fail to load and the loader falls back to their raw_tp
 * twins, rather than the whole object failing). A raw_tp program reads with probe reads. */
extern void* bpf_rdonly_cast(const void* obj, __u32 btf_id) __weak __ksym;
#define KERNEL_PTR(btf, type, value)                                                    \
  ((btf) ? (struct type*)bpf_rdonly_cast((void*)(value), bpf_core_type_id_kernel(struct type)) \
         : (struct type*)(value))
#define KERNEL_FIELD(btf, ptr, field) ((btf) ? (ptr)->field : BPF_CORE_READ(ptr, field))

/* The current task's open file `fd`, or NULL; found as the kernel finds it:
 * task->files->fdt->fd[fd], bounded by max_fds. */
static __always_inline struct file* fd_file_of(__s32 fd, bool btf) {
  if (fd < 0) return NULL;
  struct task_struct* task = bpf_get_current_task_btf();
  struct fdtable* fdt =
      btf ? (struct fdtable*)task->files->fdt : BPF_CORE_READ(task, files, fdt);
  if (!fdt || (__u32)fd >= KERNEL_FIELD(btf, fdt, max_fds)) return NULL;
  struct file** files = KERNEL_FIELD(btf, fdt, fd);
  struct file* file = NULL;
  if (bpf_probe_read_kernel(&file, sizeof(file), &files[fd]) != 0 || !file) return NULL;
  return KERNEL_PTR(btf, file, file);
}

static __always_inline struct file* fd_file(__s32 fd) { return fd_file_of(fd, false); }

/* The name of the file `fd` (its dentry's: no directory), cut to fit and NUL-padded; all NUL when
 * there is none. */
static __always_inline void fd_file_name(__s32 fd, char name[GPROF_FILE_NAME_LEN]) {
  __builtin_memset(name, 0, GPROF_FILE_NAME_LEN);
  struct file* file = fd_file(fd);
  if (!file) return;
  const unsigned char* file_name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
  if (bpf_probe_read_kernel_str(name, GPROF_FILE_NAME_LEN, file_name) < 0)
    __builtin_memset(name, 0, GPROF_FILE_NAME_LEN);
}

/* Whether the current task's `fd` is a character device whose name starts with device_prefix.
 * Fills `name` (zeroed first: it is copied into a record). */
static __always_inline bool device_fd(__s32 fd, char name[GPROF_COMM_LEN]) {
  __builtin_memset(name, 0, GPROF_COMM_LEN);
  struct file* file = fd_file(fd);
  if (!file) return false;
  if ((BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFCHR) return false;
  const unsigned char* file_name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
  if (bpf_probe_read_kernel_str(name, GPROF_COMM_LEN, file_name) < 0) return false;
  for (__u32 i = 0; i < GPROF_COMM_LEN; i++) {
    if (i >= device_prefix_len) break;
    if (name[i] != device_prefix[i]) return false;
  }
  return true;
}

/* Pipes and sockets ---------------------------------------------------------------------------- */

/* The socket behind an open file, or NULL when it is none (or has no sock). */
static __always_inline struct sock* file_sock(struct file* file, __u32* mode, bool btf) {
  if (!file) return NULL;
  struct inode* inode = KERNEL_FIELD(btf, file, f_inode);
  *mode = KERNEL_FIELD(btf, inode, i_mode) & S_IFMT;
  if (*mode != S_IFSOCK) return NULL;
  struct socket* sock = KERNEL_PTR(btf, socket, KERNEL_FIELD(btf, file, private_data));
  return sock ? KERNEL_FIELD(btf, sock, sk) : NULL;
}

/* A socket's own IPv6 address (`remote` false) or its peer's, as two words. */
static __always_inline void ipv6_address(__u64 words[2], struct sock* sk, bool remote, bool btf) {
  if (!btf) {
    /* Sized by hand: BPF_CORE_READ_INTO would take sizeof(*words), one word. */
    if (remote)
      bpf_core_read(words, 16, &sk->__sk_common.skc_v6_daddr);
    else
      bpf_core_read(words, 16, &sk->__sk_common.skc_v6_rcv_saddr);
    return;
  }
  const __u32* address = remote ? sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32
                                : sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32;
  words[0] = address[0] | (__u64)address[1] << 32;
  words[1] = address[2] | (__u64)address[3] << 32;
}

/* The receiving end of a pipe or socket (an open file of the current task), as a stream_writes
 * key: the end it reads (`reader`), or the one its writes reach; 0 when `file` is neither (or a
 * socket with no peer). A pipe's two ends share its pipe_inode_info; a Unix socket's writes reach
 * its peer; a TCP or UDP socket is known by its addresses and ports, which its peer sees swapped:
 * the key hashes (receiver, sender) in that order, so both sides find one key. */
static __always_inline __u64 stream_end_of(struct file* file, __u32 mode, struct sock* sk,
                                           bool reader, __u32* kind, bool btf) {
  if (mode == S_IFIFO) {
    *kind = GPROF_STREAM_PIPE;
    return (__u64)KERNEL_FIELD(btf, file, private_data);
  }
  if (!sk) return 0;
  __u16 family = KERNEL_FIELD(btf, sk, __sk_common.skc_family);
  if (family == AF_UNIX) {
    *kind = GPROF_STREAM_UNIX;
    struct unix_sock* unix_end = KERNEL_PTR(btf, unix_sock, sk);
    return reader ? (__u64)sk : (__u64)KERNEL_FIELD(btf, unix_end, peer);
  }
  if (family != AF_INET && family != AF_INET6) return 0;
  *kind = GPROF_STREAM_INET;
  __u64 local = KERNEL_FIELD(btf, sk, __sk_common.skc_rcv_saddr) |
                (__u64)KERNEL_FIELD(btf, sk, __sk_common.skc_num) << 32;
  __u64 remote = KERNEL_FIELD(btf, sk, __sk_common.skc_daddr) |
                 (__u64)bpf_ntohs(KERNEL_FIELD(btf, sk, __sk_common.skc_dport)) << 32;
  if (family == AF_INET6 && bpf_core_field_exists(sk->__sk_common.skc_v6_daddr)) {
    __u64 words[2] = {};
    ipv6_address(words, sk, false, btf);
    local ^= words[0] * 0x9e3779b97f4a7c15ull ^ words[1];
    ipv6_address(words, sk, true, btf);
    remote ^= words[0] * 0x9e3779b97f4a7c15ull ^ words[1];
  }
  __u64 receiver = reader ? local : remote, sender = reader ? remote : local;
  return (receiver * 0xc2b2ae3d27d4eb4full ^ sender) | 1;
}

static __always_inline __u64 stream_end(struct file* file, bool reader, __u32* kind, bool btf) {
  __u32 mode = 0;
  struct sock* sk = file_sock(file, &mode, btf);
  return stream_end_of(file, mode, sk, reader, kind, btf);
}

/* A write of a thread of the tree to a pipe or socket: the last writer of the end it reaches. */
static __always_inline void note_stream_write(struct file* file, __u32 mode, struct sock* sk,
                                              __u32 pid, __u32 tid, __u64 now, bool btf) {
  __u32 kind = 0;
  __u64 end = stream_end_of(file, mode, sk, false, &kind, btf);
  if (end == 0) return;
  struct gprof_stream_writes* writes = bpf_map_lookup_elem(&stream_writes, &end);
  if (writes) {
    writes->last[3] = writes->last[2];
    writes->last[2] = writes->last[1];
    writes->last[1] = writes->last[0];
    writes->last[0].time_ns = now;
    writes->last[0].pid = pid;
    writes->last[0].tid = tid;
    return;
  }
  struct gprof_stream_writes fresh = {};
  fresh.last[0].time_ns = now;
  fresh.last[0].pid = pid;
  fresh.last[0].tid = tid;
  bpf_map_update_elem(&stream_writes, &end, &fresh, BPF_ANY);
}

/* The return of the first read that got data after a wait nobody of the tree ended: names the
 * tree's last writers to the end it read, when it is a pipe or socket. */
static __always_inline void stream_read_done(const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret, __u64 wait_start_ns,
                                             __u64 wake_ns, bool btf) {
  __u32 kind = 0;
  __u64 end = stream_end(KERNEL_PTR(btf, file, entry->stream.file), true, &kind, btf);
  if (end == 0) return;
  struct gprof_stream_writes* writes = bpf_map_lookup_elem(&stream_writes, &end);
  if (!writes) return;
  struct gprof_stream_read* rec = reserve(sizeof(*rec), GPROF_REC_STREAM_READ);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->wait_start_ns = wait_start_ns;
  rec->wake_ns = wake_ns;
  rec->ret = ret;
  rec->syscall_nr = entry->nr;
  rec->kind = kind;
  rec->fd = (__s32)entry->args[0];
  rec->reserved = 0;
  __builtin_memcpy(rec->writers, writes->last, sizeof(rec->writers));
  submit(rec);
}

/* TCP --------------------------------------------------------------------------------------- */

#define IPPROTO_TCP 6

/* `sk` when it is a TCP socket (IPv4 or IPv6), else NULL. */
static __always_inline struct sock* tcp_sock_of(struct sock* sk, bool btf) {
  if (!sk) return NULL;
  __u16 family = KERNEL_FIELD(btf, sk, __sk_common.skc_family);
  if (family != AF_INET && family != AF_INET6) return NULL;
  return KERNEL_FIELD(btf, sk, sk_protocol) == IPPROTO_TCP ? sk : NULL;
}

/* Where a TCP socket's stream is: the next byte a send queues (write_seq), or the next byte a
 * receive hands to the program (copied_seq). */
static __always_inline __u32 tcp_position(struct sock* sk, bool send, bool btf) {
  struct tcp_sock* tcp = KERNEL_PTR(btf, tcp_sock, sk);
  return send ? KERNEL_FIELD(btf, tcp, write_seq) : KERNEL_FIELD(btf, tcp, copied_seq);
}

/* An IPv4 address (network order) as IPv6's ::ffff:a.b.c.d, so that an IPv4 socket and an IPv6
 * socket of its peer's name the same address alike. */
static __always_inline void mapped_ipv4(__u8 address[16], __u32 ipv4) {
  __builtin_memset(address, 0, 10);
  address[10] = 0xff;
  address[11] = 0xff;
  __builtin_memcpy(address + 12, &ipv4, 4);
}

/* The return of a send or receive on a TCP socket: a record when it moved bytes (true). */
static __always_inline bool tcp_transfer_done(const struct gprof_syscall_pending* entry, __u32 tid,
                                              __u64 now, bool send, __u64 wait_start_ns,
                                              __u64 wake_ns, bool btf) {
  if (!entry->stream.tcp_sock) return false;
  struct sock* sk = KERNEL_PTR(btf, sock, entry->stream.tcp_sock);
  __u32 seq = tcp_position(sk, send, btf);
  if (seq == entry->stream.seq) return false; /* nothing moved: an error, EAGAIN, a peek */
  struct gprof_tcp_transfer* rec = reserve(sizeof(*rec), GPROF_REC_TCP_TRANSFER);
  if (!rec) return true;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->wait_start_ns = wait_start_ns;
  rec->wake_ns = wake_ns;
  rec->seq_start = entry->stream.seq;
  rec->seq_end = seq;
  rec->direction = send ? GPROF_TCP_SEND : GPROF_TCP_RECEIVE;
  rec->syscall_nr = (__u16)entry->nr;
  rec->fd = (__s32)entry->args[0];
  rec->local_port = KERNEL_FIELD(btf, sk, __sk_common.skc_num);
  rec->remote_port = bpf_ntohs(KERNEL_FIELD(btf, sk, __sk_common.skc_dport));
  if (KERNEL_FIELD(btf, sk, __sk_common.skc_family) == AF_INET6) {
    ipv6_address((__u64*)rec->local_addr, sk, false, btf);
    ipv6_address((__u64*)rec->remote_addr, sk, true, btf);
  } else {
    mapped_ipv4(rec->local_addr, KERNEL_FIELD(btf, sk, __sk_common.skc_rcv_saddr));
    mapped_ipv4(rec->remote_addr, KERNEL_FIELD(btf, sk, __sk_common.skc_daddr));
  }
  submit(rec);
  return true;
}

/* How many fds of a poll or select call are looked at for a device: a GPU driver's poll is on a
 * few fds, and the cost of a call must stay bounded. */
#define DEVICE_SCAN_FDS 16
#define SELECT_SCAN_WORDS 16 /* fd_set words: fds below 1024, FD_SETSIZE */

/* The state of a scan of a poll or select call's fds. Plain numbers only (the call's arguments as
 * it passed them, user addresses read with probe reads): a global function sees its memory as
 * numbers. */
struct fd_scan {
  __u64 count;   /* poll: nfds; select: nfds (fds below it) */
  __u64 sets[3]; /* poll: the pollfd array in sets[0]; select: readfds, writefds, exceptfds */
  __u32 checked; /* fds looked up so far, at most DEVICE_SCAN_FDS */
  __s32 found_fd; /* the first fd on a device of interest, or -1 */
  char name[GPROF_COMM_LEN];
};

/* One struct pollfd of poll(fds, nfds, timeout) or ppoll(fds, nfds, tmo_p, sigmask, size): a
 * bpf_loop step, so that the verifier checks one step instead of every iteration. */
static long scan_pollfd(__u32 index, void* context) {
  struct fd_scan* scan = context;
  const struct {
    __s32 fd;
    __s16 events;
    __s16 revents;
  }* fds = (const void*)scan->sets[0];
  __s32 fd = -1;
  if (bpf_probe_read_user(&fd, sizeof(fd), &fds[index].fd) != 0) return 1;
  if (!device_fd(fd, scan->name)) return 0;
  scan->found_fd = fd;
  return 1;
}

/* The index of the one bit set in `bit`. */
static __always_inline __u32 bit_index(__u64 bit) {
  __u32 index = 0;
  if (bit & 0xffffffff00000000ull) index += 32;
  if (bit & 0xffff0000ffff0000ull) index += 16;
  if (bit & 0xff00ff00ff00ff00ull) index += 8;
  if (bit & 0xf0f0f0f0f0f0f0f0ull) index += 4;
  if (bit & 0xccccccccccccccccull) index += 2;
  if (bit & 0xaaaaaaaaaaaaaaaaull) index += 1;
  return index;
}

/* One word of the fd sets of select(nfds, readfds, writefds, exceptfds, timeout) or pselect6 (the
 * same, and a sigmask): the fds set in any of the three; 1 to end the scan. A global function,
 * verified once on its own: inlined in a bpf_loop step, its loop over the word's fds made the
 * verifier follow every count of fds checked through every step, past its million instructions
 * on Linux 6.18 builds of December 2026. */
__noinline int scan_select_word(struct fd_scan* scan, __u32 word) {
  if (!scan || word >= SELECT_SCAN_WORDS) return 1;
  __u64 bits = 0;
  for (__u32 set = 0; set < 3; set++) {
    const __u64* fds = (const __u64*)scan->sets[set];
    __u64 part = 0;
    if (fds && bpf_probe_read_user(&part, sizeof(part), &fds[word]) == 0) bits |= part;
  }
  __u64 below = scan->count - word * 64;
  if (below < 64) bits &= (1ull << below) - 1;
  for (__u32 i = 0; i < DEVICE_SCAN_FDS; i++) {
    if (!bits) return 0;
    if (scan->checked >= DEVICE_SCAN_FDS) return 1;
    __u64 lowest = bits & -bits;
    bits ^= lowest;
    scan->checked++;
    __s32 fd = (__s32)(word * 64 + bit_index(lowest));
    if (device_fd(fd, scan->name)) {
      scan->found_fd = fd;
      return 1;
    }
  }
  return 0;
}

static long scan_fdset_word(__u32 word, void* context) {
  return scan_select_word(context, word) ? 1 : 0; /* a step returns 0 or 1, as the verifier checks */
}

/* Whether a poll or select call waits on a device of interest: fills the device part. */
static __always_inline bool device_in_fds(struct gprof_syscall_pending* entry, bool select) {
  struct fd_scan scan = {};
  scan.found_fd = -1;
  if (select) {
    scan.count = entry->args[0];
    scan.sets[0] = entry->args[1];
    scan.sets[1] = entry->args[2];
    scan.sets[2] = entry->args[3];
    __u64 words = (scan.count + 63) / 64;
    bpf_loop(words < SELECT_SCAN_WORDS ? words : SELECT_SCAN_WORDS, scan_fdset_word, &scan, 0);
  } else {
    scan.count = entry->args[1];
    scan.sets[0] = entry->args[0];
    bpf_loop(scan.count < DEVICE_SCAN_FDS ? scan.count : DEVICE_SCAN_FDS, scan_pollfd, &scan, 0);
  }
  if (scan.found_fd < 0) return false;
  entry->device.fd = scan.found_fd;
  __builtin_memcpy(entry->device.name, scan.name, GPROF_COMM_LEN);
  return true;
}

/* Fills the device part of a device wait; false when the call is not one to record. */
static __always_inline bool device_call(struct gprof_syscall_pending* entry) {
  switch (entry->nr) {
    case NR_IOCTL:
      entry->device.kind = GPROF_DEVICE_IOCTL;
      entry->device.fd = (__s32)entry->args[0];
      return device_fd(entry->device.fd, entry->device.name);
    case NR_POLL:
    case NR_PPOLL:
      entry->device.kind = GPROF_DEVICE_POLL;
      return device_in_fds(entry, false);
    case NR_SELECT:
    case NR_PSELECT6:
      entry->device.kind = GPROF_DEVICE_POLL;
      return device_in_fds(entry, true);
    case NR_EPOLL_WAIT:
    case NR_EPOLL_PWAIT:
    case NR_EPOLL_PWAIT2:
      entry->device.kind = GPROF_DEVICE_EPOLL;
      entry->device.fd = (__s32)entry->args[0];
      return true;
    default:
      return false;
  }
}

static __always_inline int on_sys_enter(u64* ctx, bool btf) {
  /* (struct pt_regs *regs, long id) */
  long nr = (long)ctx[1];
  if (window_shut || !recorded_syscall(nr)) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  struct gprof_thread_state* thread = bpf_map_lookup_elem(&threads, &tid);
  if (!thread) return 0;
  __u64 start_ns = bpf_ktime_get_ns();
  if (!in_window(start_ns)) return 0;

  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  if (is_stream_write(nr) || is_stream_read(nr)) {
    __s32 fd = btf ? (__s32)regs->di : (__s32)BPF_CORE_READ(regs, di);
    struct file* file = fd_file_of(fd, btf);
    __u32 mode = 0;
    struct sock* sk = file_sock(file, &mode, btf);
    struct sock* tcp = tcp_sock_of(sk, btf);
    bool send = is_stream_write(nr);
    /* A TCP send is recorded whole (below), and names itself to the read its bytes woke: only
     * other writes are noted by the end they reach. */
    if (send && !tcp) {
      note_stream_write(file, mode, sk, pid_tgid >> 32, tid, start_ns, btf);
      return 0;
    }
    /* A read, or a write of a TCP socket: what its return needs (nothing else of the entry is read
     * then). */
    struct gprof_syscall_pending* entry = &thread->syscall;
    entry->pid = pid_tgid >> 32;
    entry->nr = (__u32)nr;
    entry->args[0] = (__u64)fd;
    entry->stream.file = (__u64)file;
    entry->stream.tcp_sock = (__u64)tcp;
    entry->stream.seq = tcp ? tcp_position(tcp, send, btf) : 0;
    entry->start_ns = start_ns;
    return 0;
  }
  /* Written in place; start_ns last, once the call is known to be one to record (a system call's
   * programs run in its own thread: nothing else writes the entry meanwhile). All of it, the
   * union's every byte included. */
  struct gprof_syscall_pending* entry = &thread->syscall;
  __builtin_memset(entry, 0, sizeof(*entry));
  entry->pid = pid_tgid >> 32;
  entry->nr = (__u32)nr;
  /* The x86_64 system call convention: di, si, dx, r10, r8, r9. */
  if (btf) {
    entry->args[0] = regs->di;
    entry->args[1] = regs->si;
    entry->args[2] = regs->dx;
    entry->args[3] = regs->r10;
    entry->args[4] = regs->r8;
    entry->args[5] = regs->r9;
  } else {
    entry->args[0] = BPF_CORE_READ(regs, di);
    entry->args[1] = BPF_CORE_READ(regs, si);
    entry->args[2] = BPF_CORE_READ(regs, dx);
    entry->args[3] = BPF_CORE_READ(regs, r10);
    entry->args[4] = BPF_CORE_READ(regs, r8);
    entry->args[5] = BPF_CORE_READ(regs, r9);
  }

  if (is_futex_syscall(nr)) {
    futex_call(entry);
  } else if (nr == NR_FUTEX_WAITV) {
    futex_waitv_call(entry);
  } else if (nr == NR_MMAP) {
    /* Every mmap is a memory map, with the name of the file it maps; one of a device file is a
     * device wait as well. */
    if (!(entry->args[3] & MAP_ANONYMOUS)) {
      fd_file_name((__s32)entry->args[4], entry->device.file);
      if (device_fd((__s32)entry->args[4], entry->device.name)) {
        entry->device.kind = GPROF_DEVICE_MMAP;
        entry->device.fd = (__s32)entry->args[4];
      }
    }
  } else if (is_memory_syscall(nr)) {
  } else if (!device_call(entry)) {
    return 0;
  }
  entry->start_ns = start_ns;
  return 0;
}
TYPED_TRACEPOINT(sys_enter, on_sys_enter)

static __always_inline void emit_futex(const struct gprof_syscall_pending* entry, __u32 tid,
                                       __u64 now, long ret) {
  struct gprof_futex* rec = reserve(sizeof(*rec), GPROF_REC_FUTEX);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->uaddr = entry->futex.uaddr;
  rec->uaddr2 = entry->futex.uaddr2;
  rec->op = entry->futex.op;
  rec->val = entry->futex.val;
  rec->val3 = entry->futex.val3;
  rec->flags = entry->futex.flags;
  rec->timeout_ns = entry->futex.timeout_ns;
  rec->ret = ret;
  rec->owner_tid = entry->futex.owner_tid;
  rec->reserved = 0;
  submit(rec);
}

static __always_inline void emit_futex_waitv(const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret) {
  struct gprof_futex_waitv* rec = reserve(sizeof(*rec), GPROF_REC_FUTEX_WAITV);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->count = entry->waitv.count;
  rec->flags = entry->waitv.flags;
  rec->timeout_ns = entry->waitv.timeout_ns;
  rec->ret = ret;
  __builtin_memcpy(rec->uaddr, entry->waitv.uaddr, sizeof(rec->uaddr));
  submit(rec);
}

static __always_inline void emit_device_wait(const struct gprof_syscall_pending* entry, __u32 tid,
                                             __u64 now, long ret) {
  struct gprof_device_wait* rec = reserve(sizeof(*rec), GPROF_REC_DEVICE_WAIT);
  if (!rec) return;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->kind = entry->device.kind;
  rec->fd = entry->device.fd;
  /* ioctl: the request; poll: nfds; mmap: the length; epoll: maxevents */
  rec->request = entry->device.kind == GPROF_DEVICE_EPOLL ? entry->args[2] : entry->args[1];
  if (entry->nr == NR_SELECT || entry->nr == NR_PSELECT6) rec->request = entry->args[0];
  rec->ret = ret;
  __builtin_memcpy(rec->device, entry->device.name, GPROF_COMM_LEN);
  submit(rec);
}

static __always_inline void emit_memory_map(const struct gprof_syscall_pending* entry, __u32 tid,
                                            __u64 now, long ret) {
  struct gprof_memory_map* rec = reserve(sizeof(*rec), GPROF_REC_MEMORY_MAP);
  if (!rec) return;
  const __u64* args = entry->args;
  rec->pid = entry->pid;
  rec->tid = tid;
  rec->start_ns = entry->start_ns;
  rec->end_ns = now;
  rec->syscall_nr = entry->nr;
  rec->address = args[0];
  rec->length = args[1];
  rec->ret = ret;
  switch (entry->nr) {
    case NR_MMAP: /* (addr, length, prot, flags, fd, offset) */
      if (ret >= 0 || ret < -4095) rec->address = (__u64)ret;
      rec->prot = (__u32)args[2];
      rec->flags = args[3];
      break;
    case NR_MPROTECT: /* (addr, length, prot) */
    case NR_MADVISE:  /* (addr, length, advice) */
      rec->prot = (__u32)args[2];
      break;
    case NR_MREMAP: /* (old_address, old_size, new_size, flags, new_address) */
      rec->flags = args[2];
      rec->prot = (__u32)args[3];
      break;
    default: /* munmap (addr, length) */
      break;
  }
  /* All NUL but for an mmap of a file: the entry starts zeroed, and only mmap fills it. */
  __builtin_memcpy(rec->file, entry->device.file, sizeof(rec->file));
  submit(rec);
}

static __always_inline int on_sys_exit(u64* ctx, bool btf) {
  /* (struct pt_regs *regs, long ret); the syscall number is in orig_ax. This runs at the end of
   * every system call of the machine: the number is a plain load where the type allows. */
  struct pt_regs* regs = (struct pt_regs*)ctx[0];
  long nr = btf ? (long)regs->orig_ax : (long)BPF_CORE_READ(regs, orig_ax);
  if (!recorded_syscall(nr)) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct gprof_thread_state* thread = bpf_map_lookup_elem(&threads, &tid);
  if (!thread || thread->syscall.start_ns == 0) return 0;
  struct gprof_syscall_pending* entry = &thread->syscall;
  /* An entry of another call: its return was missed (it cannot happen today; no record). */
  if (entry->nr == nr) {
    long ret = (long)ctx[1];
    __u64 now = bpf_ktime_get_ns();
    if (is_stream_read(nr)) {
      /* The first read that got data after a wait nobody of the tree ended says whose data it
       * was: a TCP read by its transfer record (its bytes name their send; a peek, which moves
       * none, leaves the wait to the read that does), another by the end's last writers. */
      bool woken = thread->unexplained_wake_ns != 0 && ret > 0;
      __u64 wait_start_ns = woken ? thread->unexplained_wait_start_ns : 0;
      __u64 wake_ns = woken ? thread->unexplained_wake_ns : 0;
      if (entry->stream.tcp_sock) {
        if (tcp_transfer_done(entry, tid, now, false, wait_start_ns, wake_ns, btf))
          thread->unexplained_wake_ns = 0;
      } else if (woken) {
        thread->unexplained_wake_ns = 0;
        stream_read_done(entry, tid, now, ret, wait_start_ns, wake_ns, btf);
      }
    } else if (is_stream_write(nr)) {
      tcp_transfer_done(entry, tid, now, true, 0, 0, btf);
    } else if (is_futex_syscall(nr)) {
      if (!count_short_futex(thread, tid, now)) emit_futex(entry, tid, now, ret);
    } else if (nr == NR_FUTEX_WAITV) {
      emit_futex_waitv(entry, tid, now, ret);
    } else {
      if (is_memory_syscall(nr)) emit_memory_map(entry, tid, now, ret);
      if (entry->device.kind != 0) emit_device_wait(entry, tid, now, ret);
    }
  }
  entry->start_ns = 0;
  return 0;
}
TYPED_TRACEPOINT(sys_exit, on_sys_exit)

#endif /* GPROF_SYSTEM_CALLS_BPF_H */
