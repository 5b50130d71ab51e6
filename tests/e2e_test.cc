// gprof-run for real: the command's behaviour is its own (status, signals, streams, environment),
// misuse gets one clear line and gprof-run's own statuses, and with BPF the report explains the
// fake runtime's driver-lock freeze as well as the program itself measured it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "collector/session/session_reader.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"
#include "tests/clean_utf8.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ProcessResult Gprof(std::vector<std::string> args, ProcessSpec spec = {}) {
  spec.argv = {GprofRunPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  if (spec.timeout_s == 120) spec.timeout_s = 90;
  return RunProcess(spec);
}

json ReadJson(const std::string& path) {
  json parsed = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << path;
  return parsed;
}

// --- the command's behaviour is its own ---

TEST(EndToEnd, ExitStatusIsTheCommands) {
  TempDir dir;
  EXPECT_EQ(Gprof({"-q", "-o", dir.Sub("a"), "--", AppPath("exit_app"), "exit", "3"}).exit_code(),
            3);
  EXPECT_EQ(Gprof({"-q", "-o", dir.Sub("b"), "--", AppPath("exit_app"), "exit", "0"}).exit_code(),
            0);
  ProcessResult killed =
      Gprof({"-q", "-o", dir.Sub("c"), "--", AppPath("exit_app"), "signal", "9"});
  EXPECT_TRUE(WIFEXITED(killed.wait_status));  // gprof-run itself exits, with 128 + N
  EXPECT_EQ(killed.exit_code(), 128 + 9);
  EXPECT_EQ(Gprof({"-q", "-o", dir.Sub("d"), AppPath("exit_app"), "signal", "11"}).exit_code(),
            128 + 11);
  ProcessResult session =
      Gprof({"-q", "-o", dir.Sub("e"), "--", AppPath("exit_app"), "exit", "42"});
  json meta = ReadJson(dir.Sub("e/session.json"));
  EXPECT_EQ(meta["exit"]["code"], 42);
}

TEST(EndToEnd, OutputAndInputAreUntouched) {
  TempDir dir;
  ProcessResult plain = RunProcess(Command({AppPath("exit_app"), "print"}));
  ProcessResult run = Gprof({"-q", "-o", dir.Sub("s"), "--", AppPath("exit_app"), "print"});
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);  // -q: not a byte of ours

  std::string input;
  for (int i = 0; i < 200000; ++i) input.push_back(static_cast<char>(i * 7 % 256));
  ProcessSpec spec;
  spec.input = input;
  ProcessResult echo = Gprof({"-q", "-o", dir.Sub("t"), "--", AppPath("exit_app"), "echo"}, spec);
  EXPECT_EQ(echo.exit_code(), 0);
  EXPECT_EQ(echo.out, input);

  ProcessResult loud = Gprof({"-o", dir.Sub("u"), "--", AppPath("exit_app"), "print"});
  EXPECT_EQ(loud.out, plain.out);
  ASSERT_EQ(loud.err.substr(0, plain.err.size()), plain.err);  // the report comes after
  EXPECT_NE(loud.err.find("gprof-run report"), std::string::npos);
}

TEST(EndToEnd, PreloadIsAppendedNotReplaced) {
  TempDir dir;
  std::string existing = BuildDir() + "/tests/fake_cuda/libcudart.so.13";
  ProcessSpec spec;
  spec.set_env = {"LD_PRELOAD=" + existing};
  ProcessResult run =
      Gprof({"-q", "-o", dir.Sub("s"), "--", AppPath("exit_app"), "env", "LD_PRELOAD"}, spec);
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  std::string preload = run.out.substr(0, run.out.find('\n'));
  // Ours through ld.so's $PLATFORM directory, which holds it for this machine (issue 34).
  fs::path ours = fs::canonical(InjectLibraryPath());
  EXPECT_EQ(preload, existing + ":" +
                         (ours.parent_path() / "platform/$PLATFORM" / ours.filename()).string());
  ProcessResult injection =
      Gprof({"-q", "-o", dir.Sub("t"), "--", AppPath("exit_app"), "env", "CUDA_INJECTION64_PATH"});
  EXPECT_EQ(injection.out, fs::canonical(InjectLibraryPath()).string() + "\n");
}

TEST(EndToEnd, SignalsAreForwarded) {
  TempDir dir;
  for (int signal : {SIGTERM, SIGINT}) {
    ProcessSpec spec;
    spec.signal_after_ms = 700;
    spec.signal = signal;
    spec.timeout_s = 30;
    ProcessResult run = Gprof({"-q", "-o", dir.Sub("s" + std::to_string(signal)), "--",
                               AppPath("exit_app"), "sleep", "20000"},
                              spec);
    EXPECT_EQ(run.exit_code(), 128 + signal);
    EXPECT_LT(run.seconds, 10) << "the command did not get the signal";
  }
}

// --- gprof-run's own failures ---

TEST(EndToEnd, LaunchFailuresUseTheShellsStatuses) {
  TempDir dir;
  ProcessResult missing = Gprof({"-o", dir.Sub("a"), "--", "/no/such/program"});
  EXPECT_EQ(missing.exit_code(), 127);
  EXPECT_EQ(missing.err, "gprof-run: /no/such/program: command not found\n");
  EXPECT_FALSE(fs::exists(dir.Sub("a")));
  fs::create_directory(dir.Sub("given"));  // an empty directory of the user's stays, empty
  EXPECT_EQ(Gprof({"-o", dir.Sub("given"), "--", "/no/such/program"}).exit_code(), 127);
  EXPECT_TRUE(fs::is_directory(dir.Sub("given")));
  EXPECT_TRUE(fs::is_empty(dir.Sub("given")));
  std::ofstream(dir.Sub("data.txt")) << "not a program\n";
  chmod(dir.Sub("data.txt").c_str(), 0644);
  ProcessResult not_executable = Gprof({"-o", dir.Sub("b"), "--", dir.Sub("data.txt")});
  EXPECT_EQ(not_executable.exit_code(), 126);
  EXPECT_NE(not_executable.err.find("cannot execute"), std::string::npos);
  EXPECT_EQ(std::count(not_executable.err.begin(), not_executable.err.end(), '\n'), 1);
}

TEST(EndToEnd, MisuseIsOneClearLineAnd125) {
  TempDir dir;
  ProcessResult none = Gprof({});
  EXPECT_EQ(none.exit_code(), 125);
  EXPECT_NE(none.err.find("no command given"), std::string::npos);
  ProcessResult unknown = Gprof({"--frobnicate", "--", "true"});
  EXPECT_EQ(unknown.exit_code(), 125);
  EXPECT_NE(unknown.err.find("frobnicate"), std::string::npos) << unknown.err;
  ProcessResult no_session = Gprof({"report", dir.Sub("nothing")});
  EXPECT_EQ(no_session.exit_code(), 125);
  EXPECT_NE(no_session.err.find("no such session directory"), std::string::npos) << no_session.err;
  EXPECT_EQ(Gprof({"--help"}).exit_code(), 0);
}

