#include "kernel_recorder.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "chunk_file_writer.h"
#include "kernel_events.h"
#include "kernel_events.skel.h"

namespace gprof::bpf {
namespace {

constexpr size_t kFlushBytes = 1u << 20;  // write a chunk once this much is staged
constexpr uint64_t kFlushIntervalNs = 250'000'000;
constexpr int kPollSliceMs = 100;  // the longest wait in Poll (see there)
constexpr uint64_t kMaxRingBufferBytes = 1ull << 30;
constexpr uint64_t kMaxWakeupBytes = 1u << 20;

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string ErrnoText(int error) {
  char buffer[128];
  // libbpf_strerror knows libbpf's own codes (LIBBPF_ERRNO__*) as well as errno values.
  if (libbpf_strerror(error, buffer, sizeof(buffer)) != 0) {
    snprintf(buffer, sizeof(buffer), "error %d", error);
  }
  return buffer;
}

// libbpf's messages. gprof-run must not print on the user's terminal: they go to stderr only with
// GPROF_DEBUG_BPF=1; otherwise the warnings of an operation are kept to name what failed.
std::mutex g_print_mutex;
bool g_print_debug = false;
std::vector<std::string> g_warnings;  // first line of each, without libbpf's prefix
constexpr size_t kMaxWarnings = 32;

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (g_print_debug) return vfprintf(stderr, format, args);
  if (level != LIBBPF_WARN) return 0;
  char buffer[512];
  vsnprintf(buffer, sizeof(buffer), format, args);
  std::string line(buffer, strcspn(buffer, "\n"));
  if (line.rfind("libbpf: ", 0) == 0) line.erase(0, 8);
  std::lock_guard<std::mutex> lock(g_print_mutex);
  if (g_warnings.size() < kMaxWarnings) g_warnings.push_back(std::move(line));
  return 0;
}

void InstallPrint() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* debug = getenv("GPROF_DEBUG_BPF");
    g_print_debug = debug != nullptr && strcmp(debug, "1") == 0;
    libbpf_set_print(LibbpfPrint);
  });
}

void ResetWarnings() {
  std::lock_guard<std::mutex> lock(g_print_mutex);
  g_warnings.clear();
}

// The warning that says most about a failure: the first naming a program or map (a verifier
// rejection, a map libbpf could not create), else the first one; and forgets them all.
std::string TakeWarning() {
  std::lock_guard<std::mutex> lock(g_print_mutex);
  std::string chosen = g_warnings.empty() ? "" : g_warnings.front();
  for (const std::string& line : g_warnings) {
    if (line.find("prog '") != std::string::npos || line.find("map '") != std::string::npos) {
      chosen = line;
      break;
    }
  }
  g_warnings.clear();
  return chosen;
}

// Whether this process may load tracing programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON.
// Tells missing privileges from a verifier rejection, which also reports EACCES.
bool HasBpfCapabilities() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return geteuid() == 0;
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1u; };
  constexpr int kCapPerfmon = 38;  // not in older headers
  constexpr int kCapBpf = 39;
  return has(CAP_SYS_ADMIN) || (has(kCapBpf) && has(kCapPerfmon));
}

uint64_t RoundRingBuffer(uint64_t bytes) {
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t size = page;
  while (size < bytes && size < kMaxRingBufferBytes) size <<= 1;
  return size;
}

bool KnownSample(const gprof_rec_hdr& hdr, size_t* expected_size) {
  switch (hdr.type) {
    case GPROF_REC_OFFCPU:
      *expected_size = sizeof(gprof_offcpu);
      return true;
    case GPROF_REC_FUTEX:
      *expected_size = sizeof(gprof_futex);
      return true;
    case GPROF_REC_TASK_NEW:
      *expected_size = sizeof(gprof_task_new);
      return true;
    case GPROF_REC_TASK_RENAME:
      *expected_size = sizeof(gprof_task_rename);
      return true;
    case GPROF_REC_TASK_EXIT:
      *expected_size = sizeof(gprof_task_exit);
      return true;
    default:
      return false;
  }
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

}  // namespace

struct KernelRecorder::State {
  kernel_events_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  ring_buffer* ring = nullptr;
  ChunkFileWriter writer;
  int stacks_fd = -1;

  std::vector<char> staged;
  uint32_t staged_records = 0;
  uint64_t last_flush_ns = 0;

