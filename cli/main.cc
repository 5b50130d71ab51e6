// gprof-run: profile a GPU program unchanged, and explain why its threads froze.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/capture_control.h"
#include "cli/dump_command.h"
#include "cli/exit_codes.h"
#include "cli/flight_recorder.h"
#include "cli/inject_library.h"
#include "cli/merge_command.h"
#include "cli/own_settings.h"
#include "cli/run_command.h"
#include "collector/model/model.h"
#include "collector/model/value_format.h"

namespace {

using gprof::collector::PrintableName;

// One line of misuse on stderr, escaped as the report escapes names (an argument may hold
// control characters and bytes that are not UTF-8: "\x1b", "\xff"), and gprof-run's status.
int Misuse(std::string line) {
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::string shown = gprof::collector::ShortenedWithLength(PrintableName(line), 4096);
  fprintf(stderr, "gprof-run: %s (see gprof-run --help)\n", shown.c_str());
  return gprof::cli::kExitToolFailure;
}

// A value as a message quotes it: a very long one cut short.
std::string Quoted(const std::string& value) {
  constexpr size_t kShown = 64;
  if (value.size() <= kShown) return "'" + value + "'";
  return "'" + value.substr(0, kShown) + "...'";
}

// "500M", "2G", "1.5g", "4096": bytes, with K, M, G or T (powers of 1024, an optional "i" and
// "B" after them). Nothing on failure.
std::optional<uint64_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double number = strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0 || !(number >= 0)) return std::nullopt;
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("B")) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
  static const std::string kUnits = "KMGT";
  double scale = 1;
  if (unit.size() > 1) return std::nullopt;
  if (unit.size() == 1) {
    size_t power = kUnits.find(unit[0]);
    if (power == std::string::npos) return std::nullopt;
    scale = static_cast<double>(uint64_t{1} << (10 * (power + 1)));
  }
  double bytes = number * scale;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

// --threshold: milliseconds, 0 (every call) or from 1 us to an hour. Nothing when `text` is not
// a plain decimal number (no nan, inf or hexadecimal) in that range.
constexpr double kMinThresholdMs = 0.001;
constexpr double kMaxThresholdMs = 3'600'000;
std::optional<double> ParseThresholdMs(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double ms = strtod(text.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(ms)) return std::nullopt;
  if (ms == 0) return 0.0;
  if (ms < kMinThresholdMs || ms > kMaxThresholdMs) return std::nullopt;
  return ms;
}

std::string CheckThreshold(const std::string& text) {
  if (ParseThresholdMs(text)) return {};
  return Quoted(text) + " is not a number of milliseconds from 0.001 to 3600000 (or 0: every call)";
}

constexpr uint64_t kMinMaxSize = 64 << 10;
constexpr uint64_t kMinCollectorMemory = 1 << 20;

// A validator of a number of seconds: above 0, or (allow_zero) at least 0.
std::function<std::string(const std::string&)> Seconds(bool allow_zero) {
  return [allow_zero](const std::string& text) -> std::string {
    char* end = nullptr;
    double seconds = strtod(text.c_str(), &end);
    bool number = end != text.c_str() && *end == '\0' && seconds < 1e9;
    if (number && (seconds > 0 || (allow_zero && seconds == 0))) return {};
    return Quoted(text) + " is not a number of seconds " + (allow_zero ? "(0 or more)" : "above 0");
  };
}

constexpr char kUsage[] =
    "Usage: gprof-run [OPTIONS] [--] CMD [ARGS...]\n"
    "       gprof-run [OPTIONS] -p PID[,PID...] [--duration SEC]\n"
    "       gprof-run report DIR [--threshold MS] [--collector-memory SIZE]\n"
    "       gprof-run merge -o OUT DIR... [--threshold MS] [--collector-memory SIZE]\n"
    "       gprof-run dump -p PID[,PID...] [--json FILE] [--html FILE]\n"
    "       gprof-run start|stop DIR (a session run with --capture-range)\n"
    "The command's output, input and exit status are its own; the report goes to stderr and,\n"
    "with the Perfetto trace, into the session directory.";

