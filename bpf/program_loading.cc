// The kernel recorder's start: opening the BPF object, choosing each program's attachment (tp_btf
// or raw_tp, optional features left out as the kernel refuses them), loading and attaching the
// programs, the ring buffer and kernel.gpr (KernelRecorder::StartOrThrow), and libbpf's messages.
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "bpf/recorder_state.h"
#include "inject/shared/clock.h"
#include "inject/shared/file_owner.h"

namespace gprof::bpf {
namespace {

std::string ErrnoText(int error) {
  char buffer[128];
  // libbpf_strerror knows libbpf's own codes (LIBBPF_ERRNO__*) as well as errno values.
  if (libbpf_strerror(error, buffer, sizeof(buffer)) != 0) {
    snprintf(buffer, sizeof(buffer), "error %d", error);
  }
  return buffer;
}

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

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
  bool cuda_probes = false;  // the uprobes on libcuda's entry points, attached per binary later
  bool cuda_probes_multi = false;  // ...as one uprobe_multi link per binary and direction
  bool python_on() const { return python && python_off_reason.empty(); }
  // On-CPU samples (native stacks, and Python stacks where Python is on): wanted, and why not.
  bool sample = false;
  std::string sample_off_reason;
  bool sample_on() const { return sample && sample_off_reason.empty(); }
};

// The sampling tick's program (native_stacks.bpf.h) and the slow-call marker's
// (python_stacks.bpf.h), loaded only when they are wanted.
bool IsSampleProgram(const bpf_program* program) {
  return strcmp(bpf_program__name(program), "on_cpu_sample") == 0;
}
bool IsPythonMarkerProgram(const bpf_program* program) {
  return strcmp(bpf_program__name(program), "on_python_call_point") == 0;
}
bool IsCudaProbeProgram(const bpf_program* program) {
  return strncmp(bpf_program__name(program), "on_cuda_", 8) == 0;
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
  if (IsCudaProbeProgram(program)) return plan.cuda_probes;
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
                             " bytes are over the " + std::to_string(GPROF_NATIVE_STACK_MAX_BYTES) +
                             " byte limit");
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
  skel->rodata->cuda_probe_stack_min_ns = options.cuda_probe_stack_min_ns;
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
  // Three native stack copies per CPU (native_stacks.bpf.h); one entry when none are taken.
  rc = bpf_map__set_max_entries(skel->maps.native_copies,
                                options.native_stack_bytes > 0 ? 3 * possible_cpus : 1);
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
      // A program of a uprobe_multi link is loaded for that attach type.
      if (plan.cuda_probes_multi && IsCudaProbeProgram(program)) {
        bpf_program__set_expected_attach_type(program, kAttachUprobeMulti);
      }
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
      if (IsSampleProgram(program) || IsPythonMarkerProgram(program) || IsCudaProbeProgram(program))
        continue;  // below, or per binary
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
    state.notes.push_back("kernel recorder: " + what + " sampled on CPU at " +
                          std::to_string(options.sample_hz) + " Hz" +
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
  plan.cuda_probes = options.cuda_probes;
  plan.cuda_probes_multi = options.cuda_probes && KernelHasUprobeMulti();
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
  if (options.trimmed) state.writer.KeepRecentDataOnly();
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
  if (plan.cuda_probes) {
    State* s = state.get();
    state->cuda = std::make_unique<CudaProbes>(
        state->skel->progs.on_cuda_enter, state->skel->progs.on_cuda_exit,
        bpf_map__fd(state->skel->maps.cuda_probe_names), plan.cuda_probes_multi, &state->links,
        &state->link_fds, [s](const std::string& note) {
          s->notes.push_back(note);
          s->EmitNote(note);
        });
  }
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

}  // namespace gprof::bpf
