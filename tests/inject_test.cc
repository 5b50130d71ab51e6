// libgprof_inject.so in real processes, without gprof-run and without BPF: LD_PRELOAD it into the
// test programs (which run on the fake CUDA runtime) and read back what it wrote.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <variant>

#include "collector/analysis/analysis.h"
#include "collector/analysis/gpu_timeline.h"
#include "collector/session/session_reader.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "inject/format/session_format.h"
#include "inject/shared/recording_limits.h"
#include "inject/shared/session_control.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using collector::ReadSession;
using collector::Session;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

ProcessSpec Preloaded(std::vector<std::string> argv, const TempDir& session) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath(), "GPROF_SESSION_DIR=" + session.path()};
  spec.unset_env = {"CUDA_INJECTION64_PATH"};
  spec.timeout_s = 60;
  return spec;
}

// As gprof-run starts a command: preloaded, and named as the CUDA injection library, so that the
// (fake) driver calls InitializeInjection and the (mock) CUPTI next to the fake runtime is used.
ProcessSpec Injected(std::vector<std::string> argv, const TempDir& session,
                     std::vector<std::string> extra_env = {}) {
  ProcessSpec spec = Preloaded(std::move(argv), session);
  spec.unset_env.clear();
  spec.set_env.push_back("CUDA_INJECTION64_PATH=" + InjectLibraryPath());
  spec.set_env.insert(spec.set_env.end(), extra_env.begin(), extra_env.end());
  return spec;
}

std::string MockCuptiPath() { return BuildDir() + "/tests/fake_cuda/libcupti.so.13"; }

// The session as the injected library alone left it: without gprof-run there is no session.json,
// which the reader notes; every other diagnostic is a failure.
Session ReadOrFail(const std::string& dir) {
  auto session = ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return Session{};
  std::erase_if(session->diagnostics, [](const collector::Diagnostic& d) {
    return d.file.ends_with(collector::kSessionMetaFile);
  });
  return std::move(session.value());
}

std::vector<const collector::ApiCall*> CallsOf(const Session& session, uint32_t pid) {
  std::vector<const collector::ApiCall*> calls;
  for (const auto& call : session.api_calls) {
    if (call.pid == pid) calls.push_back(&call);
  }
  return calls;
}

TEST(Inject, RecordsEveryCallWithThreadStreamAndResult) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("api_tour_app")}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.err, "");

  Session session = ReadOrFail(session_dir.path());
  EXPECT_TRUE(session.diagnostics.empty());
  ASSERT_EQ(session.processes.size(), 1u);
  uint32_t pid = session.processes.begin()->first;
  EXPECT_NE(session.processes.begin()->second.exe.find("api_tour_app"), std::string::npos);
  EXPECT_FALSE(session.processes.begin()->second.maps.empty());
  auto calls = CallsOf(session, pid);

  std::istringstream lines(run.out);
  std::string line;
  std::regex pattern(R"(api=(\w+) stream=(\S+)(?: error=(\d+))?)");
  size_t index = 0;
  while (std::getline(lines, line)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, pattern)) << line;
    ASSERT_LT(index, calls.size()) << "not recorded: " << line;
    const auto& call = *calls[index++];
    EXPECT_EQ(session.ApiName(call), match[1].str()) << "call " << index;
    EXPECT_EQ(call.tid, pid) << line;  // all from the main thread
    EXPECT_LE(call.enter_ns, call.exit_ns);
    if (match[2] == "-") {
      EXPECT_FALSE(call.flags & format::kApiCallHasStream) << line;
    } else {
      EXPECT_TRUE(call.flags & format::kApiCallHasStream) << line;
      EXPECT_EQ(call.stream, std::stoull(match[2].str(), nullptr, 16)) << line;
    }
    EXPECT_EQ(call.return_code, match[3].matched ? std::stoi(match[3].str()) : 0) << line;
  }
  EXPECT_EQ(index, calls.size()) << "recorded more calls than the program made";
  EXPECT_GE(index, 19u);
  EXPECT_EQ(session.threads.at(pid).name, "api_tour_app");
}