  std::unordered_set<int32_t> stacks_written;
  std::unordered_set<uint64_t> stack_addresses;  // symbolized at Finish
  std::vector<uint64_t> stack_buffer = std::vector<uint64_t>(GPROF_MAX_STACK_DEPTH);

  std::map<uint32_t, uint64_t> malformed;  // by claimed record type
  uint64_t lost_to_writes = 0;
  uint64_t records_written = 0;
  uint64_t kernel_lost_at_finish = 0;
  std::string last_error;
  bool finished = false;

  ~State() { Release(); }

  void Release() {
    for (bpf_link* link : links) bpf_link__destroy(link);
    links.clear();
    ring_buffer__free(ring);
    ring = nullptr;
    kernel_events_bpf__destroy(skel);
    skel = nullptr;
  }

  void Flush() {
    if (staged.empty()) return;
    int error = writer.Write(staged.data(), staged.size(), staged_records);
    if (error == 0) {
      records_written += staged_records;
    } else {
      lost_to_writes += staged_records;
      try {  // Flush runs in Finish's out-of-memory path too: it must not throw
        if (last_error.empty()) last_error = "write kernel.gpr: " + std::string(strerror(error));
      } catch (...) {
      }
    }
    staged.clear();
    staged_records = 0;
    last_flush_ns = MonotonicNs();
  }

  void Append(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    staged.insert(staged.end(), bytes, bytes + size);
    ++staged_records;
    if (staged.size() >= kFlushBytes) Flush();
  }

  // Writes stack `id` the first time a record refers to it. Ids are stable (no REUSE_STACKID),
  // and writing them as they come keeps them in the file if gprof-run is killed.
  void NoteStack(int32_t id) {
    if (id < 0 || !stacks_written.insert(id).second) return;
    std::fill(stack_buffer.begin(), stack_buffer.end(), 0);
    if (bpf_map_lookup_elem(stacks_fd, &id, stack_buffer.data()) != 0) return;
    uint32_t depth = 0;
    while (depth < stack_buffer.size() && stack_buffer[depth] != 0) ++depth;
    gprof_kernel_stack record{};
    record.hdr.size = static_cast<uint32_t>(sizeof(record) + depth * sizeof(uint64_t));
    record.hdr.type = GPROF_REC_KERNEL_STACK;
    record.stack_id = id;
    record.depth = depth;
    std::vector<char> bytes(record.hdr.size);
    memcpy(bytes.data(), &record, sizeof(record));
    memcpy(bytes.data() + sizeof(record), stack_buffer.data(), depth * sizeof(uint64_t));
    Append(bytes.data(), bytes.size());
    stack_addresses.insert(stack_buffer.begin(), stack_buffer.begin() + depth);
  }

  void OnSample(const void* data, size_t size) {
    gprof_rec_hdr hdr{};
    size_t expected = 0;
    if (size < sizeof(hdr)) {
      ++malformed[0];
      return;
    }
    memcpy(&hdr, data, sizeof(hdr));
    if (!KnownSample(hdr, &expected) || hdr.size != size || size != expected) {
      ++malformed[hdr.type];
      return;
    }
    // Records are copied before use: ring-buffer samples are only 8-byte aligned by contract.
    if (hdr.type == GPROF_REC_OFFCPU) {
      gprof_offcpu record;
      memcpy(&record, data, sizeof(record));
      NoteStack(record.kstack_id);
      NoteStack(record.waker_kstack_id);
    } else if (hdr.type == GPROF_REC_TASK_NEW) {
      gprof_task_new record;
      memcpy(&record, data, sizeof(record));
      NoteStack(record.parent_kstack_id);
    }
    Append(data, size);
  }

  // Called by libbpf's C code, which an exception must not unwind through.
  static int SampleCallback(void* context, void* data, size_t size) {
    auto* state = static_cast<State*>(context);
    try {
      state->OnSample(data, size);
    } catch (...) {  // bad_alloc: the record is lost, and counted
      ++state->lost_to_writes;
    }
    return 0;
  }

