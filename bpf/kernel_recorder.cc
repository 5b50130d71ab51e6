#include "bpf/kernel_recorder.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <poll.h>
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
#include <set>
#include <unordered_set>
#include <vector>

#include "bpf/kernel_events.skel.h"
#include "bpf/kernel_maps.h"
#include "bpf/python_stacks.h"
#include "inject/format/session_format.h"
#include "inject/shared/chunk_file_writer.h"
#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"
#include "inject/shared/file_owner.h"

namespace gprof::bpf {
namespace {

constexpr size_t kFlushBytes = 1u << 20;  // write a chunk once this much is staged
constexpr uint64_t kFlushIntervalNs = 250'000'000;
constexpr uint64_t kWaitCountIntervalNs = 1'000'000'000;  // short waits' totals read this often
constexpr int kPollSliceMs = 100;                         // the longest wait in Poll (see there)
constexpr uint64_t kMinRingBufferBytes = 16ull << 20;
constexpr uint64_t kRingBufferBytesPerCpu = 2ull << 20;
constexpr uint64_t kMaxRingBufferBytes = 1ull << 30;
constexpr uint64_t kMaxWakeupBytes = 1u << 20;
// A process's maps are read again this long after the snapshot at its start or exec.
constexpr uint64_t kMapsFollowupNs[] = {20'000'000, 100'000'000, 500'000'000};
constexpr size_t kMaxMapsBytes = 8u << 20;  // a /proc/PID/maps snapshot is cut at a line beyond
constexpr size_t kMaxUntakenSignals = 4096;
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";

// x86_64 numbers of the futex calls a gprof_syscall_pending entry can hold (older C library
// headers lack the futex2 ones).
constexpr uint32_t kSysFutex = 202;
constexpr uint32_t kSysFutexWake = 454;
constexpr uint32_t kSysFutexWait = 455;
constexpr uint32_t kSysFutexRequeue = 456;

std::string ErrnoText(int error) {
  char buffer[128];
  // libbpf_strerror knows libbpf's own codes (LIBBPF_ERRNO__*) as well as errno values.
  if (libbpf_strerror(error, buffer, sizeof(buffer)) != 0) {
    snprintf(buffer, sizeof(buffer), "error %d", error);
  }
  return buffer;
}

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

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

// "20 us", "1.5 ms": a threshold as a note says it.
std::string DurationText(uint64_t ns) {
  char text[32];
  if (ns < 1000) {
    snprintf(text, sizeof(text), "%llu ns", static_cast<unsigned long long>(ns));
  } else if (ns < 1000000) {
    snprintf(text, sizeof(text), "%g us", static_cast<double>(ns) / 1e3);
  } else {
    snprintf(text, sizeof(text), "%g ms", static_cast<double>(ns) / 1e6);
  }
  return text;
}

// libbpf's messages. gprof-run must not print on the user's terminal: they go to stderr only with
// GPROF_DEBUG_BPF=1; the warnings of an operation are kept either way, to name what failed.
std::mutex g_print_mutex;
bool g_print_debug = false;
std::vector<std::string> g_warnings;  // first line of each, without libbpf's prefix
constexpr size_t kMaxWarnings = 32;

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  if (g_print_debug) vfprintf(stderr, format, args);
  if (level == LIBBPF_WARN) {
    char buffer[512];
    vsnprintf(buffer, sizeof(buffer), format, copy);
    std::string line(buffer, strcspn(buffer, "\n"));
    if (StartsWith(line, "libbpf: ")) line.erase(0, 8);
    std::lock_guard<std::mutex> lock(g_print_mutex);
    if (g_warnings.size() < kMaxWarnings) g_warnings.push_back(std::move(line));
  }
  va_end(copy);
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

// The program libbpf named in its first warning about one ("prog 'NAME': ..."), or "".
std::string WarnedProgram() {
  std::lock_guard<std::mutex> lock(g_print_mutex);
  for (const std::string& line : g_warnings) {
    size_t start = line.find("prog '");
    if (start == std::string::npos) continue;
    start += 6;
    size_t end = line.find('\'', start);
    if (end != std::string::npos) return line.substr(start, end - start);
  }
  return "";
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

// The ring buffer's size: as asked, or 2 MiB per possible CPU (at least 16 MiB); a power of two
// of at least a page, at most 1 GiB.
uint64_t RingBufferBytes(uint64_t requested) {
  uint64_t bytes = requested;
  if (bytes == 0) {
    int cpus = libbpf_num_possible_cpus();
    bytes = std::max<uint64_t>(kMinRingBufferBytes,
                               static_cast<uint64_t>(std::max(cpus, 1)) * kRingBufferBytesPerCpu);
  }
  uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  while (size < bytes && size < kMaxRingBufferBytes) size <<= 1;
  return size;
}

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
    default:
      return 0;
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

// Up to `limit` bytes of a /proc file, cut after the last whole line; false when unreadable.
bool ReadProcFile(const std::string& path, size_t limit, std::string* text) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char buffer[65536];
  bool ok = true;
  while (text->size() < limit) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    text->append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  if (text->size() > limit) {
    size_t last_line = text->rfind('\n', limit - 1);
    text->resize(last_line == std::string::npos ? 0 : last_line + 1);
  }
  return ok;
}

// A process's start time (clock ticks after boot, /proc/PID/stat field 22): tells a process from
// a later one that reused its pid. 0 when it is gone.
uint64_t ProcessStartTime(uint32_t pid) {
  std::string stat;
  if (!ReadProcFile("/proc/" + std::to_string(pid) + "/stat", 4096, &stat)) return 0;
  size_t field = stat.rfind(')');  // the name may hold spaces and parentheses
  if (field == std::string::npos) return 0;
  // Fields from 3 (state) on; the start time is the 20th of them.
  const char* cursor = stat.c_str() + field + 1;
  for (int skip = 0; skip < 19; ++skip) {
    cursor = strchr(cursor + 1, ' ');
    if (cursor == nullptr) return 0;
  }
  return strtoull(cursor + 1, nullptr, 10);
}

// Which programs are loaded. Each tracepoint program comes as tp_btf and raw_tp twins
// (kernel_events.bpf.c's TRACEPOINT); lock, page-fault and signal recording are optional features.
struct AttachPlan {
  std::map<std::string, std::string> raw_tracepoints;  // tracepoint -> why not tp_btf
  std::string locks_off_reason;                        // non-empty: kernel locks not recorded
  std::string faults_off_reason;                       // non-empty: page faults not recorded
  std::string signals_off_reason;                      // non-empty: signals not recorded
  // Non-empty: no sched_exit_tp program, stacks taken at every switch-out (stacks_at_switch_in).
  std::string switch_in_stacks_off_reason;
  // Python stacks: wanted, and why not (non-empty: off); the sampling and slow-call programs.
  bool python = false;
  std::string python_off_reason;
  bool python_marker = false;
  bool python_on() const { return python && python_off_reason.empty(); }
  // On-CPU samples (native stacks, and Python stacks where Python is on): wanted, and why not.
  bool sample = false;
  std::string sample_off_reason;
  bool sample_on() const { return sample && sample_off_reason.empty(); }
};

// The sampling tick's program (native_stacks.bpf.h) and the slow-call marker's (python_stacks.bpf.h),
// loaded only when they are wanted.
bool IsSampleProgram(const bpf_program* program) {
  return strcmp(bpf_program__name(program), "on_cpu_sample") == 0;
}
bool IsPythonMarkerProgram(const bpf_program* program) {
  return strcmp(bpf_program__name(program), "on_python_call_point") == 0;
}
// The programs the Python walker is part of (with capture_python on).
bool HasPythonWalker(const bpf_program* program) {
  const char* name = bpf_program__name(program);
  return IsSampleProgram(program) || IsPythonMarkerProgram(program) ||
         strncmp(name, "on_sched_exit", 13) == 0 || strncmp(name, "on_sched_waking", 15) == 0;
}

struct ProgramKind {
  enum Attach { kTpBtf, kRawTp, kPerfEvent, kOther } attach = kOther;
  std::string tracepoint;  // kTpBtf, kRawTp
};

ProgramKind KindOf(const bpf_program* program) {
  std::string section = bpf_program__section_name(program);
  ProgramKind kind;
  if (StartsWith(section, "tp_btf/")) {
    kind.attach = ProgramKind::kTpBtf;
    kind.tracepoint = section.substr(7);
  } else if (StartsWith(section, "raw_tp/")) {
    kind.attach = ProgramKind::kRawTp;
    kind.tracepoint = section.substr(7);
  } else if (section == "perf_event") {
    kind.attach = ProgramKind::kPerfEvent;  // the ends of page faults
  }
  return kind;
}

// Without these the recorder still explains everything else: they are left out, with a note,
// where the kernel has no way to attach them.
bool IsLockTracepoint(const std::string& tracepoint) {
  return tracepoint == "contention_begin" || tracepoint == "contention_end";
}

bool IsFaultTracepoint(const std::string& tracepoint) {
  return tracepoint == "page_fault_user" || tracepoint == "page_fault_kernel";
}

bool IsSignalTracepoint(const std::string& tracepoint) { return tracepoint == "signal_generate"; }

// A bare tracepoint of Linux 6.16 on; without it stacks are taken at every switch-out instead.
bool IsSwitchInStackTracepoint(const std::string& tracepoint) {
  return tracepoint == "sched_exit_tp";
}

bool Wanted(const AttachPlan& plan, const bpf_program* program) {
  if (IsSampleProgram(program)) return plan.sample_on();
  if (IsPythonMarkerProgram(program)) return plan.python_on() && plan.python_marker;
  ProgramKind kind = KindOf(program);
  switch (kind.attach) {
    case ProgramKind::kTpBtf:
    case ProgramKind::kRawTp: {
      if (IsLockTracepoint(kind.tracepoint) && !plan.locks_off_reason.empty()) return false;
      if (IsFaultTracepoint(kind.tracepoint) && !plan.faults_off_reason.empty()) return false;
      if (IsSignalTracepoint(kind.tracepoint) && !plan.signals_off_reason.empty()) return false;
      if (IsSwitchInStackTracepoint(kind.tracepoint) && !plan.switch_in_stacks_off_reason.empty())
        return false;
      bool raw = plan.raw_tracepoints.count(kind.tracepoint) != 0;
      return raw == (kind.attach == ProgramKind::kRawTp);
    }
    case ProgramKind::kPerfEvent:
      return plan.faults_off_reason.empty();
    case ProgramKind::kOther:
      return true;
  }
  return true;
}

// Replaces `program`, which failed to load or attach for `reason`, by its fallback, or leaves its
// feature out; false when it has neither (a raw_tp program of a required tracepoint).
bool FallBack(AttachPlan* plan, const bpf_program* program, const std::string& reason,
              bool too_complex = false) {
  ProgramKind kind = KindOf(program);
  std::string* feature_off = nullptr;
  if (kind.attach == ProgramKind::kPerfEvent || IsFaultTracepoint(kind.tracepoint)) {
    feature_off = &plan->faults_off_reason;
  } else if (IsLockTracepoint(kind.tracepoint)) {
    feature_off = &plan->locks_off_reason;
  } else if (IsSignalTracepoint(kind.tracepoint)) {
    feature_off = &plan->signals_off_reason;
  } else if (IsSwitchInStackTracepoint(kind.tracepoint)) {
    feature_off = &plan->switch_in_stacks_off_reason;
  }
  // A program too complex for the verifier (E2BIG) is as complex as raw_tp: the same code. Not
  // tried again that way: a load that runs the verifier to its limit takes seconds (3 s here).
  if (kind.attach == ProgramKind::kTpBtf && !too_complex) {
    return plan->raw_tracepoints.emplace(kind.tracepoint, reason).second;
  }
  if (feature_off == nullptr || !feature_off->empty()) return false;
  std::string where = kind.attach == ProgramKind::kPerfEvent ? bpf_program__name(program)
                      : kind.attach == ProgramKind::kTpBtf   ? "tp_btf/" + kind.tracepoint
                                                             : "raw_tp/" + kind.tracepoint;
  *feature_off = where + " " + reason;
  return true;
}

// What the session should say about the plan that worked: how the tracepoints were attached, and
// what is not recorded.
std::vector<std::string> DescribePlan(const AttachPlan& plan, bool forced_raw) {
  std::vector<std::string> notes;
  if (forced_raw) {
    notes.push_back("kernel recorder: tracepoints attached as raw_tp (asked for)");
  } else if (plan.raw_tracepoints.empty()) {
    notes.push_back("kernel recorder: tracepoints attached as tp_btf");
  } else {
    std::string names;
    for (const auto& [tracepoint, reason] : plan.raw_tracepoints) {
      names += (names.empty() ? "" : ", ") + tracepoint;
    }
    notes.push_back("kernel recorder: tracepoints attached as tp_btf, except as raw_tp: " + names +
                    " (tp_btf " + plan.raw_tracepoints.begin()->second + ")");
  }
  if (!plan.locks_off_reason.empty()) {
    notes.push_back("kernel recorder: kernel lock waits not recorded (" + plan.locks_off_reason +
                    ")");
  }
  if (!plan.faults_off_reason.empty()) {
    notes.push_back("kernel recorder: page faults not recorded (" + plan.faults_off_reason + ")");
  }
  if (!plan.signals_off_reason.empty()) {
    notes.push_back("kernel recorder: signals not recorded (" + plan.signals_off_reason + ")");
  }
  if (!plan.switch_in_stacks_off_reason.empty()) {
    notes.push_back(
        "kernel recorder: off-CPU stacks taken at every switch-out, not when the "
        "thread runs again (" +
        plan.switch_in_stacks_off_reason + ")");
  }
  if (plan.python && !plan.python_off_reason.empty()) {
    notes.push_back("kernel recorder: Python stacks not recorded (" + plan.python_off_reason + ")");
  } else if (plan.python && !plan.switch_in_stacks_off_reason.empty()) {
    notes.push_back(
        "kernel recorder: Python stacks of waiters not recorded (they are read when the thread "
        "runs again, which needs sched_exit_tp)");
  }
  return notes;
}

// Attaches `program` to the software perf event `attr` on every online CPU. Returns 0 or an errno.
int AttachOnEveryCpu(bpf_program* program, perf_event_attr attr, std::vector<bpf_link*>* links) {
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return cpus == 0 ? ENODEV : -cpus;
  links->reserve(links->size() + static_cast<size_t>(cpus));
  attr.type = PERF_TYPE_SOFTWARE;
  attr.size = sizeof(attr);
  for (int cpu = 0; cpu < cpus; ++cpu) {
    int fd =
        static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0 && errno == ENODEV) continue;  // a CPU that is not online
    if (fd < 0) return errno;
    bpf_link* link = bpf_program__attach_perf_event(program, fd);
    if (link == nullptr) {
      int error = errno;
      close(fd);
      return error;
    }
    links->push_back(link);  // the link closes the event
  }
  return 0;
}

// One sample per event `config` (PERF_COUNT_SW_PAGE_FAULTS_MIN/MAJ).
int AttachPerCpu(bpf_program* program, uint64_t config, std::vector<bpf_link*>* links) {
  perf_event_attr attr{};
  attr.config = config;
  attr.sample_period = 1;
  return AttachOnEveryCpu(program, attr, links);
}

// A cpu-clock event sampling at `hz`.
int AttachSampling(bpf_program* program, uint32_t hz, std::vector<bpf_link*>* links) {
  perf_event_attr attr{};
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.freq = 1;
  attr.sample_freq = hz;
  return AttachOnEveryCpu(program, attr, links);
}

// The deepest user stack the kernel walks: a stack that deep may have been cut.
uint32_t UserStackDepthLimit() {
  std::string text;
  uint32_t limit = GPROF_MAX_STACK_DEPTH;
  if (ReadProcFile("/proc/sys/kernel/perf_event_max_stack", 64, &text)) {
    unsigned long sysctl = strtoul(text.c_str(), nullptr, 10);
    if (sysctl > 0 && sysctl < limit) limit = static_cast<uint32_t>(sysctl);
  }
  return limit;
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

struct KernelRecorder::State {
  kernel_events_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  ring_buffer* ring = nullptr;
  ChunkFileWriter writer;
  int stacks_fd = -1;
  int user_stacks_fd = -1;
  uint32_t user_stack_depth_limit = GPROF_MAX_STACK_DEPTH;
  uint64_t slow_fault_ns = 0;
  uint64_t stack_min_ns = 0;
  uint64_t count_under_ns = 0;
  bool stacks_wanted = false;
  uint64_t lost_stacks = 0;  // off-CPU stacks never taken (GPROF_LOST_STACK, GPROF_ALL_CPUS)
  std::vector<std::string> notes;

  std::vector<char> staged;
  uint32_t staged_records = 0;
  uint64_t last_flush_ns = 0;

  std::unordered_set<int32_t> stacks_written;
  std::unordered_set<int32_t> user_stacks_written;
  std::unordered_set<uint64_t> stack_addresses;  // symbolized at Finish
  std::vector<uint64_t> stack_buffer = std::vector<uint64_t>(GPROF_MAX_STACK_DEPTH);
  std::vector<char> record_buffer;

  // Processes of the tree, for their maps snapshots: start time (tells a reused pid) and whether
  // their last thread exited.
  struct TreeProcess {
    uint64_t start_time = 0;
    bool alive = true;
    uint64_t maps_hash = 0;  // of the last snapshot written (WriteMaps)
    // A secure-execution process of a session whose owner is not root (GPROF_EXEC_HIDDEN): its
    // memory is a privileged program's, so neither its maps nor its Python frames are read.
    bool hidden = false;
  };
  std::map<uint32_t, TreeProcess> processes;
  std::set<uint32_t> maps_due;  // appeared or exec'd since the last snapshot round
  // Processes snapshotted after they appeared or exec'd, looked at again a few times while their
  // dynamic loader maps libraries (a snapshot drained right after an exec has none of them):
  // when next, and how many looks are left. A snapshot is written only when the maps changed.
  std::map<uint32_t, std::pair<uint64_t, int>> maps_followups;
  std::unique_ptr<PythonStacks> python;  // Python stacks on

  // The short_waits map's totals as last written, by key (its bytes), and when.
  std::map<std::string, gprof_short_wait_counts> wait_totals_written;
  uint64_t wait_counts_ns = 0;

  std::map<uint32_t, uint64_t> malformed;  // by claimed record type
  // The signal_generate program's link: it outlives the recording (Finish), as gprof-run's
  // forwarding of signals reads them until the command ends.
  bpf_link* signal_link = nullptr;
  std::vector<SignalRecord> signals;  // drained, not yet taken (TakeSignals)
  uint64_t signals_drained_ns = 0;
  bool recording_done = false;        // Finish closed kernel.gpr: only signals are drained now
  uint64_t lost_to_writes = 0;
  // Writing stopped at this time (a write failed, or another writer found the disk full); what
  // comes after is counted in lost_to_writes, not written. 0: writing.
  uint64_t writes_stopped_ns = 0;
  bool final_write = false;     // Finish's one attempt to write the loss counts after a stop
  const char* stop_cause = "";  // session.json's word for why writing stopped
  uint64_t records_written = 0;
  uint64_t kernel_lost_at_finish = 0;
  std::string last_error;
  bool finished = false;

  ~State() { Release(); }

  void DetachAll() {
    for (bpf_link* link : links) bpf_link__destroy(link);
    links.clear();
  }

  void Release() {
    DetachAll();
    bpf_link__destroy(signal_link);
    signal_link = nullptr;
    python.reset();
    ring_buffer__free(ring);
    ring = nullptr;
    kernel_events_bpf__destroy(skel);
    skel = nullptr;
  }

  void StopWriting(const char* cause, const char* why) {
    if (writes_stopped_ns != 0) return;
    writes_stopped_ns = MonotonicNs();
    stop_cause = cause;
    try {  // Flush runs in Finish's out-of-memory path too: it must not throw
      if (last_error.empty()) last_error = why;
    } catch (...) {
    }
  }

  void Flush() {
    if (staged.empty()) return;
    int error = writes_stopped_ns != 0 && !final_write
                    ? ENOSPC
                    : writer.Write(staged.data(), staged.size(), staged_records);
    if (error == 0) {
      records_written += staged_records;
    } else if (error != ChunkFileWriter::kSizeBudgetRefused) {  // the budget counts what it refuses
      lost_to_writes += staged_records;
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

  // Appends a loader record: `header` (a record struct whose hdr.size covers the trailing bytes
  // too) followed by `tail`.
  template <typename Record>
  void AppendWithTail(const Record& header, const void* tail, size_t tail_size) {
    record_buffer.resize(sizeof(header) + tail_size);
    memcpy(record_buffer.data(), &header, sizeof(header));
    if (tail_size > 0) memcpy(record_buffer.data() + sizeof(header), tail, tail_size);
    Append(record_buffer.data(), record_buffer.size());
  }

  // The return addresses of stack `id` in `map_fd`, innermost first; 0 frames when unreadable.
  uint32_t ReadStack(int map_fd, int32_t id) {
    std::fill(stack_buffer.begin(), stack_buffer.end(), 0);
    if (bpf_map_lookup_elem(map_fd, &id, stack_buffer.data()) != 0) return 0;
    uint32_t depth = 0;
    while (depth < stack_buffer.size() && stack_buffer[depth] != 0) ++depth;
    return depth;
  }

  // Writes kernel stack `id` the first time a record refers to it. Ids are stable (no
  // REUSE_STACKID), and writing them as they come keeps them in the file if gprof-run is killed.
  void NoteStack(int32_t id) {
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

  // The same for user stack `id`. The map keeps no length: a stack that fills every slot the
  // kernel's walk may fill is taken as cut there.
  void NoteUserStack(int32_t id) {
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

  void NoteProcess(uint32_t pid) {
    if (processes[pid].alive && !processes[pid].hidden) maps_due.insert(pid);
  }

  // An entry in the threads map for each thread process `pid` has now (the programs record only
  // threads that have one), keeping any a starting thread got first. After the process is in the
  // tracked map: a thread started meanwhile gets its entry from sched_process_fork. False when
  // the process cannot be read or the map is full (errno says).
  bool StartThreads(uint32_t pid) {
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* tasks = opendir(dir.c_str());
    if (tasks == nullptr) return false;
    int fd = bpf_map__fd(skel->maps.threads);
    while (const dirent* task = readdir(tasks)) {
      char* end = nullptr;
      unsigned long tid = strtoul(task->d_name, &end, 10);
      if (end == task->d_name || *end != '\0' || tid == 0) continue;
      uint32_t key = static_cast<uint32_t>(tid);
      gprof_thread_state fresh{};
      fresh.offcpu.pid = fresh.syscall.pid = pid;
      if (bpf_map_update_elem(fd, &key, &fresh, BPF_NOEXIST) != 0 && errno != EEXIST) {
        int error = errno;
        closedir(tasks);
        errno = error;
        return false;
      }
    }
    closedir(tasks);
    return true;
  }

  // Writes /proc/PID/maps of a process of the tree, unless it is gone or its pid now names
  // another process.
  void SnapshotMaps(uint32_t pid) {
    std::string text;
    if (!WriteMaps(pid, &text, false)) return;
    maps_followups[pid] = {MonotonicNs() + kMapsFollowupNs[0], std::size(kMapsFollowupNs)};
    if (python) python->OnMaps(pid, text);
  }

  void FollowUpMaps(uint64_t now) {
    for (auto it = maps_followups.begin(); it != maps_followups.end();) {
      auto& [pid, due] = *it;
      if (now < due.first) {
        ++it;
        continue;
      }
      std::string text;
      uint64_t hash = processes[pid].maps_hash;
      bool read = WriteMaps(pid, &text, true);
      if (read && python && processes[pid].maps_hash != hash) python->OnMaps(pid, text);
      size_t done = std::size(kMapsFollowupNs) - static_cast<size_t>(due.second) + 1;
      if (!read || --due.second <= 0) {
        it = maps_followups.erase(it);
        continue;
      }
      due.first = now + kMapsFollowupNs[done] - kMapsFollowupNs[done - 1];
      ++it;
    }
  }

  uint64_t NextFollowUpNs() const {
    uint64_t next = UINT64_MAX;
    for (const auto& [pid, due] : maps_followups) next = std::min(next, due.first);
    return next;
  }

  // Reads /proc/PID/maps into *text and writes it as a snapshot: always, or with `if_changed`
  // only when it differs from the last one written (Python's looks at a process just exec'd,
  // which also name the libraries its dynamic loader mapped after the exec's snapshot). False
  // when the process is gone or its pid names another.
  bool WriteMaps(uint32_t pid, std::string* text, bool if_changed) {
    TreeProcess& process = processes[pid];
    if (!process.alive || process.hidden) return false;
    uint64_t start_time = ProcessStartTime(pid);
    if (start_time == 0) return false;
    if (process.start_time == 0) process.start_time = start_time;
    if (process.start_time != start_time) {
      process.alive = false;
      return false;
    }
    uint64_t now = MonotonicNs();
    if (!ReadProcFile("/proc/" + std::to_string(pid) + "/maps", kMaxMapsBytes, text)) return false;
    uint64_t hash = std::hash<std::string>{}(*text);
    if (if_changed && hash == process.maps_hash) return true;
    process.maps_hash = hash;
    gprof_process_maps record{};
    record.hdr.size = static_cast<uint32_t>(sizeof(record) + text->size());
    record.hdr.type = GPROF_REC_PROCESS_MAPS;
    record.pid = pid;
    record.text_len = static_cast<uint32_t>(text->size());
    record.time_ns = now;
    AppendWithTail(record, text->data(), text->size());
    return true;
  }

  void SnapshotDueMaps() {
    for (uint32_t pid : maps_due) SnapshotMaps(pid);
    maps_due.clear();
  }

  void OnSample(const void* data, size_t size) {
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
          if (python && !processes[record.pid].hidden)
            python->OnFork(record.pid, record.parent_pid);
        }
        break;
      }
      case GPROF_REC_TASK_RENAME: {
        gprof_task_rename record;
        memcpy(&record, data, sizeof(record));
        if (record.is_exec) {
          processes[record.pid].hidden = (record.is_exec & GPROF_EXEC_HIDDEN) != 0;
          NoteProcess(record.pid);
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

  // A Python stack: a header and `depth` frames, checked to be exactly that; its code objects are
  // named before it is written.
  void OnPythonStack(const void* data, size_t size, const gprof_rec_hdr& hdr) {
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

  // A native stack copy: a header and exactly `copied_bytes` of stack.
  void OnNativeStack(const void* data, size_t size, const gprof_rec_hdr& hdr) {
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

  // The kernel's loss counters: their sum, and (records != nullptr) one gprof_lost per (kind,
  // record type, CPU) with a count.
  uint64_t KernelLost(std::vector<gprof_lost>* records) const {
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

  uint64_t LoaderLost() const {
    uint64_t total = lost_to_writes + lost_stacks;
    for (const auto& [type, count] : malformed) total += count;
    return total;
  }

  // Intervals that ended just as the programs were detached, before their thread took its stacks
  // (one per CPU at most): written without them.
  void EmitSwitchedIn() {
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

  // Threads still off-CPU or inside a futex call when recording stops: their intervals end now.
  void EmitUnfinished(uint64_t now) {
    int threads_fd = bpf_map__fd(skel->maps.threads);
    ForEachKey(threads_fd, [&](uint32_t tid) {
      gprof_thread_state state{};
      if (bpf_map_lookup_elem(threads_fd, &tid, &state) != 0) return;
      EmitUnfinishedOffCpu(tid, state.offcpu, now);
      EmitUnfinishedFutex(tid, state.syscall, now);
    });
  }

  void EmitUnfinishedOffCpu(uint32_t tid, const gprof_offcpu_pending& entry, uint64_t now) {
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

  void EmitUnfinishedFutex(uint32_t tid, const gprof_syscall_pending& entry, uint64_t now) {
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

  // A GPROF_REC_WAIT_COUNT record for each reason whose totals in the short_waits map grew since
  // the last call: what it added since then.
  void EmitWaitCounts(uint64_t now) {
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
      record.start_ns = written.count == 0 ? totals.first_ns
                                           : std::max<uint64_t>(wait_counts_ns, written.last_ns);
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

  // Quick page faults of threads still alive, and spinning-lock contention per CPU.
  void EmitCounts() {
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

  void EmitSymbols() {
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

  void EmitNotes() {
    for (const std::string& note : notes) {
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
};

namespace {

// A libbpf call of a start that failed: what it was for and its error (negative or errno), with
// the libbpf warning that names the program or map at fault (the verifier log itself only with
// GPROF_DEBUG_BPF=1). Made as soon as the call fails, while the warning is still the call's.
Status LibbpfFailure(const std::string& what, int code) {
  code = code < 0 ? -code : code;
  std::string message = what + ": " + ErrnoText(code);
  std::string warning = TakeWarning();
  if ((code == EPERM || code == EACCES) && !HasBpfCapabilities()) {
    // libbpf's own guesses (RLIMIT_MEMLOCK, CONFIG_BPF_SYSCALL) would only mislead here.
    return Status::Error(StatusCode::kPermissionDenied,
                         message + "; needs root or CAP_BPF+CAP_PERFMON");
  }
  if (!warning.empty()) message += " (libbpf: " + warning + ")";
  if (!g_print_debug) message += "; GPROF_DEBUG_BPF=1 shows libbpf's log";
  // With the capabilities, a refusal is the kernel's: its verifier, a missing tracepoint, a
  // lockdown.
  return Status::Error(code == ENOMEM ? StatusCode::kOutOfMemory : StatusCode::kUnsupported,
                       message);
}

// The start's steps, in the order KernelRecorder::StartOrThrow takes them.

// Options the programs cannot run with, and a kernel they cannot load into.
Status CheckOptions(const KernelRecorderOptions& options) {
  // CO-RE relocations and tp_btf both need the kernel's BTF; say so rather than let libbpf fail.
  if (access(kVmlinuxBtf, R_OK) != 0) {
    return Status::Error(StatusCode::kUnsupported,
                         std::string("kernel has no BTF (") + kVmlinuxBtf +
                             " missing): kernel recording needs CONFIG_DEBUG_INFO_BTF");
  }
  if (options.ring_buffer_bytes > kMaxRingBufferBytes) {
    return Status::Error(StatusCode::kInvalid, "kernel ring buffer of " +
                                                   std::to_string(options.ring_buffer_bytes) +
                                                   " bytes is over the 1 GiB limit");
  }
  if (options.native_stack_bytes > GPROF_NATIVE_STACK_MAX_BYTES) {
    return Status::Error(StatusCode::kInvalid,
                         "native stack copies of " + std::to_string(options.native_stack_bytes) +
                             " bytes are over the " +
                             std::to_string(GPROF_NATIVE_STACK_MAX_BYTES) + " byte limit");
  }
  if (options.stack_map_entries == 0) {
    return Status::Error(StatusCode::kInvalid, "kernel stack map needs at least one entry");
  }
  if (options.device_prefix.size() >= GPROF_COMM_LEN) {
    return Status::Error(StatusCode::kInvalid,
                         "device prefix \"" + options.device_prefix + "\" is longer than " +
                             std::to_string(GPROF_COMM_LEN - 1) + " characters");
  }
  return {};
}

// The programs' constants and the maps' sizes, before the object is loaded.
Status SetProgramConstants(kernel_events_bpf* skel, const KernelRecorderOptions& options,
                           const AttachPlan& plan, uint64_t ring_bytes) {
  skel->rodata->self_tgid = static_cast<uint32_t>(getpid());
  skel->rodata->wakeup_bytes = std::min<uint64_t>(kMaxWakeupBytes, ring_bytes / 4);
  skel->rodata->capture_stacks = options.kernel_stacks ? 1 : 0;
  skel->rodata->capture_user_stacks = options.user_stacks ? 1 : 0;
  memset(skel->rodata->device_prefix, 0, sizeof(skel->rodata->device_prefix));
  memcpy(skel->rodata->device_prefix, options.device_prefix.data(), options.device_prefix.size());
  skel->rodata->device_prefix_len = static_cast<uint32_t>(options.device_prefix.size());
  skel->rodata->slow_fault_ns = options.slow_page_fault_ns;
  skel->rodata->stack_min_ns = options.stack_min_ns;
  skel->rodata->count_under_ns = options.count_under_ns;
  skel->rodata->stacks_at_switch_in = plan.switch_in_stacks_off_reason.empty() ? 1 : 0;
  skel->rodata->capture_python = plan.python_on() ? 1 : 0;
  // A secure-execution process is a privileged one: only root's sessions look inside it.
  skel->rodata->hide_secure_exec =
      (options.file_uid >= 0 ? static_cast<uid_t>(options.file_uid) : geteuid()) != 0 ? 1 : 0;
  skel->rodata->native_copy_bytes = options.native_stack_bytes;
  skel->rodata->waker_copy_min_ns = options.native_stack_bytes > 0 ? options.waker_stack_min_ns : 0;
  int rc = bpf_map__set_max_entries(skel->maps.events, static_cast<uint32_t>(ring_bytes));
  if (rc != 0) return LibbpfFailure("size the kernel ring buffer", rc);
  // Without stacks a map is never written: one entry instead of ~16 MiB of kernel memory.
  rc = bpf_map__set_max_entries(skel->maps.stacks,
                                options.kernel_stacks ? options.stack_map_entries : 1);
  if (rc == 0) {
    rc = bpf_map__set_max_entries(skel->maps.user_stacks,
                                  options.user_stacks ? options.stack_map_entries : 1);
  }
  if (rc != 0) return LibbpfFailure("size the stack maps", rc);
  if (options.count_under_ns == 0) {  // never written
    rc = bpf_map__set_max_entries(skel->maps.short_waits, 1);
    if (rc == 0) rc = bpf_map__set_max_entries(skel->maps.short_wait_totals, 1);
    if (rc != 0) return LibbpfFailure("size the short waits' map", rc);
  }
  int possible_cpus = libbpf_num_possible_cpus();
  if (possible_cpus <= 0) return LibbpfFailure("count the possible CPUs", possible_cpus);
  skel->rodata->possible_cpus = static_cast<uint32_t>(possible_cpus);
  // Two native stack copies per CPU (native_stacks.bpf.h); one entry when none are taken.
  rc = bpf_map__set_max_entries(skel->maps.native_copies,
                                options.native_stack_bytes > 0 ? 2 * possible_cpus : 1);
  if (rc != 0) return LibbpfFailure("size the native stack copies' map", rc);
  return {};
}

// Opens, loads and attaches the programs. One attempt per fallback at most: each failed attempt
// moves one program to its fallback (or leaves an optional feature out), and a failure with no
// fallback ends the loop.
Status LoadAndAttach(KernelRecorder::State& state, const KernelRecorderOptions& options,
                     AttachPlan& plan, bool force_raw, uint64_t ring_bytes) {
  for (;;) {
    state.Release();
    ResetWarnings();
    state.skel = kernel_events_bpf__open();
    if (state.skel == nullptr) return LibbpfFailure("open BPF object", errno);
    kernel_events_bpf* skel = state.skel;
    if (force_raw) {
      bpf_program* program = nullptr;
      bpf_object__for_each_program(program, skel->obj) {
        ProgramKind kind = KindOf(program);
        if (kind.attach == ProgramKind::kTpBtf) plan.raw_tracepoints.emplace(kind.tracepoint, "");
      }
    }
    if (Status set = SetProgramConstants(skel, options, plan, ring_bytes); !set.ok()) return set;

    // The verifier's statistics and errors only (BPF_LOG_STATS), unless GPROF_DEBUG_BPF=1: with no
    // log level, libbpf loads a program that fails again with the full log to print it, which
    // takes seconds for one that reached the verifier's limit (10 s here).
    bpf_program* program = nullptr;
    bpf_object__for_each_program(program, skel->obj) {
      bpf_program__set_autoload(program, Wanted(plan, program));
      bpf_program__set_log_level(program, g_print_debug ? 1 : 4);
    }
    int rc = kernel_events_bpf__load(skel);
    if (rc != 0) {
      if ((rc == -EPERM || rc == -EACCES) && !HasBpfCapabilities()) {
        return LibbpfFailure("load BPF programs", rc);
      }
      std::string name = WarnedProgram();
      bpf_program* failed =
          name.empty() ? nullptr : bpf_object__find_program_by_name(skel->obj, name.c_str());
      // A program the Python walker is part of: without it first (the walker is left out of every
      // program when capture_python is 0).
      if (failed != nullptr && plan.python_on() && HasPythonWalker(failed)) {
        plan.python_off_reason =
            std::string(bpf_program__name(failed)) + " failed to load: " + ErrnoText(-rc);
        continue;
      }
      // The sampling program without the walker: left out, samples off, the rest recorded.
      if (failed != nullptr && IsSampleProgram(failed) && plan.sample_off_reason.empty()) {
        plan.sample_off_reason = "failed to load: " + ErrnoText(-rc);
        continue;
      }
      if (failed == nullptr ||
          !FallBack(&plan, failed, "failed to load: " + ErrnoText(-rc), rc == -E2BIG)) {
        return LibbpfFailure("load BPF programs", rc);
      }
      continue;
    }

    // Attached one by one rather than with the skeleton, so an error names the tracepoint.
    bpf_program* failed = nullptr;
    int attach_error = 0;
    state.links.reserve(64);  // a push_back that throws would leak an attached link
    bpf_object__for_each_program(program, skel->obj) {
      if (!bpf_program__autoload(program)) continue;
      if (IsSampleProgram(program) || IsPythonMarkerProgram(program)) continue;  // below
      if (KindOf(program).attach == ProgramKind::kPerfEvent) {
        uint64_t config = program == skel->progs.on_major_fault_done
                              ? PERF_COUNT_SW_PAGE_FAULTS_MAJ
                              : PERF_COUNT_SW_PAGE_FAULTS_MIN;
        attach_error = AttachPerCpu(program, config, &state.links);
        if (attach_error == 0) continue;
        failed = program;
        break;
      }
      bpf_link* link = bpf_program__attach(program);
      if (link == nullptr) {
        failed = program;
        attach_error = errno;
        break;
      }
      if (IsSignalTracepoint(KindOf(program).tracepoint)) {
        state.signal_link = link;
      } else {
        state.links.push_back(link);
      }
    }
    if (failed == nullptr) return {};
    if (!FallBack(&plan, failed, "failed to attach: " + ErrnoText(attach_error))) {
      return LibbpfFailure(std::string("attach ") + bpf_program__section_name(failed),
                           attach_error);
    }
  }
}

// The sampling tick: without it, waits are still explained, but not what a thread on CPU ran.
void AttachSamplingTick(KernelRecorder::State& state, const KernelRecorderOptions& options,
                        const AttachPlan& plan) {
  if (!plan.sample) return;
  int error = plan.sample_on()
                  ? AttachSampling(state.skel->progs.on_cpu_sample, options.sample_hz, &state.links)
                  : 0;
  std::string what = options.native_stack_bytes > 0 ? "native stacks" : "";
  if (plan.python_on()) what += std::string(what.empty() ? "" : " and ") + "Python stacks";
  if (what.empty()) return;
  if (!plan.sample_on() || error != 0) {
    state.notes.push_back("kernel recorder: " + what + " not sampled on CPU (" +
                          (error != 0 ? "cpu-clock: " + ErrnoText(error)
                                      : "on_cpu_sample " + plan.sample_off_reason) +
                          ")");
  } else {
    state.notes.push_back(
        "kernel recorder: " + what + " sampled on CPU at " + std::to_string(options.sample_hz) +
        " Hz" +
        (options.native_stack_bytes > 0
             ? " (native: " + std::to_string(options.native_stack_bytes / 1024) +
                   " KiB of stack copied, unwound after the run)"
             : ""));
  }
}

// The optional Python parts: without them Python stacks are still read after waits and at
// wakeups.
void AttachPythonParts(KernelRecorder::State& state, const KernelRecorderOptions& options,
                       const AttachPlan& plan) {
  if (!plan.python_on()) return;
  if (plan.python_marker) {
    LIBBPF_OPTS(bpf_uprobe_opts, uprobe, .func_name = "gprof_python_stack_point");
    state.links.reserve(state.links.size() + 1);
    bpf_link* link =
        bpf_program__attach_uprobe_opts(state.skel->progs.on_python_call_point, -1,
                                        options.python_marker_library.c_str(), 0, &uprobe);
    if (link == nullptr) {
      state.notes.push_back(
          "kernel recorder: Python stacks of slow CUDA calls not recorded (uprobe on " +
          options.python_marker_library + ": " + ErrnoText(errno) + ")");
    } else {
      state.links.push_back(link);
    }
  }
  state.python = std::make_unique<PythonStacks>(
      bpf_map__fd(state.skel->maps.python_targets),
      [s = &state](const void* data, size_t size) { s->Append(data, size); });
}

// The notes that say how the recording was set up.
void NoteSettings(KernelRecorder::State& state, const KernelRecorderOptions& options) {
  if (options.stack_min_ns > 0 && (options.kernel_stacks || options.user_stacks)) {
    state.notes.push_back("kernel recorder: stacks only for off-CPU intervals of at least " +
                          DurationText(options.stack_min_ns) +
                          ", and a waker's only for a wait that long");
  }
  if (options.count_under_ns > 0) {
    state.notes.push_back("kernel recorder: off-CPU intervals and futex calls under " +
                          DurationText(options.count_under_ns) +
                          " counted per thread and reason instead of recorded one by one");
  }
}

// Which programs to try first: the fallbacks are taken as loading or attaching fails.
AttachPlan PlanFor(const KernelRecorderOptions& options) {
  AttachPlan plan;
  if (options.stacks_at_switch_out) plan.switch_in_stacks_off_reason = "asked for";
  plan.python = options.python_stacks;
  plan.sample = options.sample_hz > 0;
  plan.python_marker = !options.python_marker_library.empty();
  return plan;
}

// The ring buffer the programs write to, and the stack maps its records name.
Status OpenRing(KernelRecorder::State& state) {
  state.ring = ring_buffer__new(bpf_map__fd(state.skel->maps.events),
                                &KernelRecorder::State::SampleCallback, &state, nullptr);
  if (state.ring == nullptr) return LibbpfFailure("open the kernel ring buffer", errno);
  state.stacks_fd = bpf_map__fd(state.skel->maps.stacks);
  state.user_stacks_fd = bpf_map__fd(state.skel->maps.user_stacks);
  state.user_stack_depth_limit = UserStackDepthLimit();
  return {};
}

// kernel.gpr, owned as the session's files are. (Not kPermissionDenied when refused: no BPF
// privilege would help.)
Status CreateOutput(KernelRecorder::State& state, const std::string& session_dir,
                    const KernelRecorderOptions& options) {
  std::string path = session_dir + "/kernel.gpr";
  if (!options.size_budget.empty()) {
    if (int rc = state.writer.AttachBudget(options.size_budget.c_str()); rc != 0) {
      return Status::Error(StatusCode::kIo, std::string("attach the size budget: ") + strerror(rc));
    }
  }
  int rc;
  {
    FileOwnerScope owner(options.file_uid, options.file_gid);
    rc = owner.ok() ? state.writer.Create(path.c_str(), format::Source::kKernel,
                                          static_cast<uint32_t>(getpid()))
                    : EPERM;
  }
  if (rc != 0)
    return Status::Error(StatusCode::kIo, std::string("create kernel.gpr: ") + strerror(rc));
  return {};
}

}  // namespace

KernelRecorder::KernelRecorder(std::unique_ptr<State> state) : state_(std::move(state)) {}

KernelRecorder::~KernelRecorder() { Finish(); }

Expected<std::unique_ptr<KernelRecorder>> KernelRecorder::Start(
    const std::string& session_dir, const KernelRecorderOptions& options) {
  try {
    return StartOrThrow(session_dir, options);
  } catch (...) {  // bad_alloc from a string or vector: nothing else here throws
    return Status::Error(StatusCode::kOutOfMemory, "kernel recorder: out of memory");
  }
}

Expected<std::unique_ptr<KernelRecorder>> KernelRecorder::StartOrThrow(
    const std::string& session_dir, const KernelRecorderOptions& options) {
  InstallPrint();
  if (Status valid = CheckOptions(options); !valid.ok()) return valid;
  const char* raw_env = getenv("GPROF_BPF_RAW_TP");
  bool force_raw =
      options.force_raw_tracepoints || (raw_env != nullptr && strcmp(raw_env, "1") == 0);
  uint64_t ring_bytes = RingBufferBytes(options.ring_buffer_bytes);
  auto state = std::make_unique<State>();
  state->slow_fault_ns = options.slow_page_fault_ns;
  state->stack_min_ns = options.stack_min_ns;
  state->count_under_ns = options.count_under_ns;
  state->stacks_wanted = options.kernel_stacks || options.user_stacks;
  AttachPlan plan = PlanFor(options);

  if (Status attached = LoadAndAttach(*state, options, plan, force_raw, ring_bytes);
      !attached.ok()) {
    return attached;
  }
  state->notes = DescribePlan(plan, force_raw);
  AttachSamplingTick(*state, options, plan);
  AttachPythonParts(*state, options, plan);
  NoteSettings(*state, options);

  if (Status opened = OpenRing(*state); !opened.ok()) return opened;
  // The file comes last: a failed start leaves no kernel.gpr claiming a recording.
  if (Status created = CreateOutput(*state, session_dir, options); !created.ok()) return created;
  state->staged.reserve(kFlushBytes + 4096);
  state->last_flush_ns = MonotonicNs();
  state->wait_counts_ns = state->last_flush_ns;
  state->EmitNotes();
  TakeWarning();
  return std::unique_ptr<KernelRecorder>(new KernelRecorder(std::move(state)));
}

Status KernelRecorder::Track(int pid) try {
  const std::string what = "track pid " + std::to_string(pid) + ": ";
  if (state_->finished)
    return Status::Error(StatusCode::kInvalid, what + "the recorder is finished");
  if (pid <= 0 || pid == getpid()) {
    return Status::Error(StatusCode::kInvalid, what + "not a process the recorder can follow");
  }
  uint32_t key = static_cast<uint32_t>(pid);
  uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(state_->skel->maps.tracked), &key, &one, BPF_ANY) != 0) {
    return Status::FromErrno(errno, what + strerror(errno));
  }
  // Its threads running now; those it starts from here on get their entry at their start.
  if (!state_->StartThreads(key)) return Status::FromErrno(errno, what + strerror(errno));
  state_->SnapshotMaps(key);
  return {};
} catch (...) {
  return Status::Error(StatusCode::kOutOfMemory, "track: out of memory");
}

void KernelRecorder::SetWindow(uint64_t start_ns, uint64_t end_ns) {
  if (state_->finished) return;
  RecordingWindow window = RecordingWindow::Between(start_ns, end_ns);
  // The programs read these on every event: a plain store into the mapped data section.
  state_->skel->data->window_start_ns = window.start_ns;
  state_->skel->data->window_length_ns = window.length_ns;
}

bool KernelRecorder::size_budget_stopped() const { return state_->writer.budget_stopped(); }

int KernelRecorder::Poll(int timeout_ms) try {
  State& s = *state_;
  if (s.finished && s.signal_link == nullptr) {
    // Nothing left to drain (Finish ran out of memory and freed it all): the wait still waits,
    // or the caller's loop, which waits here while the command runs, would spin on a CPU.
    poll(nullptr, 0, timeout_ms < 0 ? kPollSliceMs : std::min(timeout_ms, kPollSliceMs));
    return 0;
  }
  // One wait, never longer than a slice: the programs wake us only once a batch is waiting
  // (wakeup_bytes), so a quiet target's records are drained by this timeout, not by a wakeup.
  // Waiting in several slices would lose signals: one that lands between two waits is consumed by
  // the caller's handler and the next wait sleeps on. The caller's loop sees it instead.
  int wait_ms = timeout_ms < 0 ? kPollSliceMs : std::min(timeout_ms, kPollSliceMs);
  // A process just exec'd is looked at again soon: its maps, and for its Python interpreter.
  {
    uint64_t next = std::min(s.NextFollowUpNs(), s.python ? s.python->NextLookNs() : UINT64_MAX);
    uint64_t now = MonotonicNs();
    if (next != UINT64_MAX)
      wait_ms =
          std::min<int>(wait_ms, next <= now ? 0 : static_cast<int>((next - now) / 1000000 + 1));
  }
  int drained = 0;
  int rc = ring_buffer__poll(s.ring, wait_ms);
  if (rc < 0 && rc != -EINTR) return rc;
  if (rc > 0) drained += rc;
  // Whatever epoll did not report: records below the wakeup threshold, or left by an EINTR.
  uint64_t drained_ns = MonotonicNs();
  rc = ring_buffer__consume(s.ring);
  if (rc >= 0) s.signals_drained_ns = drained_ns;
  if (rc < 0) return rc;
  drained += rc;
  if (s.finished) return drained;  // signals only, taken by the caller
  s.SnapshotDueMaps();
  s.FollowUpMaps(MonotonicNs());
  if (s.python) {
    s.python->Tick(MonotonicNs(),
                   [&s](uint32_t pid, std::string* text) { return s.WriteMaps(pid, text, true); });
  }
  if (uint64_t now = MonotonicNs(); now - s.wait_counts_ns >= kWaitCountIntervalNs) {
    s.EmitWaitCounts(now);
  }
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
    s.lost_to_writes += s.staged_records;
    s.staged.clear();
    s.staged_records = 0;
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

const std::vector<std::string>& KernelRecorder::notes() const { return state_->notes; }

bool KernelRecorder::records_signals() const { return state_->signal_link != nullptr; }

uint64_t KernelRecorder::signals_drained_ns() const { return state_->signals_drained_ns; }

std::vector<SignalRecord> KernelRecorder::TakeSignals() {
  std::vector<SignalRecord> taken;
  taken.swap(state_->signals);
  return taken;
}

const std::string& KernelRecorder::last_error() const { return state_->last_error; }

uint64_t KernelRecorder::writes_stopped_ns() const { return state_->writes_stopped_ns; }

const char* KernelRecorder::writes_stopped_cause() const { return state_->stop_cause; }

std::vector<uint32_t> KernelRecorder::RunningProcesses() const {
  std::vector<uint32_t> running;
  for (const auto& [pid, process] : state_->processes) {
    if (!process.alive) continue;
    uint64_t start_time = ProcessStartTime(pid);
    if (start_time != 0 && (process.start_time == 0 || process.start_time == start_time)) {
      running.push_back(pid);
    }
  }
  return running;
}

}  // namespace gprof::bpf
