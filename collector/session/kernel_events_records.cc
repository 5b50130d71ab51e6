#include "collector/session/kernel_events_records.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "collector/model/record_storage.h"
#include "collector/session/process_maps.h"
#include "collector/session/rank_identity.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

// Where gprof_offcpu and gprof_lost ended before user stacks and per-CPU counts were added.
// An off-CPU record that short had a reserved 0 where user_stack_id now is: no stack, not id 0.
constexpr size_t kOffCpuFirstSize = offsetof(gprof_offcpu, waker_user_stack_id);
constexpr size_t kFutexFirstSize = offsetof(gprof_futex, owner_tid);
constexpr size_t kLostFirstSize = offsetof(gprof_lost, cpu);
constexpr size_t kMemoryMapFirstSize = offsetof(gprof_memory_map, file);
static_assert(kAllCpus == GPROF_ALL_CPUS);

const char* KernelRecordName(uint32_t type) {
  switch (type) {
    case GPROF_REC_OFFCPU:
      return "off-CPU intervals";
    case GPROF_REC_FUTEX:
      return "futex calls";
    case GPROF_REC_TASK_NEW:
      return "thread starts";
    case GPROF_REC_TASK_RENAME:
      return "thread renames";
    case GPROF_REC_TASK_EXIT:
      return "thread exits";
    case GPROF_REC_LOCK_WAIT:
      return "lock waits";
    case GPROF_REC_DEVICE_WAIT:
      return "device waits";
    case GPROF_REC_PAGE_FAULT:
      return "page faults";
    case GPROF_REC_MEMORY_MAP:
      return "memory map calls";
    case GPROF_REC_FUTEX_WAITV:
      return "futex_waitv calls";
    case GPROF_REC_EVENT_COUNT:
      return "quick page fault counts";
    case GPROF_REC_SIGNAL:
      return "signals";
    case GPROF_REC_PYTHON_STACK:
      return "Python stacks";
    case GPROF_REC_WAIT_COUNT:
      return "short wait counts";
    case GPROF_REC_NATIVE_STACK:
      return "native stacks";
    case GPROF_REC_STREAM_READ:
      return "pipe and socket reads";
    case GPROF_REC_TCP_TRANSFER:
      return "TCP reads and writes";
    case GPROF_REC_CUDA_PROBE_CALL:
      return "CUDA calls (uprobes)";
    default:
      return "records";
  }
}

const char* LostKindName(uint32_t kind) {
  switch (kind) {
    case GPROF_LOST_RINGBUF:
      return "ring buffer full";
    case GPROF_LOST_STACK:
      return "stack unavailable";
    case GPROF_LOST_PENDING:
      return "per-thread state map full";
    case GPROF_LOST_TRACKED:
      return "process map full, a child process not followed";
    case GPROF_LOST_MALFORMED:
      return "malformed ring-buffer sample";
    case GPROF_LOST_WRITE:
      return "kernel.gpr could not be written";
    default:
      return "lost";
  }
}

DeviceCall DeviceCallOf(uint32_t kind) {
  switch (kind) {
    case GPROF_DEVICE_IOCTL:
      return DeviceCall::kIoctl;
    case GPROF_DEVICE_POLL:
      return DeviceCall::kPoll;
    case GPROF_DEVICE_EPOLL:
      return DeviceCall::kEpoll;
    case GPROF_DEVICE_MMAP:
      return DeviceCall::kMmap;
    default:
      return DeviceCall::kUnknown;  // a newer recorder's kind: kept, named generically
  }
}

// x86_64 system call numbers, as the recorder gives them.
MemorySyscall MemorySyscallOf(uint32_t syscall_nr) {
  switch (syscall_nr) {
    case 9:
      return MemorySyscall::kMmap;
    case 10:
      return MemorySyscall::kMprotect;
    case 11:
      return MemorySyscall::kMunmap;
    case 25:
      return MemorySyscall::kMremap;
    case 28:
      return MemorySyscall::kMadvise;
    default:
      return MemorySyscall::kUnknown;
  }
}