TEST(Inject, KeepsUpWithALaunchBoundLoop) {
  // Calls as fast as one thread can make them: the writer must drain each ring as it fills, not
  // on its periodic tick, or the ring overflows and calls are dropped.
  TempDir session_dir;
  ProcessResult run =
      RunProcess(Preloaded({AppPath("api_tour_app"), "burst", "400000"}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  uint64_t lost = 0;
  for (const auto& entry : session.lost) lost += entry.count;
  EXPECT_EQ(lost, 0u);
  size_t queries = 0;
  for (const auto& call : session.api_calls) queries += session.ApiName(call) == "cudaEventQuery";
  EXPECT_EQ(queries, 400000u + 1);
}

TEST(Inject, OnlyTheOutermostCallIsRecorded) {
  // cudaMallocHost of the fake runtime calls the exported cudaHostAlloc (through the PLT, so
  // through the interposer): one record, the outer one.
  TempDir session_dir;
  ASSERT_EQ(RunProcess(Preloaded({AppPath("api_tour_app")}, session_dir)).exit_code(), 0);
  Session session = ReadOrFail(session_dir.path());
  int host_allocs = 0;
  for (const auto& call : session.api_calls)
    host_allocs += session.ApiName(call) == "cudaHostAlloc";
  EXPECT_EQ(host_allocs, 1);
}

TEST(Inject, WithoutASessionDirectoryItOnlyForwards) {
  TempDir session_dir;
  ProcessSpec spec = Preloaded({AppPath("api_tour_app")}, session_dir);
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath()};
  spec.unset_env = {"GPROF_SESSION_DIR"};
  ProcessResult preloaded = RunProcess(spec);
  ProcessResult plain = RunProcess(Command({AppPath("api_tour_app")}));
  EXPECT_EQ(preloaded.exit_code(), 0);
  // Line by line the same calls (whether cudaEventQuery found the GPU done varies between runs).
  EXPECT_EQ(std::count(preloaded.out.begin(), preloaded.out.end(), '\n'),
            std::count(plain.out.begin(), plain.out.end(), '\n'));
  EXPECT_TRUE(std::filesystem::is_empty(session_dir.path()));
}

TEST(Inject, OutputAndStatusAreTheProgramsOwn) {
  TempDir session_dir;
  for (std::vector<std::string> args : {std::vector<std::string>{"print", "exit", "3"},
                                        std::vector<std::string>{"print", "signal", "15"}}) {
    std::vector<std::string> argv = {AppPath("exit_app")};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult plain = RunProcess(Command(argv));
    ProcessResult preloaded = RunProcess(Preloaded(argv, session_dir));
    EXPECT_EQ(preloaded.out, plain.out);
    EXPECT_EQ(preloaded.err, plain.err);
    EXPECT_EQ(preloaded.wait_status, plain.wait_status);
  }
}

TEST(Inject, ForkWithoutExecKeepsRecordingInEveryChild) {
  TempDir session_dir;
  ProcessResult run = RunProcess(
      Preloaded({AppPath("fork_app"), "--children", "6", "--calls", "150"}, session_dir));
  ASSERT_FALSE(run.timed_out) << "fork_app deadlocked under the injected library";
  ASSERT_EQ(run.exit_code(), 0) << run.err;

  Session session = ReadOrFail(session_dir.path());
  std::regex pattern(R"((child|parent) pid=(\d+) calls=(\d+))");
  int children = 0;
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, pattern)) continue;
    uint32_t pid = static_cast<uint32_t>(std::stoul(match[2]));
    size_t expected = std::stoul(match[3]);
    EXPECT_EQ(CallsOf(session, pid).size(), expected) << line;
    children += match[1] == "child";
  }
  EXPECT_EQ(children, 6);
  for (const auto& diagnostic : session.diagnostics) ADD_FAILURE() << diagnostic.message;
  uint64_t lost = 0;
  for (const auto& entry : session.lost) lost += entry.count;
  EXPECT_EQ(lost, 0u);
}