// What the command line says: the options of a run, and of `report DIR`, as given.
struct CommandLine {
  gprof::cli::RunOptions run;
  bool no_kernel = false;
  bool quiet = false;
  std::string threshold = "1";
  std::string python_stacks = "on";
  std::string max_size;
  std::string capture_range;
  std::string capture_range_end;
  std::vector<std::string> triggers;
  std::string switch_dir;  // `start DIR`, `stop DIR`
  std::string collector_memory;
  std::string report_dir;
  std::string report_threshold = "1";
  std::string report_collector_memory;
  gprof::cli::MergeCommandOptions merge;
  gprof::cli::DumpCommandOptions dump;
  std::string merge_threshold = "1";
  std::string merge_collector_memory;
};

// (--help lists the options in the order they are added: these functions add them in turn.)

// Where the session goes, which calls are explained, and whose the command is.
void AddSessionOptions(CLI::App* app, CommandLine* line) {
  // Every option says its value's kind in a word (DIR, MS, MODE...), and no validator adds
  // CLI11's own type strings ("FLOAT:POSITIVE"): their messages are gprof-run's, with the value.
  app->add_option("-o,--output", line->run.output_dir,
                  "Session directory (default: a new gprof-<cmd>-<date-time> here); must not hold "
                  "an earlier session")
      ->type_name("DIR")
      ->check([](const std::string& dir) {
        return dir.empty() ? "must not be empty (leave it out for a new directory here)"
                           : std::string();
      });
  const char* threshold_help =
      "Explain CUDA calls that took at least MS milliseconds, and keep their native stacks "
      "(default 1; from 0.001 to 3600000; 0: every call, which slows the program by a stack "
      "for each)";
  app->add_option("--threshold", line->threshold, threshold_help)
      ->type_name("MS")
      ->check(CheckThreshold);
  app->add_flag("--no-kernel", line->no_kernel, "Record CUDA calls only, no BPF (no explanations)");
  app->add_flag("-q,--quiet", line->quiet,
                "Do not print the report at the end (it is still written)");
  app->add_flag("--run-as-root", line->run.run_as_root,
                "Under sudo, run the command as root instead of as the invoking user");
}

// How CUDA calls are recorded.
void AddCudaOptions(CLI::App* app, CommandLine* line) {
  app->add_option("--cuda", line->run.cuda_mode,
                  "How CUDA calls are recorded: auto (CUPTI when it can be used, else "
                  "interposition), cupti (say so loudly when CUPTI cannot be used), preload "
                  "(interposition only: leaves CUPTI to torch.profiler or nsys), off (kernel only)")
      ->type_name("MODE")
      ->check([](const std::string& mode) {
        for (const char* known : {"auto", "cupti", "preload", "off"}) {
          if (mode == known) return std::string();
        }
        return Quoted(mode) + " is not one of auto, cupti, preload, off";
      });
  app->add_option("--cupti-lib", line->run.cupti_library,
                  "libcupti to use when the program has none loaded (default: next to its "
                  "libcudart, then the CUDA toolkit's)")
      ->type_name("FILE")
      ->check([](const std::string& path) {
        gprof::Status checked = gprof::cli::CheckCuptiLibrary(path);
        return checked.ok() ? std::string() : Quoted(path) + " " + checked.message();
      });
}

