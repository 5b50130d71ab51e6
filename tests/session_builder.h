// Writes session files the way the recorders do (through the real ChunkFileWriter), with records
// the test chooses: the input of reader, analysis and writer tests.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"
#include "inject/shared/chunk_file_writer.h"

namespace gprof::test {

// Encoded records waiting to become one chunk.
class RecordBatch {
 public:
  // Appends `record` (any struct that starts with the 8-byte record header) and `tail` bytes after
  // it, filling in the header's size and type.
  template <typename Record>
  void Add(Record record, uint16_t type, std::string_view tail = {}) {
    format::RecordHeader header{static_cast<uint32_t>(sizeof(Record) + tail.size()), type, 0};
    memcpy(&record, &header, sizeof(header));
    bytes_.append(reinterpret_cast<const char*>(&record), sizeof(record));
    bytes_.append(tail);
    ++count_;
  }
  // Appends the first `size` bytes of `record`: a record written before its struct grew.
  template <typename Record>
  void AddFirstBytes(Record record, uint16_t type, size_t size) {
    format::RecordHeader header{static_cast<uint32_t>(size), type, 0};
    memcpy(&record, &header, sizeof(header));
    bytes_.append(reinterpret_cast<const char*>(&record), size);
    ++count_;
  }
  // Writes the batch as one chunk and empties it.
  void WriteTo(ChunkFileWriter* file) {
    file->Write(bytes_.data(), bytes_.size(), count_);
    bytes_.clear();
    count_ = 0;
  }

