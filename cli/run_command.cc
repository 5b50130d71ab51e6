#include "run_command.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "collect.h"
#include "exit_codes.h"
#include "kernel_recorder.h"
#include "session_directory.h"
#include "target_process.h"

extern char** environ;

namespace gprof::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kPollIntervalMs = 100;

void Say(const std::string& line) { fprintf(stderr, "gprof-run: %s\n", line.c_str()); }

unsigned long long ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// libgprof_inject.so: given, or where the install (and the build tree, which mirrors it) puts it
// relative to this executable: <prefix>/bin/gprof-run, <prefix>/lib/gprof-run/libgprof_inject.so.
std::optional<std::string> FindInjectLibrary(const std::string& requested, std::string* error) {
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
    *error = "cannot find the injected library " + path.string() + " (give it with --inject-lib)";
    return std::nullopt;
  }
  // LD_PRELOAD splits on spaces and colons.
  if (path.string().find_first_of(" :") != std::string::npos) {
    *error = "the injected library's path " + path.string() +
             " contains a space or colon, which "
             "LD_PRELOAD cannot hold; install gprof-run elsewhere";
    return std::nullopt;
  }
  return path.string();
}

// The command's environment: ours, with the injected library appended to any LD_PRELOAD the user
// set and named as the CUDA injection library (for CUPTI), and the session's settings.
// `--cuda=off` adds nothing: only the kernel is recorded. An injection library the user already
// set stays, unless CUPTI is asked for: the driver loads one only.
std::vector<std::string> TargetEnvironment(const RunOptions& options,
                                           const std::string& inject_library,
                                           const std::string& session_dir) {
  std::vector<std::string> environment;
  bool inject = options.cuda_mode != "off";
  bool use_cupti = options.cuda_mode == "auto" || options.cuda_mode == "cupti";
  std::string preload = inject_library;
  std::string injection = inject_library;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view variable(*entry);
    if (inject && variable.starts_with("LD_PRELOAD=")) {
      std::string existing(variable.substr(strlen("LD_PRELOAD=")));
      if (!existing.empty()) preload = existing + ":" + inject_library;
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
    if (variable.starts_with("GPROF_SESSION_DIR=") || variable.starts_with("GPROF_CUDA_MODE=") ||
        variable.starts_with("GPROF_STACK_THRESHOLD_NS=") ||
        (!options.cupti_library.empty() && variable.starts_with("GPROF_CUPTI_LIB="))) {
      continue;  // this run's own settings follow
    }
    environment.emplace_back(variable);
  }
  if (!inject) return environment;
  environment.push_back("LD_PRELOAD=" + preload);
  if (use_cupti && !injection.empty()) environment.push_back("CUDA_INJECTION64_PATH=" + injection);
  environment.push_back("GPROF_SESSION_DIR=" + session_dir);
  environment.push_back("GPROF_CUDA_MODE=" + options.cuda_mode);
  environment.push_back("GPROF_STACK_THRESHOLD_NS=" +
                        std::to_string(static_cast<uint64_t>(options.threshold_ms * 1e6)));
  if (!options.cupti_library.empty())
    environment.push_back("GPROF_CUPTI_LIB=" + options.cupti_library);
  return environment;
}

// Under sudo, the command runs as the user who asked, as it would have without gprof-run.
void ApplySudoUser(const RunOptions& options, LaunchSettings* launch) {
  if (options.run_as_root || getuid() != 0) return;
  const char* uid = getenv("SUDO_UID");
  const char* gid = getenv("SUDO_GID");
  if (uid == nullptr || gid == nullptr || atoi(uid) == 0) return;
  launch->run_as_uid = static_cast<uid_t>(atoi(uid));
  launch->run_as_gid = static_cast<gid_t>(atoi(gid));
  if (const char* user = getenv("SUDO_USER")) launch->run_as_user = user;
}

void PrintCollectorOutput(const collector::CollectResult& result, FILE* out) {
  fputs(result.text_report.c_str(), out);
  for (const auto& path : result.written) {
    if (path.ends_with(collector::kTraceFile)) {
      fprintf(out, "\ntrace: %s (open it in https://ui.perfetto.dev)\n",
              collector::PrintableName(path).c_str());
    }
  }
  for (const auto& warning : result.warnings) Say("warning: " + warning);
}