// What the kernel recorder records.
void AddKernelOptions(CLI::App* app, CommandLine* line) {
  app->add_option("--ring-buffer-mb", line->run.ring_buffer_mb,
                  "Kernel recorder's ring buffer, in MiB (default: 2 per CPU, at least 16; from 1 "
                  "to 1024); raise it when the report counts events lost in the ring buffer")
      ->type_name("MIB")
      ->check([](const std::string& text) {
        bool digits = !text.empty() && text.size() <= 4 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
        int mib = digits ? std::stoi(text) : 0;
        return mib >= 1 && mib <= 1024 ? std::string()
                                       : Quoted(text) + " is not a whole number from 1 to 1024";
      });
  app->add_option("--device-prefix", line->run.device_prefix,
                  "System calls on device files whose name starts with this are recorded as "
                  "device waits (default: nvidia, for /dev/nvidiactl, /dev/nvidia0, "
                  "/dev/nvidia-uvm; empty: every character device)")
      ->type_name("PREFIX")
      ->check([](const std::string& prefix) {
        return prefix.size() <= 15 ? std::string()
                                   : Quoted(prefix) + " is longer than 15 characters";
      });
  app->add_option("--python-stacks", line->python_stacks,
                  "Python stacks (CPython 3.9 to 3.13) at every explained wait, its release, slow "
                  "CUDA calls and on-CPU samples: on (default) or off (native stacks only, to "
                  "compare the cost)")
      ->type_name("on|off")
      ->check([](const std::string& value) {
        return value == "on" || value == "off" ? std::string()
                                               : Quoted(value) + " is not one of on, off";
      });
  // One tick serves both kinds of stacks: native and Python samples of the same moment.
  auto sample_rate = [](const std::string& text) {
    bool digits = !text.empty() && text.size() <= 4 &&
                  text.find_first_not_of("0123456789") == std::string::npos;
    return digits && std::stoi(text) <= 1000
               ? std::string()
               : Quoted(text) + " is not a whole number from 0 to 1000";
  };
  CLI::Option* sample_hz =
      app->add_option("--sample-hz", line->run.sample_hz,
                      "Rate per CPU at which threads on CPU are sampled (native stacks, and Python "
                      "stacks of Python threads), to name what a thread that held others up was "
                      "running (default 99; 0: no sampling; at most 1000)")
          ->type_name("HZ")
          ->check(sample_rate);
  app->add_option("--python-sample-hz", line->run.sample_hz,
                  "Deprecated: the same as --sample-hz, which now sets the one rate of native and "
                  "Python samples")
      ->type_name("HZ")
      ->check(sample_rate)
      ->excludes(sample_hz);
  app->add_option("--count-under", line->run.count_under_us,
                  "Off-CPU intervals and futex calls shorter than US microseconds are counted per "
                  "thread and reason, not recorded one by one (default 20, as short as no report "
                  "explains; 0: record every one; at most 1000000)")
      ->type_name("US")
      ->check([](const std::string& text) {
        bool digits = !text.empty() && text.size() <= 7 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
        return digits && std::stoul(text) <= 1'000'000
                   ? std::string()
                   : Quoted(text) + " is not a whole number of microseconds from 0 to 1000000";
      });
}

// The injected library, and when and how much the run records.
void AddLaunchOptions(CLI::App* app, CommandLine* line) {
  app->add_option("--inject-lib", line->run.inject_library, "Path of libgprof_inject.so")
      ->type_name("FILE")
      ->check([](const std::string& path) {
        gprof::Status checked = gprof::cli::CheckInjectLibrary(path);
        return checked.ok() ? std::string() : Quoted(path) + " " + checked.message();
      });
  app->add_option("--delay", line->run.delay_s,
                  "Start recording SEC seconds after the command starts (it runs unrecorded "
                  "until then)")
      ->type_name("SEC")
      ->check(Seconds(/*allow_zero=*/true));
  app->add_option("--duration", line->run.duration_s,
                  "Stop recording after SEC seconds of recording; the command runs on to its end")
      ->type_name("SEC")
      ->check(Seconds(/*allow_zero=*/false));
  app->add_option("--capture-range", line->capture_range,
                  "Record only inside windows: cudaProfilerApi (between the program's "
                  "cudaProfilerStart and cudaProfilerStop, as often as it calls them) or manual "
                  "(between 'gprof-run start DIR' and 'gprof-run stop DIR') or nvtx:NAME (while "
                  "the program's NVTX range NAME is open: its first, or each with "
                  "--capture-range-end=repeat)")
      ->type_name("RANGE")
      ->check([](const std::string& text) {
        auto range = gprof::cli::ParseCaptureRange(text);
        return range.ok() ? std::string() : range.status().message();
      });
  app->add_option("--capture-range-end", line->capture_range_end,
                  "With --capture-range=nvtx:NAME: stop (only the first such range, the default) "
                  "or repeat (every one)")
      ->type_name("stop|repeat")
      ->check(CLI::IsMember({"stop", "repeat"}));
  app->add_option("-p,--pid", line->run.attach_pids,
                  "Record these running processes and their descendants, not a command: until "
                  "--duration SEC, Ctrl-C, or their end; they run on untouched")
      ->type_name("PID[,PID...]");
  app->add_option("--flight-recorder", line->run.flight_recorder_s,
                  "Keep only the last SEC seconds of the recording (every recorder, in bounded "
                  "disk), written and explained at the command's end, at 'gprof-run stop DIR', or "
                  "a second after what a --trigger fired on ran again; the command runs on untouched")
      ->type_name("SEC")
      ->check(Seconds(/*allow_zero=*/false));
  app->add_option("--trigger", line->triggers,
                  "With --flight-recorder: end the recording at freeze:MS (a CUDA call running MS "
                  "milliseconds, or threads doing CUDA work blocked together that long) or "
                  "hang:SEC (no CUDA call finished for SEC seconds); may be given twice")
      ->type_name("freeze:MS|hang:SEC")
      ->check([](const std::string& text) {
        gprof::cli::RunOptions ignored;
        gprof::Status parsed = gprof::cli::ParseFlightTrigger(text, &ignored);
        return parsed.ok() ? std::string() : parsed.message();
      });
  app->add_option("--max-size", line->max_size,
                  "Cap on the recording's bytes on disk (e.g. 500M, 2G; K, M, G, T are powers of "
                  "1024): recording stops there, the command runs on, and the report says what "
                  "is missing")
      ->type_name("SIZE")
      ->check([](const std::string& text) {
        auto bytes = ParseSize(text);
        if (!bytes) return Quoted(text) + " is not a size (a number, then K, M, G or T: 500M, 2G)";
        return *bytes >= kMinMaxSize ? std::string() : Quoted(text) + " is under the minimum, 64K";
      });
}

