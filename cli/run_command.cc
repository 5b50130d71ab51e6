#include "cli/run_command.h"

#include <poll.h>
#include <pwd.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "bpf/kernel_recorder.h"
#include "cli/capture_control.h"
#include "cli/attach_target.h"
#include "cli/attach_window.h"
#include "cli/clock_anchors.h"
#include "cli/exit_codes.h"
#include "cli/flight_recorder.h"
#include "cli/inject_library.h"
#include "cli/output_name.h"
#include "cli/own_settings.h"
#include "cli/session_closing.h"
#include "cli/session_directory.h"
#include "cli/target_process.h"
#include "collector/collect.h"
#include "collector/model/value_format.h"
#include "collector/session/rank_identity.h"
#include "collector/session/session_files.h"
#include "inject/capture_range.h"
#include "inject/profiler_watch.h"
#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"
#include "inject/shared/file_owner.h"
#include "inject/shared/held_directory.h"
#include "inject/shared/namespaces.h"
#include "inject/shared/recording_limits.h"

extern char** environ;

namespace gprof::cli {
namespace {

// The user's own NVTX_INJECTION64_PATH, for the injected library to forward to (nvtx_tool.cc).
constexpr char kNvtxChainEnv[] = "GPROF_NVTX_CHAIN_PATH";
// The user's own NCCL_PROFILER_PLUGIN, for the injected library's NCCL plugin to chain
// (inject/nccl_profiler.cc).
constexpr char kNcclChainEnv[] = "GPROF_NCCL_CHAIN_PLUGIN";

namespace fs = std::filesystem;

constexpr int kPollIntervalMs = 100;
constexpr int kCaptureFollowMs = 10;  // how soon the kernel recorder follows a capture window

// One line on stderr, escaped as the report escapes names: a path or an argument in it may hold
// control characters and bytes that are not UTF-8.
// A line is cut at 4 KiB, its length said: an argument in it may be a launcher's megabytes.

// libgprof_inject.so: given, or where the install (and the build tree, which mirrors it) puts it
// relative to this executable: <prefix>/bin/gprof-run, <prefix>/lib/gprof-run/libgprof_inject.so.
Expected<std::string> FindInjectLibrary(const std::string& requested) {
  std::error_code ec;
  std::string candidate = requested;
  if (candidate.empty()) {
    if (const char* env = getenv("GPROF_INJECT_LIB")) candidate = env;
  }
  if (candidate.empty()) {
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    candidate =
        (exe.parent_path().parent_path() / "lib" / "gprof-run" / "libgprof_inject.so").string();
  }
  fs::path path = fs::absolute(candidate, ec).lexically_normal();
  if (!fs::is_regular_file(path, ec)) {
    return Status::Error(StatusCode::kNotFound, "cannot find the injected library " +
                                                    path.string() + " (give it with --inject-lib)");
  }
  // LD_PRELOAD splits on spaces and colons.
  if (path.string().find_first_of(" :") != std::string::npos) {
    return Status::Error(StatusCode::kInvalid,
                         "the injected library's path " + path.string() +
                             " contains a space or colon, which "
                             "LD_PRELOAD cannot hold; install gprof-run elsewhere");
  }
  return path.string();
}

// What bounds the recording, as every recorder gets it (inject/shared/recording_limits.h).
struct RecordingLimits {
  uint64_t window_start_ns = 0;
  uint64_t window_end_ns = 0;  // 0: no end
  std::string budget;          // the size budget's handle; empty: no --max-size
  std::string control;         // the session's control's handle (session_control.h)
  std::string session_dir_id;  // the session directory's identity (held_directory.h)
};

// --delay and --duration as absolute times, counted from `start_ns` (the command's start).
RecordingLimits LimitsFor(const RunOptions& options, uint64_t start_ns) {
  RecordingLimits limits;
  if (options.delay_s <= 0 && options.duration_s <= 0) return limits;
  limits.window_start_ns = start_ns + static_cast<uint64_t>(options.delay_s * 1e9);
  if (options.duration_s > 0) {
    limits.window_end_ns = limits.window_start_ns +
                           std::max<uint64_t>(1, static_cast<uint64_t>(options.duration_s * 1e9));
  }
  return limits;
}

// The environment gprof-run was started with. With file capabilities (setcap) it runs in secure
// mode, where glibc removes LD_LIBRARY_PATH, LD_PRELOAD, TMPDIR and the like from `environ`
// before main. Those were meant for the command, which runs without the capabilities: they are
// read back from where the kernel put the environment strings, which glibc leaves as they were
// (/proc/self/stat fields 50 and 51: env_start, env_end; /proc/self/environ is closed to a
// process with capabilities).
std::vector<std::string> StartingEnvironment() {
  std::vector<std::string> variables;
  if (getauxval(AT_SECURE) != 0) {
    std::ifstream in("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t name_end = stat.rfind(')');
    std::istringstream fields(name_end == std::string::npos ? "" : stat.substr(name_end + 1));
    std::string field;
    uintptr_t env_start = 0, env_end = 0;
    for (int number = 3; fields >> field && number <= 51; ++number) {
      if (number == 50) env_start = std::strtoull(field.c_str(), nullptr, 10);
      if (number == 51) env_end = std::strtoull(field.c_str(), nullptr, 10);
    }
    if (env_start != 0 && env_start < env_end && env_end - env_start < (64u << 20)) {
      std::string_view strings(reinterpret_cast<const char*>(env_start), env_end - env_start);
      for (size_t begin = 0; begin < strings.size();) {
        size_t nul = strings.find('\0', begin);
        std::string_view variable = strings.substr(begin, nul - begin);
        if (variable.find('=') != std::string_view::npos) variables.emplace_back(variable);
        if (nul == std::string_view::npos) break;
        begin = nul + 1;
      }
      if (!variables.empty()) return variables;
    }
  }
  for (char** entry = environ; *entry != nullptr; ++entry) variables.emplace_back(*entry);
  return variables;
}

// The command's environment: ours, with the injected library appended to any LD_PRELOAD the user
// set and named as the CUDA injection library (for CUPTI), and the session's settings.
// `--cuda=off` adds nothing: only the kernel is recorded. An injection library the user already
// set stays, unless CUPTI is asked for: the driver loads one only.
std::vector<std::string> TargetEnvironment(const RunOptions& options,
                                           const std::string& inject_library,
                                           const std::string& session_dir,
                                           const RecordingLimits& limits) {
  std::vector<std::string> environment;
  bool inject = options.cuda_mode != "off";
  bool use_cupti = options.cuda_mode == "auto" || options.cuda_mode == "cupti";
  std::string preload = PreloadPath(inject_library);
  bool nccl_plugin_off = false;  // the user set NCCL_PROFILER_PLUGIN=none
  std::string injection = inject_library;
  for (const std::string& entry : StartingEnvironment()) {
    std::string_view variable(entry);
    if (inject && variable.starts_with("LD_PRELOAD=")) {
      std::string existing(variable.substr(strlen("LD_PRELOAD=")));
      if (!existing.empty()) preload = existing + ":" + preload;
      continue;
    }
    if (use_cupti && variable.starts_with("CUDA_INJECTION64_PATH=")) {
      std::string existing(variable.substr(strlen("CUDA_INJECTION64_PATH=")));
      if (!existing.empty() && existing != inject_library) {
        if (options.cuda_mode == "cupti") {
          Say("replacing CUDA_INJECTION64_PATH=" + existing + " (--cuda=cupti)");
        } else {
          Say("CUDA_INJECTION64_PATH is already set (" + existing +
              "): keeping it, so CUDA "
              "calls are recorded by interposition, without the GPU timeline");
          injection.clear();
          environment.emplace_back(variable);
        }
      }
      continue;
    }
    if (inject && variable.starts_with("NVTX_INJECTION64_PATH=")) {
      // The user's own NVTX tool keeps being called: the injected library forwards to it.
      std::string existing(variable.substr(strlen("NVTX_INJECTION64_PATH=")));
      if (!existing.empty() && existing != inject_library) {
        Say("NVTX_INJECTION64_PATH is already set (" + existing +
            "): gprof-run records NVTX and forwards every NVTX call to it");
        environment.push_back(std::string(kNvtxChainEnv) + "=" + existing);
      }
      continue;
    }
    if (inject && variable.starts_with("NCCL_PROFILER_PLUGIN=")) {
      // NCCL loads one plugin: the injected library, which loads the user's and calls it too.
      // "none" turns NCCL's plugins off: kept, as the user asked.
      std::string existing(variable.substr(strlen("NCCL_PROFILER_PLUGIN=")));
      if (strcasecmp(existing.c_str(), "none") == 0) {
        nccl_plugin_off = true;
        environment.emplace_back(variable);
      } else if (!existing.empty() && existing != inject_library) {
        Say("NCCL_PROFILER_PLUGIN is already set (" + existing +
            "): gprof-run records NCCL's collectives and forwards every event to it");
        environment.push_back(std::string(kNcclChainEnv) + "=" + existing);
      }
      continue;
    }
    if (variable.starts_with("GPROF_SESSION_DIR=") ||
        variable.starts_with(std::string(kNvtxChainEnv) + "=") ||
        variable.starts_with(std::string(kNcclChainEnv) + "=") ||
        variable.starts_with(std::string(kSessionDirIdEnv) + "=") ||
        variable.starts_with("GPROF_CUDA_MODE=") ||
        variable.starts_with("GPROF_STACK_THRESHOLD_NS=") ||
        variable.starts_with(std::string(kWindowStartEnv) + "=") ||
        variable.starts_with(std::string(kWindowEndEnv) + "=") ||
        variable.starts_with(std::string(kSizeBudgetEnv) + "=") ||
        variable.starts_with(std::string(kSessionControlEnv) + "=") ||
        variable.starts_with(std::string(inject::kCaptureRangeEnv) + "=") ||
        variable.starts_with(std::string(inject::kCaptureNvtxEnv) + "=") ||
        variable.starts_with(std::string(inject::kCaptureEndEnv) + "=") ||
        variable.starts_with(std::string(inject::kProfilerPidEnv) + "=") ||
        (!options.cupti_library.empty() && variable.starts_with("GPROF_CUPTI_LIB="))) {
      continue;  // this run's own settings follow
    }
    environment.emplace_back(variable);
  }
  if (!inject) return environment;
  environment.push_back("LD_PRELOAD=" + preload);
  if (use_cupti && !injection.empty()) environment.push_back("CUDA_INJECTION64_PATH=" + injection);
  // Every NVTX instance in the tree (each library has its own) asks this at its first call.
  environment.push_back("NVTX_INJECTION64_PATH=" + inject_library);
  // NCCL 2.24+ loads its profiler plugin from here at a communicator's creation.
  if (!nccl_plugin_off) environment.push_back("NCCL_PROFILER_PLUGIN=" + inject_library);
  environment.push_back("GPROF_SESSION_DIR=" + session_dir);
  environment.push_back(std::string(kSessionDirIdEnv) + "=" + limits.session_dir_id);
  environment.push_back("GPROF_CUDA_MODE=" + options.cuda_mode);
  environment.push_back("GPROF_STACK_THRESHOLD_NS=" +
                        std::to_string(static_cast<uint64_t>(options.threshold_ms * 1e6)));
  // So that the command's processes notice when gprof-run is gone (killed) and stop recording.
  environment.push_back(std::string(inject::kProfilerPidEnv) + "=" + std::to_string(getpid()) +
                        ":" + std::to_string(inject::ProcessStartTicks(getpid())) + ":" +
                        std::to_string(OwnPidNamespace()));
  if (!options.cupti_library.empty())
    environment.push_back("GPROF_CUPTI_LIB=" + options.cupti_library);
  if (limits.window_start_ns != 0) {
    environment.push_back(std::string(kWindowStartEnv) + "=" +
                          std::to_string(limits.window_start_ns));
  }
  if (limits.window_end_ns != 0) {
    environment.push_back(std::string(kWindowEndEnv) + "=" + std::to_string(limits.window_end_ns));
  }
  if (!limits.budget.empty()) {
    environment.push_back(std::string(kSizeBudgetEnv) + "=" + limits.budget);
  }
  environment.push_back(std::string(kSessionControlEnv) + "=" + limits.control);
  if (options.capture_range != 0) {
    environment.push_back(std::string(inject::kCaptureRangeEnv) + "=" +
                          std::to_string(options.capture_range));
  }
  if (!options.capture_nvtx_name.empty()) {
    environment.push_back(std::string(inject::kCaptureNvtxEnv) + "=" + options.capture_nvtx_name);
    environment.push_back(std::string(inject::kCaptureEndEnv) + "=" +
                          (options.capture_repeat ? "repeat" : "stop"));
  }
  return environment;
}

// Under sudo, the command runs as the user who asked, as it would have without gprof-run.
// SUDO_UID and SUDO_GID name them; one that is not an id is refused rather than read as root.
// The groups are those of the user with that uid (SUDO_USER could name another user's).
Status ApplySudoUser(const RunOptions& options, LaunchSettings* launch) {
  if (options.run_as_root || getuid() != 0) return {};
  const char* uid_text = getenv("SUDO_UID");
  if (uid_text == nullptr) return {};
  const char* gid_text = getenv("SUDO_GID");
  auto parse = [](const char* text, unsigned long* id) {
    if (text == nullptr || *text < '0' || *text > '9') return false;
    char* end = nullptr;
    errno = 0;
    *id = strtoul(text, &end, 10);
    return errno == 0 && *end == '\0' && *id < UINT32_MAX;  // (uid_t)-1 is no id
  };
  unsigned long uid = 0, gid = 0;
  if (!parse(uid_text, &uid) || !parse(gid_text, &gid)) {
    return Status::Error(
        StatusCode::kInvalid,
        "SUDO_UID=" + collector::PrintableName(uid_text) +
            " SUDO_GID=" + collector::PrintableName(gid_text != nullptr ? gid_text : "") +
            " do not name a user and group (--run-as-root keeps the command root's)");
  }
  if (uid == 0) return {};
  launch->run_as_uid = static_cast<uid_t>(uid);
  launch->run_as_gid = static_cast<gid_t>(gid);
  if (const passwd* user = getpwuid(launch->run_as_uid.value()))
    launch->run_as_user = user->pw_name;
  return {};
}

void PrintCollectorOutput(const collector::CollectResult& result, FILE* out) {
  fputs(result.text_report.c_str(), out);
  for (const auto& path : result.written) {
    if (path.ends_with(collector::kTraceFile)) {
      fprintf(out, "\ntrace: %s (open it in https://ui.perfetto.dev)\n",
              collector::PrintableName(path).c_str());
    }
  }
  if (result.storage.peak_spilled_bytes > 0) {
    fprintf(out,
            "(the collector held %llu MiB of records in files in the session directory, past "
            "its %llu MiB of memory: --collector-memory)\n",
            static_cast<unsigned long long>(result.storage.peak_spilled_bytes >> 20),
            static_cast<unsigned long long>(result.storage.memory_budget_bytes >> 20));
  }
  for (const auto& warning : result.warnings) Say("warning: " + warning);
}

collector::CollectOptions CollectOptionsFor(double threshold_ms, uint64_t memory_bytes) {
  collector::CollectOptions options;
  options.analysis.threshold_ns = static_cast<uint64_t>(threshold_ms * 1e6);
  options.memory_budget_bytes = memory_bytes;
  return options;
}

// Says why the kernel is not recorded, on the terminal (with what to do, when known) and in the
// session's description.
void KernelRecordingOff(const std::string& why, const char* what_to_do, RunDescription* run) {
  run->kernel_recording_note = why;
  Say("kernel recording off (" + why +
      "): CUDA calls are recorded but blocked calls cannot be explained" +
      (what_to_do != nullptr ? std::string("; ") + what_to_do : std::string()));
}

// Stops the kernel recorder (at the window's end, at the size cap, or when the command ended).
// Also notes when kernel.gpr stopped taking records (a full disk), and why.
void FinishKernelRecording(bpf::KernelRecorder* recorder, RunDescription* run) {
  recorder->Finish();
  if (!recorder->last_error().empty()) Say("warning: kernel recording: " + recorder->last_error());
  run->kernel_writes_stopped_ns = recorder->writes_stopped_ns();
  run->kernel_writes_stopped_reason = recorder->last_error();
  run->kernel_writes_stopped_cause = recorder->writes_stopped_cause();
}

// The size budget's final counters into the session's description.
void RecordSizeBudget(const SizeBudget& budget, RunDescription* run) {
  SizeBudget::Counts counts = budget.Read();
  run->size_used_bytes = counts.used_bytes;
  run->size_stopped_at_ns = counts.stopped_at_ns;
  run->size_refused_records = counts.refused_records;
  run->size_refused_bytes = counts.refused_bytes;
}


// "exited with 3", "was killed by SIGTERM": how the command ended, for a line on stderr.
std::string CommandEndText(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return "was killed by " + (name != nullptr ? "SIG" + std::string(name)
                                               : "signal " + std::to_string(WTERMSIG(wait_status)));
  }
  return "exited with " + std::to_string(ExitStatusOf(wait_status));
}

// What one run holds from its session's creation to its report.
struct Session {
  SessionDirectory dir;
  LaunchSettings launch;
  RunDescription run;
  // A filesystem with less than the disk margin free (disk_room.h) has no room to record in
  // without taking what the program may need: the command then runs as it would without
  // gprof-run, nothing is written into the session until it has ended, and the report says why
  // nothing was recorded.
  bool no_room = false;
  // The budget and the control are shared memory (inject/shared/shared_segment.h), the session owner's:
  // no file of the session's filesystem, whose lack of room would kill with SIGBUS whoever
  // stores into a mapping of it.
  SizeBudget budget;
  // Every run that injects has one: without it a process that outlives the command would write
  // into the session after the report (session_control.h).
  SessionControl control;
};

// Whether the session's filesystem lacks room to record in; if so, why, in the session's stops.
bool NoRoomToRecord(int dir_fd, RunDescription* run) {
  DiskRoom room = DiskRoomOf(dir_fd);
  if (room.Allows(0, RoomUse::kData)) return false;
  char why[200];
  snprintf(why, sizeof(why),
           "the session's filesystem had %.1f MiB free, less than the %.0f MiB that gprof-run "
           "leaves free (disk margin); -o can name a directory with more room",
           room.free_bytes / 1048576.0, room.margin_bytes / 1048576.0);
  run->other_stops.push_back({"all recording", 0, "disk_room", why});
  run->kernel_recording_note = "no room on the session's filesystem";
  return true;
}

// The size budget (--max-size) and, when the command is injected, the session's control; and the
// CUDA capture the command gets (`launch_options`): none without room to record, or under a
// memory limit. On failure says why and discards the session.
bool CreateSharedState(const RunOptions& options, Session* session, RunOptions* launch_options) {
  FileOwner owner = SessionFileOwner(session->launch);
  if (options.max_size_bytes > 0 && !session->no_room) {
    if (int rc = session->budget.Create(options.max_size_bytes, owner.uid, owner.gid); rc != 0) {
      Say(std::string("cannot create the size budget (shared memory): ") + strerror(rc));
      DiscardSession(session->dir, session->launch);
      return false;
    }
  }
  if (session->no_room) launch_options->cuda_mode = "off";
  if (std::string why = MemoryLimitOfCommand(); !why.empty() && options.cuda_mode != "off") {
    Say(why);
    session->run.other_stops.push_back({"inject-*.gpr", 0, "memory_limit", why});
    launch_options->cuda_mode = "off";
  }
  // --capture-range switches every recorder through the control, the kernel's too.
  if (launch_options->cuda_mode != "off" || options.capture_range != 0) {
    if (int rc = session->control.Create(owner.uid, owner.gid); rc != 0) {
      Say(std::string("cannot create the session's control (shared memory): ") + strerror(rc));
      DiscardSession(session->dir, session->launch);
      return false;
    }
  }
  return true;
}

// The kernel recorder's settings for a run's options.
bpf::KernelRecorderOptions KernelOptionsFor(const RunOptions& options,
                                            const std::string& inject_library,
                                            const Session& session) {
  bpf::KernelRecorderOptions kernel_options;
  kernel_options.ring_buffer_bytes = uint64_t{options.ring_buffer_mb} << 20;
  kernel_options.device_prefix = options.device_prefix;
  kernel_options.python_stacks = options.python_stacks;
  kernel_options.sample_hz = options.sample_hz;
  // The size of each native stack copy, for measuring what depth a size reaches
  // (docs/performance.md); the recorder refuses one over its limit.
  if (const char* bytes = getenv("GPROF_NATIVE_STACK_BYTES"); bytes != nullptr && *bytes != 0)
    kernel_options.native_stack_bytes = static_cast<uint32_t>(strtoul(bytes, nullptr, 10));
  kernel_options.python_marker_library = inject_library;
  kernel_options.count_under_ns = uint64_t{options.count_under_us} * 1000;
  // The directory through its descriptor, and kernel.gpr born the session owner's.
  kernel_options.size_budget = session.budget.handle();
  kernel_options.trimmed = options.flight_recorder_s > 0;
  kernel_options.file_uid = SessionFileOwner(session.launch).uid;
  kernel_options.file_gid = SessionFileOwner(session.launch).gid;
  return kernel_options;
}

// The kernel recorder, started before the command: loading it takes a while, and --delay counts
// from the command's start, which the window (in every recorder's settings) must know. Null when
// it is off; why is then in the session's description.
std::unique_ptr<bpf::KernelRecorder> StartKernelRecorder(const RunOptions& options,
                                                         const std::string& inject_library,
                                                         Session* session) {
  RunDescription& run = session->run;
  if (session->no_room) return nullptr;  // said in the session's stops
  if (!options.kernel_recording) {
    run.kernel_recording_note = "turned off with --no-kernel";
    return nullptr;
  }
  bpf::KernelRecorderOptions kernel_options = KernelOptionsFor(options, inject_library, *session);
  auto started = bpf::KernelRecorder::Start(session->dir.FilePath(), kernel_options);
  if (!started.ok()) {
    KernelRecordingOff(started.status().message(),
                       started.status().code() == StatusCode::kPermissionDenied
                           ? "run as root or give gprof-run CAP_BPF and CAP_PERFMON (setcap "
                             "cap_bpf,cap_perfmon+ep)"
                           : "see above",
                       &run);
    return nullptr;
  }
  run.kernel_stack_min_ns = kernel_options.stack_min_ns;
  return std::move(*started);
}

// The command's start on every clock, and what bounds the recording from it (--delay,
// --duration, --max-size, the session's identity), in every recorder's settings.
RecordingLimits StartRecordingWindow(const RunOptions& options, Session* session) {
  RunDescription& run = session->run;
  // One reading of the three clocks, also the anchor that lines this session up with others.
  run.start_anchor = ReadClockAnchor();
  run.start_monotonic_ns = run.start_anchor.monotonic_ns;
  for (auto& stop : run.other_stops) {
    if (stop.time_ns == 0) stop.time_ns = run.start_monotonic_ns;  // from before the start
  }
  run.start_realtime_ns = run.start_anchor.realtime_ns;
  run.start_boottime_ns = run.start_anchor.boottime_ns;
  run.host_name = HostName();
  run.boot_id = BootId();
  run.test_realtime_skew_ns = TestRealtimeSkewNs();
  run.rank = collector::RankFromVariables([](const char* name) { return getenv(name); });
  RecordingLimits limits = LimitsFor(options, run.start_monotonic_ns);
  limits.budget = session->budget.handle();
  limits.control = session->control.handle();
  // The command's processes find the directory by its path, which a user who can rename one of
  // its components can make name another: they record only into the one that has this identity.
  if (struct stat made {}; fstat(session->dir.fd.get(), &made) == 0) {
    limits.session_dir_id = std::to_string(made.st_dev) + ":" + std::to_string(made.st_ino);
  }
  run.delay_s = options.delay_s;
  run.duration_s = options.duration_s;
  run.window_start_ns = limits.window_start_ns;
  run.window_end_ns = limits.window_end_ns;
  run.max_size_bytes = options.max_size_bytes;
  return limits;
}

// Waits for the command to end, draining the kernel recorder meanwhile, stopping it at the
// window's end or at the size cap (the command runs on), and forwarding signals as the kernel's
// record of them settles. Returns the command's wait status; `kernel_running` says whether the
// recorder still records.
int WaitForCommand(TargetProcess* target, bpf::KernelRecorder* recorder, uint64_t window_end_ns,
                   KernelWindowFollower* capture, FlightRecorder* flight, RunDescription* run,
                   bool* kernel_running) {
  uint64_t window_end = window_end_ns != 0 ? window_end_ns : UINT64_MAX;
  *kernel_running = recorder != nullptr;
  // Signals are recorded on after the recording stops, for the forwarding (SettleForwards).
  bool signals_recorded = recorder != nullptr && recorder->records_signals();
  int wait_status = 0;
  while (!target->Reap(/*block=*/!*kernel_running && !signals_recorded && !flight->active(),
                       &wait_status)) {
    uint64_t now = MonotonicNs();
    // (Before the window follows: a trigger's close is applied to the kernel recorder at once.)
    flight->Tick(*kernel_running ? recorder : nullptr, now);
    if (*kernel_running && (now >= window_end || recorder->size_budget_stopped())) {
      FinishKernelRecording(recorder, run);
      capture->KernelStopped();
      *kernel_running = false;
      continue;
    }
    uint64_t wait_ms = kPollIntervalMs;
    // A capture window's switch waits for the kernel recorder: it is looked at often.
    if (*kernel_running && capture->following()) {
      capture->Follow();
      wait_ms = kCaptureFollowMs;
    }
    if (*kernel_running) {
      uint64_t until_end_ms = (window_end - now) / 1'000'000 + 1;  // no overflow: now < window_end
      wait_ms = std::min<uint64_t>(wait_ms, until_end_ms);
    }
    if (recorder == nullptr) {  // only the flight recorder's turns
      poll(nullptr, 0, static_cast<int>(wait_ms));
      continue;
    }
    // A forward waits for the kernel's record of signals (a few ms): the wait is cut short.
    int until_forward_ms =
        target->SettleForwards(recorder->TakeSignals(), recorder->signals_drained_ns());
    if (until_forward_ms >= 0) wait_ms = std::min<uint64_t>(wait_ms, until_forward_ms);
    // A failed drain (out of memory) returns at once: the loop still waits, never spins.
    if (recorder->Poll(static_cast<int>(wait_ms)) < 0) poll(nullptr, 0, static_cast<int>(wait_ms));
  }
  return wait_status;
}

// Once the command has ended: the session closed to late writers, the kernel recorder stopped,
// and how the command ended, in the session's description. Returns the writers still open at
// the close.
std::vector<OpenWriter> EndRecording(int wait_status, bool kernel_running,
                                     bpf::KernelRecorder* recorder, KernelWindowFollower* capture,
                                     const FlightRecorder& flight, Session* session) {
  RunDescription& run = session->run;
  run.end_anchor = ReadClockAnchor();
  run.end_monotonic_ns = run.end_anchor.monotonic_ns;
  std::vector<OpenWriter> open_at_close;
  if (session->control.attached()) {
    // A window still open ends with the command, for the kernel recorder too.
    EndCapture(&session->control, &run);
    flight.Describe(&run);
    if (kernel_running) capture->Follow();
    if (kernel_running) flight.TrimKernelRecord(recorder);
    open_at_close = CloseSession(&session->control, kernel_running ? recorder : nullptr);
  }
  if (kernel_running) FinishKernelRecording(recorder, &run);
  if (recorder) {
    for (uint32_t pid : recorder->RunningProcesses()) run.running_at_end.push_back({int(pid)});
  }
  if (WIFEXITED(wait_status)) run.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) run.exit_signal = WTERMSIG(wait_status);
  run.finished = true;
  return open_at_close;
}

// The report's outcome on the terminal: the report itself, or under -q only which outputs could
// not be written, and why, in one line.
void SayReport(const Expected<collector::CollectResult>& result, bool print_report,
               const std::string& session_path) {
  if (!result.ok()) {
    Say("cannot build the report: " + result.status().message());
  } else if (print_report) {
    fputc('\n', stderr);
    PrintCollectorOutput(result.value(), stderr);
  } else if (!result->not_written.empty()) {
    // -q silences the report, not a loss.
    std::string line = "could not write in " + session_path + ":";
    for (const auto& output : result->not_written) {
      line += (&output == &result->not_written.front() ? " " : "; ") + output.file + " (" +
              output.reason + ")";
    }
    Say(line);
  }
}

// The session's last description and its report, built as the invoking user once root is needed
// no more: the files it writes are theirs, and root never writes into a directory their command
// could have filled with links. Returns the command's exit status, as gprof-run's.
int ReportOnSession(const RunOptions& options, int wait_status,
                    const std::vector<OpenWriter>& open_at_close, TargetProcess* target,
                    EnclosingSession* enclosing, Session* session) {
  RunDescription& run = session->run;
  if (!DropPrivileges(session->launch)) {
    Say(std::string("cannot switch to the invoking user to build the report: ") + strerror(errno) +
        "; build it with 'gprof-run report " + collector::PrintableName(session->dir.path) + "'");
    return ExitStatusOf(wait_status);
  }
  if (session->budget.attached()) RecordSizeBudget(session->budget, &run);
  // (A process that starts recording from now on finds the session closed.)
  if (session->control.attached()) {
    RecordSessionControl(session->control, open_at_close, session->dir.fd.get(), &run);
  }
  collector::CollectOptions collect_options =
      CollectOptionsFor(options.threshold_ms, options.collector_memory_bytes);
  collect_options.directory_fd = session->dir.fd.get();
  if (Status written = WriteSessionMeta(session->dir, session->launch, run); !written.ok()) {
    Say("warning: " + written.message());
    if (session->no_room) Say("nothing was recorded: " + run.other_stops.front().reason);
    // The report still says how the run went, and what stopped.
    collect_options.session_meta_text = SessionMetaText(run);
  }
  // Ctrl-C or SIGTERM from here on (or since the command ended) stops gprof-run by that signal:
  // what is left is the report, which the session rebuilds.
  const std::string shown_dir = collector::PrintableName(session->dir.path);
  target->StopOnInterrupt("gprof-run: interrupted while building the report (the command " +
                          CommandEndText(wait_status) +
                          "); the session is kept: 'gprof-run report " + shown_dir +
                          "' builds it\n");
  auto result = collector::Collect(session->dir.path, collect_options);
  enclosing->NoteNested(session->dir.path,
                        result.ok() ? std::optional<uint64_t>(result->api_calls) : std::nullopt);
  SayReport(result, options.print_report, session->dir.path);
  return ExitStatusOf(wait_status);
}

// The session directory -o names (expanded), for a command or an attach named `name`. Under sudo
// the session is the invoking user's: made by them, every file theirs from its first moment, and
// named only through the directory's descriptor while this runs as root.
Expected<std::unique_ptr<Session>> MakeSession(const RunOptions& options,
                                               const std::string& name) {
  LaunchSettings launch;
  if (Status sudo = ApplySudoUser(options, &launch); !sudo.ok()) return sudo;
  auto output_dir = ExpandOutputName(options.output_dir);
  if (!output_dir.ok()) return output_dir.status();
  auto session_dir = CreateSessionDirectory(*output_dir, name, launch);
  if (!session_dir.ok()) return session_dir.status();
  // Held while this runs, gone with it however it ends: a reader (report, merge) of a session
  // not finished tells one still being recorded from one whose gprof-run died (session_reader.cc).
  (void)flock(session_dir->fd.get(), LOCK_EX | LOCK_NB);
  return std::unique_ptr<Session>(new Session{std::move(*session_dir), std::move(launch)});
}

}  // namespace