// Each misuse, the documented way: exactly one line on stderr naming what is wrong, status 125,
// nothing on stdout.
TEST(EndToEnd, EveryMisuseIsOneLineAnd125) {
  TempDir dir;
  fs::create_directory(dir.Sub("not-a-session"));
  std::ofstream(dir.Sub("not-a-session/notes.txt")) << "hello";
  fs::create_directory(dir.Sub("newer"));
  std::ofstream(dir.Sub("newer/session.json")) << R"({"version": 99, "command": ["x"]})";
  const std::vector<std::pair<std::vector<std::string>, std::string>> misuses = {
      {{}, "no command given"},
      {{"--frobnicate", "--", "true"}, "frobnicate"},
      {{"--threshold", "-3", "--", "true"}, "threshold"},
      {{"--cuda=sometimes", "--", "true"}, "sometimes"},
      {{"report"}, "dir"},
      {{"report", dir.Sub("nothing")}, dir.Sub("nothing") + ": no such session directory"},
      {{"report", dir.Sub("not-a-session")}, "not a gprof-run session"},
      {{"report", dir.Sub("newer")}, "newer/session.json: session written by a newer gprof-run"},
      {{"report", dir.Sub("newer"), "--frobnicate"}, "frobnicate"},
  };
  for (const auto& [args, what] : misuses) {
    std::string command = "gprof-run";
    for (const std::string& arg : args) command += " " + arg;
    ProcessResult result = Gprof(args);
    EXPECT_EQ(result.exit_code(), 125) << command;
    EXPECT_NE(result.err.find(what), std::string::npos) << command << ": " << result.err;
    EXPECT_TRUE(result.err.starts_with("gprof-run: ")) << command << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << command << ": " << result.err;
    EXPECT_EQ(result.out, "") << command;
  }
}

TEST(EndToEnd, NeverOverwritesASession) {
  TempDir dir;
  fs::create_directory(dir.Sub("taken"));
  std::ofstream(dir.Sub("taken/keep")) << "precious";
  ProcessResult run = Gprof({"-o", dir.Sub("taken"), "--", AppPath("exit_app")});
  EXPECT_EQ(run.exit_code(), 125);
  EXPECT_NE(run.err.find("not empty"), std::string::npos);
  EXPECT_EQ(ReadFile(dir.Sub("taken/keep")), "precious");

  // Without -o, each run gets a new directory beside the others.
  ProcessSpec here;
  here.cwd = dir.path();
  ASSERT_EQ(Gprof({"-q", AppPath("exit_app")}, here).exit_code(), 0);
  ASSERT_EQ(Gprof({"-q", AppPath("exit_app")}, here).exit_code(), 0);
  int sessions = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    sessions += entry.path().filename().string().starts_with("gprof-exit_app-");
  }
  EXPECT_EQ(sessions, 2);
}

TEST(EndToEnd, WithoutBpfPrivilegesCudaCallsAreStillRecorded) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run gprof-run as an unprivileged user";
  TempDir dir;
  ProcessSpec spec;
  spec.run_as_uid = 65534;  // nobody
  ProcessResult run = Gprof({"-o", dir.Sub("s"), "--", AppPath("api_tour_app")}, spec);
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  std::istringstream lines(run.err);
  std::string first;
  std::getline(lines, first);
  EXPECT_NE(first.find("kernel recording off"), std::string::npos) << run.err;
  EXPECT_NE(first.find("CAP_BPF"), std::string::npos) << first;
  // The recorder's refusal came as permission denied: gprof-run says what would grant it.
  EXPECT_NE(first.find("setcap cap_bpf,cap_perfmon+ep"), std::string::npos) << first;
  json report = ReadJson(dir.Sub("s/report.json"));
  EXPECT_GE(report["session"]["counts"]["cuda_calls"].get<int>(), 19);
  EXPECT_FALSE(report["session"]["kernel_recording"].get<bool>());
}

// --- the freeze, explained ---

struct AppCall {
  uint32_t tid;
  std::string thread, api;
  uint64_t enter_ns, exit_ns;
};

std::vector<AppCall> ReadAppCalls(const std::string& path) {
  std::vector<AppCall> calls;
  std::istringstream lines(ReadFile(path));
  std::string line;
  std::regex pattern(R"(call tid=(\d+) thread=(\S+) api=(\w+) enter_ns=(\d+) exit_ns=(\d+))");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, m, pattern)) {
      calls.push_back({static_cast<uint32_t>(std::stoul(m[1])), m[2], m[3], std::stoull(m[4]),
                       std::stoull(m[5])});
    }
  }
  return calls;
}

