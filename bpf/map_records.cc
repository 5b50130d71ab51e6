// What the kernel recorder reads out of the BPF maps rather than the ring buffer: the short waits'
// totals (about once a second), and when recording stops the intervals and calls left unfinished,
// the counts, the kernel stacks' symbols and the loss counters (KernelRecorder::FinishRecording,
// stats).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "bpf/recorder_state.h"
#include "inject/shared/clock.h"

namespace gprof::bpf {
namespace {

// A count of events lost, of one kind and record type, on one CPU (or GPROF_ALL_CPUS).
gprof_lost LostRecord(uint32_t kind, uint32_t record_type, uint64_t count, uint32_t cpu) {
  gprof_lost record{};
  record.hdr.size = sizeof(record);
  record.hdr.type = GPROF_REC_LOST;
  record.kind = kind;
  record.record_type = record_type;
  record.count = count;
  record.cpu = cpu;
  return record;
}

struct KernelSymbol {
  uint64_t address;
  std::string name;
};

// Text symbols of /proc/kallsyms sorted by address; empty when the addresses are hidden
// (kptr_restrict shows them as 0) or the file cannot be read.
std::vector<KernelSymbol> ReadKallsyms() {
  std::vector<KernelSymbol> symbols;
  FILE* file = fopen("/proc/kallsyms", "re");
  if (file == nullptr) return symbols;
  char* line = nullptr;
  size_t capacity = 0;
  bool any_address = false;
  while (getline(&line, &capacity, file) > 0) {
    char* end = nullptr;
    unsigned long long address = strtoull(line, &end, 16);
    if (end == line || *end != ' ') continue;
    char type = end[1];
    if (type == '\0' || end[2] != ' ') continue;
    // Return addresses are in code: t/T (text), w/W (weak, text in practice).
    if (type != 't' && type != 'T' && type != 'w' && type != 'W') continue;
    if (address != 0) any_address = true;
    const char* name = end + 3;
    size_t length = strcspn(name, "\t\n");  // "name\t[module]"
    symbols.push_back({address, std::string(name, length)});
  }
  free(line);
  fclose(file);
  if (!any_address) return {};
  std::sort(symbols.begin(), symbols.end(),
            [](const KernelSymbol& a, const KernelSymbol& b) { return a.address < b.address; });
  return symbols;
}

// Iterates the keys of a hash map, calling visit(key) on each.
template <typename Visit>
void ForEachKey(int map_fd, Visit visit) {
  uint32_t key = 0;
  uint32_t next = 0;
  const uint32_t* previous = nullptr;
  while (bpf_map_get_next_key(map_fd, previous, &next) == 0) {
    key = next;
    previous = &key;
    visit(key);
  }
}

}  // namespace

uint64_t KernelRecorder::State::KernelLost(std::vector<gprof_lost>* records) const {
  if (skel == nullptr || recording_done) return kernel_lost_at_finish;
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return 0;
  std::vector<uint64_t> values(static_cast<size_t>(cpus));
  int fd = bpf_map__fd(skel->maps.lost);
  uint64_t total = 0;
  for (uint32_t slot = 0; slot < GPROF_LOST_SLOTS; ++slot) {
    if (bpf_map_lookup_elem(fd, &slot, values.data()) != 0) continue;
    for (int cpu = 0; cpu < cpus; ++cpu) {
      uint64_t count = values[static_cast<size_t>(cpu)];
      if (count == 0) continue;
      total += count;
      if (records == nullptr) continue;
      records->push_back(LostRecord(slot / GPROF_LOST_TYPE_SLOTS,
                                    GPROF_REC_OFFCPU + slot % GPROF_LOST_TYPE_SLOTS, count,
                                    static_cast<uint32_t>(cpu)));
    }
  }
  return total;
}

uint64_t KernelRecorder::State::LoaderLost() const {
  uint64_t total = lost_to_writes + lost_stacks;
  for (const auto& [type, count] : malformed) total += count;
  return total;
}

void KernelRecorder::State::EmitSwitchedIn() {
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return;
  std::vector<gprof_switched_in> slots(static_cast<size_t>(cpus));
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.switched_in), &zero, slots.data()) != 0) return;
  for (const gprof_switched_in& slot : slots) {
    if (slot.tid == 0) continue;
    gprof_offcpu record = slot.record;
    record.kstack_id = record.user_stack_id = -ENODATA;
    ++lost_stacks;
    NoteStack(record.waker_kstack_id);
    NoteUserStack(record.waker_user_stack_id);
    Append(&record, sizeof(record));
  }
}