// The `depth` return addresses that follow a stack record of type T, or nothing when they do not
// fit the record or the recorder's depth limit.
template <typename T>
std::optional<std::vector<uint64_t>> StackFrames(std::span<const uint8_t> bytes, uint32_t depth) {
  uint64_t frames_bytes = uint64_t{depth} * sizeof(uint64_t);
  if (depth > GPROF_MAX_STACK_DEPTH || bytes.size() - sizeof(T) < frames_bytes) return std::nullopt;
  std::vector<uint64_t> ips(depth);
  // An empty stack has no buffer to copy into: memcpy to null is undefined even for 0 bytes.
  if (frames_bytes > 0) memcpy(ips.data(), bytes.data() + sizeof(T), frames_bytes);
  return ips;
}

}  // namespace

// Records of a file read before its vectors are sized for the mix they showed.
constexpr uint64_t kMixSample = 16384;

void KernelRecordDecoder::Decode(const RecordView& record) {
  if (++seen_records_ == kMixSample) [[unlikely]]
    ReserveForTheMix(record.file_records);
  switch (record.type) {
    case GPROF_REC_OFFCPU:
      ++seen_off_cpu_;
      return DecodeOffCpu(record);
    case GPROF_REC_FUTEX:
      ++seen_futex_;
      return DecodeFutex(record);
    case GPROF_REC_FUTEX_WAITV:
      return DecodeFutexWaitv(record);
    case GPROF_REC_LOCK_WAIT:
      return DecodeLockWait(record);
    case GPROF_REC_DEVICE_WAIT:
      return DecodeDeviceWait(record);
    case GPROF_REC_PAGE_FAULT:
      return DecodePageFault(record);
    case GPROF_REC_MEMORY_MAP:
      return DecodeMemoryMap(record);
    case GPROF_REC_TASK_NEW:
      return DecodeTaskNew(record);
    case GPROF_REC_TASK_RENAME:
      return DecodeTaskRename(record);
    case GPROF_REC_TASK_EXIT:
      return DecodeTaskExit(record);
    case GPROF_REC_KERNEL_STACK:
      return DecodeKernelStack(record);
    case GPROF_REC_KERNEL_SYMBOL:
      return DecodeKernelSymbol(record);
    case GPROF_REC_USER_STACK:
      return DecodeUserStack(record);
    case GPROF_REC_PROCESS_MAPS:
      return DecodeProcessMaps(record);
    case GPROF_REC_LOST:
      return DecodeLost(record);
    case GPROF_REC_EVENT_COUNT:
      return DecodeEventCount(record);
    case GPROF_REC_SIGNAL:
      return DecodeSignal(record);
    case GPROF_REC_PYTHON_STACK:
      return DecodePythonStack(record);
    case GPROF_REC_PYTHON_PROCESS:
      return DecodePythonProcess(record);
    case GPROF_REC_PYTHON_CODE:
      return DecodePythonCode(record);
    case GPROF_REC_PYTHON_THREAD:
      return DecodePythonThread(record);
    case GPROF_REC_WAIT_COUNT:
      return DecodeWaitCount(record);
    case GPROF_REC_NATIVE_STACK:
      return native_.Decode(record);
    case GPROF_REC_STREAM_READ:
      return DecodeStreamRead(record);
    case GPROF_REC_LAUNCH_VARIABLES:
      return DecodeLaunchVariables(record);
    case GPROF_REC_TCP_TRANSFER:
      return DecodeTcpTransfer(record);
    case GPROF_REC_CUDA_PROBE_CALL:
      return DecodeCudaProbeCall(record);
    default:
      return;  // a newer recorder's record: skipped by design
  }
}

// The rest of the file in the proportions of the sample, an eighth more for the mix's drift: a
// vector grown by doubling moves every record it holds each time and touches twice the memory.
// What is reserved and not used is address space, never touched, so not resident.
void KernelRecordDecoder::ReserveForTheMix(uint64_t file_records) {
  if (file_records <= seen_records_) return;
  uint64_t left = file_records - seen_records_;
  auto reserve = [&](auto& records, uint64_t seen) {
    uint64_t expected = left / seen_records_ * seen + left % seen_records_ * seen / seen_records_;
    ReserveLarge(records, records.size() + expected + expected / 8);
  };
  reserve(session_->off_cpu, seen_off_cpu_);
  reserve(session_->futex_calls, seen_futex_);
}