void Say(const std::string& line) {
  std::string shown = collector::ShortenedWithLength(collector::PrintableName(line), 4096);
  fprintf(stderr, "gprof-run: %s\n", shown.c_str());
}

// `report` run as root on a directory that is not root's runs as the directory's owner, for good:
// whatever the session's files name or link to is then read with the owner's rights, and the
// reports are theirs. A directory of root's that others can change is refused: they could plant
// what root would read.
Status ReportAsOwner(int dir_fd, const std::string& directory) {
  const std::string shown = collector::PrintableName(directory);
  struct stat info {};
  if (fstat(dir_fd, &info) != 0) return Status::FromErrno(errno, shown + ": " + strerror(errno));
  if (info.st_uid == 0) {
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) == 0) return {};
    return Status::Error(
        StatusCode::kInvalid,
        shown +
            " is writable by others: as root, gprof-run reports only on a directory no one "
            "else can change");
  }
  passwd* owner = getpwuid(info.st_uid);
  if (owner == nullptr) {
    return Status::Error(
        StatusCode::kInvalid,
        shown + " belongs to uid " + std::to_string(info.st_uid) +
            ", who is no user here: as root, gprof-run reports on a directory only as its owner");
  }
  LaunchSettings as;
  as.run_as_uid = info.st_uid;
  as.run_as_gid = owner->pw_gid;
  as.run_as_user = owner->pw_name;
  if (!DropPrivileges(as)) {
    return Status::FromErrno(errno, "cannot switch to " + collector::PrintableName(owner->pw_name) +
                                        ", who owns " + shown + ": " + strerror(errno));
  }
  return {};
}