TEST(Inject, SigkillLosesAtMostTheLastSecond) {
  TempDir session_dir;
  ProcessSpec spec = Preloaded({AppPath("freeze_app"), "--rounds", "1000"}, session_dir);
  spec.signal_after_ms = 1500;
  spec.signal = SIGKILL;
  uint64_t started = NowNs();
  ProcessResult run = RunProcess(spec);
  uint64_t killed_at = started + 1500ull * 1000000;
  ASSERT_EQ(run.exit_code(), 128 + SIGKILL);

  Session session = ReadOrFail(session_dir.path());
  ASSERT_FALSE(session.api_calls.empty());
  uint64_t last_exit = 0;
  for (const auto& call : session.api_calls) last_exit = std::max(last_exit, call.exit_ns);
  EXPECT_GT(last_exit + 1000000000ull, killed_at)
      << "the newest record is " << (killed_at - last_exit) / 1e6 << " ms older than the kill";
}

TEST(Inject, UnderscoreExitStillFlushes) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("api_tour_app"), "_exit"}, session_dir));
  ASSERT_EQ(run.exit_code(), 0);
  Session session = ReadOrFail(session_dir.path());
  ASSERT_FALSE(session.api_calls.empty());
  EXPECT_EQ(session.ApiName(session.api_calls.back()), "cudaStreamSynchronize");
}

TEST(Inject, ExitFromAnotherThreadKeepsTheRecord) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("exit_app"), "thread-exit", "5"}, session_dir));
  EXPECT_EQ(run.exit_code(), 5);
  Session session = ReadOrFail(session_dir.path());
  EXPECT_FALSE(session.api_calls.empty());
  EXPECT_TRUE(session.diagnostics.empty());
}

TEST(Inject, NamesThreadsAsTheProgramNamedThem) {
  TempDir session_dir;
  ProcessResult run = RunProcess(
      Preloaded({AppPath("freeze_app"), "--rounds", "1", "--launchers", "2"}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  std::set<std::string> names;
  for (const auto& [tid, thread] : session.threads) names.insert(thread.name);
  for (const char* name : {"launcher-0", "launcher-1", "holder"}) {
    EXPECT_TRUE(names.contains(name)) << name;
  }
}

TEST(Inject, AnUnwritableSessionDirectoryDoesNotHarmTheProgram) {
  ProcessSpec spec;
  spec.argv = {AppPath("exit_app"), "print", "exit", "4"};
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath(), "GPROF_SESSION_DIR=/proc/no-such-dir"};
  ProcessResult plain = RunProcess(Command(spec.argv));
  ProcessResult run = RunProcess(spec);
  EXPECT_EQ(run.exit_code(), 4);
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
}

// --- CUPTI capture (the mock CUPTI and the fake driver's injection, tests/mock_cupti) ---

const collector::Process& OnlyProcess(const Session& session) {
  EXPECT_EQ(session.processes.size(), 1u);
  return session.processes.begin()->second;
}

size_t KernelsOf(const Session& session) {
  return std::count_if(session.gpu_activities.begin(), session.gpu_activities.end(),
                       [](const collector::GpuActivity& activity) {
                         return std::holds_alternative<collector::GpuKernel>(activity.detail);
                       });
}

TEST(InjectCupti, RecordsEveryCallOnceWithTheGpuWorkItCaused) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Injected({AppPath("api_tour_app")}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.err, "");
  Session session = ReadOrFail(session_dir.path());
  const collector::Process& process = OnlyProcess(session);
  EXPECT_EQ(process.capture.mode, collector::CaptureMode::kCupti) << process.capture.note;
  EXPECT_NE(process.capture.note.find(MockCuptiPath()), std::string::npos) << process.capture.note;

  // The same calls in the same order as the program printed them, each once, named without
  // CUPTI's version suffix; CUPTI also sees the calls interposition does not wrap. The first call
  // starts the driver (and CUPTI with it), so interposition records that one; every other has its
  // own correlation id.
  std::vector<std::string> printed;
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) printed.push_back(line.substr(4, line.find(' ') - 4));
  const std::set<std::string> unprinted = {"cudaStreamBeginCapture", "cudaStreamEndCapture",
                                           "cudaGraphInstantiate", "cudaGetLastError"};
  std::vector<std::string> recorded;
  std::set<uint64_t> correlation_ids;
  for (const auto& call : session.api_calls) {
    if (unprinted.contains(session.ApiName(call))) continue;
    recorded.push_back(session.ApiName(call));
    if (&call != &session.api_calls.front()) {
      EXPECT_NE(call.correlation_id, 0u) << session.ApiName(call);
      correlation_ids.insert(call.correlation_id);
    }
  }
  EXPECT_EQ(recorded, printed);
  EXPECT_EQ(correlation_ids.size(), printed.size() - 1);

  // Every launch has its kernel, the copies have their bytes, the waits their sync records.
  collector::Analysis analysis = collector::Analyze(session, {});
  EXPECT_EQ(analysis.gpu.launch_calls, 2u);  // one direct, one captured into the graph
  EXPECT_GE(analysis.gpu.kernels, 2u);
  EXPECT_EQ(analysis.gpu.launch_calls_with_kernel, 1u) << "the captured launch runs in the graph";
  EXPECT_EQ(analysis.gpu.launch_calls_captured, 1u);
  EXPECT_EQ(analysis.gpu.graph_launches, 1u);
  EXPECT_EQ(analysis.gpu.graph_kernels, 1u) << "the graph's kernel, by its launch's correlation id";
  bool copy_of_4096 = false;
  for (const auto& activity : session.gpu_activities) {
    if (const auto* copy = std::get_if<collector::GpuMemcpy>(&activity.detail)) {
      copy_of_4096 |= copy->bytes == 4096;
    }
  }
  EXPECT_TRUE(copy_of_4096);
  EXPECT_GT(analysis.gpu.synchronizations, 0u);
}