// Runs freeze_app under gprof-run and checks the report against what the app measured itself:
// every blocked launcher named, one lock, the holder and its call, durations within 10%.
void CheckFreezeExplained(const std::string& holder_mode, const std::string& holder_api) {
  TempDir dir;
  std::string calls_file = dir.Sub("calls.txt");
  ProcessResult run =
      Gprof({"-o", dir.Sub("s"), "--", AppPath("freeze_app"), "--launchers", "3", "--rounds", "3",
             "--long-kernel-ms", "40", "--holder", holder_mode, "--calls-out", calls_file});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json report = ReadJson(dir.Sub("s/report.json"));
  ASSERT_TRUE(report["session"]["kernel_recording"].get<bool>()) << run.err;
  // The stack threshold, stated where the report's reader sees it.
  EXPECT_EQ(report["session"]["kernel_stack_min_ns"].get<uint64_t>(), 20000u);
  EXPECT_NE(ReadFile(dir.Sub("s/report.txt"))
                .find("  stacks    only for off-CPU intervals of 20.0 us or longer, a waker's only "
                      "after a wait that long\n"),
            std::string::npos);

  std::vector<AppCall> measured = ReadAppCalls(calls_file);
  std::map<uint32_t, std::string> launchers;
  uint32_t holder_tid = 0;
  for (const auto& call : measured) {
    if (call.thread.starts_with("launcher")) launchers[call.tid] = call.thread;
    if (call.thread == "holder") holder_tid = call.tid;
  }
  ASSERT_EQ(launchers.size(), 3u) << "the app itself saw fewer blocked launchers";
  ASSERT_NE(holder_tid, 0u);

  // The calls of the rounds, as the app measured them: the holder's holding calls, and the
  // launches that blocked for most of one. (Other calls the app timed at a millisecond or two are
  // scheduling noise on a loaded 2-core machine, not the freeze.)
  std::vector<AppCall> rounds, round_calls;
  for (const auto& call : measured) {
    if (call.tid == holder_tid && call.api == holder_api) rounds.push_back(call);
  }
  ASSERT_EQ(rounds.size(), 3u);
  for (const auto& call : measured) {
    for (const auto& round : rounds) {
      bool holds = call.tid == holder_tid && call.api == holder_api;
      bool blocked = launchers.contains(call.tid) && call.enter_ns < round.exit_ns &&
                     call.exit_ns > round.enter_ns &&
                     call.exit_ns - call.enter_ns > (round.exit_ns - round.enter_ns) / 2;
      if (holds || blocked) {
        round_calls.push_back(call);
        break;
      }
    }
  }
  // Each is in the report, with the duration the app measured, within 10%.
  const json& slow = report["slow_calls"];
  for (const auto& call : round_calls) {
    const json* found = nullptr;
    for (const auto& entry : slow) {
      if (entry["tid"] == call.tid && entry["enter_ns"].get<uint64_t>() >= call.enter_ns &&
          entry["exit_ns"].get<uint64_t>() <= call.exit_ns) {
        found = &entry;
      }
    }
    ASSERT_NE(found, nullptr) << call.thread << " " << call.api << " at " << call.enter_ns
                              << " is not in the report";
    EXPECT_EQ((*found)["api"], call.api);
    double app_ns = static_cast<double>(call.exit_ns - call.enter_ns);
    double reported_ns = (*found)["duration_ns"].get<double>();
    EXPECT_NEAR(reported_ns, app_ns, app_ns * 0.10) << call.thread << " " << call.api;
  }

  // Each round (one slow holder call, as the app measured it) is one freeze: the launchers blocked
  // during it, together, on one lock, released by the holder inside that call. (Other freezes,
  // such as threads starting up together, may exist; they are not the rounds.)
  const json& freezes = report["freezes"];
  std::set<std::string> locks;
  std::set<uint32_t> blocked_seen;
  for (const auto& round : rounds) {
    const json* freeze = nullptr;
    for (const auto& candidate : freezes) {
      if (candidate["start_ns"].get<uint64_t>() < round.exit_ns &&
          candidate["end_ns"].get<uint64_t>() > round.enter_ns &&
          (freeze == nullptr ||
           candidate["duration_ns"].get<uint64_t>() > (*freeze)["duration_ns"].get<uint64_t>())) {
        freeze = &candidate;
      }
    }
    ASSERT_NE(freeze, nullptr) << "no freeze during the round at " << round.enter_ns;
    const json& holder = (*freeze)["holder"];
    ASSERT_FALSE(holder.is_null()) << freeze->dump(1);
    EXPECT_EQ(holder["tid"], holder_tid) << freeze->dump(1);
    EXPECT_EQ(holder["name"], "holder");
    ASSERT_FALSE(holder["call"].is_null()) << freeze->dump(1);
    EXPECT_EQ(holder["call"]["api"], holder_api) << freeze->dump(1);
    EXPECT_GE(holder["call"]["enter_ns"].get<uint64_t>(), round.enter_ns);
    EXPECT_LE(holder["call"]["exit_ns"].get<uint64_t>(), round.exit_ns);
    ASSERT_FALSE((*freeze)["object"]["futex_address"].is_null());
    locks.insert((*freeze)["object"]["futex_address"].get<std::string>());
    EXPECT_NE((*freeze)["object"]["location"].get<std::string>().find("libcudart.so.13"),
              std::string::npos)
        << "the driver lock lives in the runtime's data: " << (*freeze)["object"].dump();
    for (const auto& member : (*freeze)["members"]) {
      uint32_t tid = member["tid"];
      EXPECT_TRUE(launchers.contains(tid)) << "not a launcher: " << member.dump();
      blocked_seen.insert(tid);
    }
    // Launchers the app saw blocked during the round are all in its freeze, and the freeze lasts as
    // long as the longest of their blocked calls, as the app measured them.
    uint64_t longest_blocked_ns = 0;
    for (const auto& call : round_calls) {
      if (!launchers.contains(call.tid) || call.enter_ns >= round.exit_ns ||
          call.exit_ns <= round.enter_ns) {
        continue;
      }
      EXPECT_TRUE(blocked_seen.contains(call.tid)) << call.thread << " missing from the freeze";
      longest_blocked_ns = std::max(longest_blocked_ns, call.exit_ns - call.enter_ns);
    }
    double freeze_ns = (*freeze)["duration_ns"].get<double>();
    EXPECT_NEAR(freeze_ns, longest_blocked_ns, longest_blocked_ns * 0.10);
  }
  EXPECT_EQ(locks.size(), 1u) << "one driver lock";
  for (const auto& [tid, name] : launchers) EXPECT_TRUE(blocked_seen.contains(tid)) << name;

  // And the text says it in words.
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("\nfreeze 1 at "), std::string::npos) << text;
  EXPECT_NE(text.find("holder   \"holder\" (" + std::to_string(holder_tid) + ") held it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("inside " + holder_api), std::string::npos) << text;
  for (const auto& [tid, name] : launchers) EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_EQ(run.err.find(text.substr(0, 40)) != std::string::npos, true) << "report printed";
  ExpectReadableReport(text);
  // The demo's ~600-column frame (std::string's full name six times, clone suffixes) is shortened.
  EXPECT_EQ(text.find("std::__cxx11::basic_string"), std::string::npos) << text;
  EXPECT_EQ(text.find("[clone ."), std::string::npos) << text;
  EXPECT_EQ(text.find("futex_do_wait"), std::string::npos) << "reasons in words\n" << text;
  EXPECT_NE(text.find("\nCUDA API CALLS by total time\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nGPU KERNELS by total time\n"), std::string::npos) << text;
}

TEST(EndToEnd, ExplainsAFreezeBehindASleepingHolder) {
  GPROF_NEED_BPF();
  CheckFreezeExplained("sync", "cudaDeviceSynchronize");
}

TEST(EndToEnd, ExplainsAFreezeBehindASpinningHolder) {
  GPROF_NEED_BPF();
  CheckFreezeExplained("free", "cudaFree");
}

TEST(EndToEnd, TraceDecodesWithThePerfettoSchema) {
  GPROF_NEED_BPF();
  std::string schema = PerfettoSchemaPath();
  std::string schema_dir = fs::path(schema).parent_path();
  if (!fs::exists(schema)) {
    GTEST_SKIP() << "Perfetto schema not found at " << schema << " (set GPROF_PERFETTO_SCHEMA)";
  }
  if (RunProcess(Command({"/usr/bin/protoc", "--version"})).exit_code() != 0) {
    GTEST_SKIP() << "protoc not installed (Debian: protobuf-compiler)";
  }
  TempDir dir;
  ASSERT_EQ(
      Gprof({"-q", "-o", dir.Sub("s"), "--", AppPath("freeze_app"), "--rounds", "1"}).exit_code(),
      0);
  ProcessSpec decode;
  decode.argv = {"/bin/sh", "-c",
                 "/usr/bin/protoc --proto_path='" + schema_dir +
                     "' --decode=perfetto.protos.Trace perfetto_trace.proto < '" +
                     dir.Sub("s/trace.perfetto-trace") + "'"};
  ProcessResult decoded = RunProcess(decode);
  ASSERT_EQ(decoded.exit_code(), 0) << decoded.err;
  for (const char* expected :
       {"launcher-0", "holder", "cudaLaunchKernel", "cudaDeviceSynchronize", "off-CPU", "futex"}) {
    EXPECT_NE(decoded.out.find(expected), std::string::npos) << expected;
  }
}

// --- how CUDA calls are captured ---

std::string CaptureNote(const std::string& session) {
  json report = ReadJson(session + "/report.json");
  if (report["session"]["processes"].empty()) return "";
  return report["session"]["processes"][0]["capture"].dump();
}

TEST(EndToEnd, CudaModeChoosesTheCapture) {
  TempDir dir;
  // auto: CUPTI (the mock, found next to the fake runtime), with the GPU timeline.
  ASSERT_EQ(Gprof({"-q", "-o", dir.Sub("auto"), "--", AppPath("api_tour_app")}).exit_code(), 0);
  json automatic = ReadJson(dir.Sub("auto/report.json"));
  EXPECT_NE(CaptureNote(dir.Sub("auto")).find("cupti"), std::string::npos)
      << CaptureNote(dir.Sub("auto"));
  EXPECT_GT(automatic["gpu"]["kernels_total"].get<int>(), 0);

  // preload: interposition only, CUPTI left alone.
  ASSERT_EQ(Gprof({"-q", "--cuda=preload", "-o", dir.Sub("preload"), "--", AppPath("api_tour_app")})
                .exit_code(),
            0);
  json preload = ReadJson(dir.Sub("preload/report.json"));
  EXPECT_EQ(preload["gpu"]["kernels_total"], 0);
  EXPECT_GE(preload["session"]["counts"]["cuda_calls"].get<int>(), 19);

  // off: nothing injected at all.
  ProcessResult off = Gprof(
      {"-q", "--cuda=off", "-o", dir.Sub("off"), "--", AppPath("exit_app"), "env", "LD_PRELOAD"});
  EXPECT_EQ(off.exit_code(), 0);
  EXPECT_EQ(off.out, "") << "LD_PRELOAD is unset, as without gprof-run";
  EXPECT_EQ(ReadJson(dir.Sub("off/report.json"))["session"]["counts"]["cuda_calls"], 0);

  // An injection library the user set stays, under auto: calls still recorded by interposition.
  ProcessSpec theirs;
  theirs.set_env = {"CUDA_INJECTION64_PATH=/opt/other/libinjection.so"};
  ProcessResult kept = Gprof(
      {"-o", dir.Sub("kept"), "--", AppPath("exit_app"), "env", "CUDA_INJECTION64_PATH"}, theirs);
  EXPECT_EQ(kept.out, "/opt/other/libinjection.so\n");
  EXPECT_NE(kept.err.find("already set"), std::string::npos) << kept.err;
}

// --- processes that escape the injection (issue 17, section 4) ---

// A child that starts a CUDA program with a cleared environment gets no LD_PRELOAD: the report
// must name it as not recorded, from the kernel's record, and not the child that ran it as it is.
TEST(EndToEnd, AProcessStartedWithAClearedEnvironmentIsNamedAsNotRecorded) {
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string app = AppPath("api_tour_app");
  const std::vector<std::string> tree = {"/bin/sh", "-c",
                                         "env -i " + app + " > /dev/null; " + app + " > /dev/null"};
  std::vector<std::string> args = {"-o", dir.Sub("s"), "--"};
  args.insert(args.end(), tree.begin(), tree.end());
  ProcessResult run = Gprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;

  std::set<uint32_t> injected;  // the processes that wrote a recording
  for (const auto& entry : fs::directory_iterator(dir.Sub("s"))) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("inject-")) injected.insert(std::stoul(name.substr(7)));
  }
  json report = ReadJson(dir.Sub("s/report.json"));
  const json& unrecorded = report["session"]["unrecorded_processes"];
  ASSERT_EQ(unrecorded.size(), 1u) << unrecorded.dump(1);
  uint32_t pid = unrecorded[0]["pid"];
  EXPECT_EQ(unrecorded[0]["name"], "api_tour_app");
  EXPECT_EQ(unrecorded[0]["cuda_library"], "libcudart.so.13");
  EXPECT_FALSE(injected.contains(pid));
  EXPECT_EQ(injected.size(), 1u) << "the other child, injected";
  EXPECT_GE(report["session"]["counts"]["cuda_calls"].get<int>(), 19) << "its calls";
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("  UNRECORDED pid " + std::to_string(pid) +
                      " (api_tour_app) loaded libcudart.so.13"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("lost      nothing"), std::string::npos) << text;

  // --cuda=off injects nothing by choice: no process is said to have escaped.
  args[1] = dir.Sub("off");
  args.insert(args.begin(), "--cuda=off");
  ProcessResult off = Gprof(args);
  ASSERT_EQ(off.exit_code(), 0) << off.err;
  EXPECT_EQ(ReadFile(dir.Sub("off/report.txt")).find("UNRECORDED"), std::string::npos);
}