// The collector's memory, for both commands, and the `report DIR` subcommand, which it returns.
CLI::App* AddReportOptions(CLI::App* app, CommandLine* line) {
  const char* collector_memory_help =
      "Memory the collector may hold records in (e.g. 4G); past it they are held in files in the "
      "session directory, paged by the kernel (default: half of the machine's available memory, "
      "or of the memory cgroup's limit when lower)";
  auto check_collector_memory = [](const std::string& text) {
    auto bytes = ParseSize(text);
    if (!bytes) return Quoted(text) + " is not a size (a number, then K, M, G or T: 512M, 4G)";
    return *bytes >= kMinCollectorMemory ? std::string()
                                         : Quoted(text) + " is under the minimum, 1M";
  };
  app->add_option("--collector-memory", line->collector_memory, collector_memory_help)
      ->type_name("SIZE")
      ->check(check_collector_memory);

  CLI::App* report =
      app->add_subcommand("report", "Explain a saved session again and print the report");
  report->add_option("dir", line->report_dir, "Session directory")->type_name("DIR")->required();
  report
      ->add_option("--threshold", line->report_threshold,
                   "Explain CUDA calls that took at least MS milliseconds (default 1; from 0.001 "
                   "to 3600000; 0: every call)")
      ->type_name("MS")
      ->check(CheckThreshold);
  report->add_option("--collector-memory", line->report_collector_memory, collector_memory_help)
      ->type_name("SIZE")
      ->check(check_collector_memory);

  return report;
}

// The `merge -o OUT DIR...` subcommand, which it returns.
CLI::App* AddMergeOptions(CLI::App* app, CommandLine* line) {
  CLI::App* merge = app->add_subcommand(
      "merge", "Explain several sessions of one job together (one per rank or host)");
  merge->add_option("-o,--output", line->merge.output_dir,
                    "A new directory for the merged report.txt, report.json, report.html and trace")
      ->type_name("OUT")
      ->required();
  merge->add_option("dirs", line->merge.directories, "Session directories")
      ->type_name("DIR")
      ->required();
  merge
      ->add_option("--threshold", line->merge_threshold,
                   "Explain waits and CUDA calls of at least MS milliseconds (default 1)")
      ->type_name("MS")
      ->check(CheckThreshold);
  merge->add_option("--collector-memory", line->merge_collector_memory,
                    "Memory the merge may hold records in (e.g. 4G); past it they are held in "
                    "files in OUT")
      ->type_name("SIZE")
      ->check([](const std::string& text) {
        return ParseSize(text) ? std::string() : Quoted(text) + " is not a size (512M, 4G)";
      });
  return merge;
}

// The `dump -p PID[,PID...]` subcommand, which it returns.
CLI::App* AddDumpOptions(CLI::App* app, CommandLine* line) {
  CLI::App* dump = app->add_subcommand(
      "dump", "What each thread of running processes waits on now, who holds it, and deadlocks "
              "(a thread is stopped only briefly, where /proc cannot tell)");
  dump->add_option("-p,--pid", line->dump.pids, "Processes to dump with their descendants")
      ->type_name("PID[,PID...]")
      ->required();
  dump->add_option("--json", line->dump.json_path, "Also write the dump as JSON to FILE")
      ->type_name("FILE");
  dump->add_option("--html", line->dump.html_path, "Also write the dump as an HTML page to FILE")
      ->type_name("FILE");
  return dump;
}