void KernelRecorder::State::EmitUnfinished(uint64_t now) {
  int threads_fd = bpf_map__fd(skel->maps.threads);
  ForEachKey(threads_fd, [&](uint32_t tid) {
    gprof_thread_state state{};
    if (bpf_map_lookup_elem(threads_fd, &tid, &state) != 0) return;
    EmitUnfinishedOffCpu(tid, state.offcpu, now);
    EmitUnfinishedFutex(tid, state.syscall, now);
  });
}

void KernelRecorder::State::EmitUnfinishedOffCpu(uint32_t tid, const gprof_offcpu_pending& entry,
                                                 uint64_t now) {
  if (!entry.open) return;
  gprof_offcpu record{};
  record.hdr.size = sizeof(record);
  record.hdr.type = GPROF_REC_OFFCPU;
  record.pid = entry.pid;
  record.tid = tid;
  record.start_ns = entry.start_ns;
  record.end_ns = std::max<uint64_t>(now, entry.start_ns);
  record.kstack_id = entry.kstack_id;
  record.state = entry.state;
  record.cpu = entry.cpu;
  record.flags = GPROF_OFFCPU_UNFINISHED;
  record.user_stack_id = entry.user_stack_id;
  if (record.end_ns - record.start_ns < stack_min_ns) {
    record.kstack_id = record.user_stack_id = -ENODATA;
  } else if (stacks_wanted && skel->rodata->stacks_at_switch_in) {
    ++lost_stacks;  // due when it runs again, which it did not while recording
  }
  record.waker_kstack_id = record.waker_user_stack_id = -1;
  if (entry.wake_ns >= entry.start_ns) {  // its waker's fields are this interval's
    record.wake_ns = entry.wake_ns;
    record.waker_pid = entry.waker_pid;
    record.waker_tid = entry.waker_tid;
    record.waker_kstack_id = entry.waker_kstack_id;
    memcpy(record.waker_comm, entry.waker_comm, sizeof(record.waker_comm));
    record.waker_user_stack_id = entry.waker_user_stack_id;
  }
  NoteStack(record.kstack_id);
  NoteStack(record.waker_kstack_id);
  NoteUserStack(record.user_stack_id);
  NoteUserStack(record.waker_user_stack_id);
  Append(&record, sizeof(record));
}

void KernelRecorder::State::EmitUnfinishedFutex(uint32_t tid, const gprof_syscall_pending& entry,
                                                uint64_t now) {
  if (entry.start_ns == 0) return;
  if (entry.nr != kSysFutex && entry.nr != kSysFutexWake && entry.nr != kSysFutexWait &&
      entry.nr != kSysFutexRequeue) {
    return;  // only futex calls can say they are unfinished
  }
  gprof_futex record{};
  record.hdr.size = sizeof(record);
  record.hdr.type = GPROF_REC_FUTEX;
  record.pid = entry.pid;
  record.tid = tid;
  record.start_ns = entry.start_ns;
  record.end_ns = std::max<uint64_t>(now, entry.start_ns);
  record.uaddr = entry.futex.uaddr;
  record.uaddr2 = entry.futex.uaddr2;
  record.op = entry.futex.op;
  record.val = entry.futex.val;
  record.val3 = entry.futex.val3;
  record.flags = entry.futex.flags | GPROF_FUTEX_UNFINISHED;
  record.timeout_ns = entry.futex.timeout_ns;
  record.owner_tid = entry.futex.owner_tid;
  Append(&record, sizeof(record));
}