// --- saved sessions, whole or damaged ---

TEST(EndToEnd, ReportReprintsAndSalvagesADamagedSession) {
  TempDir dir;
  std::string session = dir.Sub("s");
  ASSERT_EQ(Gprof({"-q", "-o", session, "--", AppPath("freeze_app"), "--rounds", "2"}).exit_code(),
            0);
  // report.html is written with the others, and `report` writes it again, the same.
  std::string html = ReadFile(session + "/report.html");
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>")) << html.substr(0, 200);
  ASSERT_EQ(unlink((session + "/report.html").c_str()), 0);
  ProcessResult again = Gprof({"report", session});
  ASSERT_EQ(again.exit_code(), 0) << again.err;
  EXPECT_EQ(again.out.substr(0, again.out.find("\ntrace:")) + "",
            ReadFile(session + "/report.txt"));
  EXPECT_EQ(ReadFile(session + "/report.html"), html);

  // Cut the inject file inside its last chunk and break a byte of the kernel file's first chunk.
  std::string inject;
  for (const auto& entry : fs::directory_iterator(session)) {
    if (entry.path().filename().string().starts_with("inject-")) inject = entry.path();
  }
  ASSERT_FALSE(inject.empty());
  uintmax_t size = fs::file_size(inject);
  fs::resize_file(inject, size - 10);
  if (fs::exists(session + "/kernel.gpr")) {
    std::fstream kernel(session + "/kernel.gpr", std::ios::in | std::ios::out | std::ios::binary);
    kernel.seekp(sizeof(format::FileHeader) + sizeof(format::ChunkHeader) + 8);
    kernel.put('\x7f');
  }
  ProcessResult damaged = Gprof({"report", session});
  EXPECT_EQ(damaged.exit_code(), 0) << damaged.err;
  EXPECT_NE(damaged.err.find(inject + " at offset "), std::string::npos) << damaged.err;
  EXPECT_NE(damaged.err.find("mid-chunk"), std::string::npos) << damaged.err;
  EXPECT_NE(damaged.out.find("gprof-run report"), std::string::npos);
  json report = ReadJson(session + "/report.json");
  EXPECT_GT(report["session"]["counts"]["cuda_calls"].get<int>(), 0) << "nothing salvaged";
  EXPECT_FALSE(report["session"]["diagnostics"].empty());

  // A file that is no session file at all.
  std::ofstream(session + "/kernel.gpr", std::ios::trunc) << "garbage";
  ProcessResult garbage = Gprof({"report", session});
  EXPECT_EQ(garbage.exit_code(), 0);
  EXPECT_NE(garbage.err.find("kernel.gpr at offset 0: not a gprof-run session file"),
            std::string::npos)
      << garbage.err;
}

// How gprof-run ended when `signal` came once the command had ended, while it built the report of
// two million CUDA calls (seconds); `ignored`: it started with the signal ignored, as a script's
// `&` starts a command with SIGINT.
struct InterruptedRun {
  int wait_status = 0;
  double seconds_after_signal = -1;
  std::string err;
};

InterruptedRun InterruptTheReport(const std::string& session, int signal_number, bool ignored) {
  const std::string gprof_run = GprofRunPath(), app = AppPath("api_tour_app");
  const std::string err_path = session + ".err";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open("/dev/null", O_WRONLY);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(120);
    if (ignored) signal(signal_number, SIG_IGN);
    execl(gprof_run.c_str(), "gprof-run", "-q", "-o", session.c_str(), "--", app.c_str(), "burst",
          "2000000", nullptr);
    _exit(121);
  }
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
  };
  // The command is gprof-run's only child: once it is gone, what is left is the report.
  const std::string children =
      "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children";
  bool started = false;
  for (double end = now() + 60; now() < end; usleep(5000)) {
    bool any = !ReadFile(children).empty();
    if (started && !any) break;
    started = started || any;
  }
  EXPECT_TRUE(started);
  usleep(200'000);  // as a user would press Ctrl-C: while the report is built, not as it starts
  kill(pid, signal_number);
  double signalled = now();
  InterruptedRun run;
  for (double end = signalled + 120;; usleep(5000)) {
    if (waitpid(pid, &run.wait_status, WNOHANG) == pid) break;
    if (now() > end) {
      ADD_FAILURE() << "gprof-run did not end";
      kill(pid, SIGKILL);
      waitpid(pid, &run.wait_status, 0);
      break;
    }
  }
  run.seconds_after_signal = now() - signalled;
  run.err = ReadFile(err_path);
  return run;
}