  uint64_t KernelLost(std::vector<gprof_lost>* records) const {
    if (skel == nullptr) return kernel_lost_at_finish;
    int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return 0;
    std::vector<uint64_t> values(static_cast<size_t>(cpus));
    int fd = bpf_map__fd(skel->maps.lost);
    uint64_t total = 0;
    for (uint32_t slot = 0; slot < GPROF_LOST_SLOTS; ++slot) {
      if (bpf_map_lookup_elem(fd, &slot, values.data()) != 0) continue;
      uint64_t count = 0;
      for (uint64_t value : values) count += value;
      if (count == 0) continue;
      total += count;
      if (records != nullptr) {
        gprof_lost record{};
        record.hdr.size = sizeof(record);
        record.hdr.type = GPROF_REC_LOST;
        record.kind = slot / GPROF_LOST_TYPE_SLOTS;
        record.record_type = GPROF_REC_OFFCPU + slot % GPROF_LOST_TYPE_SLOTS;
        record.count = count;
        records->push_back(record);
      }
    }
    return total;
  }

  uint64_t LoaderLost() const {
    uint64_t total = lost_to_writes;
    for (const auto& [type, count] : malformed) total += count;
    return total;
  }

  // Threads still off-CPU or inside futex() when recording stops: their intervals end now.
  void EmitUnfinished(uint64_t now) {
    int offcpu_fd = bpf_map__fd(skel->maps.offcpu_pending);
    uint32_t key = 0;
    uint32_t next = 0;
    const uint32_t* previous = nullptr;
    while (bpf_map_get_next_key(offcpu_fd, previous, &next) == 0) {
      key = next;
      previous = &key;
      gprof_offcpu_pending entry{};
      if (bpf_map_lookup_elem(offcpu_fd, &key, &entry) != 0) continue;
      gprof_offcpu record{};
      record.hdr.size = sizeof(record);
      record.hdr.type = GPROF_REC_OFFCPU;
      record.pid = entry.pid;
      record.tid = key;
      record.start_ns = entry.start_ns;
      record.end_ns = std::max<uint64_t>(now, entry.start_ns);
      record.wake_ns = entry.wake_ns;
      record.waker_pid = entry.waker_pid;
      record.waker_tid = entry.waker_tid;
      record.kstack_id = entry.kstack_id;
      record.waker_kstack_id = entry.waker_kstack_id;
      record.state = entry.state;
      record.cpu = entry.cpu;
      record.flags = GPROF_OFFCPU_UNFINISHED;
      memcpy(record.waker_comm, entry.waker_comm, sizeof(record.waker_comm));
      NoteStack(record.kstack_id);
      NoteStack(record.waker_kstack_id);
      Append(&record, sizeof(record));
    }

    int futex_fd = bpf_map__fd(skel->maps.futex_pending);
    previous = nullptr;
    while (bpf_map_get_next_key(futex_fd, previous, &next) == 0) {
      key = next;
      previous = &key;
      gprof_futex_pending entry{};
      if (bpf_map_lookup_elem(futex_fd, &key, &entry) != 0) continue;
      gprof_futex record{};
      record.hdr.size = sizeof(record);
      record.hdr.type = GPROF_REC_FUTEX;
      record.pid = entry.pid;
      record.tid = key;
      record.start_ns = entry.start_ns;
      record.end_ns = std::max<uint64_t>(now, entry.start_ns);
      record.uaddr = entry.uaddr;
      record.uaddr2 = entry.uaddr2;
      record.op = entry.op;
      record.val = entry.val;
      record.val3 = entry.val3;
      record.flags = GPROF_FUTEX_UNFINISHED;
      record.timeout_ns = entry.timeout_ns;
      Append(&record, sizeof(record));
    }
  }

  void EmitSymbols() {
    if (stack_addresses.empty()) return;
    std::vector<KernelSymbol> symbols = ReadKallsyms();
    if (symbols.empty()) return;  // hidden addresses: the collector shows raw ones
    std::vector<uint64_t> addresses(stack_addresses.begin(), stack_addresses.end());
    std::sort(addresses.begin(), addresses.end());
    std::vector<char> bytes;
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
      bytes.resize(record.hdr.size);
      memcpy(bytes.data(), &record, sizeof(record));
      memcpy(bytes.data() + sizeof(record), symbol.name.data(), symbol.name.size());
      Append(bytes.data(), bytes.size());
    }
  }
};

KernelRecorder::KernelRecorder(std::unique_ptr<State> state) : state_(std::move(state)) {}

KernelRecorder::~KernelRecorder() { Finish(); }