void KernelRecorder::State::EmitWaitCounts(uint64_t now) {
  if (count_under_ns == 0) return;
  int fd = bpf_map__fd(skel->maps.short_waits);
  int totals_fd = bpf_map__fd(skel->maps.short_wait_totals);
  gprof_short_wait_key key{};
  gprof_short_wait_key next{};
  const gprof_short_wait_key* previous = nullptr;
  while (bpf_map_get_next_key(fd, previous, &next) == 0) {
    key = next;
    previous = &key;
    uint32_t slot = 0;
    gprof_short_wait_counts totals{};
    if (bpf_map_lookup_elem(fd, &key, &slot) != 0 ||
        bpf_map_lookup_elem(totals_fd, &slot, &totals) != 0) {
      continue;
    }
    gprof_short_wait_counts& written =
        wait_totals_written[std::string(reinterpret_cast<const char*>(&key), sizeof(key))];
    // Two fields of one entry can be read between two updates: never a negative part.
    if (totals.count <= written.count) continue;
    gprof_wait_count record{};
    record.hdr.size = sizeof(record);
    record.hdr.type = GPROF_REC_WAIT_COUNT;
    record.kind = key.kind;
    record.how = key.how;
    record.pid = key.pid;
    record.tid = key.tid;
    record.syscall_nr = key.syscall_nr;
    record.waker_pid = key.waker_pid;
    record.waker_tid = key.waker_tid;
    record.object = key.object;
    record.start_ns =
        written.count == 0 ? totals.first_ns : std::max<uint64_t>(wait_counts_ns, written.last_ns);
    record.end_ns = std::max<uint64_t>(totals.last_ns, record.start_ns);
    record.count = totals.count - written.count;
    record.total_ns = totals.total_ns - std::min<uint64_t>(totals.total_ns, written.total_ns);
    record.runnable_ns =
        totals.runnable_ns - std::min<uint64_t>(totals.runnable_ns, written.runnable_ns);
    record.woken = totals.woken - std::min<uint64_t>(totals.woken, written.woken);
    record.limit_ns = count_under_ns;
    Append(&record, sizeof(record));
    written = totals;
  }
  wait_counts_ns = now;
}

void KernelRecorder::State::EmitCounts() {
  int faults_fd = bpf_map__fd(skel->maps.fault_pending);
  ForEachKey(faults_fd, [&](uint32_t tid) {
    gprof_fault_state entry{};
    if (bpf_map_lookup_elem(faults_fd, &tid, &entry) != 0 || entry.quick_count == 0) return;
    gprof_event_count record{};
    record.hdr.size = sizeof(record);
    record.hdr.type = GPROF_REC_EVENT_COUNT;
    record.kind = GPROF_COUNT_QUICK_PAGE_FAULTS;
    record.cpu = GPROF_ALL_CPUS;
    record.pid = entry.pid;
    record.tid = tid;
    record.count = entry.quick_count;
    record.total_ns = entry.quick_total_ns;
    record.limit_ns = slow_fault_ns;
    Append(&record, sizeof(record));
  });

  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return;
  std::vector<uint64_t> values(static_cast<size_t>(cpus));
  uint32_t slot = GPROF_COUNT_SPIN_CONTENTION;
  if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.counts), &slot, values.data()) != 0) return;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    if (values[static_cast<size_t>(cpu)] == 0) continue;
    gprof_event_count record{};
    record.hdr.size = sizeof(record);
    record.hdr.type = GPROF_REC_EVENT_COUNT;
    record.kind = GPROF_COUNT_SPIN_CONTENTION;
    record.cpu = static_cast<uint32_t>(cpu);
    record.count = values[static_cast<size_t>(cpu)];
    Append(&record, sizeof(record));
  }
}