TEST(EndToEnd, AnInterruptWhileTheReportIsBuiltStopsGprofRunAndKeepsTheSession) {
  TempDir dir;
  for (int signal_number : {SIGINT, SIGTERM}) {
    std::string session = dir.Sub("s" + std::to_string(signal_number));
    InterruptedRun run = InterruptTheReport(session, signal_number, /*ignored=*/false);
    // Ended by the signal, as an interrupted tool does: a calling script stops too, and the
    // shell says 128 + N.
    EXPECT_TRUE(WIFSIGNALED(run.wait_status) && WTERMSIG(run.wait_status) == signal_number)
        << "status " << run.wait_status << ": " << run.err;
    EXPECT_LT(run.seconds_after_signal, 2);
    EXPECT_EQ(run.err,
              "gprof-run: interrupted while building the report (the command exited "
              "with 0); the session is kept: 'gprof-run report " +
                  session + "' builds it\n");
    json meta = ReadJson(session + "/session.json");
    EXPECT_EQ(meta["finished"], true);
    EXPECT_EQ(meta["exit"]["code"], 0);
    ProcessResult again = Gprof({"report", session});
    EXPECT_EQ(again.exit_code(), 0) << again.err;
    EXPECT_TRUE(fs::exists(session + "/report.txt"));
  }
  // Started with SIGINT ignored (a script's `gprof-run ... &`), it keeps it so, as any program.
  std::string session = dir.Sub("ignored");
  InterruptedRun run = InterruptTheReport(session, SIGINT, /*ignored=*/true);
  EXPECT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_TRUE(fs::exists(session + "/report.txt"));
}

// --- bounding a run: --delay, --duration, --max-size ---

TEST(EndToEnd, BadBoundsAreOneClearLineAnd125) {
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--duration", "-1"}, "--duration"}, {{"--duration", "0"}, "--duration"},
      {{"--delay", "soon"}, "--delay"},     {{"--max-size", "12Q"}, "12Q"},
      {{"--max-size", "10K"}, "minimum"},   {{"--max-size", "-5M"}, "-5M"}};
  for (const auto& [options, named] : cases) {
    std::vector<std::string> args = options;
    for (const char* rest : {"-o", "", "--", "", "print"}) args.push_back(rest);
    args[options.size() + 1] = dir.Sub("s");
    args[options.size() + 3] = AppPath("exit_app");
    ProcessResult run = Gprof(args);
    std::string first_line = run.err.substr(0, run.err.find('\n'));
    EXPECT_EQ(run.exit_code(), 125) << options[0] << " " << options[1] << ": " << run.err;
    EXPECT_NE(first_line.find(named), std::string::npos) << first_line;
    EXPECT_EQ(run.out, "") << "the command must not run";
    EXPECT_FALSE(fs::exists(dir.Sub("s")));
  }
}