TEST(InjectCupti, ATakenCuptiFallsBackToInterpositionAndSaysSo) {
  TempDir session_dir;
  ProcessResult run =
      RunProcess(Injected({AppPath("api_tour_app")}, session_dir, {"MOCK_CUPTI_TAKEN=1"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  const collector::Process& process = OnlyProcess(session);
  EXPECT_EQ(process.capture.mode, collector::CaptureMode::kInterposition);
  EXPECT_NE(process.capture.note.find("taken"), std::string::npos) << process.capture.note;
  EXPECT_GE(session.api_calls.size(), 19u);  // interposition recorded them
  EXPECT_TRUE(session.gpu_activities.empty());
  ASSERT_FALSE(session.messages.empty());
  EXPECT_NE(session.messages[0].find("taken"), std::string::npos) << session.messages[0];
}

TEST(InjectCupti, AProfilerInsideTheProgramIsToldWhyItSeesNothing) {
  // The program links a libcupti of its own: that one is used, never a second (not even one named
  // by GPROF_CUPTI_LIB).
  TempDir session_dir;
  ProcessResult run = RunProcess(Injected({AppPath("in_process_profiler_app")}, session_dir,
                                          {"GPROF_CUPTI_LIB=/opt/elsewhere/libcupti.so.13"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "subscribe=39\n");  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
  Session session = ReadOrFail(session_dir.path());
  std::string messages;
  for (const auto& message : session.messages) messages += message + "\n";
  EXPECT_NE(messages.find("could not subscribe because gprof-run holds CUPTI"), std::string::npos)
      << messages;
  EXPECT_NE(messages.find("registered its own activity buffers"), std::string::npos) << messages;
  EXPECT_NE(messages.find("--cuda=preload"), std::string::npos) << messages;
  EXPECT_NE(OnlyProcess(session).capture.note.find(MockCuptiPath()), std::string::npos)
      << OnlyProcess(session).capture.note;
}

TEST(InjectCupti, ExitFromAnotherThreadHandsOverTheGpuRecords) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Injected({AppPath("exit_app"), "thread-exit", "5"}, session_dir));
  EXPECT_EQ(run.exit_code(), 5);
  Session session = ReadOrFail(session_dir.path());
  EXPECT_EQ(OnlyProcess(session).capture.mode, collector::CaptureMode::kCupti);
  EXPECT_GE(KernelsOf(session), 1u) << "the kernels of its first calls, ran before the exit";
}

TEST(InjectCupti, PreloadModeLeavesCuptiToOthers) {
  TempDir session_dir;
  ProcessResult run =
      RunProcess(Injected({AppPath("api_tour_app")}, session_dir, {"GPROF_CUDA_MODE=preload"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  EXPECT_EQ(OnlyProcess(session).capture.mode, collector::CaptureMode::kInterposition);
  EXPECT_NE(OnlyProcess(session).capture.note.find("--cuda=preload"), std::string::npos);
  EXPECT_GE(session.api_calls.size(), 19u);
  EXPECT_TRUE(session.gpu_activities.empty());
}

// GPROF_CUPTI_API_RECORDS, the knob of scripts/gpu/bench_capture_parts.sh: the same GPU work
// whichever source the API calls come from, and gpu-only records none (nor does interposition
// record them instead).
TEST(InjectCupti, EachApiSourceRecordsTheSameGpuWork) {
  TempDir callbacks_dir, activity_dir, gpu_only_dir;
  for (auto [dir, source] :
       {std::pair{&callbacks_dir, "callbacks"}, std::pair{&activity_dir, "activity"},
        std::pair{&gpu_only_dir, "gpu-only"}}) {
    ProcessResult run = RunProcess(Injected({AppPath("api_tour_app")}, *dir,
                                            {std::string("GPROF_CUPTI_API_RECORDS=") + source}));
    ASSERT_EQ(run.exit_code(), 0) << source << ": " << run.err;
  }
  Session callbacks = ReadOrFail(callbacks_dir.path());
  Session activity = ReadOrFail(activity_dir.path());
  Session gpu_only = ReadOrFail(gpu_only_dir.path());
  EXPECT_NE(OnlyProcess(activity).capture.note.find("activity records"), std::string::npos);
  EXPECT_NE(OnlyProcess(gpu_only).capture.note.find("no API call recorded"), std::string::npos);
  EXPECT_GE(KernelsOf(callbacks), 2u);
  EXPECT_EQ(KernelsOf(activity), KernelsOf(callbacks));
  EXPECT_EQ(KernelsOf(gpu_only), KernelsOf(callbacks));
  // Activity records keep a runtime call's driver calls as records of their own: more, not fewer.
  EXPECT_GE(activity.api_calls.size(), callbacks.api_calls.size() - 1);
  // The first call starts the driver and CUPTI with it: interposition records that one only.
  EXPECT_LE(gpu_only.api_calls.size(), 1u);
}

TEST(InjectCupti, AMovedCuptiClockIsMeasuredAndCorrected) {
  // What Kineto does when it registers its own timestamp callback: CUPTI's clock is no longer
  // CLOCK_MONOTONIC. The kernels must still land inside the calls that launched them.
  TempDir session_dir;
  ProcessResult run = RunProcess(
      Injected({AppPath("api_tour_app")}, session_dir, {"MOCK_CUPTI_CLOCK_OFFSET_NS=5000000000"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  const collector::Process& process = OnlyProcess(session);
  ASSERT_FALSE(process.clock_offsets.empty());
  EXPECT_NEAR(static_cast<double>(process.clock_offsets.back().offset_ns), 5e9, 1e6);
  collector::GpuCorrelation correlation(session);
  int checked = 0;
  for (const auto& call : session.api_calls) {
    for (const collector::GpuActivity* activity : correlation.ActivitiesOf(call)) {
      if (!std::holds_alternative<collector::GpuKernel>(activity->detail)) continue;
      EXPECT_GE(activity->start_ns, call.enter_ns) << session.ApiName(call);
      EXPECT_LT(activity->start_ns, call.exit_ns + 1000000000ull);
      ++checked;
    }
  }
  EXPECT_GE(checked, 1);
}

TEST(InjectCupti, RecordsCuptiCouldNotKeepAreCounted) {
  TempDir session_dir;
  ProcessResult run =
      RunProcess(Injected({AppPath("api_tour_app")}, session_dir, {"MOCK_CUPTI_MAX_BUFFERS=0"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  EXPECT_TRUE(session.gpu_activities.empty());
  EXPECT_GT(OnlyProcess(session).gpu_dropped_records, 0u);
  bool said = false;
  for (const auto& lost : session.lost)
    said |= lost.what.find("GPU activity records") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(InjectCupti, SeesAProgramThatLinksTheRuntimeStatically) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Injected({AppPath("static_runtime_app")}, session_dir,
                                          {"GPROF_CUPTI_LIB=" + MockCuptiPath()}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  size_t printed = std::count(run.out.begin(), run.out.end(), '\n');
  EXPECT_EQ(session.api_calls.size(), printed);
  EXPECT_GE(KernelsOf(session), 1u);

  // Interposition alone sees none of them.
  TempDir preloaded_dir;
  ASSERT_EQ(RunProcess(Preloaded({AppPath("static_runtime_app")}, preloaded_dir)).exit_code(), 0);
  auto preloaded = ReadSession(preloaded_dir.path());
  EXPECT_TRUE(!preloaded.ok() || preloaded->api_calls.empty());
}

TEST(InjectCupti, SlowCallsCarryTheirNativeStack) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Injected({AppPath("freeze_app"), "--rounds", "1"}, session_dir,
                                          {"GPROF_STACK_THRESHOLD_NS=1000000"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  int slow = 0;
  for (const auto& call : session.api_calls) {
    if (call.duration() < 1000000) continue;
    ++slow;
    const collector::NativeStack* stack = session.CallStackOf(call);
    ASSERT_NE(stack, nullptr) << session.ApiName(call) << " at " << call.enter_ns;
    ASSERT_GE(stack->ips.size(), 3u) << session.ApiName(call) << ": " << stack->cut_short;
    std::string frames;
    for (const auto& frame : collector::NativeStackFrames(session, *stack)) frames += frame + "\n";
    EXPECT_EQ(frames.find("mock_cupti"), std::string::npos) << "CUPTI's own frames:\n" << frames;
    EXPECT_EQ(frames.find("libgprof_inject"), std::string::npos) << frames;
    EXPECT_EQ(frames.find("gprof::inject"), std::string::npos) << frames;
    // Seen through CUPTI, the stack starts in the runtime's function; an interposed call's starts
    // in its caller (the interposer's frame is left out). Below it, the program's own frames, to
    // its thread's start.
    if (call.correlation_id != 0) {
      EXPECT_NE(frames.find(session.ApiName(call)), std::string::npos) << frames;
    }
    EXPECT_TRUE(frames.find("RunLauncher(") != std::string::npos ||
                frames.find("main::{lambda") != std::string::npos)
        << frames;
    EXPECT_NE(frames.find("start_thread"), std::string::npos) << frames;
    EXPECT_TRUE(stack->cut_short.empty()) << stack->cut_short << "\n" << frames;
  }
  EXPECT_GE(slow, 4);  // the holder's sync and the launches it blocked
}

// Issue 18: a slow call's stack is taken without the dynamic loader. While a thread of the
// program holds the loader's lock (a plugin's constructor under dlopen, a dl_iterate_phdr walk),
// another thread's slow CUDA calls take as long as they take without gprof-run: taking their
// stacks (dladdr, libunwind's dl_iterate_phdr) once made them wait for the lock. The stacks are
// unwound after the run, and name the program's own frames.
TEST(InjectCupti, ASlowCallsStackIsTakenWithoutTheLoadersLock) {
  for (const char* hold : {"dlopen", "iterate"}) {
    for (bool cupti : {true, false}) {
      SCOPED_TRACE(std::string(hold) + (cupti ? ", CUPTI" : ", interposed"));
      TempDir session_dir;
      std::vector<std::string> argv = {
          AppPath("loader_lock_app"), "--hold", hold, "--hold-ms", "1500", "--calls", "4"};
      ProcessSpec spec = cupti ? Injected(argv, session_dir, {"GPROF_STACK_THRESHOLD_NS=1000000"})
                               : Preloaded(argv, session_dir);
      if (!cupti) spec.set_env.push_back("GPROF_STACK_THRESHOLD_NS=1000000");
      ProcessResult run = RunProcess(spec);
      ASSERT_EQ(run.exit_code(), 0) << run.err;
      std::map<std::string, double> figures;
      std::istringstream lines(run.out);
      for (std::string name; lines >> name;) lines >> figures[name];
      ASSERT_GE(figures["held_ms"], 1400) << run.out;
      ASSERT_EQ(figures["calls_in_hold"], 4) << "every call while the lock was held\n" << run.out;
      // 20 ms kernels: a call that waited for the lock would take most of the 1.5 s.
      EXPECT_LT(figures["longest_sync_ms"], 500) << run.out;

      Session session = ReadOrFail(session_dir.path());
      int stacks = 0;
      for (const auto& call : session.api_calls) {
        if (session.ApiName(call) != "cudaStreamSynchronize" || call.duration() < 1000000) continue;
        const collector::NativeStack* stack = session.CallStackOf(call);
        ASSERT_NE(stack, nullptr);
        ++stacks;
        std::vector<std::string> frames = collector::NativeStackFrames(session, *stack);
        std::string text;
        for (const std::string& frame : frames) text += frame + "\n";
        ASSERT_GE(frames.size(), 2u) << text;
        // Innermost first: the runtime's own frames (CUPTI's callbacks come from inside it), or
        // straight the program's (interposed: the interposer's frame is left out).
        size_t own = 0;
        while (own < frames.size() &&
               frames[own].find("SyncWhileTheLoaderIsHeld") == std::string::npos)
          ++own;
        ASSERT_LT(own, frames.size()) << text;
        if (cupti) {
          ASSERT_GT(own, 0u) << text;
          EXPECT_NE(frames[own - 1].find("cudaStreamSynchronize"), std::string::npos) << text;
        } else {
          EXPECT_EQ(own, 0u) << text;
        }
        EXPECT_NE(text.find("start_thread"), std::string::npos) << "to the thread's start\n"
                                                                << text;
      }
      EXPECT_EQ(stacks, 4);
    }
  }
}

TEST(InjectCupti, AFatalSignalStillHandsOverTheLastRecords) {
  TempDir session_dir;
  ProcessSpec spec = Injected({AppPath("freeze_app"), "--rounds", "1000"}, session_dir);
  spec.signal_after_ms = 1500;
  spec.signal = SIGTERM;
  ProcessResult run = RunProcess(spec);
  uint64_t signalled_at = run.signalled_at_ns;
  EXPECT_EQ(run.exit_code(), 128 + SIGTERM) << "the signal's own outcome, unchanged";
  Session session = ReadOrFail(session_dir.path());
  ASSERT_FALSE(session.gpu_activities.empty());
  uint64_t last_end = 0;
  for (const auto& activity : session.gpu_activities)
    last_end = std::max(last_end, activity.end_ns);
  // Kernels run back to back (one per launcher every 0.5 ms): the newest recorded one ended just
  // before the signal. Without the flush on the signal, what came since the last periodic flush
  // (up to 0.5 s of CUPTI's, 0.2 s of the writer's) would be missing.
  EXPECT_GT(last_end + 20000000ull, signalled_at)
      << "the newest GPU record is " << (signalled_at - last_end) / 1e6
      << " ms older than the signal";
}

TEST(InjectCupti, ForkedChildrenInitialiseCuptiOfTheirOwn) {
  TempDir session_dir;
  ProcessResult run =
      RunProcess(Injected({AppPath("fork_app"), "--children", "3", "--calls", "60"}, session_dir));
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  std::regex pattern(R"(child pid=(\d+) calls=(\d+))");
  std::istringstream lines(run.out);
  std::string line;
  int children = 0;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, pattern)) continue;
    uint32_t pid = static_cast<uint32_t>(std::stoul(match[1]));
    EXPECT_EQ(CallsOf(session, pid).size(), std::stoul(match[2])) << line;
    EXPECT_EQ(session.processes.at(pid).capture.mode, collector::CaptureMode::kCupti);
    ++children;
  }
  EXPECT_EQ(children, 3);
}

// --- what bounds a recording (inject/shared/recording_limits.h) ---

TEST(Inject, RecordsOnlyCallsThatStartInsideTheWindow) {
  // A window that ended before the program started: nothing recorded, nothing created.
  TempDir before;
  ProcessSpec spec = Preloaded({AppPath("api_tour_app")}, before);
  spec.set_env.push_back(std::string(kWindowStartEnv) + "=1");
  spec.set_env.push_back(std::string(kWindowEndEnv) + "=" + std::to_string(NowNs()));
  ProcessResult run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_TRUE(std::filesystem::is_empty(before.path())) << "a file for a process that recorded "
                                                           "nothing";

  // A window that opens now and has no end: every call.
  TempDir open;
  spec = Preloaded({AppPath("api_tour_app"), "burst", "100000"}, open);
  uint64_t start_ns = NowNs();
  spec.set_env.push_back(std::string(kWindowStartEnv) + "=" + std::to_string(start_ns));
  run = RunProcess(spec);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(open.path());
  size_t queries = 0;
  for (const auto& call : session.api_calls) {
    EXPECT_GE(call.enter_ns, start_ns);
    queries += session.ApiName(call) == "cudaEventQuery";
  }
  EXPECT_EQ(queries, 100000u + 1);
}

TEST(SizeBudget, StopsAtTheDataLimitAndKeepsRoomForClosingChunks) {
  SizeBudget made;
  ASSERT_EQ(made.Create(80000), 0);
  SizeBudget first, second;  // two writers of one session
  ASSERT_EQ(first.Attach(made.handle().c_str()), 0);
  ASSERT_EQ(second.Attach(made.handle().c_str()), 0);
  // Data may use 7/8 of the cap: 70000 bytes.
  EXPECT_TRUE(first.Charge(40000, 100000, 10, false));
  EXPECT_TRUE(second.Charge(30000, 90000, 9, false));
  EXPECT_FALSE(second.stopped());
  EXPECT_FALSE(first.Charge(1, 5, 1, false));  // over the data limit: refused, and stopped
  EXPECT_TRUE(second.stopped());
  SizeBudget::Counts counts = second.Read();
  EXPECT_NE(counts.stopped_at_ns, 0u);
  EXPECT_EQ(counts.used_bytes, 70000u);
  EXPECT_EQ(counts.refused_records, 1u);
  EXPECT_FALSE(second.Charge(0, 0, 0, false)) << "nothing after the stop, even what would fit";
  // Closing chunks use the room kept back, up to the cap itself, without moving the stop time.
  EXPECT_TRUE(first.Charge(9000, 20000, 3, true));
  EXPECT_FALSE(second.Charge(2000, 4000, 2, true));
  EXPECT_TRUE(second.Charge(1000, 4000, 2, true));
  counts = first.Read();
  EXPECT_EQ(counts.used_bytes, 80000u);
  EXPECT_EQ(counts.refused_records, 1u + 2u);
  EXPECT_EQ(counts.refused_bytes, 5u + 4000u);

  // Shared across processes: a forked child's charge is the parent's too.
  SizeBudget parent;
  ASSERT_EQ(parent.Create(1 << 20), 0);
  std::string handle = parent.handle();
  pid_t child = fork();
  if (child == 0) {
    SizeBudget mine;
    _exit(mine.Attach(handle.c_str()) == 0 && mine.Charge(4096, 1, 1, false) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(parent.Read().used_bytes, 4096u);

  // A handle with another token (a segment made later with the same id), or none that reads, is
  // not attached.
  std::string other_token = handle.substr(0, handle.find(':') + 1) + "12345";
  EXPECT_EQ(SizeBudget().Attach(other_token.c_str()), EINVAL);
  EXPECT_NE(SizeBudget().Attach("not a handle"), 0);
}

// The budget and the session's control are shared memory, not files (shared_segment.h): they go
// when the last process holding them does, killed or not, and leave nothing behind.
TEST(SharedSegment, IsGoneOnceNoProcessHoldsIt) {
  std::string handle;
  {
    SessionControl control;
    ASSERT_EQ(control.Create(), 0);
    handle = control.handle();
    SessionControl writer;
    ASSERT_EQ(writer.Attach(handle.c_str()), 0);
    int slot = writer.Register(1234, 5678, 4026531836);
    EXPECT_GE(slot, 0);
    int seen = 0;
    control.ForEachWriter([&](uint32_t pid, uint64_t ticks, uint32_t pid_namespace) {
      seen += pid == 1234 && ticks == 5678 && pid_namespace == 4026531836;
    });
    EXPECT_EQ(seen, 1);
  }
  EXPECT_NE(SessionControl().Attach(handle.c_str()), 0) << "still there after every detach";
}

}  // namespace
}  // namespace gprof::test