int RunCommand(const RunOptions& options) {
  // Before any time is read: in a time namespace every time written is the kernel's.
  auto [monotonic_offset_ns, boottime_offset_ns] = TakeOwnTimeNamespaceOffsets();
  // Started inside another gprof-run's command: that session's report names this one's.
  EnclosingSession enclosing;
  enclosing.AttachFromEnvironment();
  auto inject_library = FindInjectLibrary(options.inject_library);
  if (!inject_library.ok()) {
    Say(inject_library.status().message());
    return kExitToolFailure;
  }
  auto made = MakeSession(options, options.command.front());
  if (!made.ok()) {
    Say(made.status().message());
    return kExitToolFailure;
  }
  Session& session = **made;
  RunDescription& run = session.run;
  run.time_namespace_monotonic_ns = monotonic_offset_ns;
  run.time_namespace_boottime_ns = boottime_offset_ns;
  session.no_room = NoRoomToRecord(session.dir.fd.get(), &run);
  RunOptions launch_options = options;
  if (!CreateSharedState(options, &session, &launch_options)) return kExitToolFailure;

  std::unique_ptr<bpf::KernelRecorder> recorder =
      StartKernelRecorder(options, *inject_library, &session);
  RecordingLimits limits = StartRecordingWindow(options, &session);
  if (recorder) recorder->SetWindow(limits.window_start_ns, limits.window_end_ns);
  KernelWindowFollower capture;
  if (options.capture_range != 0 && session.control.attached()) {
    capture.Start(&session.control, recorder.get(),
                  static_cast<CaptureRange>(options.capture_range));
    run.capture_range = CaptureRangeName(static_cast<CaptureRange>(options.capture_range));
    if (!options.capture_nvtx_name.empty()) {
      run.capture_range += ":" + options.capture_nvtx_name;
      if (options.capture_repeat) run.capture_range += " (every range)";
    }
    run.capture_control = session.control.handle();
  }
  FlightRecorder flight;
  if (options.flight_recorder_s > 0 && session.control.attached()) {
    flight.Start(&session.control, options);
    capture.Follow();  // the kernel recorder records from the command's first moment
  }

  session.launch.argv = options.command;
  session.launch.environment =
      TargetEnvironment(launch_options, *inject_library, session.dir.path, limits);
  // session.json is UTF-8: bytes of the command line that are not are kept as the report shows
  // them ("\xff"), not replaced.
  for (const std::string& arg : options.command)
    run.command.push_back(collector::PrintableName(arg));
  run.inject_library = *inject_library;
  run.cuda_mode = options.cuda_mode;
  for (const std::string& variable : session.launch.environment) {
    if (variable.starts_with(std::string(kNvtxChainEnv) + "=")) {
      run.nvtx_tool = variable.substr(strlen(kNvtxChainEnv) + 1);
    }
    if (variable.starts_with(std::string(kNcclChainEnv) + "=")) {
      run.nccl_plugin = variable.substr(strlen(kNcclChainEnv) + 1);
    }
  }

  auto target = TargetProcess::Spawn(session.launch);
  if (!target.ok()) {
    Say("cannot start " + options.command.front() + ": " + target.status().message());
    if (recorder) recorder->Finish();
    return kExitToolFailure;
  }
  run.root_pid = target->pid();
  TakeOwnSettingsAfterFork();
  if (recorder) {
    if (Status tracked = recorder->Track(target->pid()); !tracked.ok()) {
      recorder.reset();
      KernelRecordingOff(tracked.message(), nullptr, &run);
    }
  }
  run.kernel_recording = recorder != nullptr;

  // (Not on a disk without room: then the session is written only once the command has ended.)
  if (!session.no_room) {
    if (Status written = WriteSessionMeta(session.dir, session.launch, run); !written.ok()) {
      Say(written.message());
      target->Abandon();
      return kExitToolFailure;
    }
  }

  target->ForwardSignals(/*witnessed=*/recorder != nullptr && recorder->records_signals());
  if (auto failure = target->Release()) {
    Say(failure->message);
    if (recorder) recorder->Finish();
    DiscardSession(session.dir, session.launch);  // nothing ran: nothing to keep
    return failure->exit_status;
  }

  bool kernel_running = false;
  int wait_status = WaitForCommand(&*target, recorder.get(), limits.window_end_ns, &capture,
                                   &flight, &run, &kernel_running);
  std::vector<OpenWriter> open_at_close =
      EndRecording(wait_status, kernel_running, recorder.get(), &capture, flight, &session);
  recorder.reset();  // root is needed no more
  return ReportOnSession(options, wait_status, open_at_close, &*target, &enclosing, &session);
}