// The `start DIR` and `stop DIR` subcommands, which it returns.
std::pair<CLI::App*, CLI::App*> AddSwitchOptions(CLI::App* app, CommandLine* line) {
  CLI::App* start = app->add_subcommand(
      "start", "Open a recording window in a running session started with --capture-range");
  start->add_option("dir", line->switch_dir, "Session directory")->type_name("DIR")->required();
  CLI::App* stop = app->add_subcommand("stop", "Close the recording window 'start' opened");
  stop->add_option("dir", line->switch_dir, "Session directory")->type_name("DIR")->required();
  return {start, stop};
}

// `gprof-run start|stop DIR`: anything after it is misuse.
int Switch(const CLI::App& app, const CLI::App& which, bool separator_given, bool start,
           const CommandLine& line) {
  std::vector<std::string> extra = which.remaining();
  if (extra.empty()) extra = app.remaining();
  if (extra.empty() && separator_given) extra = {"--"};
  if (!extra.empty())
    return Misuse(std::string(start ? "start" : "stop") + ": unexpected argument " + extra.front());
  return gprof::cli::CaptureSwitchCommand(line.switch_dir, start);
}

// `gprof-run dump`: anything after its options is misuse.
int Dump(const CLI::App& app, const CLI::App& dump, bool separator_given, CommandLine& line) {
  std::vector<std::string> extra = dump.remaining();
  if (extra.empty()) extra = app.remaining();
  if (extra.empty() && separator_given) extra = {"--"};
  if (!extra.empty()) return Misuse("dump: unexpected argument " + extra.front());
  return gprof::cli::DumpCommand(line.dump);
}

// `gprof-run merge`: anything after its directories (a "--" included) is misuse.
int Merge(const CLI::App& app, const CLI::App& merge, bool separator_given, CommandLine& line) {
  std::vector<std::string> extra = merge.remaining();
  if (extra.empty()) extra = app.remaining();
  if (extra.empty() && separator_given) extra = {"--"};
  if (!extra.empty()) return Misuse("merge: unexpected argument " + extra.front());
  line.merge.threshold_ms = *ParseThresholdMs(line.merge_threshold);
  if (!line.merge_collector_memory.empty())
    line.merge.collector_memory_bytes = *ParseSize(line.merge_collector_memory);
  return gprof::cli::MergeCommand(line.merge);
}

// `gprof-run report DIR`: anything after it (a "--" included) is misuse.
int Report(const CLI::App& app, const CLI::App& report, bool separator_given,
           const CommandLine& line) {
  // prefix_command() lets what `report` does not know through as remaining arguments.
  std::vector<std::string> extra = report.remaining();
  if (extra.empty()) extra = app.remaining();
  if (extra.empty() && separator_given) extra = {"--"};
  if (!extra.empty()) return Misuse("report: unexpected argument " + extra.front());
  uint64_t memory =
      line.report_collector_memory.empty() ? 0 : *ParseSize(line.report_collector_memory);
  return gprof::cli::ReportCommand(line.report_dir, *ParseThresholdMs(line.report_threshold),
                                   memory);
}

