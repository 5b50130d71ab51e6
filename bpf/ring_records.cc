// The kernel recorder's records: the ring buffer drained (each sample checked, the stacks and
// processes it names noted), loader records staged, and chunks written to kernel.gpr.
#include <cerrno>
#include <cstring>

#include "bpf/recorder_state.h"
#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"

namespace gprof::bpf {
namespace {

// The size of each record type the BPF programs write; 0 for any other type.
size_t BpfRecordSize(uint16_t type) {
  switch (type) {
    case GPROF_REC_OFFCPU:
      return sizeof(gprof_offcpu);
    case GPROF_REC_FUTEX:
      return sizeof(gprof_futex);
    case GPROF_REC_TASK_NEW:
      return sizeof(gprof_task_new);
    case GPROF_REC_TASK_RENAME:
      return sizeof(gprof_task_rename);
    case GPROF_REC_TASK_EXIT:
      return sizeof(gprof_task_exit);
    case GPROF_REC_LOCK_WAIT:
      return sizeof(gprof_lock_wait);
    case GPROF_REC_DEVICE_WAIT:
      return sizeof(gprof_device_wait);
    case GPROF_REC_PAGE_FAULT:
      return sizeof(gprof_page_fault);
    case GPROF_REC_MEMORY_MAP:
      return sizeof(gprof_memory_map);
    case GPROF_REC_FUTEX_WAITV:
      return sizeof(gprof_futex_waitv);
    case GPROF_REC_EVENT_COUNT:
      return sizeof(gprof_event_count);
    case GPROF_REC_SIGNAL:
      return sizeof(gprof_signal);
    case GPROF_REC_STREAM_READ:
      return sizeof(gprof_stream_read);
    case GPROF_REC_TCP_TRANSFER:
      return sizeof(gprof_tcp_transfer);
    case GPROF_REC_CUDA_PROBE_CALL:
      return sizeof(gprof_cuda_probe_call);
    default:
      return 0;
  }
}

// --flight-recorder: what the threads did, which goes once older than the seconds kept. Every
// other record (stacks, processes and threads, maps, symbols, counts, losses, messages, and any
// type this list does not know) names what later records refer to, and stays. A count of quick
// page faults written at a switch-out (time_ns set) is of that run on CPU, and goes with it.
bool IsTrimmableRecord(const char* bytes, size_t size) {
  gprof_rec_hdr hdr{};
  memcpy(&hdr, bytes, sizeof(hdr));
  switch (hdr.type) {
    case GPROF_REC_EVENT_COUNT: {
      gprof_event_count count{};
      if (size < sizeof(count)) return false;
      memcpy(&count, bytes, sizeof(count));
      return count.time_ns != 0;
    }
    case GPROF_REC_OFFCPU:
    case GPROF_REC_FUTEX:
    case GPROF_REC_LOCK_WAIT:
    case GPROF_REC_DEVICE_WAIT:
    case GPROF_REC_PAGE_FAULT:
    case GPROF_REC_MEMORY_MAP:
    case GPROF_REC_FUTEX_WAITV:
    case GPROF_REC_SIGNAL:
    case GPROF_REC_PYTHON_STACK:
    case GPROF_REC_NATIVE_STACK:
    case GPROF_REC_STREAM_READ:
    case GPROF_REC_TCP_TRANSFER:
      return true;
    default:
      return false;
  }
}

}  // namespace

void KernelRecorder::State::StopWriting(const char* cause, const char* why) {
  if (writes_stopped_ns != 0) return;
  writes_stopped_ns = MonotonicNs();
  stop_cause = cause;
  try {  // Flush runs in Finish's out-of-memory path too: it must not throw
    if (last_error.empty()) last_error = why;
  } catch (...) {
  }
}

void KernelRecorder::State::WriteStaged(std::vector<char>* buffer, uint32_t* records,
                                        bool trimmable) {
  if (buffer->empty()) return;
  int error = writes_stopped_ns != 0 && !final_write
                  ? ENOSPC
                  : writer.Write(buffer->data(), buffer->size(), *records, trimmable);
  if (error == 0) {
    records_written += *records;
  } else if (error != ChunkFileWriter::kSizeBudgetRefused) {  // the budget counts what it refuses
    lost_to_writes += *records;
    if (writes_stopped_ns == 0) {
      char why[200];
      if (writer.refused_for_room()) {
        DiskRoom room = writer.Room();
        snprintf(why, sizeof(why),
                 "the session's filesystem was down to %.1f MiB free, and gprof-run leaves "
                 "%.0f MiB free (disk margin)",
                 room.free_bytes / 1048576.0, room.margin_bytes / 1048576.0);
        StopWriting("disk_room", why);
      } else if (*writer.descriptor_lost() != '\0') {
        snprintf(why, sizeof(why), "cannot write kernel.gpr: %s", writer.descriptor_lost());
        StopWriting("file_lost", why);
      } else if (error == EFBIG) {  // a hard limit gprof-run could not lift (own_settings.h)
        snprintf(why, sizeof(why),
                 "the file size limit (ulimit -f) that gprof-run was started under was reached");
        StopWriting("file_size_limit", why);
      } else {
        snprintf(why, sizeof(why), "cannot write kernel.gpr: %s", strerror(error));
        StopWriting("write_failed", why);
      }
    }
  }
  buffer->clear();
  *records = 0;
}

void KernelRecorder::State::Flush() {
  uint64_t now = MonotonicNs();
  if (!staged_state.empty() && (finished || state_due || staged_state.size() >= kStateFlushBytes ||
                                now - state_staged_ns >= kStateFlushIntervalNs)) {
    WriteStaged(&staged_state, &staged_state_records, /*trimmable=*/false);
    state_due = false;
  }
  WriteStaged(&staged, &staged_records, writer.trims());
  last_flush_ns = now;
}

void KernelRecorder::State::Append(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  if (writer.trims() && size >= sizeof(gprof_rec_hdr)) {
    gprof_rec_hdr hdr{};
    memcpy(&hdr, bytes, sizeof(hdr));
    if (!IsTrimmableRecord(bytes, size)) {
      if (staged_state.empty()) state_staged_ns = MonotonicNs();
      state_due |= hdr.type != GPROF_REC_KERNEL_STACK && hdr.type != GPROF_REC_USER_STACK &&
                   hdr.type != GPROF_REC_KERNEL_SYMBOL;
      staged_state.insert(staged_state.end(), bytes, bytes + size);
      ++staged_state_records;
      if (staged_state.size() >= kStateFlushBytes) Flush();
      return;
    }
  }
  staged.insert(staged.end(), bytes, bytes + size);
  ++staged_records;
  if (staged.size() >= kFlushBytes) Flush();
}

uint32_t KernelRecorder::State::ReadStack(int map_fd, int32_t id) {
  std::fill(stack_buffer.begin(), stack_buffer.end(), 0);
  if (bpf_map_lookup_elem(map_fd, &id, stack_buffer.data()) != 0) return 0;
  uint32_t depth = 0;
  while (depth < stack_buffer.size() && stack_buffer[depth] != 0) ++depth;
  return depth;
}

void KernelRecorder::State::NoteStack(int32_t id) {
  if (id < 0 || !stacks_written.insert(id).second) return;
  uint32_t depth = ReadStack(stacks_fd, id);
  if (depth == 0) return;
  gprof_kernel_stack record{};
  record.hdr.size = static_cast<uint32_t>(sizeof(record) + depth * sizeof(uint64_t));
  record.hdr.type = GPROF_REC_KERNEL_STACK;
  record.stack_id = id;
  record.depth = depth;
  AppendWithTail(record, stack_buffer.data(), depth * sizeof(uint64_t));
  stack_addresses.insert(stack_buffer.begin(), stack_buffer.begin() + depth);
}

void KernelRecorder::State::NoteUserStack(int32_t id) {
  if (id < 0 || !user_stacks_written.insert(id).second) return;
  uint32_t depth = ReadStack(user_stacks_fd, id);
  if (depth == 0) return;
  gprof_user_stack record{};
  record.hdr.size = static_cast<uint32_t>(sizeof(record) + depth * sizeof(uint64_t));
  record.hdr.type = GPROF_REC_USER_STACK;
  record.stack_id = id;
  record.depth = depth;
  record.flags = depth >= user_stack_depth_limit ? GPROF_USER_STACK_TRUNCATED : 0;
  AppendWithTail(record, stack_buffer.data(), depth * sizeof(uint64_t));
}

void KernelRecorder::State::OnSample(const void* data, size_t size) {
  gprof_rec_hdr hdr{};
  if (size < sizeof(hdr)) {
    ++malformed[0];
    return;
  }
  memcpy(&hdr, data, sizeof(hdr));
  if (hdr.type == GPROF_REC_PYTHON_STACK) return OnPythonStack(data, size, hdr);
  if (hdr.type == GPROF_REC_NATIVE_STACK) return OnNativeStack(data, size, hdr);
  size_t expected = BpfRecordSize(hdr.type);
  if (expected == 0 || hdr.size != size || size != expected) {
    if (!recording_done) ++malformed[hdr.type];
    return;
  }
  if (recording_done && hdr.type != GPROF_REC_SIGNAL) return;  // none come: all detached
  // Records are copied before use: ring-buffer samples are only 8-byte aligned by contract.
  switch (hdr.type) {
    case GPROF_REC_OFFCPU: {
      gprof_offcpu record;
      memcpy(&record, data, sizeof(record));
      NoteStack(record.kstack_id);
      NoteStack(record.waker_kstack_id);
      NoteUserStack(record.user_stack_id);
      NoteUserStack(record.waker_user_stack_id);
      break;
    }
    case GPROF_REC_CUDA_PROBE_CALL: {
      gprof_cuda_probe_call record;
      memcpy(&record, data, sizeof(record));
      NoteUserStack(record.user_stack_id);
      break;
    }
    case GPROF_REC_LOCK_WAIT: {
      gprof_lock_wait record;
      memcpy(&record, data, sizeof(record));
      NoteStack(record.kstack_id);
      NoteUserStack(record.user_stack_id);
      break;
    }
    case GPROF_REC_TASK_NEW: {
      gprof_task_new record;
      memcpy(&record, data, sizeof(record));
      NoteStack(record.parent_kstack_id);
      if (!(record.flags & GPROF_TASK_NEW_THREAD)) {
        processes[record.pid].hidden = (record.flags & GPROF_TASK_NEW_SECURE) != 0;
        NoteProcess(record.pid);
        if (python && !processes[record.pid].hidden) python->OnFork(record.pid, record.parent_pid);
      }
      break;
    }
    case GPROF_REC_TASK_RENAME: {
      gprof_task_rename record;
      memcpy(&record, data, sizeof(record));
      if (record.is_exec) {
        processes[record.pid].hidden = (record.is_exec & GPROF_EXEC_HIDDEN) != 0;
        NoteProcess(record.pid);
        if (maps_due.contains(record.pid)) launch_variables_due.insert(record.pid);
        if (python) python->OnExec(record.pid);  // forgets what it knew of the old program
      }
      break;
    }
    case GPROF_REC_TASK_EXIT: {
      gprof_task_exit record;
      memcpy(&record, data, sizeof(record));
      if (record.flags & GPROF_TASK_EXIT_PROCESS) {
        processes[record.pid].alive = false;
        maps_due.erase(record.pid);
        launch_variables_due.erase(record.pid);
        maps_followups.erase(record.pid);
        if (python) python->OnExit(record.pid);
      }
      break;
    }
    case GPROF_REC_SIGNAL: {
      gprof_signal record;
      memcpy(&record, data, sizeof(record));
      // Taken every turn of gprof-run's wait loop; bounded for a caller that never takes them.
      if (signals.size() >= kMaxUntakenSignals) {
        signals.erase(signals.begin(), signals.begin() + kMaxUntakenSignals / 2);
      }
      signals.push_back(SignalRecord{
          record.time_ns, record.signal, static_cast<int>(record.pid),
          static_cast<int>(record.sender_pid), (record.flags & GPROF_SIGNAL_TO_MANY) != 0,
          // pending also where the kernel had no room for its info
          record.result == GPROF_SIGNAL_DELIVERED || record.result == GPROF_SIGNAL_LOSE_INFO,
          record.result == GPROF_SIGNAL_ALREADY_PENDING,
          (record.flags & GPROF_SIGNAL_TO_THREAD) != 0, record.code});
      if (recording_done) return;  // kernel.gpr is closed
      break;
    }
    default:
      break;
  }
  Append(data, size);
}

void KernelRecorder::State::OnPythonStack(const void* data, size_t size, const gprof_rec_hdr& hdr) {
  gprof_python_stack stack;
  if (size < sizeof(stack) || hdr.size != size) {
    ++malformed[hdr.type];
    return;
  }
  memcpy(&stack, data, sizeof(stack));
  if (stack.depth > GPROF_PYTHON_MAX_FRAMES ||
      size != sizeof(stack) + stack.depth * sizeof(gprof_python_frame)) {
    ++malformed[hdr.type];
    return;
  }
  if (python) {
    std::vector<gprof_python_frame> frames(stack.depth);
    if (stack.depth > 0)
      memcpy(frames.data(), static_cast<const char*>(data) + sizeof(stack),
             stack.depth * sizeof(gprof_python_frame));
    python->OnStack(stack, frames.data());
  }
  Append(data, size);
}

void KernelRecorder::State::OnNativeStack(const void* data, size_t size, const gprof_rec_hdr& hdr) {
  gprof_native_stack stack;
  if (size < sizeof(stack) || hdr.size != size) {
    ++malformed[hdr.type];
    return;
  }
  memcpy(&stack, data, sizeof(stack));
  if (stack.copied_bytes > GPROF_NATIVE_STACK_MAX_BYTES ||
      size != sizeof(stack) + stack.copied_bytes) {
    ++malformed[hdr.type];
    return;
  }
  if (recording_done) return;
  Append(data, size);
}

int KernelRecorder::State::SampleCallback(void* context, void* data, size_t size) {
  auto* state = static_cast<State*>(context);
  try {
    state->OnSample(data, size);
  } catch (...) {  // bad_alloc: the record is lost, and counted
    ++state->lost_to_writes;
  }
  return 0;
}

void KernelRecorder::State::EmitNotes() {
  for (const std::string& note : notes) EmitNote(note);
}

void KernelRecorder::State::EmitNote(const std::string& note) {
  {
    format::MessageRecord record{};
    record.header.size = static_cast<uint32_t>(sizeof(record) + note.size());
    record.header.type = format::kMessage;
    record.time_ns = MonotonicNs();
    record.level = static_cast<uint32_t>(note.find(" not recorded") != std::string::npos
                                             ? format::MessageLevel::kWarning
                                             : format::MessageLevel::kInfo);
    record.text_len = static_cast<uint32_t>(note.size());
    AppendWithTail(record, note.data(), note.size());
  }
}

}  // namespace gprof::bpf