// Every bad value: one line naming the option and the value, escaped as the report escapes names
// (control characters and bytes that are not UTF-8 as \xNN), short, status 125, nothing run.
TEST(EndToEnd, BadValuesAreOneLineNamingTheOptionAndTheValue) {
  TempDir dir;
  std::ofstream(dir.Sub("text.so")) << "not a library\n";
  mkfifo(dir.Sub("fifo").c_str(), 0600);
  const std::string nines(400, '9');
  struct Case {
    std::vector<std::string> options;
    std::string shown;  // how the value must appear in the line
  };
  const std::vector<Case> cases = {
      {{"--threshold", "nan"}, "'nan'"},
      {{"--threshold", "inf"}, "'inf'"},
      {{"--threshold", "1e20"}, "'1e20'"},
      {{"--threshold", "1e-300"}, "'1e-300'"},  // would round to 0 ns: every call
      {{"--threshold", "12345678901234567890123"}, "'12345678901234567890123'"},
      {{"--threshold", "-1"}, "'-1'"},
      {{"--threshold", "0.0005"}, "'0.0005'"},
      {{"--threshold", "0x10"}, "'0x10'"},
      {{"--threshold", nines}, "'" + nines.substr(0, 64) + "...'"},
      {{"--ring-buffer-mb", "0"}, "'0'"},
      {{"--ring-buffer-mb", "1025"}, "'1025'"},
      {{"--ring-buffer-mb", "many"}, "'many'"},
      {{"--cuda", "x\x1b[2J"}, "'x\\x1b[2J'"},
      {{"--cuda", "\xff"}, "'\\xff'"},
      {{"--max-size", "1\x01Q"}, "'1\\x01Q'"},
      {{"--delay", "\x9b"}, "'\\x9b'"},
      {{"--device-prefix", "0123456789abcdef"}, "'0123456789abcdef'"},
      {{"-o", ""}, "--output"},
      {{"--inject-lib", "/etc/passwd"}, "'/etc/passwd' is not an ELF shared object"},
      {{"--inject-lib", dir.Sub("text.so")}, "is not an ELF shared object"},
      {{"--inject-lib", dir.path()}, "is not a file"},
      {{"--inject-lib", dir.Sub("fifo")}, "is not a file"},  // and opening it does not hang
      // ELF shared objects, but not the injected library: a PIE executable, another library.
      {{"--inject-lib", AppPath("exit_app")}, "has no InitializeInjection"},
      {{"--inject-lib", BuildDir() + "/tests/fake_cuda/libcudart.so.13"},
       "has no InitializeInjection"},
      {{"--cupti-lib", dir.Sub("none\x1b")}, "'" + dir.Sub("none") + "\\x1b'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.options;
    if (c.options[0] != "-o") args.insert(args.end(), {"-o", dir.Sub("s")});
    args.insert(args.end(), {"--", AppPath("exit_app"), "print"});
    ProcessResult run = Gprof(args);
    std::string what = collector::PrintableName(c.options[0] + " " + c.options[1]);
    EXPECT_EQ(run.exit_code(), 125) << what << ": " << run.err;
    EXPECT_TRUE(run.err.starts_with("gprof-run: " + c.options[0]) ||
                (c.options[0] == "-o" && run.err.starts_with("gprof-run: --output")))
        << what << ": " << run.err;
    EXPECT_NE(run.err.find(c.shown), std::string::npos) << what << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << what << ": " << run.err;
    EXPECT_LT(run.err.size(), 250u) << what << ": " << run.err;
    EXPECT_TRUE(IsCleanUtf8(run.err, "\n")) << what << ": " << run.err;
    EXPECT_EQ(run.out, "") << what << ": the command must not run";
    EXPECT_FALSE(fs::exists(dir.Sub("s"))) << what;
  }
  // The injected library itself is taken.
  ProcessResult good = Gprof({"-q", "--inject-lib", InjectLibraryPath(), "-o", dir.Sub("good"),
                              "--", AppPath("exit_app"), "exit", "4"});
  EXPECT_EQ(good.exit_code(), 4) << good.err;
}

// 0 explains every call (as 0 means everything to the bcc tools' *slower); the smallest other
// value is 1 us, the largest an hour.
TEST(EndToEnd, ThresholdZeroExplainsEveryCall) {
  TempDir dir;
  for (const auto& [threshold, ns] : std::vector<std::pair<std::string, uint64_t>>{
           {"0", 0}, {"0.001", 1000}, {"2.5", 2'500'000}, {"3600000", 3'600'000'000'000}}) {
    std::string session = dir.Sub("s" + threshold);
    ProcessResult run = Gprof({"-q", "--no-kernel", "--threshold", threshold, "-o", session, "--",
                               AppPath("exit_app"), "exit", "0"});
    ASSERT_EQ(run.exit_code(), 0) << threshold << ": " << run.err;
    EXPECT_EQ(ReadJson(session + "/report.json")["threshold_ns"], ns) << threshold;
  }
  ProcessResult report = Gprof({"report", dir.Sub("s0.001"), "--threshold", "0"});
  ASSERT_EQ(report.exit_code(), 0) << report.err;
  EXPECT_NE(report.out.find("took 0 ns or longer"), std::string::npos) << report.out;
  ProcessResult tiny = Gprof({"report", dir.Sub("s0"), "--threshold", "1e-300"});
  EXPECT_EQ(tiny.exit_code(), 125);
  EXPECT_NE(tiny.err.find("--threshold: '1e-300'"), std::string::npos) << tiny.err;
}

// Every one-line error that echoes an argument escapes it as the report does; the report's
// command line shows a byte that is not UTF-8 as \xNN, never as U+FFFD.
TEST(EndToEnd, ArgumentsInMessagesAreEscapedAsTheReportDoes) {
  TempDir dir;
  fs::create_directory(dir.Sub("taken\x1b"));
  std::ofstream(dir.Sub("taken\x1b/keep")) << "precious";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bad\x1b[2J", "--", "true"}, "unknown option --bad\\x1b[2J"},
      {{"-o", dir.Sub("a"), "--", "x\x1b[2J"}, "x\\x1b[2J: command not found"},
      {{"-o", dir.Sub("taken\x1b"), "--", "true"}, dir.Sub("taken") + "\\x1b already exists"},
      {{"report", dir.Sub("none\x1b\xff")}, dir.Sub("none") + "\\x1b\\xff: no such session"},
      {{"report", dir.Sub("taken\x1b"), "extra\x07"}, "unexpected argument extra\\x07"},
  };
  for (const auto& [args, shown] : cases) {
    ProcessResult run = Gprof(args);
    EXPECT_GE(run.exit_code(), 125) << shown;
    EXPECT_NE(run.err.find(shown), std::string::npos) << shown << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_TRUE(IsCleanUtf8(run.err, "\n")) << run.err;
  }

  // A program whose name holds a byte that is not UTF-8.
  std::string odd = dir.Sub(
      "exit\xff"
      "app");
  fs::create_symlink(AppPath("exit_app"), odd);
  ProcessResult run = Gprof({"--no-kernel", "-o", dir.Sub("odd"), "--", odd, "exit", "0"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::string escaped = dir.Sub("exit") + "\\xffapp";
  EXPECT_NE(run.err.find("command   " + escaped), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("\xef\xbf\xbd"), std::string::npos) << "U+FFFD in the report";
  EXPECT_EQ(ReadJson(dir.Sub("odd/session.json"))["command"][0], escaped);
  ProcessResult again = Gprof({"report", dir.Sub("odd")});
  EXPECT_NE(again.out.find("command   " + escaped), std::string::npos) << again.out;
}

// --help names each value's kind in a word, not in CLI11's type strings.
TEST(EndToEnd, HelpSaysTypesInWords) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"report", "--help"}}) {
    ProcessResult help = Gprof(args);
    EXPECT_EQ(help.exit_code(), 0);
    std::smatch cli11;
    EXPECT_FALSE(std::regex_search(
        help.out, cli11, std::regex(R"(\b(TEXT|FLOAT|UINT|INT|POSITIVE)\b|:FILE|\{auto)")))
        << cli11.str() << " in:\n"
        << help.out;
    EXPECT_NE(help.out.find("--threshold MS "), std::string::npos) << help.out;
  }
  ProcessResult help = Gprof({"--help"});
  for (const char* option : {"-o,--output DIR", "--cuda MODE", "--ring-buffer-mb MIB",
                             "--inject-lib FILE", "--cupti-lib FILE", "--device-prefix PREFIX"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option;
  }
}

// Reads a session back as the collector does.
collector::Session ReadSessionOrFail(const std::string& dir) {
  auto session = collector::ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  return session.ok() ? std::move(session.value()) : collector::Session{};
}

TEST(EndToEnd, WindowKeepsWhatStartsInsideIt) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  // freeze_app launches every 0.5 ms on 3 threads, and freezes every 100 ms, for about 3 s.
  ProcessResult run = Gprof({"-o", session_dir, "--delay", "0.8", "--duration", "1", "--",
                             AppPath("freeze_app"), "--rounds", "30"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json meta = ReadJson(session_dir + "/session.json");
  uint64_t start = meta["start"]["monotonic_ns"];
  uint64_t window_start = meta["window"]["start_monotonic_ns"];
  uint64_t window_end = meta["window"]["end_monotonic_ns"];
  EXPECT_EQ(window_start, start + 800'000'000ull);
  EXPECT_EQ(window_end, window_start + 1'000'000'000ull);
  ASSERT_GT(meta["end"]["monotonic_ns"].get<uint64_t>(), window_end) << "the run outlasts it";

  // Every recorder checks the start of what it records against the window, on the one clock:
  // no tolerance. What started inside is kept whole, so ends may pass the window's end.
  collector::Session session = ReadSessionOrFail(session_dir);
  auto inside = [&](uint64_t ns) { return ns >= window_start && ns < window_end; };
  ASSERT_FALSE(session.api_calls.empty());
  for (const auto& call : session.api_calls) EXPECT_TRUE(inside(call.enter_ns)) << call.enter_ns;
  ASSERT_FALSE(session.gpu_activities.empty());
  for (const auto& gpu : session.gpu_activities) EXPECT_TRUE(inside(gpu.start_ns));
  ASSERT_FALSE(session.off_cpu.empty());
  for (const auto& interval : session.off_cpu) EXPECT_TRUE(inside(interval.start_ns));
  ASSERT_FALSE(session.futex_calls.empty());
  for (const auto& futex : session.futex_calls) EXPECT_TRUE(inside(futex.start_ns));
  // And the window is recorded to its edges: three threads launch every 0.5 ms, so 100 ms
  // without a call at either edge would be a recorder starting late or stopping early (and not a
  // loaded machine's scheduling delay, which is a few milliseconds).
  EXPECT_LT(session.api_calls.front().enter_ns - window_start, 100'000'000u);
  EXPECT_LT(window_end - session.api_calls.back().enter_ns, 100'000'000u);
  EXPECT_LT(window_end - session.off_cpu.back().start_ns, 100'000'000u);

  // The trace shows nothing before the window. After it, only the later parts of what started
  // inside (a thread woken after the end, runnable until it ran): freeze_app's calls and sleeps
  // last under 100 ms, and the kernel recorder ends what is still open when it detaches at the
  // window's end (within its 100 ms poll), so 1 s bounds it with room for a loaded machine.
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(session_dir + "/trace.perfetto-trace"));
  size_t begins = 0;
  bool window_noted = false;
  for (const DecodedEvent& event : trace.events) {
    if (event.type != kSliceBegin && event.type != kInstant) continue;
    if (event.name.starts_with("window: ")) window_noted = true;
    // gprof-run's own notes about the session (losses, the window) sit at its start.
    if (std::count(event.categories.begin(), event.categories.end(), "gprof-run") > 0) continue;
    ++begins;
    EXPECT_GE(event.timestamp_ns, window_start) << event.name;
    EXPECT_LT(event.timestamp_ns, window_end + 1'000'000'000u) << event.name;
  }
  EXPECT_GT(begins, 0u);
  EXPECT_TRUE(window_noted) << "the trace says what its window is";

  std::string text = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(text.find("  window    recorded +0.800 s to +1.800 s, 1.000 s of "), std::string::npos)
      << text;
  EXPECT_NE(text.find("(--delay 0.8 --duration 1)"), std::string::npos) << text;
  json report = ReadJson(session_dir + "/report.json");
  EXPECT_EQ(report["session"]["window"]["end_monotonic_ns"], window_end);
}

TEST(EndToEnd, WindowLeavesTheCommandItsOwn) {
  GPROF_NEED_BPF();
  TempDir dir;
  // The window ends while the command sleeps: the kernel recorder stops, the command runs on.
  std::vector<std::string> command = {AppPath("exit_app"), "sleep", "700", "print", "exit", "3"};
  ProcessResult plain = RunProcess(Command(command));
  std::vector<std::string> args = {"-q",  "-o",         dir.Sub("s"), "--delay",
                                   "0.1", "--duration", "0.2",        "--"};
  args.insert(args.end(), command.begin(), command.end());
  ProcessResult run = Gprof(args);
  EXPECT_EQ(run.exit_code(), 3);
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
  EXPECT_GE(run.seconds, 0.7) << "the command was cut short";
  json report = ReadJson(dir.Sub("s/report.json"));
  EXPECT_EQ(report["session"]["exit_code"], 3);
  EXPECT_TRUE(report["session"]["kernel_recording"].get<bool>());

  // A delay longer than the command: nothing recorded, and the report says why.
  ProcessResult late = Gprof(
      {"-o", dir.Sub("late"), "--delay", "30", "--", AppPath("exit_app"), "print", "exit", "4"});
  EXPECT_EQ(late.exit_code(), 4);
  EXPECT_EQ(late.out, RunProcess(Command({AppPath("exit_app"), "print"})).out);
  EXPECT_LT(late.seconds, 20) << "gprof-run waited for the window instead of the command";
  EXPECT_NE(late.err.find("recorded nothing: the command ended at +"), std::string::npos)
      << late.err;
  EXPECT_EQ(ReadJson(dir.Sub("late/report.json"))["session"]["counts"]["cuda_calls"], 0);
}

// Bytes of the session's recording files (kernel.gpr, inject-*.gpr).
uint64_t RecordingBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".gpr") bytes += entry.file_size();
  }
  return bytes;
}