uint32_t KernelRecordDecoder::CommIndex(const char (&comm)[16]) {
  static_assert(sizeof(CommKey) == sizeof(comm));
  // The name's bytes up to its first NUL, found a word at a time: the lowest byte flagged by
  // (w - 0x01..01) & ~w & 0x80..80 is the first zero byte (flags above it may be false).
  CommKey key;
  memcpy(key.data(), comm, sizeof(key));
  constexpr uint64_t kOnes = 0x0101010101010101ULL, kHighs = 0x8080808080808080ULL;
  for (uint64_t& word : key) {
    uint64_t zeros = (word - kOnes) & ~word & kHighs;
    if (zeros == 0) continue;
    int keep_bits = __builtin_ctzll(zeros) & ~7;  // bits below the first zero byte
    word = keep_bits == 0 ? 0 : word & (~uint64_t{0} >> (64 - keep_bits));
    if (&word == &key[0]) key[1] = 0;
    break;
  }
  const size_t hash = CommKeyHash()(key);
  RecentComm& recent = recent_comms_[(hash ^ (hash >> 17)) % recent_comms_.size()];
  if (recent.index != UINT32_MAX && recent.key[0] == key[0] && recent.key[1] == key[1])
    return recent.index;
  auto [entry, inserted] = comm_indexes_.try_emplace(key, 0);
  if (inserted) entry->second = session_->CommIndex(PrintableName(FixedString(comm, sizeof(comm))));
  recent = RecentComm{key, entry->second};
  return entry->second;
}

void KernelRecordDecoder::Malformed(const RecordView& record, const std::string& what) {
  session_->diagnostics.push_back(
      {path_, record.chunk_offset,
       "malformed " + what + " record skipped (" + RecordPlace(record) + ")"});
}

template <typename Event>
bool KernelRecordDecoder::ReadInterval(const RecordView& record, Event* event, const char* what,
                                       size_t first_size) {
  if (!ReadGrownRecord(record.bytes, first_size, event)) {
    Malformed(record, what);
    return false;
  }
  if (event->end_ns < event->start_ns) {
    Malformed(record, std::string(what) + " (end before start)");
    return false;
  }
  return true;
}