int AttachCommand(const RunOptions& options) {
  auto [monotonic_offset_ns, boottime_offset_ns] = TakeOwnTimeNamespaceOffsets();
  auto pids = ParsePidList(options.attach_pids);
  if (!pids.ok()) {
    Say(pids.status().message());
    return kExitToolFailure;
  }
  if (Status allowed = CheckAttachTargets(*pids); !allowed.ok()) {
    Say(allowed.message());
    return kExitToolFailure;
  }
  auto made = MakeSession(options, "attach-" + std::to_string(pids->front()));
  if (!made.ok()) {
    Say(made.status().message());
    return kExitToolFailure;
  }
  Session& session = **made;
  RunDescription& run = session.run;
  run.time_namespace_monotonic_ns = monotonic_offset_ns;
  run.time_namespace_boottime_ns = boottime_offset_ns;
  // Nothing is injected: the processes' CUDA calls come from the kernel recorder's uprobes.
  RunOptions attach_options = options;
  attach_options.cuda_mode = "off";
  attach_options.delay_s = 0;
  auto fail = [&](const std::string& line) {
    Say(line);
    DiscardSession(session.dir, session.launch);
    return kExitToolFailure;
  };
  if (NoRoomToRecord(session.dir.fd.get(), &run)) return fail(run.other_stops.front().reason);
  if (!CreateSharedState(attach_options, &session, &attach_options)) return kExitToolFailure;
  bpf::KernelRecorderOptions kernel_options = KernelOptionsFor(attach_options, "", session);
  kernel_options.cuda_probes = true;
  kernel_options.cuda_probe_stack_min_ns = static_cast<uint64_t>(options.threshold_ms * 1e6);
  auto started = bpf::KernelRecorder::Start(session.dir.FilePath(), kernel_options);
  if (!started.ok()) return fail("cannot attach: " + started.status().message());
  std::unique_ptr<bpf::KernelRecorder> recorder = std::move(*started);
  RecordingLimits limits = StartRecordingWindow(attach_options, &session);
  recorder->SetWindow(limits.window_start_ns, limits.window_end_ns);
  auto tracked = TrackProcessTrees(recorder.get(), *pids);
  if (!tracked.ok()) {
    recorder->Finish();
    return fail("cannot attach: " + tracked.status().message());
  }
  run.command = ProcessCommandLine(pids->front());
  for (std::string& argument : run.command) argument = collector::PrintableName(argument);
  run.root_pid = pids->front();
  run.kernel_recording = true;
  run.kernel_stack_min_ns = kernel_options.stack_min_ns;
  run.cuda_mode = "off";
  run.attach.emplace();
  run.attach->pids.assign(pids->begin(), pids->end());
  run.attach->processes = static_cast<int>(tracked->size());
  if (Status written = WriteSessionMeta(session.dir, session.launch, run); !written.ok()) {
    recorder->Finish();
    return fail(written.message());
  }
  Say("recording " + std::to_string(tracked->size()) + " running process" +
      (tracked->size() == 1 ? "" : "es") + (options.duration_s > 0 ? "" : " until Ctrl-C") +
      " into " + collector::PrintableName(session.dir.path));
  run.attach->ended = RecordUntilWindowEnds(recorder.get(), limits.window_end_ns);
  run.end_anchor = ReadClockAnchor();
  run.end_monotonic_ns = run.end_anchor.monotonic_ns;
  FinishKernelRecording(recorder.get(), &run);
  run.finished = true;
  // Which processes' CUDA calls the uprobes recorded, and why not where they could not.
  for (const std::string& note : recorder->notes()) {
    if (note.starts_with("kernel recorder: CUDA driver calls")) Say(note.substr(17));
  }
  recorder.reset();  // every program, link and map of the recorder closed: detached
  if (!DropPrivileges(session.launch)) {
    Say(std::string("cannot switch to the invoking user to build the report: ") + strerror(errno));
    return kExitToolFailure;
  }
  if (session.budget.attached()) RecordSizeBudget(session.budget, &run);
  if (Status written = WriteSessionMeta(session.dir, session.launch, run); !written.ok())
    Say("warning: " + written.message());
  collector::CollectOptions collect_options =
      CollectOptionsFor(options.threshold_ms, options.collector_memory_bytes);
  collect_options.directory_fd = session.dir.fd.get();
  auto result = collector::Collect(session.dir.path, collect_options);
  SayReport(result, options.print_report, session.dir.path);
  return result.ok() ? 0 : kExitToolFailure;
}

int ReportCommand(const std::string& directory, double threshold_ms,
                  uint64_t collector_memory_bytes) {
  // Resolved once; everything after is relative to the descriptor.
  auto dir = collector::OpenSessionDirectory(directory);
  if (!dir.ok()) {
    Say(dir.status().message());
    return kExitToolFailure;
  }
  if (geteuid() == 0) {
    if (Status owned = ReportAsOwner(dir->get(), directory); !owned.ok()) {
      Say(owned.message());
      return kExitToolFailure;
    }
  }
  collector::CollectOptions options = CollectOptionsFor(threshold_ms, collector_memory_bytes);
  options.directory_fd = dir->get();
  auto result = collector::Collect(directory, options);
  if (!result.ok()) {
    Say(result.status().message());
    return kExitToolFailure;
  }
  PrintCollectorOutput(*result, stdout);
  return 0;
}

}  // namespace gprof::cli