TEST(EndToEnd, MaxSizeCapsTheRecordingAndSaysWhatIsMissing) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::string session_dir = dir.Sub("s");
  constexpr uint64_t kCap = 256 << 10;
  ProcessResult run = Gprof({"-o", session_dir, "--max-size", "256K", "--", AppPath("freeze_app"),
                             "--launchers", "4", "--rounds", "30"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.out.find("freeze_app"), std::string::npos) << "the command's own summary";

  // The recording files together hold at most the cap, exactly: every chunk is charged to the
  // session's budget before it is written.
  uint64_t recorded = RecordingBytes(session_dir);
  EXPECT_LE(recorded, kCap);
  EXPECT_GT(recorded, kCap / 2) << "stopped far below the cap";
  // The rest of the directory is session.json and what the collector derives at the end (trace,
  // reports), which the cap does not cover (README: "Bounding a long run").
  for (const auto& entry : fs::directory_iterator(session_dir)) {
    std::string name = entry.path().filename();
    EXPECT_TRUE(name.ends_with(".gpr") || name == "session.json" || name.starts_with("report.") ||
                name == "trace.perfetto-trace")
        << name;
  }

  json cap = ReadJson(session_dir + "/report.json")["session"]["max_size"];
  ASSERT_TRUE(cap.is_object()) << cap.dump();
  EXPECT_EQ(cap["limit_bytes"], kCap);
  ASSERT_TRUE(cap["stopped"].get<bool>()) << cap.dump();
  EXPECT_GT(cap["refused_records"].get<uint64_t>(), 0u);
  uint64_t stopped_at = cap["stopped_at_monotonic_ns"];
  // Nothing that started after the stop was written, but what ended the kernel recorder's
  // intervals, which it does as soon as it sees the stop.
  collector::Session session = ReadSessionOrFail(session_dir);
  ASSERT_FALSE(session.api_calls.empty());
  for (const auto& call : session.api_calls) EXPECT_LE(call.enter_ns, stopped_at);
  for (const auto& gpu : session.gpu_activities) EXPECT_LE(gpu.start_ns, stopped_at);
  for (const auto& interval : session.off_cpu) {
    EXPECT_LE(interval.start_ns,
              stopped_at + ((interval.flags & GPROF_OFFCPU_UNFINISHED) ? 1'000'000'000u : 0u));
  }
  std::string text = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(text.find("  STOPPED   stopped at --max-size 256.0 KiB at +"), std::string::npos)
      << text;
  EXPECT_NE(text.find("not written, nothing recorded from then on"), std::string::npos) << text;
}

// --- GPU idle time and what it waited for ---

// The idle time of the session's one GPU, from its recorded work: the time between its first work
// and its last that no kernel, copy or memset covers (computed here apart from the collector).
uint64_t DeviceIdleNs(const collector::Session& session) {
  std::vector<std::pair<uint64_t, uint64_t>> work;
  for (const auto& activity : session.gpu_activities) {
    if (activity.occupies_gpu()) work.emplace_back(activity.start_ns, activity.end_ns);
  }
  std::sort(work.begin(), work.end());
  uint64_t idle = 0, reached = work.empty() ? 0 : work.front().second;
  for (const auto& [start, end] : work) {
    if (start > reached) idle += start - reached;
    reached = std::max(reached, end);
  }
  return idle;
}

// Four decoding threads on their own streams: the GPU's idle time is counted once, not once per
// idle stream, and the causes explain no more of it than there was.
TEST(EndToEnd, GpuIdleIsTheDevicesNotTheSumOfItsStreams) {
  TempDir dir;
  const std::string session_dir = dir.Sub("s");
  ProcessResult run = Gprof({"-q", "-o", session_dir, "--", AppPath("gpu_gaps_app"), "streams",
                             "--threads", "4", "--rounds", "30"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  collector::Session session = ReadSessionOrFail(session_dir);
  std::set<uint32_t> streams;
  for (const auto& activity : session.gpu_activities) streams.insert(activity.stream_id);
  ASSERT_GE(streams.size(), 4u) << "each thread's own stream";
  const uint64_t idle_ns = DeviceIdleNs(session);

  json report = ReadJson(session_dir + "/report.json");
  uint64_t explained_ns = 0;
  for (const auto& cause : report["diagnosis"]["causes"])
    explained_ns += cause["gpu_idle_ns"].get<uint64_t>();
  EXPECT_LE(explained_ns, idle_ns) << "more GPU idle explained than the GPU was idle";
  // Each gap is an interval in which the GPU ran nothing at all.
  for (const auto& gap : report["diagnosis"]["gaps"]) {
    const uint64_t start = gap["start_ns"], end = gap["end_ns"];
    for (const auto& activity : session.gpu_activities) {
      if (!activity.occupies_gpu()) continue;
      EXPECT_FALSE(activity.start_ns < end && activity.end_ns > start)
          << "stream " << activity.stream_id << " ran in the gap at " << start;
    }
  }
  const json& devices = report["gpu"]["devices"];
  ASSERT_EQ(devices.size(), 1u) << report["gpu"].dump();
  EXPECT_EQ(devices[0]["idle_ns"].get<uint64_t>(), idle_ns);
  // The mock CUPTI names the GPU by a UUID, as the real one does.
  ASSERT_TRUE(devices[0]["uuid"].is_string()) << devices.dump();
  EXPECT_TRUE(devices[0]["uuid"].get<std::string>().starts_with("GPU-"));
  std::string text = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(text.find("\nSUMMARY\n  GPU 0 ran nothing "), std::string::npos) << text;
  ExpectReadableReport(text);
}

// Between two launches the thread computes 60 ms on the CPU: the copy that ends the GPU's wait
// took microseconds, and the report says where the 60 ms went.
TEST(EndToEnd, ALateThreadIsDescribedByWhatItDidNotByTheCallThatEndedTheGap) {
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string session_dir = dir.Sub("s");
  ProcessResult run =
      Gprof({"-q", "-o", session_dir, "--", AppPath("gpu_gaps_app"), "cpu-between"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json report = ReadJson(session_dir + "/report.json");
  const json* copy_gap = nullptr;
  for (const auto& gap : report["diagnosis"]["gaps"]) {
    if (gap["after_call"].is_object() && gap["after_call"]["api"] == "cudaMemcpyAsync")
      copy_gap = &gap;
  }
  ASSERT_NE(copy_gap, nullptr) << report["diagnosis"]["gaps"].dump(1);
  const json& late = (*copy_gap)["late_thread"];
  ASSERT_TRUE(late.is_object()) << copy_gap->dump(1);
  EXPECT_LT(late["call_ns"].get<uint64_t>(), 1'000'000u) << late.dump(1);
  const std::string description = late["text"];
  std::smatch outside;
  ASSERT_TRUE(
      std::regex_search(description, outside,
                        std::regex(R"(\(([0-9.]+) ms outside CUDA calls, then [0-9.]+ [un]?s )"
                                   R"(in cudaMemcpyAsync\)(, waiting for a CPU [0-9.]+ [mun]?s)?$)")))
      << description;
  EXPECT_GE(std::stod(outside[1]), 55.0) << description;
}

// The first launch of a kernel whose module the driver loads on first use (40 ms on the CPU in the
// launch): named as loading a module, not as a thread late to launch.
TEST(EndToEnd, AFirstLaunchThatLoadsAModuleIsNamedSo) {
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string session_dir = dir.Sub("s");
  ProcessResult run =
      Gprof({"-q", "-o", session_dir, "--", AppPath("gpu_gaps_app"), "lazy-module"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  collector::Session session = ReadSessionOrFail(session_dir);
  ASSERT_EQ(session.module_loads.size(), 1u) << "CUPTI's overhead record, through the injection";
  EXPECT_GE(session.module_loads[0].end_ns - session.module_loads[0].start_ns, 40'000'000u);
  json report = ReadJson(session_dir + "/report.json");
  const json* loading = nullptr;
  for (const auto& cause : report["diagnosis"]["causes"]) {
    const std::string identity = cause["identity"];
    if (identity.find("loading a CUDA module in cudaLaunchKernel") != std::string::npos)
      loading = &cause;
    if (identity.find("late to launch") != std::string::npos) {
      EXPECT_LT(cause["gpu_idle_ns"].get<uint64_t>(), 30'000'000u)
          << "the module's loading taken for a late thread: " << cause.dump(1);
    }
  }
  ASSERT_NE(loading, nullptr) << report["diagnosis"]["causes"].dump(1);
  EXPECT_GE((*loading)["gpu_idle_ns"].get<uint64_t>(), 35'000'000u);
  EXPECT_EQ((*loading)["identity"].get<std::string>().find("loader ("), 0u);
}

// Launches captured into a CUDA graph are counted as captured, and the graph launches' kernels
// as theirs.
TEST(EndToEnd, CapturedLaunchesAreNotMissingKernels) {
  TempDir dir;
  const std::string session_dir = dir.Sub("s");
  ProcessResult run = Gprof({"-q", "-o", session_dir, "--", AppPath("gpu_gaps_app"), "graph"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::string text = ReadFile(session_dir + "/report.txt");
  EXPECT_NE(text.find("  gpu       15 kernels, 0 copies, 0 memsets; 5 kernel launches captured "
                      "into CUDA graphs; 3 graph launches ran 15 kernels\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("have no kernel recorded"), std::string::npos) << text;
}

// Issue 18: gprof-run's own threads in the program's process (the injected library's writer, the
// (mock) CUPTI's worker that hands over activity buffers) are named as gprof-run's, and never as a
// cause, a holder, a freeze's holder or a link of a chain; the report names them only on its line
// of gprof-run's own cost. A thread holds the loader's lock meanwhile, as in the H200 runs where
// the writer once took it to name stacks.
TEST(EndToEnd, GprofRunsOwnThreadsAreNeverBlamed) {
  GPROF_NEED_BPF();
  TempDir dir;
  const std::string session_dir = dir.Sub("s");
  ProcessResult run = Gprof({"-q", "-o", session_dir, "--", AppPath("loader_lock_app"), "--hold",
                             "dlopen", "--hold-ms", "600", "--calls", "8"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json report = ReadJson(session_dir + "/report.json");
  const json& diagnosis = report["diagnosis"];
  std::map<uint32_t, std::string> ours;
  for (const json& thread : diagnosis["profiler_cost"]["threads"])
    ours[thread["thread"]["tid"].get<uint32_t>()] = thread["role"].get<std::string>();
  std::set<std::string> roles;
  for (const auto& [tid, role] : ours) roles.insert(role);
  EXPECT_TRUE(roles.contains("writer")) << diagnosis["profiler_cost"].dump(1);
  EXPECT_TRUE(roles.contains("cupti")) << "the mock CUPTI's worker\n"
                                       << diagnosis["profiler_cost"].dump(1);
  auto is_ours = [&](const json& thread) {
    return thread.is_object() && ours.contains(thread["tid"].get<uint32_t>());
  };
  for (const json& cause : diagnosis["causes"]) {
    EXPECT_FALSE(is_ours(cause["holder"])) << cause.dump(1);
    if (!cause["root"].is_null()) EXPECT_FALSE(is_ours(cause["root"]["thread"])) << cause.dump(1);
    EXPECT_EQ(cause.dump().find("_rtld_global"), std::string::npos) << cause.dump(1);
  }
  for (const json& stall : diagnosis["stalls"]) {
    EXPECT_FALSE(is_ours(stall["thread"])) << "gprof-run's own waits are not the program's";
    for (const json& link : stall["chain"]) EXPECT_FALSE(is_ours(link["thread"])) << stall.dump(1);
  }
  for (const json& freeze : report["freezes"]) EXPECT_FALSE(is_ours(freeze["holder"]));
  // The slow calls' stacks, unwound after the run, are the program's own.
  size_t named = 0;
  for (const json& call : report["slow_calls"]) {
    if (call["api"] != "cudaStreamSynchronize") continue;
    named += call["native_stack"].dump().find("SyncWhileTheLoaderIsHeld") != std::string::npos;
  }
  EXPECT_GE(named, 8u) << report["slow_calls"].dump(1);

  // In the text, gprof-run's threads appear on the line of its cost at most.
  std::string text = ReadFile(session_dir + "/report.txt");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("gprof-run's own threads delayed") != std::string::npos) continue;
    for (const std::string name : {"gprof-writer", "mock-cupti"})
      EXPECT_EQ(line.find(name + " ("), std::string::npos) << line << "\n" << text;
    EXPECT_EQ(line.find("_rtld_global"), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace gprof::test