 private:
  std::string bytes_;
  uint32_t count_ = 0;
};

inline format::ApiCallRecord ApiCall(uint32_t tid, uint32_t api_id, uint64_t enter_ns,
                                     uint64_t exit_ns) {
  format::ApiCallRecord record{};
  record.tid = tid;
  record.api_id = api_id;
  record.enter_ns = enter_ns;
  record.exit_ns = exit_ns;
  return record;
}

inline void AddApiName(RecordBatch* batch, uint32_t api_id, std::string_view name) {
  format::ApiNameRecord record{};
  record.api_id = api_id;
  record.domain = static_cast<uint32_t>(format::ApiDomain::kRuntime);
  record.name_len = static_cast<uint32_t>(name.size());
  batch->Add(record, format::kApiName, name);
}

inline void AddCaptureInfo(RecordBatch* batch, format::CaptureMode mode, uint32_t cupti_version,
                           std::string_view text, uint64_t time_ns = 0) {
  format::CaptureInfoRecord record{};
  record.time_ns = time_ns;
  record.mode = static_cast<uint32_t>(mode);
  record.cupti_version = cupti_version;
  record.text_len = static_cast<uint32_t>(text.size());
  batch->Add(record, format::kCaptureInfo, text);
}

inline void AddGpuName(RecordBatch* batch, uint32_t name_id, std::string_view name) {
  format::GpuNameRecord record{};
  record.name_id = name_id;
  record.name_len = static_cast<uint32_t>(name.size());
  batch->Add(record, format::kGpuName, name);
}

// Where and when GPU work ran, on CUPTI's clock.
inline format::GpuPlacement Placement(uint64_t start_ns, uint64_t end_ns, uint64_t correlation_id,
                                      uint32_t stream_id, uint32_t device_id = 0) {
  format::GpuPlacement placement{};
  placement.start_ns = start_ns;
  placement.end_ns = end_ns;
  placement.correlation_id = correlation_id;
  placement.stream_id = stream_id;
  placement.device_id = device_id;
  placement.context_id = 1;
  return placement;
}

inline format::GpuKernelRecord KernelRecord(const format::GpuPlacement& placement,
                                            uint32_t name_id) {
  format::GpuKernelRecord record{};
  record.placement = placement;
  record.name_id = name_id;
  record.grid[0] = 128;
  record.grid[1] = record.grid[2] = 1;
  record.block[0] = 256;
  record.block[1] = record.block[2] = 1;
  record.registers_per_thread = 32;
  record.shared_memory_bytes = 4096;
  return record;
}

inline format::ClockOffsetRecord ClockOffsetAt(uint64_t time_ns, int64_t offset_ns,
                                               uint64_t uncertainty_ns = 100) {
  format::ClockOffsetRecord record{};
  record.time_ns = time_ns;
  record.offset_ns = offset_ns;
  record.uncertainty_ns = uncertainty_ns;
  return record;
}

// A native stack of `ips` whose text is `lines` joined by newlines (one per frame, as written).
inline void AddCallStack(RecordBatch* batch, uint32_t tid, uint64_t enter_ns,
                         const std::vector<uint64_t>& ips, const std::vector<std::string>& lines) {
  std::string tail(reinterpret_cast<const char*>(ips.data()), ips.size() * sizeof(uint64_t));
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  format::CallStackRecord record{};
  record.tid = tid;
  record.enter_ns = enter_ns;
  record.frame_count = static_cast<uint32_t>(ips.size());
  record.text_len = static_cast<uint32_t>(text.size());
  batch->Add(record, format::kCallStack, tail + text);
}

inline void AddThreadName(RecordBatch* batch, uint32_t tid, std::string_view name) {
  format::ThreadNameRecord record{};
  record.tid = tid;
  memcpy(record.name, name.data(), std::min(name.size(), sizeof(record.name) - 1));
  batch->Add(record, format::kThreadName);
}

inline gprof_offcpu OffCpu(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                           uint64_t wake_ns, uint32_t waker_tid, int32_t kstack_id) {
  gprof_offcpu event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.wake_ns = wake_ns;
  event.waker_pid = waker_tid != 0 ? pid : 0;
  event.waker_tid = waker_tid;
  event.kstack_id = kstack_id;
  event.waker_kstack_id = -1;
  event.state = wake_ns != 0 ? GPROF_TASK_INTERRUPTIBLE : GPROF_TASK_RUNNING;
  return event;
}

inline gprof_futex Futex(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                         uint64_t uaddr, uint32_t op) {
  gprof_futex event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.uaddr = uaddr;
  event.op = op;
  event.timeout_ns = -1;
  return event;
}

// A kernel stack record and the symbols of its frames, innermost first.
inline void AddKernelStack(RecordBatch* batch, int32_t stack_id,
                           std::initializer_list<std::pair<uint64_t, std::string_view>> frames) {
  std::string ips;
  for (const auto& [address, name] : frames) {
    ips.append(reinterpret_cast<const char*>(&address), sizeof(address));
    gprof_kernel_symbol symbol{};
    symbol.address = address;
    symbol.name_len = static_cast<uint32_t>(name.size());
    batch->Add(symbol, GPROF_REC_KERNEL_SYMBOL, name);
  }
  gprof_kernel_stack stack{};
  stack.stack_id = stack_id;
  stack.depth = static_cast<uint32_t>(frames.size());
  batch->Add(stack, GPROF_REC_KERNEL_STACK, ips);
}

inline gprof_lock_wait LockWaitEvent(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                                     uint64_t lock_address, uint32_t flags, uint32_t owner_tid,
                                     std::string_view owner_comm) {
  gprof_lock_wait event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.lock_address = lock_address;
  event.flags = flags;
  event.owner_pid = owner_tid != 0 ? pid : 0;
  event.owner_tid = owner_tid;
  memcpy(event.owner_comm, owner_comm.data(),
         std::min(owner_comm.size(), sizeof(event.owner_comm) - 1));
  event.kstack_id = -1;
  event.user_stack_id = -1;
  return event;
}

inline gprof_device_wait DeviceWaitEvent(uint32_t pid, uint32_t tid, uint64_t start_ns,
                                         uint64_t end_ns, uint32_t kind, std::string_view device,
                                         uint64_t request) {
  gprof_device_wait event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.kind = kind;
  event.fd = 7;
  event.request = request;
  memcpy(event.device, device.data(), std::min(device.size(), sizeof(event.device) - 1));
  return event;
}

inline gprof_page_fault PageFaultEvent(uint32_t pid, uint32_t tid, uint64_t start_ns,
                                       uint64_t end_ns, uint64_t address) {
  gprof_page_fault event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.address = address;
  event.flags = 0x41;  // FAULT_FLAG_WRITE | FAULT_FLAG_USER
  event.result = 0x4;  // VM_FAULT_MAJOR
  return event;
}

// x86_64 numbers: 9 mmap, 11 munmap.
inline gprof_memory_map MemoryMapEvent(uint32_t pid, uint32_t tid, uint64_t start_ns,
                                       uint64_t end_ns, uint32_t syscall_nr, uint64_t address,
                                       uint64_t length) {
  gprof_memory_map event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.syscall_nr = syscall_nr;
  event.address = address;
  event.length = length;
  return event;
}

inline gprof_futex_waitv FutexWaitvEvent(uint32_t pid, uint32_t tid, uint64_t start_ns,
                                         uint64_t end_ns, uint32_t count, int64_t woken_index) {
  gprof_futex_waitv event{};
  event.pid = pid;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.count = count;
  event.timeout_ns = -1;
  event.ret = woken_index;
  for (uint32_t i = 0; i < GPROF_WAITV_MAX; ++i) event.uaddr[i] = 0x7f0000000100 + i * 0x40;
  return event;
}

inline gprof_lost LostEvent(uint32_t kind, uint32_t record_type, uint64_t count, uint32_t cpu) {
  gprof_lost lost{};
  lost.kind = kind;
  lost.record_type = record_type;
  lost.count = count;
  lost.cpu = cpu;
  return lost;
}

// A user stack record: its return addresses follow, innermost first.
inline void AddUserStack(RecordBatch* batch, int32_t stack_id, const std::vector<uint64_t>& ips,
                         bool truncated = false) {
  gprof_user_stack stack{};
  stack.stack_id = stack_id;
  stack.depth = static_cast<uint32_t>(ips.size());
  stack.flags = truncated ? GPROF_USER_STACK_TRUNCATED : 0;
  batch->Add(
      stack, GPROF_REC_USER_STACK,
      std::string_view(reinterpret_cast<const char*>(ips.data()), ips.size() * sizeof(uint64_t)));
}

// The loader's copy of /proc/PID/maps at `time_ns`.
inline void AddProcessMaps(RecordBatch* batch, uint32_t pid, uint64_t time_ns,
                           std::string_view text) {
  gprof_process_maps maps{};
  maps.pid = pid;
  maps.time_ns = time_ns;
  maps.text_len = static_cast<uint32_t>(text.size());
  batch->Add(maps, GPROF_REC_PROCESS_MAPS, text);
}

}  // namespace gprof::test