void KernelRecordDecoder::DecodeOffCpu(const RecordView& record) {
  gprof_offcpu event{};
  if (!ReadInterval(record, &event, "off-CPU", kOffCpuFirstSize)) return;
  if (record.bytes.size() < sizeof(event))
    event.user_stack_id = event.waker_user_stack_id = -ENODATA;
  OffCpuInterval interval;
  interval.start_ns = event.start_ns;
  interval.end_ns = event.end_ns;
  interval.wake_ns = event.wake_ns;
  interval.pid = event.pid;
  interval.tid = event.tid;
  interval.waker_pid = event.waker_pid;
  interval.waker_tid = event.waker_tid;
  interval.kstack_id = event.kstack_id;
  interval.waker_kstack_id = event.waker_kstack_id;
  interval.user_stack_id = event.user_stack_id;
  interval.waker_user_stack_id = event.waker_user_stack_id;
  interval.raw_state = event.state;
  interval.cpu = event.cpu;
  interval.flags = event.flags;
  interval.waker_comm = CommIndex(event.waker_comm);
  session_->off_cpu.push_back(std::move(interval));
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeFutex(const RecordView& record) {
  gprof_futex event{};
  if (!ReadInterval(record, &event, "futex", kFutexFirstSize)) return;
  if (event.ret < INT32_MIN || event.ret > INT32_MAX)
    return Malformed(record, "futex (a result no futex call returns)");
  session_->futex_calls.push_back(FutexCall{event.start_ns, event.end_ns, event.uaddr, event.uaddr2,
                                            event.pid, event.tid, event.op, event.val, event.val3,
                                            event.flags, event.timeout_ns,
                                            static_cast<int32_t>(event.ret), event.owner_tid});
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeFutexWaitv(const RecordView& record) {
  gprof_futex_waitv event;
  if (!ReadInterval(record, &event, "futex_waitv")) return;
  FutexWaitvCall call;
  call.start_ns = event.start_ns;
  call.end_ns = event.end_ns;
  call.pid = event.pid;
  call.tid = event.tid;
  call.count = event.count;
  call.addresses.assign(event.uaddr,
                        event.uaddr + std::min<uint32_t>(event.count, GPROF_WAITV_MAX));
  call.timeout_ns = event.timeout_ns;
  call.ret = event.ret;
  session_->futex_waitv_calls.push_back(std::move(call));
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeLockWait(const RecordView& record) {
  gprof_lock_wait event;
  if (!ReadInterval(record, &event, "kernel lock wait")) return;
  LockWait wait;
  wait.start_ns = event.start_ns;
  wait.end_ns = event.end_ns;
  wait.lock_address = event.lock_address;
  wait.pid = event.pid;
  wait.tid = event.tid;
  wait.flags = event.flags;
  wait.ret = event.ret;
  wait.owner_pid = event.owner_pid;
  wait.owner_tid = event.owner_tid;
  wait.owner_comm = PrintableName(FixedString(event.owner_comm, sizeof(event.owner_comm)));
  wait.kstack_id = event.kstack_id;
  wait.user_stack_id = event.user_stack_id;
  session_->lock_waits.push_back(std::move(wait));
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeDeviceWait(const RecordView& record) {
  gprof_device_wait event;
  if (!ReadInterval(record, &event, "device wait")) return;
  DeviceWait wait;
  wait.start_ns = event.start_ns;
  wait.end_ns = event.end_ns;
  wait.pid = event.pid;
  wait.tid = event.tid;
  wait.call = DeviceCallOf(event.kind);
  wait.fd = event.fd;
  wait.request = event.request;
  wait.ret = event.ret;
  wait.device = PrintableName(FixedString(event.device, sizeof(event.device)));
  session_->device_waits.push_back(std::move(wait));
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeStreamRead(const RecordView& record) {
  gprof_stream_read event;
  if (!ReadInterval(record, &event, "pipe or socket read")) return;
  if (event.wait_start_ns > event.wake_ns || event.wake_ns > event.end_ns)
    return Malformed(record, "pipe or socket read");
  StreamRead read;
  read.start_ns = event.start_ns;
  read.end_ns = event.end_ns;
  read.wait_start_ns = event.wait_start_ns;
  read.wake_ns = event.wake_ns;
  read.pid = event.pid;
  read.tid = event.tid;
  read.fd = event.fd;
  read.kind = event.kind;
  for (size_t i = 0; i < 4; ++i)
    read.writers[i] = {event.writers[i].time_ns, event.writers[i].pid, event.writers[i].tid};
  session_->stream_reads[{read.tid, read.wait_start_ns}] = read;
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeTcpTransfer(const RecordView& record) {
  gprof_tcp_transfer event;
  if (!ReadInterval(record, &event, "TCP read or write")) return;
  const uint32_t bytes = event.seq_end - event.seq_start;
  // No call moves nothing (those are not recorded) or more than 2 GiB (Linux caps a read or
  // write below); the wait a receive followed ends before the receive does.
  const bool waited = event.wake_ns != 0;
  if ((event.direction != GPROF_TCP_SEND && event.direction != GPROF_TCP_RECEIVE) || bytes == 0 ||
      bytes > INT32_MAX || event.tid == 0 ||
      (waited && (event.direction != GPROF_TCP_RECEIVE || event.wait_start_ns > event.wake_ns ||
                  event.wake_ns > event.end_ns)))
    return Malformed(record, "TCP read or write");
  TcpTransfer transfer;
  transfer.start_ns = event.start_ns;
  transfer.end_ns = event.end_ns;
  transfer.wait_start_ns = waited ? event.wait_start_ns : 0;
  transfer.wake_ns = event.wake_ns;
  transfer.pid = event.pid;
  transfer.tid = event.tid;
  std::memcpy(transfer.local.address.data(), event.local_addr, sizeof(event.local_addr));
  std::memcpy(transfer.remote.address.data(), event.remote_addr, sizeof(event.remote_addr));
  transfer.local.port = event.local_port;
  transfer.remote.port = event.remote_port;
  transfer.seq_start = event.seq_start;
  transfer.seq_end = event.seq_end;
  transfer.is_send = event.direction == GPROF_TCP_SEND;
  transfer.syscall_nr = event.syscall_nr;
  transfer.fd = event.fd;
  session_->tcp_transfers.push_back(transfer);
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodePageFault(const RecordView& record) {
  gprof_page_fault event;
  if (!ReadInterval(record, &event, "page fault")) return;
  session_->page_faults.push_back(PageFault{event.start_ns, event.end_ns, event.address, event.pid,
                                            event.tid, event.flags, event.result});
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeMemoryMap(const RecordView& record) {
  gprof_memory_map event{};  // a record from before `file`: no name
  if (!ReadInterval(record, &event, "memory map", kMemoryMapFirstSize)) return;
  session_->memory_map_calls.push_back(MemoryMapCall{
      event.start_ns, event.end_ns, event.pid, event.tid, MemorySyscallOf(event.syscall_nr),
      event.prot, event.address, event.length, event.flags, event.ret});
  threads_->SeeThread(event.tid, event.pid);
  // A file mapped executable that stayed mapped: a library loaded (unseen in any maps snapshot,
  // when the process was quick).
  bool mapped = event.ret >= 0 || event.ret < -4095;
  if (event.syscall_nr == 9 && (event.prot & PROT_EXEC) && mapped && event.file[0] != '\0') {
    Process& process = session_->processes[event.pid];
    process.pid = event.pid;
    process.loaded_files.push_back(
        LoadedFile{event.end_ns, PrintableName(FixedString(event.file, sizeof(event.file)))});
  }
}

void KernelRecordDecoder::DecodeTaskNew(const RecordView& record) {
  gprof_task_new event{};
  if (!ReadGrownRecord(record.bytes, offsetof(gprof_task_new, ns_pid), &event))
    return Malformed(record, "thread start");
  bool is_thread = (event.flags & GPROF_TASK_NEW_THREAD) != 0;
  session_->task_starts.push_back(TaskStart{event.time_ns, event.pid, event.tid, event.parent_pid,
                                            event.parent_tid, event.parent_kstack_id, is_thread,
                                            event.ns_pid, event.ns_tid, event.pid_namespace});
  threads_->SeeKernelName(event.tid, event.time_ns, FixedString(event.comm, sizeof(event.comm)));
  threads_->SeeStart(event.tid, event.pid);
  // A tid the kernel gives again after an exit is another thread: its start is the latest.
  Thread& thread = session_->threads[event.tid];
  thread.tid = event.tid;
  thread.pid = event.pid;
  thread.start_ns = std::max<uint64_t>(thread.start_ns, event.time_ns);
  if (!is_thread) {
    Process& process = session_->processes[event.pid];
    process.pid = event.pid;
    if (process.ppid == 0) process.ppid = event.parent_pid;
    if ((event.flags & GPROF_TASK_NEW_SECURE) && process.secure_ns == 0) {
      process.secure_ns = event.time_ns;
      process.secure_forked_from = event.parent_pid;
      process.secure_hidden = true;
    }
  }
}

void KernelRecordDecoder::DecodeTaskRename(const RecordView& record) {
  gprof_task_rename event;
  if (!ReadRecord(record.bytes, &event)) return Malformed(record, "thread rename");
  threads_->SeeKernelName(event.tid, event.time_ns, FixedString(event.comm, sizeof(event.comm)));
  threads_->SeeThread(event.tid, event.pid);
  // A new program: the maps snapshots from before name none of its addresses.
  if (event.is_exec) session_->processes[event.pid].exec_ns.push_back(event.time_ns);
  if ((event.is_exec & GPROF_EXEC_SECURE) && session_->processes[event.pid].secure_ns == 0) {
    Process& process = session_->processes[event.pid];
    process.pid = event.pid;
    process.secure_ns = event.time_ns;
    process.secure_hidden = (event.is_exec & GPROF_EXEC_HIDDEN) != 0;
  }
}

void KernelRecordDecoder::DecodeTaskExit(const RecordView& record) {
  gprof_task_exit event;
  if (!ReadRecord(record.bytes, &event)) return Malformed(record, "thread exit");
  Thread& thread = session_->threads[event.tid];
  thread.tid = event.tid;
  thread.pid = event.pid;
  thread.exit_ns = event.time_ns;
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeKernelStack(const RecordView& record) {
  gprof_kernel_stack stack;
  if (!ReadRecord(record.bytes, &stack)) return Malformed(record, "kernel stack");
  auto ips = StackFrames<gprof_kernel_stack>(record.bytes, stack.depth);
  if (!ips) return Malformed(record, "kernel stack");
  session_->kernel_stacks[stack.stack_id] = std::move(*ips);
}

void KernelRecordDecoder::DecodeKernelSymbol(const RecordView& record) {
  gprof_kernel_symbol symbol;
  if (!ReadRecord(record.bytes, &symbol)) return Malformed(record, "kernel symbol");
  auto name = TrailingText<gprof_kernel_symbol>(record.bytes, symbol.name_len);
  if (name.size() != symbol.name_len) return Malformed(record, "kernel symbol");
  char offset[24];
  snprintf(offset, sizeof(offset), "+0x%x", symbol.offset);
  session_->kernel_symbols[symbol.address] = PrintableName(name) + offset;
}

void KernelRecordDecoder::DecodeUserStack(const RecordView& record) {
  gprof_user_stack stack;
  if (!ReadRecord(record.bytes, &stack)) return Malformed(record, "user stack");
  auto ips = StackFrames<gprof_user_stack>(record.bytes, stack.depth);
  if (!ips) return Malformed(record, "user stack");
  session_->user_stacks[stack.stack_id] =
      UserStack{std::move(*ips), (stack.flags & GPROF_USER_STACK_TRUNCATED) != 0};
}

void KernelRecordDecoder::DecodeProcessMaps(const RecordView& record) {
  gprof_process_maps maps;
  if (!ReadRecord(record.bytes, &maps)) return Malformed(record, "process maps");
  auto text = TrailingText<gprof_process_maps>(record.bytes, maps.text_len);
  if (text.size() != maps.text_len) return Malformed(record, "process maps");
  Process& process = session_->processes[maps.pid];
  process.pid = maps.pid;
  process.maps.push_back(MapsSnapshot{maps.time_ns, ParseMaps(text)});
}

void KernelRecordDecoder::DecodeLaunchVariables(const RecordView& record) {
  gprof_launch_variables variables;
  if (!ReadRecord(record.bytes, &variables)) return Malformed(record, "launch variables");
  auto text = TrailingText<gprof_launch_variables>(record.bytes, variables.text_len);
  if (text.size() != variables.text_len) return Malformed(record, "launch variables");
  Process& process = session_->processes[variables.pid];
  process.pid = variables.pid;
  if (variables.time_ns < process.environment_read_ns) return;  // an earlier exec's
  process.environment_read_ns = std::max<uint64_t>(variables.time_ns, 1);
  process.rank = RankFromVariableText(text);
}

void KernelRecordDecoder::DecodeLost(const RecordView& record) {
  gprof_lost lost{};
  lost.cpu = GPROF_ALL_CPUS;  // a count from before per-CPU counts: for no CPU in particular
  if (!ReadGrownRecord(record.bytes, kLostFirstSize, &lost))
    return Malformed(record, "lost-events");
  auto [entry, inserted] =
      lost_entries_.try_emplace({lost.kind, lost.record_type}, session_->lost.size());
  if (inserted) {
    session_->lost.push_back(LostEvents{std::string("kernel ") +
                                            KernelRecordName(lost.record_type) + ": " +
                                            LostKindName(lost.kind),
                                        0,
                                        {}});
  }
  LostEvents& total = session_->lost[entry->second];
  total.count += lost.count;
  if (lost.record_type == GPROF_REC_MEMORY_MAP) session_->memory_map_calls_lost += lost.count;
  total.by_cpu[lost.cpu] += lost.count;
}

void KernelRecordDecoder::DecodeEventCount(const RecordView& record) {
  gprof_event_count event{};
  if (!ReadGrownRecord(record.bytes, GPROF_EVENT_COUNT_FIRST_SIZE, &event))
    return Malformed(record, "event count");
  switch (event.kind) {
    case GPROF_COUNT_QUICK_PAGE_FAULTS: {
      if (event.tid == 0) return Malformed(record, "page fault count");
      // A thread that exec'ed as another tid, or ran past the loader's end, has more than one.
      Thread& thread = session_->threads[event.tid];
      thread.tid = event.tid;
      thread.quick_page_faults += event.count;
      thread.quick_page_fault_ns += event.total_ns;
      if (event.time_ns != 0)
        session_->quick_fault_runs.push_back(QuickFaultRun{
            event.time_ns, event.time_ns, event.pid, event.tid, event.count, event.total_ns});
      session_->quick_page_fault_limit_ns = event.limit_ns;
      threads_->SeeThread(event.tid, event.pid);
      return;
    }
    case GPROF_COUNT_SPIN_CONTENTION:
      session_->spin_contention_by_cpu[event.cpu] += event.count;
      return;
    default:
      return;  // a newer recorder's count: skipped by design
  }
}

void KernelRecordDecoder::DecodeSignal(const RecordView& record) {
  gprof_signal event;
  if (!ReadGrownRecord(record.bytes, sizeof(event), &event)) return Malformed(record, "signal");
  // gprof-run's own (the file's writer): what its forwarding of signals decided by.
  if (event.pid == record.writer_pid) return;
  session_->signals.push_back(SignalSent{event.time_ns, event.pid, event.tid, event.signal,
                                         event.code, event.sender_pid, CommIndex(event.sender_comm),
                                         event.flags, event.result});
  threads_->SeeThread(event.tid, event.pid);
}

void KernelRecordDecoder::DecodeWaitCount(const RecordView& record) {
  gprof_wait_count event;
  if (!ReadGrownRecord(record.bytes, sizeof(event), &event)) return Malformed(record, "wait count");
  if (event.kind != GPROF_WAIT_COUNT_OFFCPU && event.kind != GPROF_WAIT_COUNT_FUTEX)
    return;  // a newer recorder's count: skipped by design
  if (event.tid == 0 || event.end_ns < event.start_ns || event.total_ns < event.runnable_ns)
    return Malformed(record, "wait count");
  CountedWaits counted;
  counted.kind = static_cast<CountedWaits::Kind>(event.kind);
  counted.how = event.how;
  counted.pid = event.pid;
  counted.tid = event.tid;
  counted.syscall_nr = event.syscall_nr;
  counted.waker_pid = event.waker_pid;
  counted.waker_tid = event.waker_tid;
  counted.object = event.object;
  counted.start_ns = event.start_ns;
  counted.end_ns = event.end_ns;
  counted.count = event.count;
  counted.total_ns = event.total_ns;
  counted.runnable_ns = event.runnable_ns;
  counted.woken = std::min(event.woken, event.count);
  session_->counted_waits.push_back(counted);
  session_->counted_waits_limit_ns = event.limit_ns;
  threads_->SeeThread(event.tid, event.pid);
}

}  // namespace gprof::collector

namespace gprof::collector {

void KernelRecordDecoder::DecodePythonStack(const RecordView& record) {
  gprof_python_stack stack;
  if (!ReadRecord(record.bytes, &stack)) return Malformed(record, "Python stack");
  uint64_t frames_bytes = uint64_t{stack.depth} * sizeof(gprof_python_frame);
  if (stack.depth == 0 || stack.depth > GPROF_PYTHON_MAX_FRAMES ||
      record.bytes.size() - sizeof(stack) < frames_bytes)
    return Malformed(record, "Python stack");
  if (stack.kind < GPROF_PY_STACK_WAITER || stack.kind > GPROF_PY_STACK_CUDA_CALL)
    return;  // a newer recorder's kind: skipped by design
  std::vector<PythonFrameRef> frames(stack.depth);
  for (uint32_t i = 0; i < stack.depth; ++i) {
    gprof_python_frame frame;
    memcpy(&frame, record.bytes.data() + sizeof(stack) + i * sizeof(frame), sizeof(frame));
    frames[i] = {frame.code, frame.offset < -1 ? -1 : frame.offset, frame.firstlineno, frame.tag,
                 frame.flags};
  }
  PythonStack out;
  out.time_ns = stack.time_ns;
  out.key_ns = stack.key_ns;
  out.pid = stack.pid;
  out.tid = stack.tid;
  out.key_tid = stack.key_tid;
  out.flags = stack.flags;
  out.kind = static_cast<PythonStackKind>(stack.kind);
  out.frames = session_->python.InternFrames(std::move(frames));
  session_->python.stacks.push_back(out);
  threads_->SeeThread(stack.tid, stack.pid);
}

void KernelRecordDecoder::DecodePythonProcess(const RecordView& record) {
  gprof_python_process process;
  if (!ReadRecord(record.bytes, &process)) return Malformed(record, "Python process");
  auto text = TrailingText<gprof_python_process>(record.bytes, process.path_len);
  if (text.size() != process.path_len) return Malformed(record, "Python process");
  PythonProcess& out = session_->python.processes[process.pid];
  out.status = process.status;
  out.version_hex = process.version_hex;
  size_t newline = text.find('\n');
  out.path = PrintableName(text.substr(0, newline));
  out.why =
      newline == std::string_view::npos ? std::string() : PrintableName(text.substr(newline + 1));
  Process& model = session_->processes[process.pid];
  model.pid = process.pid;
}

void KernelRecordDecoder::DecodePythonCode(const RecordView& record) {
  gprof_python_code code;
  if (!ReadRecord(record.bytes, &code)) return Malformed(record, "Python code object");
  uint64_t tail = uint64_t{code.filename_len} + code.name_len + code.linetable_len;
  auto bytes = TrailingText<gprof_python_code>(record.bytes, tail);
  if (bytes.size() != tail) return Malformed(record, "Python code object");
  PythonCode out;
  if (code.flags & GPROF_PY_CODE_UNREADABLE) {
    out.error = code.error != 0 ? static_cast<int>(code.error) : EINVAL;
  } else {
    out.filename = PrintableName(bytes.substr(0, code.filename_len));
    out.name = PrintableName(bytes.substr(code.filename_len, code.name_len));
    auto table = bytes.substr(uint64_t{code.filename_len} + code.name_len);
    out.linetable.assign(table.begin(), table.end());
  }
  out.qualname = (code.flags & GPROF_PY_CODE_QUALNAME) != 0;
  out.line_format = code.line_format;
  out.code_bytes = code.code_bytes;
  // A code object read well is kept over an attempt that failed.
  auto [entry, inserted] = session_->python.codes.try_emplace(
      PythonCodeKey{code.pid, code.code, code.firstlineno, code.tag}, out);
  if (!inserted && entry->second.error != 0) entry->second = std::move(out);
}

void KernelRecordDecoder::DecodePythonThread(const RecordView& record) {
  gprof_python_thread thread;
  if (!ReadRecord(record.bytes, &thread)) return Malformed(record, "Python thread name");
  auto name = TrailingText<gprof_python_thread>(record.bytes, thread.name_len);
  if (name.size() != thread.name_len) return Malformed(record, "Python thread name");
  python_thread_names_.push_back({thread.pid, thread.tid, PrintableName(name)});
}

void KernelRecordDecoder::Finish() {
  native_.Finish();
  FinishCudaProbeCalls();
  // A Python thread's native_id is its id in its process's PID namespace: in a container that is
  // not the kernel's (pid_namespaces.h).
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> host_tid;  // (pid, namespace tid) -> tid
  for (const TaskStart& start : session_->task_starts) {
    if (start.pid_namespace != 0 && start.ns_tid != start.tid)
      host_tid[{start.pid, start.ns_tid}] = start.tid;
  }
  for (PythonThreadName& entry : python_thread_names_) {
    auto translated = host_tid.find({entry.pid, entry.tid});
    uint32_t tid = translated != host_tid.end() ? translated->second : entry.tid;
    session_->python.thread_names[tid] = std::move(entry.name);
  }
  python_thread_names_.clear();
}

}  // namespace gprof::collector
