// gprof-run: profile a GPU program unchanged, and explain why its threads froze.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exit_codes.h"
#include "run_command.h"

namespace {

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

constexpr uint64_t kMinMaxSize = 64 << 10;
constexpr uint64_t kMinCollectorMemory = 1 << 20;

// A validator of a number of seconds: above 0, or (allow_zero) at least 0.
std::function<std::string(const std::string&)> Seconds(bool allow_zero) {
  return [allow_zero](const std::string& text) -> std::string {
    char* end = nullptr;
    double seconds = strtod(text.c_str(), &end);
    bool number = end != text.c_str() && *end == '\0' && seconds < 1e9;
    if (number && (seconds > 0 || (allow_zero && seconds == 0))) return {};
    return "'" + text + "' is not a number of seconds " + (allow_zero ? "(0 or more)" : "above 0");
  };
}

constexpr char kUsage[] =
    "Usage: gprof-run [OPTIONS] [--] CMD [ARGS...]\n"
    "       gprof-run report DIR [--threshold MS] [--collector-memory SIZE]\n"
    "The command's output, input and exit status are its own; the report goes to stderr and,\n"
    "with the Perfetto trace, into the session directory.";
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gprof-run: records every CUDA call of a program and what the kernel did with its threads, "
      "then explains each blocked call: the lock behind it, the thread that held it, and what "
      "that thread was doing.",
      "gprof-run"};
  app.footer(kUsage);
  app.set_version_flag("--version", GPROF_VERSION);
  app.prefix_command();  // everything from CMD on belongs to the command

  gprof::cli::RunOptions run;
  bool no_kernel = false;
  bool quiet = false;
  app.add_option("-o,--output", run.output_dir,
                 "Session directory (default: a new gprof-<cmd>-<date-time> here); must not hold "
                 "an earlier session");
  app.add_option("--threshold", run.threshold_ms, "Explain CUDA calls at least this long, in ms")
      ->default_val(1.0)
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-kernel", no_kernel, "Record CUDA calls only, no BPF (no explanations)");
  app.add_flag("-q,--quiet", quiet, "Do not print the report at the end (it is still written)");
  app.add_flag("--run-as-root", run.run_as_root,
               "Under sudo, run the command as root instead of as the invoking user");
  app.add_option("--cuda", run.cuda_mode,
                 "How CUDA calls are recorded: auto (CUPTI when it can be used, else "
                 "interposition), cupti (say so loudly when CUPTI cannot be used), preload "
                 "(interposition only: leaves CUPTI to torch.profiler or nsys), off (kernel only)")
      ->check(CLI::IsMember({"auto", "cupti", "preload", "off"}));
  app.add_option("--cupti-lib", run.cupti_library,
                 "libcupti to use when the program has none loaded (default: next to its "
                 "libcudart, then the CUDA toolkit's)")
      ->check(CLI::ExistingFile);
  app.add_option("--ring-buffer-mb", run.ring_buffer_mb,
                 "Kernel recorder's ring buffer, in MiB (default: 2 per CPU, at least 16; at most "
                 "1024); raise it when the report counts events lost in the ring buffer")
      ->check(CLI::Range(1, 1024));
  app.add_option("--device-prefix", run.device_prefix,
                 "System calls on device files whose name starts with this are recorded as "
                 "device waits (default: nvidia, for /dev/nvidiactl, /dev/nvidia0, "
                 "/dev/nvidia-uvm; empty: every character device)")
      ->check([](const std::string& prefix) {
        return prefix.size() <= 15 ? std::string() : "at most 15 characters";
      });
  app.add_option("--inject-lib", run.inject_library, "Path of libgprof_inject.so")
      ->check(CLI::ExistingFile);
  app.add_option("--delay", run.delay_s,
                 "Start recording SEC seconds after the command starts (it runs unrecorded "
                 "until then)")
      ->type_name("SEC")
      ->check(Seconds(/*allow_zero=*/true));
  app.add_option("--duration", run.duration_s,
                 "Stop recording after SEC seconds of recording; the command runs on to its end")
      ->type_name("SEC")
      ->check(Seconds(/*allow_zero=*/false));
  std::string max_size;
  app.add_option("--max-size", max_size,
                 "Cap on the recording's bytes on disk (e.g. 500M, 2G; K, M, G, T are powers of "
                 "1024): recording stops there, the command runs on, and the report says what "
                 "is missing")
      ->type_name("SIZE")
      ->check([](const std::string& text) {
        auto bytes = ParseSize(text);
        if (!bytes) return "'" + text + "' is not a size (a number, then K, M, G or T: 500M, 2G)";
        return *bytes >= kMinMaxSize ? std::string() : "'" + text + "' is under the minimum, 64K";
      });

  // Both commands run the collector.
  const char* collector_memory_help =
      "Memory the collector may hold records in (e.g. 4G); past it they are held in files in the "
      "session directory, paged by the kernel (default: half of the machine's available memory, "
      "or of the memory cgroup's limit when lower)";
  auto check_collector_memory = [](const std::string& text) {
    auto bytes = ParseSize(text);
    if (!bytes) return "'" + text + "' is not a size (a number, then K, M, G or T: 512M, 4G)";
    return *bytes >= kMinCollectorMemory ? std::string()
                                         : "'" + text + "' is under the minimum, 1M";
  };
  std::string collector_memory;
  app.add_option("--collector-memory", collector_memory, collector_memory_help)
      ->type_name("SIZE")
      ->check(check_collector_memory);

  std::string report_dir;
  double report_threshold_ms = 1.0;
  CLI::App* report =
      app.add_subcommand("report", "Explain a saved session again and print the report");
  report->add_option("dir", report_dir, "Session directory")->required();
  report
      ->add_option("--threshold", report_threshold_ms,
                   "Explain CUDA calls at least this long, in ms")
      ->default_val(1.0)
      ->check(CLI::PositiveNumber);
  std::string report_collector_memory;
  report->add_option("--collector-memory", report_collector_memory, collector_memory_help)
      ->type_name("SIZE")
      ->check(check_collector_memory);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');  // misuse is told in one line
    fprintf(stderr, "gprof-run: %s (see gprof-run --help)\n", what.c_str());
    return gprof::cli::kExitToolFailure;
  }

  if (report->parsed()) {
    // prefix_command() lets what `report` does not know through as remaining arguments.
    std::vector<std::string> extra = report->remaining();
    if (extra.empty()) extra = app.remaining();
    if (!extra.empty()) {
      fprintf(stderr, "gprof-run: report: unexpected argument %s (see gprof-run --help)\n",
              extra.front().c_str());
      return gprof::cli::kExitToolFailure;
    }
    uint64_t memory = report_collector_memory.empty() ? 0 : *ParseSize(report_collector_memory);
    return gprof::cli::ReportCommand(report_dir, report_threshold_ms, memory);
  }

  run.command = app.remaining();
  // prefix_command() hands over everything from the first argument it does not know: an option
  // there is a typo for one of ours, not a command (a command named "-x" goes after "--").
  if (!run.command.empty() && run.command.front().starts_with("-") && run.command.front() != "--") {
    fprintf(stderr, "gprof-run: unknown option %s (see gprof-run --help)\n",
            run.command.front().c_str());
    return gprof::cli::kExitToolFailure;
  }
  if (!run.command.empty() && run.command.front() == "--") run.command.erase(run.command.begin());
  if (run.command.empty()) {
    fprintf(stderr,
            "gprof-run: no command given: gprof-run [OPTIONS] [--] CMD [ARGS...], or gprof-run "
            "report DIR (see gprof-run --help)\n");
    return gprof::cli::kExitToolFailure;
  }
  if (!max_size.empty()) run.max_size_bytes = *ParseSize(max_size);
  if (!collector_memory.empty()) run.collector_memory_bytes = *ParseSize(collector_memory);
  run.kernel_recording = !no_kernel;
  run.print_report = !quiet;
  return gprof::cli::RunCommand(run);
}