std::unique_ptr<KernelRecorder> KernelRecorder::Start(const std::string& session_dir,
                                                      const KernelRecorderOptions& options,
                                                      std::string* error, bool* permission_denied) {
  try {
    return StartOrThrow(session_dir, options, error, permission_denied);
  } catch (...) {  // bad_alloc from a string or vector: nothing else here throws
    if (error != nullptr) *error = "kernel recorder: out of memory";
    return nullptr;
  }
}

std::unique_ptr<KernelRecorder> KernelRecorder::StartOrThrow(const std::string& session_dir,
                                                             const KernelRecorderOptions& options,
                                                             std::string* error,
                                                             bool* permission_denied) {
  std::string scratch_error;
  bool scratch_denied = false;
  if (error == nullptr) error = &scratch_error;
  if (permission_denied == nullptr) permission_denied = &scratch_denied;
  error->clear();
  *permission_denied = false;
  InstallPrint();

  // Errors from libbpf calls: the errno plus the libbpf warning that names the program or map at
  // fault (the verifier log itself only with GPROF_DEBUG_BPF=1).
  auto fail = [&](const char* what, int code) -> std::unique_ptr<KernelRecorder> {
    code = code < 0 ? -code : code;
    *error = std::string(what) + ": " + ErrnoText(code);
    std::string warning = TakeWarning();
    if ((code == EPERM || code == EACCES) && !HasBpfCapabilities()) {
      // libbpf's own guesses (RLIMIT_MEMLOCK, CONFIG_BPF_SYSCALL) would only mislead here.
      *permission_denied = true;
      *error += "; needs root or CAP_BPF+CAP_PERFMON";
      return nullptr;
    }
    if (!warning.empty()) *error += " (libbpf: " + warning + ")";
    if (!g_print_debug) *error += "; GPROF_DEBUG_BPF=1 shows libbpf's log";
    return nullptr;
  };

  if (options.ring_buffer_bytes > kMaxRingBufferBytes) {
    *error = "kernel ring buffer of " + std::to_string(options.ring_buffer_bytes) +
             " bytes is over the 1 GiB limit";
    return nullptr;
  }
  if (options.stack_map_entries == 0) {
    *error = "kernel stack map needs at least one entry";
    return nullptr;
  }

  auto state = std::make_unique<State>();
  ResetWarnings();
  state->skel = kernel_events_bpf__open();
  if (state->skel == nullptr) return fail("open BPF object", errno);

  uint64_t ring_bytes = RoundRingBuffer(options.ring_buffer_bytes);
  state->skel->rodata->self_tgid = static_cast<uint32_t>(getpid());
  state->skel->rodata->wakeup_bytes = std::min<uint64_t>(kMaxWakeupBytes, ring_bytes / 4);
  state->skel->rodata->capture_stacks = options.kernel_stacks ? 1 : 0;
  int rc = bpf_map__set_max_entries(state->skel->maps.events, static_cast<uint32_t>(ring_bytes));
  if (rc != 0) return fail("size the kernel ring buffer", rc);
  // Without stacks the map is never written: one entry instead of ~16 MiB of kernel memory.
  rc = bpf_map__set_max_entries(state->skel->maps.stacks,
                                options.kernel_stacks ? options.stack_map_entries : 1);
  if (rc != 0) return fail("size the kernel stack map", rc);

  rc = kernel_events_bpf__load(state->skel);
  if (rc != 0) return fail("load BPF programs", rc);

  // Attached one by one rather than with the skeleton, so an error names the tracepoint.
  bpf_program* program = nullptr;
  state->links.reserve(16);  // a push_back that throws would leak an attached link
  bpf_object__for_each_program(program, state->skel->obj) {
    bpf_link* link = bpf_program__attach(program);
    if (link == nullptr) {
      int code = errno;
      std::string what = std::string("attach ") + bpf_program__section_name(program);
      return fail(what.c_str(), code);
    }
    state->links.push_back(link);
  }

  state->ring = ring_buffer__new(bpf_map__fd(state->skel->maps.events), &State::SampleCallback,
                                 state.get(), nullptr);
  if (state->ring == nullptr) return fail("open the kernel ring buffer", errno);
  state->stacks_fd = bpf_map__fd(state->skel->maps.stacks);

  // The file comes last: a failed start leaves no kernel.gpr claiming a recording.
  std::string path = session_dir + "/kernel.gpr";
  rc = state->writer.Create(path.c_str(), format::Source::kKernel, static_cast<uint32_t>(getpid()));
  if (rc != 0) {
    *error = "create " + path + ": " + strerror(rc);
    return nullptr;
  }
  state->staged.reserve(kFlushBytes + 4096);
  state->last_flush_ns = MonotonicNs();
  TakeWarning();
  return std::unique_ptr<KernelRecorder>(new KernelRecorder(std::move(state)));
}