// A run of the command: `command` is what CLI11 left (from the command's name on, before the
// first "--", if one was given), `after_separator` what followed that "--".
int Run(std::vector<std::string> command, bool separator_given,
        const std::vector<std::string>& after_separator, CommandLine* line) {
  gprof::cli::RunOptions& run = line->run;
  run.command = std::move(command);
  // prefix_command() hands over everything from the first argument it does not know: an option
  // there is a typo for one of ours, not a command (a command named "-x" goes after "--").
  if (!run.command.empty() && run.command.front().starts_with("-"))
    return Misuse("unknown option " + run.command.front());
  // A "--" after the command's name is the command's own argument.
  if (!run.command.empty() && separator_given) run.command.push_back("--");
  run.command.insert(run.command.end(), after_separator.begin(), after_separator.end());
  if (!run.attach_pids.empty()) {
    if (!run.command.empty() || separator_given)
      return Misuse("-p records running processes: no command goes with it");
    if (run.delay_s > 0) return Misuse("-p starts recording at once: no --delay goes with it");
    if (line->no_kernel)
      return Misuse("-p records through the kernel: no --no-kernel goes with it");
  } else if (run.command.empty()) {
    return Misuse(
        "no command given: gprof-run [OPTIONS] [--] CMD [ARGS...], or gprof-run report DIR");
  }
  run.threshold_ms = *ParseThresholdMs(line->threshold);
  if (!line->max_size.empty()) run.max_size_bytes = *ParseSize(line->max_size);
  if (!line->capture_range.empty()) {
    if (run.delay_s > 0 || run.duration_s > 0)
      return Misuse("--capture-range cannot be combined with --delay or --duration");
    run.capture_range = static_cast<uint32_t>(*gprof::cli::ParseCaptureRange(line->capture_range));
    if (line->capture_range.starts_with("nvtx:")) {
      run.capture_nvtx_name = line->capture_range.substr(5);
      run.capture_repeat = line->capture_range_end == "repeat";
    }
  }
  if (!line->capture_range_end.empty() && run.capture_nvtx_name.empty())
    return Misuse("--capture-range-end needs --capture-range=nvtx:NAME");
  if (!line->triggers.empty() && run.flight_recorder_s <= 0)
    return Misuse("--trigger needs --flight-recorder SEC");
  for (const std::string& trigger : line->triggers) {
    if (gprof::Status parsed = gprof::cli::ParseFlightTrigger(trigger, &run); !parsed.ok())
      return Misuse(parsed.message());
  }
  if (run.flight_recorder_s > 0) {
    if (run.capture_range != 0 || run.delay_s > 0 || run.duration_s > 0)
      return Misuse(
          "--flight-recorder cannot be combined with --capture-range, --delay or --duration");
    run.capture_range = static_cast<uint32_t>(gprof::CaptureRange::kFlight);
  }
  if (!line->collector_memory.empty())
    run.collector_memory_bytes = *ParseSize(line->collector_memory);
  run.kernel_recording = !line->no_kernel;
  run.python_stacks = line->python_stacks == "on";
  run.print_report = !line->quiet;
  if (!run.attach_pids.empty()) return gprof::cli::AttachCommand(run);
  return gprof::cli::RunCommand(run);
}

int GprofRunMain(int argc, char** argv) {
  CLI::App app{
      "gprof-run: records every CUDA call of a program and what the kernel did with its threads, "
      "then explains each blocked call: the lock behind it, the thread that held it, and what "
      "that thread was doing.",
      "gprof-run"};
  app.footer(kUsage);
  app.set_version_flag("--version", GPROF_VERSION);
  app.prefix_command();  // everything from CMD on belongs to the command

  CommandLine line;
  AddSessionOptions(&app, &line);
  AddCudaOptions(&app, &line);
  AddKernelOptions(&app, &line);
  AddLaunchOptions(&app, &line);
  CLI::App* report = AddReportOptions(&app, &line);
  CLI::App* merge = AddMergeOptions(&app, &line);
  CLI::App* dump = AddDumpOptions(&app, &line);
  auto [start, stop] = AddSwitchOptions(&app, &line);

  // Everything after the first "--" is the command, whatever its name: `gprof-run -- report x`
  // runs a program named report. CLI11 sees only what comes before.
  int options_end = 1;
  while (options_end < argc && strcmp(argv[options_end], "--") != 0) ++options_end;
  std::vector<std::string> after_separator(argv + std::min(options_end + 1, argc), argv + argc);
  try {
    app.parse(options_end, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Misuse(e.what());
  }

  if (report->parsed()) return Report(app, *report, options_end < argc, line);
  if (merge->parsed()) return Merge(app, *merge, options_end < argc, line);
  if (dump->parsed()) return Dump(app, *dump, options_end < argc, line);
  if (start->parsed()) return Switch(app, *start, options_end < argc, true, line);
  if (stop->parsed()) return Switch(app, *stop, options_end < argc, false, line);
  return Run(app.remaining(), options_end < argc, after_separator, &line);
}

}  // namespace

int main(int argc, char** argv) {
  gprof::cli::TakeOwnLimits();  // the command's limits are not gprof-run's (own_settings.h)
  return gprof::cli::RunOnOwnStack(GprofRunMain, argc, argv);
}