void KernelRecorder::State::EmitSymbols() {
  if (stack_addresses.empty()) return;
  std::vector<KernelSymbol> symbols = ReadKallsyms();
  if (symbols.empty()) return;  // hidden addresses: the collector shows raw ones
  std::vector<uint64_t> addresses(stack_addresses.begin(), stack_addresses.end());
  std::sort(addresses.begin(), addresses.end());
  for (uint64_t address : addresses) {
    auto after = std::upper_bound(
        symbols.begin(), symbols.end(), address,
        [](uint64_t value, const KernelSymbol& symbol) { return value < symbol.address; });
    if (after == symbols.begin()) continue;
    const KernelSymbol& symbol = *(after - 1);
    uint64_t offset = address - symbol.address;
    if (offset > UINT32_MAX) continue;  // past the last symbol of a region: not a function
    gprof_kernel_symbol record{};
    record.hdr.size = static_cast<uint32_t>(sizeof(record) + symbol.name.size());
    record.hdr.type = GPROF_REC_KERNEL_SYMBOL;
    record.address = address;
    record.offset = static_cast<uint32_t>(offset);
    record.name_len = static_cast<uint32_t>(symbol.name.size());
    AppendWithTail(record, symbol.name.data(), symbol.name.size());
  }
}

void KernelRecorder::FinishRecording() {
  State& s = *state_;
  // Detach first: what the maps and the ring hold after this is final.
  s.DetachAll();
  if (s.ring != nullptr) ring_buffer__consume(s.ring);
  if (s.python) s.python->Finish();
  s.Flush();
  s.writer.SetClosing();  // what ends, counts, names and places the records: kept at the size cap
  s.EmitSwitchedIn();
  s.EmitUnfinished(MonotonicNs());
  s.EmitCounts();
  s.EmitWaitCounts(MonotonicNs());
  for (auto& [pid, process] : s.processes) {
    if (process.alive) s.maps_due.insert(pid);
  }
  s.SnapshotDueMaps();
  s.EmitSymbols();

  std::vector<gprof_lost> lost_records;
  s.kernel_lost_at_finish = s.KernelLost(&lost_records);
  for (const auto& [type, count] : s.malformed) {
    lost_records.push_back(LostRecord(GPROF_LOST_MALFORMED, type, count, GPROF_ALL_CPUS));
  }
  // After a stop, what is staged is lost; the loss counts get one last try (the disk may have
  // room again). Write failures so far; records of a failing final chunk can only reach stats().
  if (s.writes_stopped_ns != 0) {
    s.lost_to_writes += s.staged_records + s.staged_state_records;
    s.staged.clear();
    s.staged_records = 0;
    s.staged_state.clear();
    s.staged_state_records = 0;
    s.final_write = true;
  }
  if (s.lost_stacks > 0) {
    lost_records.push_back(
        LostRecord(GPROF_LOST_STACK, GPROF_REC_OFFCPU, s.lost_stacks, GPROF_ALL_CPUS));
  }
  if (s.lost_to_writes > 0) {
    lost_records.push_back(LostRecord(GPROF_LOST_WRITE, 0, s.lost_to_writes, GPROF_ALL_CPUS));
  }
  for (const gprof_lost& record : lost_records) s.Append(&record, sizeof(record));
  s.Flush();
  s.writer.Close();
  s.recording_done = true;
  if (s.signal_link == nullptr) s.Release();
}

KernelRecorderStats KernelRecorder::stats() const {
  const State& s = *state_;
  KernelRecorderStats stats;
  stats.records_written = s.records_written;
  stats.lost = s.LoaderLost();
  try {
    stats.lost += s.KernelLost(nullptr);
  } catch (...) {  // bad_alloc of the per-CPU buffer: the kernel's share is unknown just now
  }
  return stats;
}

}  // namespace gprof::bpf