bool KernelRecorder::Track(int pid, std::string* error) try {
  std::string scratch;
  if (error == nullptr) error = &scratch;
  if (state_->finished) {
    *error = "track pid " + std::to_string(pid) + ": the recorder is finished";
    return false;
  }
  if (pid <= 0 || pid == getpid()) {
    *error = "track pid " + std::to_string(pid) + ": not a process the recorder can follow";
    return false;
  }
  uint32_t key = static_cast<uint32_t>(pid);
  uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(state_->skel->maps.tracked), &key, &one, BPF_ANY) != 0) {
    *error = "track pid " + std::to_string(pid) + ": " + strerror(errno);
    return false;
  }
  return true;
} catch (...) {
  if (error != nullptr) *error = "track: out of memory";
  return false;
}

int KernelRecorder::Poll(int timeout_ms) try {
  State& s = *state_;
  if (s.finished) return 0;
  // One wait, never longer than a slice: the programs wake us only once a batch is waiting
  // (wakeup_bytes), so a quiet target's records are drained by this timeout, not by a wakeup.
  // Waiting in several slices would lose signals: one that lands between two waits is consumed by
  // the caller's handler and the next wait sleeps on. The caller's loop sees it instead.
  int wait_ms = timeout_ms < 0 ? kPollSliceMs : std::min(timeout_ms, kPollSliceMs);
  int drained = 0;
  int rc = ring_buffer__poll(s.ring, wait_ms);
  if (rc < 0 && rc != -EINTR) return rc;
  if (rc > 0) drained += rc;
  // Whatever epoll did not report: records below the wakeup threshold, or left by an EINTR.
  rc = ring_buffer__consume(s.ring);
  if (rc < 0) return rc;
  drained += rc;
  if (MonotonicNs() - s.last_flush_ns >= kFlushIntervalNs) s.Flush();
  return drained;
} catch (...) {  // bad_alloc while staging a loader record
  return -ENOMEM;
}

void KernelRecorder::Finish() {
  State& s = *state_;
  if (s.finished) return;
  s.finished = true;
  try {
    FinishRecording();
  } catch (...) {  // bad_alloc: keep what is staged, close the file, free the kernel objects
    try {
      s.kernel_lost_at_finish = s.KernelLost(nullptr);
    } catch (...) {
    }
    s.Flush();
    s.writer.Close();
    s.Release();
  }
}

void KernelRecorder::FinishRecording() {
  State& s = *state_;
  // Detach first: what the maps and the ring hold after this is final.
  for (bpf_link* link : s.links) bpf_link__destroy(link);
  s.links.clear();
  if (s.ring != nullptr) ring_buffer__consume(s.ring);
  s.EmitUnfinished(MonotonicNs());
  s.EmitSymbols();

  std::vector<gprof_lost> lost_records;
  s.kernel_lost_at_finish = s.KernelLost(&lost_records);
  for (const auto& [type, count] : s.malformed) {
    gprof_lost record{};
    record.hdr.size = sizeof(record);
    record.hdr.type = GPROF_REC_LOST;
    record.kind = GPROF_LOST_MALFORMED;
    record.record_type = type;
    record.count = count;
    lost_records.push_back(record);
  }
  // Write failures so far; records of a failing final chunk can only reach stats().
  if (s.lost_to_writes > 0) {
    gprof_lost record{};
    record.hdr.size = sizeof(record);
    record.hdr.type = GPROF_REC_LOST;
    record.kind = GPROF_LOST_WRITE;
    record.record_type = 0;
    record.count = s.lost_to_writes;
    lost_records.push_back(record);
  }
  for (const gprof_lost& record : lost_records) s.Append(&record, sizeof(record));
  s.Flush();
  s.writer.Close();
  s.Release();
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

const std::string& KernelRecorder::last_error() const { return state_->last_error; }

}  // namespace gprof::bpf