collector::CollectOptions CollectOptionsFor(double threshold_ms) {
  collector::CollectOptions options;
  options.analysis.threshold_ns = static_cast<uint64_t>(threshold_ms * 1e6);
  return options;
}

}  // namespace

int RunCommand(const RunOptions& options) {
  std::string error;
  auto inject_library = FindInjectLibrary(options.inject_library, &error);
  if (!inject_library) {
    Say(error);
    return kExitToolFailure;
  }
  std::error_code ec;
  bool dir_existed = !options.output_dir.empty() && fs::exists(options.output_dir, ec);
  auto session_dir = CreateSessionDirectory(options.output_dir, options.command.front(), &error);
  if (!session_dir) {
    Say(error);
    return kExitToolFailure;
  }

  LaunchSettings launch;
  launch.argv = options.command;
  launch.environment = TargetEnvironment(options, *inject_library, *session_dir);
  ApplySudoUser(options, &launch);
  if (launch.run_as_uid) ChownTree(*session_dir, *launch.run_as_uid, *launch.run_as_gid);

  RunDescription run;
  run.command = options.command;
  run.inject_library = *inject_library;
  run.cuda_mode = options.cuda_mode;

  auto target = TargetProcess::Spawn(launch, &error);
  if (!target) {
    Say("cannot start " + options.command.front() + ": " + error);
    return kExitToolFailure;
  }
  run.root_pid = target->pid();

  std::unique_ptr<bpf::KernelRecorder> recorder;
  if (options.kernel_recording) {
    bool permission_denied = false;
    bpf::KernelRecorderOptions kernel_options;
    kernel_options.ring_buffer_bytes = uint64_t{options.ring_buffer_mb} << 20;
    kernel_options.device_prefix = options.device_prefix;
    recorder = bpf::KernelRecorder::Start(*session_dir, kernel_options, &error, &permission_denied);
    if (recorder && !recorder->Track(target->pid(), &error)) recorder.reset();
    if (!recorder) {
      run.kernel_recording_note = error;
      Say("kernel recording off (" + error +
          "): CUDA calls are recorded but blocked calls cannot "
          "be explained; " +
          (permission_denied ? "run as root or give gprof-run CAP_BPF and "
                               "CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep)"
                             : "see above"));
    }
  } else {
    run.kernel_recording_note = "turned off with --no-kernel";
  }
  run.kernel_recording = recorder != nullptr;

  run.start_monotonic_ns = ClockNs(CLOCK_MONOTONIC);
  run.start_realtime_ns = ClockNs(CLOCK_REALTIME);
  run.start_boottime_ns = ClockNs(CLOCK_BOOTTIME);
  if (!WriteSessionMeta(*session_dir, run, &error)) {
    Say(error);
    target->Abandon();
    return kExitToolFailure;
  }

  target->ForwardSignals();
  if (auto failure = target->Release()) {
    Say(failure->message);
    if (recorder) recorder->Finish();
    DiscardSession(*session_dir, /*created=*/!dir_existed);  // nothing ran: nothing to keep
    return failure->exit_status;
  }

  int wait_status = 0;
  while (!target->Reap(/*block=*/recorder == nullptr, &wait_status)) {
    recorder->Poll(kPollIntervalMs);
  }
  if (recorder) {
    recorder->Finish();
    if (!recorder->last_error().empty())
      Say("warning: kernel recording: " + recorder->last_error());
  }

  run.end_monotonic_ns = ClockNs(CLOCK_MONOTONIC);
  if (WIFEXITED(wait_status)) run.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) run.exit_signal = WTERMSIG(wait_status);
  if (!WriteSessionMeta(*session_dir, run, &error)) Say("warning: " + error);

  auto result = collector::Collect(*session_dir, CollectOptionsFor(options.threshold_ms));
  if (launch.run_as_uid) ChownTree(*session_dir, *launch.run_as_uid, *launch.run_as_gid);
  if (!result.ok()) {
    Say("cannot build the report: " + result.status().message());
  } else if (options.print_report) {
    fputc('\n', stderr);
    PrintCollectorOutput(*result, stderr);
  }
  return ExitStatusOf(wait_status);
}

int ReportCommand(const std::string& directory, double threshold_ms) {
  auto result = collector::Collect(directory, CollectOptionsFor(threshold_ms));
  if (!result.ok()) {
    Say(result.status().message());
    return kExitToolFailure;
  }
  PrintCollectorOutput(*result, stdout);
  return 0;
}

}  // namespace gprof::cli
