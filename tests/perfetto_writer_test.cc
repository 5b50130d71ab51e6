// The Perfetto writer, checked by decoding its output: with protozero against field numbers looked
// up in perfetto_trace.proto independently of the writer, and with protoc against the schema
// itself.
#include "collector/writers/perfetto/perfetto_writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <protozero/pbf_reader.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/writers/perfetto/proto_encoder.h"
#include "inject/format/kernel_events.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::collector {
namespace {

using namespace gprof::test;  // the trace decoder

// ---------------------------------------------------------------------------------------------
// The session: two processes, a main thread whose CUDA calls nest, a data thread that holds a lock
// and wakes it, a thread only the kernel saw (no name), a worker whose calls start together and
// overlap; wakers in the tree, outside it and interrupts; futex waits and wakes; losses.

constexpr uint64_t kBase = 1'000'000'000'000;  // 1000 s of CLOCK_MONOTONIC
constexpr uint32_t kMain = 100, kPinThread = 101, kKernelOnly = 102, kWorker = 200, kOutsider = 999;
constexpr int32_t kFutexWaitStack = 1, kFutexWakeStack = 2, kPreemptStack = 3, kIoStack = 4;
constexpr uint64_t kStream = 0x7f00aa00;
constexpr uint64_t kGil = 0x7f1234;

uint64_t At(uint64_t offset_ns) { return kBase + offset_ns; }

void AddStack(Session& session, int32_t id, const std::vector<std::string>& frames) {
  uint64_t address = 0xffffffff81000000ull + static_cast<uint64_t>(id) * 0x1000;
  for (const std::string& frame : frames) {
    session.kernel_stacks[id].push_back(address);
    session.kernel_symbols[address] = frame;
    address += 0x10;
  }
}

ApiCall Call(uint32_t pid, uint32_t tid, uint32_t name_index, uint64_t enter, uint64_t exit) {
  ApiCall call;
  call.pid = pid;
  call.tid = tid;
  call.name_index = name_index;
  call.enter_ns = At(enter);
  call.exit_ns = At(exit);
  return call;
}

OffCpuInterval OffCpu(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, uint32_t state,
                      int32_t stack) {
  OffCpuInterval interval;
  interval.pid = pid;
  interval.tid = tid;
  interval.start_ns = At(start);
  interval.end_ns = At(end);
  interval.raw_state = state;
  interval.kstack_id = stack;
  return interval;
}

OffCpuInterval Woken(Session& session, OffCpuInterval interval, uint64_t wake, uint32_t waker_pid,
                     uint32_t waker_tid, const std::string& waker_comm, int32_t waker_stack) {
  interval.wake_ns = At(wake);
  interval.waker_pid = waker_pid;
  interval.waker_tid = waker_tid;
  interval.waker_comm = session.CommIndex(waker_comm);
  interval.waker_kstack_id = waker_stack;
  return interval;
}

FutexCall Futex(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, uint32_t op, uint32_t val,
                int64_t ret) {
  FutexCall call;
  call.pid = pid;
  call.tid = tid;
  call.start_ns = At(start);
  call.end_ns = At(end);
  call.op = op;
  call.uaddr = kGil;
  call.val = val;
  call.ret = ret;
  return call;
}

enum ApiName : uint32_t {
  kCudaLaunchKernel,
  kCuLaunchKernel,
  kCudaDeviceSynchronize,
  kCudaMemcpyAsync
};

Process MakeProcess(uint32_t pid, uint32_t ppid, std::vector<std::string> cmdline) {
  Process process;
  process.pid = pid;
  process.ppid = ppid;
  process.exe = "/usr/bin/python3.12";
  process.cmdline = std::move(cmdline);
  return process;
}

Session MakeSession() {
  Session session;
  session.meta.start_monotonic_ns = kBase;
  session.meta.start_boottime_ns = kBase + 777'000'000;
  session.meta.kernel_recording = true;
  session.processes[kMain] = MakeProcess(kMain, 1, {"python", "train.py"});
  session.processes[kWorker] = MakeProcess(kWorker, kMain, {"python", "worker.py"});
  session.threads[kMain] = Thread{kMain, kMain, "python", 0};
  session.threads[kPinThread] = Thread{kMain, kPinThread, "pt_data_pin", 0};
  session.threads[kKernelOnly] = Thread{kMain, kKernelOnly, "", 0};
  session.threads[kWorker] = Thread{kWorker, kWorker, "worker", 0};
  session.api_names = {"cudaLaunchKernel", "cuLaunchKernel", "cudaDeviceSynchronize",
                       "cudaMemcpyAsync"};

  ApiCall launch = Call(kMain, kMain, kCudaLaunchKernel, 1000, 5000);
  launch.flags = 1;  // kApiCallHasStream
  launch.stream = kStream;
  launch.correlation_id = 1;
  ApiCall driver_launch = Call(kMain, kMain, kCuLaunchKernel, 2000, 4000);
  driver_launch.correlation_id = 2;
  ApiCall failed_copy = Call(kMain, kMain, kCudaMemcpyAsync, 6100, 7000);
  failed_copy.return_code = 700;
  session.api_calls = {
      launch,
      Call(kMain, kPinThread, kCudaDeviceSynchronize, 1500, 9000),
      driver_launch,
      failed_copy,
      // Entered in the same nanosecond, the nested one listed first.
      Call(kWorker, kWorker, kCuLaunchKernel, 8000, 8200),
      Call(kWorker, kWorker, kCudaLaunchKernel, 8000, 8500),
      // The second starts inside the first and ends after it.
      Call(kWorker, kWorker, kCudaMemcpyAsync, 9000, 9500),
      Call(kWorker, kWorker, kCudaDeviceSynchronize, 9200, 9800),
  };

  OffCpuInterval unfinished = Woken(session, OffCpu(kMain, kMain, 10000, 12000, 1, kFutexWaitStack),
                                    11000, kWorker, kWorker, "worker", -1);
  unfinished.flags = 1;  // GPROF_OFFCPU_UNFINISHED
  session.off_cpu = {
      Woken(session, OffCpu(kMain, kMain, 5000, 6000, 1, kFutexWaitStack), 5800, kMain, kPinThread,
            "pt_data_pin", kFutexWakeStack),
      OffCpu(kMain, kKernelOnly, 5100, 5600, 0, kPreemptStack),
      Woken(session, OffCpu(kWorker, kWorker, 5200, 7000, 2, kIoStack), 6500, 42, kOutsider,
            "kworker/0:1", -1),
      Woken(session, OffCpu(kMain, kPinThread, 9100, 9900, 1, -14), 9400, 0, 0, "swapper/1", -1),
      unfinished,
  };
  session.futex_calls = {
      Futex(kMain, kMain, 4900, 6050, 9 | 128, 0, 0),
      Futex(kMain, kPinThread, 5790, 5810, 1 | 128, 1, 1),
  };
  AddStack(session, kFutexWaitStack,
           {"__schedule+0x2f0", "schedule+0x5e", "futex_wait_queue+0x60", "futex_wait+0x177",
            "do_futex+0x106"});
  AddStack(session, kFutexWakeStack,
           {"try_to_wake_up+0x1f0", "wake_up_q+0x4a", "futex_wake+0x15c"});
  AddStack(session, kPreemptStack,
           {"__schedule+0x2f0", "preempt_schedule_irq+0x39", "irqentry_exit+0x30"});
  AddStack(
      session, kIoStack,
      {"__schedule+0x2f0", "schedule+0x5e", "io_schedule+0x46", "folio_wait_bit_common+0x13d"});
  session.lost = {{"kernel ring buffer: off-CPU", 42, {}}, {"CUDA call records of pid 200", 3, {}}};
  session.diagnostics = {{"kernel.gpr", 4096, "truncated chunk salvaged"}};
  session.messages = {"pid 100: CUPTI subscriber taken by another tool"};
  return session;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string TracePath(const std::string& name) {
  return testing::TempDir() + "perfetto_writer_test_" + std::to_string(getpid()) + "_" + name +
         ".perfetto-trace";
}

class PerfettoWriterTest : public testing::Test {
 protected:
  virtual Session BuildSession() const { return MakeSession(); }

  void SetUp() override {
    session_ = BuildSession();
    path_ = TracePath(testing::UnitTest::GetInstance()->current_test_info()->name());
    Status written = WritePerfettoTrace(session_, path_);
    ASSERT_TRUE(written.ok()) << written.message();
    trace_ = TraceDecoder().Decode(ReadFile(path_));
  }

  void TearDown() override { std::filesystem::remove(path_); }

  const DecodedTrack* ThreadTrack(int64_t tid) const {
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.is_thread && track.tid == tid) return &track;
    }
    return nullptr;
  }

  const DecodedTrack* ChildTrack(int64_t tid, const std::string& name) const {
    const DecodedTrack* thread = ThreadTrack(tid);
    for (const DecodedTrack& track : trace_.tracks) {
      if (thread != nullptr && track.parent_uuid == thread->uuid && track.name == name)
        return &track;
    }
    return nullptr;
  }

  // A track named `name` under the process `pid` (a GPU stream, the GPU synchronization track).
  const DecodedTrack* ProcessChildTrack(int64_t pid, const std::string& name) const {
    for (const DecodedTrack& process : trace_.tracks) {
      if (!process.is_process || process.pid != pid) continue;
      for (const DecodedTrack& track : trace_.tracks) {
        if (track.parent_uuid == process.uuid && track.name == name) return &track;
      }
    }
    return nullptr;
  }

  const DecodedTrack* NamedTrack(const std::string& name) const {
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.name == name && track.parent_uuid == 0) return &track;
    }
    return nullptr;
  }

  std::vector<Slice> Slices(const DecodedTrack* track) {
    EXPECT_NE(track, nullptr);
    if (track == nullptr) return {};
    std::vector<std::string> errors;
    std::vector<Slice> slices = SlicesOf(trace_, track->uuid, &errors);
    EXPECT_TRUE(errors.empty()) << testing::PrintToString(errors);
    return slices;
  }

  std::vector<const DecodedEvent*> Instants(const DecodedTrack* track) const {
    std::vector<const DecodedEvent*> instants;
    for (const DecodedEvent& event : trace_.events) {
      if (track != nullptr && event.track_uuid == track->uuid && event.type == kInstant)
        instants.push_back(&event);
    }
    return instants;
  }

  Session session_;
  std::string path_;
  DecodedTrace trace_;
};

TEST_F(PerfettoWriterTest, FollowsTheFormatsRules) {
  // Sequence flags, clocks, interning once per sequence, every iid resolved, no unknown field.
  EXPECT_TRUE(trace_.errors.empty()) << testing::PrintToString(trace_.errors);
  EXPECT_FALSE(trace_.events.empty());
}

// Each track's events are on its sequence's incremental clock: a packet holds the time since the
// previous event of its track (the first one, the time since the clock's anchor at 0).
TEST_F(PerfettoWriterTest, SendsEachTracksTimesAsDeltas) {
  std::map<uint64_t, uint64_t> last_on_track;
  for (const DecodedEvent& event : trace_.events) {
    EXPECT_EQ(event.clock_id, 64u) << event.name;
    uint64_t previous = last_on_track[event.track_uuid];
    EXPECT_EQ(event.encoded_timestamp, event.timestamp_ns - previous) << event.name;
    last_on_track[event.track_uuid] = event.timestamp_ns;
  }
}

TEST_F(PerfettoWriterTest, StatesMonotonicAsTheTraceClock) {
  EXPECT_EQ(trace_.primary_trace_clock, kClockMonotonic);
  EXPECT_EQ(trace_.clock_snapshot[kClockMonotonic], session_.meta.start_monotonic_ns);
  EXPECT_EQ(trace_.clock_snapshot[kClockBoottime], session_.meta.start_boottime_ns);
}

TEST_F(PerfettoWriterTest, DescribesEveryThreadOnceWithItsName) {
  std::map<int64_t, int> descriptors;
  for (const DecodedTrack& track : trace_.tracks) {
    if (track.is_thread) ++descriptors[track.tid];
  }
  EXPECT_EQ(descriptors,
            (std::map<int64_t, int>{{kMain, 1}, {kPinThread, 1}, {kKernelOnly, 1}, {kWorker, 1}}));
  EXPECT_EQ(ThreadTrack(kPinThread)->thread_name, "pt_data_pin");
  EXPECT_EQ(ThreadTrack(kPinThread)->pid, kMain);
  EXPECT_EQ(ThreadTrack(kWorker)->thread_name, "worker");
  EXPECT_FALSE(ThreadTrack(kKernelOnly)->thread_name.has_value());
}

TEST_F(PerfettoWriterTest, DescribesProcessesWithNameAndCommandLine) {
  std::map<int64_t, const DecodedTrack*> processes;
  for (const DecodedTrack& track : trace_.tracks) {
    if (track.is_process) processes[track.pid] = &track;
  }
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[kMain]->process_name, "python3.12");
  EXPECT_EQ(processes[kMain]->cmdline, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(ThreadTrack(kWorker)->parent_uuid, processes[kWorker]->uuid);
}

TEST_F(PerfettoWriterTest, WritesNestedCudaCallsWithTheirAnnotations) {
  std::vector<Slice> slices = Slices(ThreadTrack(kMain));
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].name, "cudaLaunchKernel");
  EXPECT_EQ(slices[0].depth, 0u);
  EXPECT_EQ(slices[0].begin->categories, std::vector<std::string>{"cuda"});
  EXPECT_EQ(slices[0].begin->annotations, (std::map<std::string, std::string>{
                                              {"stream", "0x7f00aa00"}, {"correlation_id", "1"}}));
  EXPECT_EQ(slices[1].name, "cuLaunchKernel");
  EXPECT_EQ(slices[1].depth, 1u);
  EXPECT_EQ(slices[1].begin_ns, At(2000));
  EXPECT_EQ(slices[1].end_ns, At(4000));
  EXPECT_EQ(slices[2].name, "cudaMemcpyAsync");
  EXPECT_EQ(slices[2].begin->annotations.at("return_code"), "700");
}

TEST_F(PerfettoWriterTest, OpensTheLongerOfTwoCallsEnteredTogetherFirst) {
  std::vector<Slice> slices = Slices(ThreadTrack(kWorker));
  ASSERT_GE(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "cudaLaunchKernel");
  EXPECT_EQ(slices[0].depth, 0u);
  EXPECT_EQ(slices[1].name, "cuLaunchKernel");
  EXPECT_EQ(slices[1].depth, 1u);
}

TEST_F(PerfettoWriterTest, EndsACallThatOutlivesItsEnclosingCallWithIt) {
  std::vector<Slice> slices = Slices(ThreadTrack(kWorker));
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[3].name, "cudaDeviceSynchronize");
  EXPECT_EQ(slices[3].depth, 1u);
  EXPECT_EQ(slices[3].end_ns, At(9500));
  EXPECT_EQ(slices[3].begin->annotations.at("recorded_duration_ns"), "600");
}

TEST_F(PerfettoWriterTest, SplitsAnOffCpuIntervalAtItsWakeup) {
  const DecodedTrack* off_cpu = ChildTrack(kMain, "off-CPU");
  std::vector<Slice> slices = Slices(off_cpu);
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0].name, "S futex_wait_queue");
  EXPECT_EQ(slices[0].begin_ns, At(5000));
  EXPECT_EQ(slices[0].end_ns, At(5800));
  EXPECT_EQ(slices[0].begin->annotations.at("state"), "S (sleeping, prev_state 0x1)");
  EXPECT_EQ(CallstackText(*slices[0].begin, true),
            "__schedule+0x2f0 <- schedule+0x5e <- futex_wait_queue+0x60 <- futex_wait+0x177 <- "
            "do_futex+0x106");
  EXPECT_EQ(slices[1].name, "runnable (woken by pt_data_pin (101) of python3.12 (pid 100))");
  EXPECT_EQ(slices[1].begin_ns, At(5800));
  EXPECT_EQ(slices[1].end_ns, At(6000));
  EXPECT_EQ(slices[1].depth, 0u);
  EXPECT_EQ(slices[1].begin->annotations.at("waker"), "pt_data_pin (101) of python3.12 (pid 100)");
  EXPECT_EQ(CallstackText(*slices[1].begin, true),
            "try_to_wake_up+0x1f0 <- wake_up_q+0x4a <- futex_wake+0x15c");
}

TEST_F(PerfettoWriterTest, NamesTheWaitAfterTheFirstFrameThatIsNotTheScheduler) {
  std::vector<Slice> io_wait = Slices(ChildTrack(kWorker, "off-CPU"));
  ASSERT_EQ(io_wait.size(), 2u);
  EXPECT_EQ(io_wait[0].name, "D folio_wait_bit_common");
  std::vector<Slice> preempted = Slices(ChildTrack(kKernelOnly, "off-CPU"));
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_EQ(preempted[0].name, "R preempted");
  EXPECT_EQ(preempted[0].begin_ns, At(5100));
  EXPECT_EQ(preempted[0].end_ns, At(5600));
  std::vector<Slice> no_stack = Slices(ChildTrack(kPinThread, "off-CPU"));
  ASSERT_EQ(no_stack.size(), 2u);
  EXPECT_EQ(no_stack[0].name, "S sleeping");
  EXPECT_TRUE(no_stack[0].begin->callstack.empty());
}

TEST_F(PerfettoWriterTest, MarksAnIntervalStillOpenWhenRecordingStopped) {
  std::vector<Slice> slices = Slices(ChildTrack(kMain, "off-CPU"));
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[2].begin->annotations.at("still_off_cpu_at_end"), "true");
  EXPECT_EQ(slices[0].begin->annotations.count("still_off_cpu_at_end"), 0u);
}

TEST_F(PerfettoWriterTest, DrawsAWakeArrowFromEachWakerInTheTree) {
  std::map<uint64_t, const DecodedEvent*> origins, ends;
  for (const DecodedEvent& event : trace_.events) {
    for (uint64_t id : event.flow_ids)
      EXPECT_TRUE(origins.emplace(id, &event).second) << "flow " << id;
    for (uint64_t id : event.terminating_flow_ids)
      EXPECT_TRUE(ends.emplace(id, &event).second) << "flow " << id;
  }
  ASSERT_EQ(origins.size(), 2u);
  ASSERT_EQ(ends.size(), 2u);
  std::set<std::string> arrows;
  for (const auto& [id, origin] : origins) {
    ASSERT_EQ(ends.count(id), 1u);
    const DecodedEvent* end = ends[id];
    EXPECT_EQ(origin->type, kInstant);
    EXPECT_EQ(origin->timestamp_ns, end->timestamp_ns);
    arrows.insert(origin->name + " -> " + end->name);
  }
  EXPECT_EQ(arrows,
            (std::set<std::string>{"wake python (100) of python3.12 -> runnable (woken by pt_data_pin (101) of python3.12 (pid 100))",
                                   "wake python (100) of python3.12 -> runnable (woken by worker (200) of python3.12)"}));
  ASSERT_EQ(Instants(ThreadTrack(kPinThread)).size(), 1u);
  EXPECT_EQ(Instants(ThreadTrack(kPinThread))[0]->timestamp_ns, At(5800));
}

TEST_F(PerfettoWriterTest, NamesWakersOutsideTheTreeWithoutAnArrow) {
  std::vector<Slice> worker = Slices(ChildTrack(kWorker, "off-CPU"));
  ASSERT_EQ(worker.size(), 2u);
  EXPECT_EQ(worker[1].name, "runnable (woken by kworker/0:1 (999))");
  EXPECT_EQ(worker[1].begin->annotations.at("waker"), "kworker/0:1 (999)");
  EXPECT_TRUE(worker[1].begin->terminating_flow_ids.empty());
  std::vector<Slice> pin = Slices(ChildTrack(kPinThread, "off-CPU"));
  ASSERT_EQ(pin.size(), 2u);
  EXPECT_EQ(pin[1].name, "runnable (woken by interrupt/idle)");
  EXPECT_TRUE(pin[1].begin->terminating_flow_ids.empty());
}

TEST_F(PerfettoWriterTest, WritesFutexCallsOnTheirOwnTrack) {
  std::vector<Slice> waits = Slices(ChildTrack(kMain, "futex"));
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].name, "FUTEX_WAIT_BITSET 0x7f1234");
  EXPECT_EQ(waits[0].begin->annotations,
            (std::map<std::string, std::string>{{"op", "FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG"},
                                                {"uaddr", "0x7f1234"},
                                                {"val", "0"},
                                                {"return", "0"}}));
  std::vector<Slice> wakes = Slices(ChildTrack(kPinThread, "futex"));
  ASSERT_EQ(wakes.size(), 1u);
  EXPECT_EQ(wakes[0].name, "FUTEX_WAKE 0x7f1234");
  EXPECT_EQ(wakes[0].begin->annotations.at("return"), "1");
  EXPECT_EQ(ChildTrack(kWorker, "futex"), nullptr)
      << "a thread without futex calls gets no futex track";
}

TEST_F(PerfettoWriterTest, ShowsLossesAndDiagnosticsOnTheGprofRunTrack) {
  std::vector<const DecodedEvent*> instants = Instants(NamedTrack("gprof-run"));
  std::map<std::string, std::map<std::string, std::string>> shown;
  for (const DecodedEvent* event : instants) {
    shown[event->name] = event->annotations;
    EXPECT_EQ(event->timestamp_ns, session_.meta.start_monotonic_ns);
  }
  EXPECT_EQ(shown,
            (std::map<std::string, std::map<std::string, std::string>>{
                {"lost: kernel ring buffer: off-CPU", {{"count", "42"}}},
                {"lost: CUDA call records of pid 200", {{"count", "3"}}},
                {"reader: truncated chunk salvaged", {{"file", "kernel.gpr"}, {"offset", "4096"}}},
                {"message: pid 100: CUPTI subscriber taken by another tool", {}},
            }));
}

TEST_F(PerfettoWriterTest, KeepsEveryTrackInOrderWithMatchedSlices) {
  std::set<uint64_t> event_tracks;
  for (const DecodedEvent& event : trace_.events) event_tracks.insert(event.track_uuid);
  std::set<uint64_t> described;
  for (const DecodedTrack& track : trace_.tracks) described.insert(track.uuid);
  for (uint64_t uuid : event_tracks) {
    EXPECT_EQ(described.count(uuid), 1u) << "events on undescribed track " << uuid;
    std::vector<std::string> errors;
    SlicesOf(trace_, uuid, &errors);
    EXPECT_TRUE(errors.empty()) << testing::PrintToString(errors);
  }
}

// Hundreds of threads with calls and waits open at once, their ends in every order: what waits
// for its time is kept differently past a few dozen (a heap), and back when they are fewer.
TEST(PerfettoWriter, KeepsEveryTrackInOrderWithHundredsOfSlicesOpenAtOnce) {
  Session session;
  session.api_names = {"cudaFree"};
  constexpr uint32_t kPid = 300, kThreads = 300;
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> expected;  // by tid
  for (uint32_t round = 0; round < 3; ++round) {
    uint64_t round_start = round * 1'000'000;
    for (uint32_t i = 0; i < kThreads; ++i) {
      uint32_t tid = kPid + 1 + i;
      // Starts in order, ends scrambled: each thread's calls outlast the others' starts. A call
      // nests in another, so that the last ends to run are of both, on one track.
      uint64_t enter = round_start + i * 10;
      uint64_t exit = round_start + 10'000 + (i * 7919) % 5000;
      session.api_calls.push_back(Call(kPid, tid, 0, enter, exit));
      session.api_calls.push_back(Call(kPid, tid, 0, enter + 1, exit - 1));
      expected[tid].emplace_back(At(enter), At(exit));
      expected[tid].emplace_back(At(enter + 1), At(exit - 1));
      OffCpuInterval wait = OffCpu(kPid, tid, enter + 2, exit - 2, 1, -1);
      session.off_cpu.push_back(Woken(session, wait, exit - 3 - (i * 31) % 100, kPid,
                                      kPid + 1 + (i + 1) % kThreads, "worker", -1));
    }
  }
  for (uint32_t i = 0; i < kThreads; ++i)
    session.threads[kPid + 1 + i] = Thread{kPid, kPid + 1 + i, "worker"};
  std::string path = TracePath("hundreds_open");
  ASSERT_TRUE(WritePerfettoTrace(session, path).ok());
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(path));
  std::filesystem::remove(path);
  EXPECT_TRUE(trace.errors.empty()) << testing::PrintToString(trace.errors);
  std::set<uint64_t> event_tracks;
  for (const DecodedEvent& event : trace.events) event_tracks.insert(event.track_uuid);
  for (uint64_t uuid : event_tracks) {
    std::vector<std::string> errors;
    SlicesOf(trace, uuid, &errors);
    EXPECT_TRUE(errors.empty()) << testing::PrintToString(errors);
  }
  for (const DecodedTrack& track : trace.tracks) {
    if (!track.is_thread) continue;
    std::vector<std::string> errors;
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    for (const Slice& slice : SlicesOf(trace, track.uuid, &errors))
      calls.emplace_back(slice.begin_ns, slice.end_ns);
    EXPECT_EQ(calls, expected[static_cast<uint32_t>(track.tid)]) << "tid " << track.tid;
  }
}

TEST(PerfettoWriter, GivesTracksToThreadsOnlyTheEventsName) {
  Session session;
  session.api_names = {"cudaFree"};
  session.api_calls = {Call(300, 301, 0, 10, 20)};
  std::string path = TracePath("unlisted_thread");
  ASSERT_TRUE(WritePerfettoTrace(session, path).ok());
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(path));
  std::filesystem::remove(path);
  EXPECT_TRUE(trace.errors.empty()) << testing::PrintToString(trace.errors);
  int threads = 0;
  for (const DecodedTrack& track : trace.tracks)
    threads += track.is_thread && track.tid == 301 && track.pid == 300;
  EXPECT_EQ(threads, 1);
}

TEST(PerfettoWriter, SaysWhenKernelRecordingWasOff) {
  Session session;
  session.meta.kernel_recording_note = "no CAP_BPF";
  std::string path = TracePath("kernel_off");
  ASSERT_TRUE(WritePerfettoTrace(session, path).ok());
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(path));
  std::filesystem::remove(path);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].name, "kernel recording off: no CAP_BPF");
}

TEST(PerfettoWriter, ShowsSignalsOnTheirThreadsSignalsTrackInTimeOrder) {
  Session session;
  session.threads[301] = Thread{300, 301, "trainer", 0};
  SignalSent term{At(500),
                  300,
                  301,
                  SIGTERM,
                  0,
                  4242,
                  session.CommIndex("timeout"),
                  GPROF_SIGNAL_TO_MANY,
                  GPROF_SIGNAL_DELIVERED};
  SignalSent first = term;
  first.time_ns = At(400);
  first.flags = 0;
  SignalSent child{
      At(450), 300, 301, SIGCHLD, 1, 302, session.CommIndex("worker"), 0, GPROF_SIGNAL_IGNORED};
  SignalSent alarm{At(600),
                   300,
                   301,
                   SIGALRM,
                   0x80,
                   0,
                   0,
                   GPROF_SIGNAL_FROM_INTERRUPT,
                   GPROF_SIGNAL_ALREADY_PENDING};
  session.signals = {term, first, child, alarm};  // by time on each CPU only
  std::string path = TracePath("signals");
  ASSERT_TRUE(WritePerfettoTrace(session, path).ok());
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(path));
  std::filesystem::remove(path);
  EXPECT_TRUE(trace.errors.empty()) << testing::PrintToString(trace.errors);
  uint64_t thread = 0, signals = 0;
  for (const DecodedTrack& track : trace.tracks) {
    if (track.is_thread && track.tid == 301) thread = track.uuid;
  }
  for (const DecodedTrack& track : trace.tracks) {
    if (thread != 0 && track.parent_uuid == thread && track.name == "signals") signals = track.uuid;
  }
  ASSERT_NE(signals, 0u);
  std::vector<std::string> shown;
  uint64_t last = 0;
  for (const DecodedEvent& event : trace.events) {
    if (event.track_uuid != signals) continue;
    EXPECT_EQ(event.type, kInstant);
    EXPECT_GE(event.timestamp_ns, last);
    last = event.timestamp_ns;
    std::string line = event.name + ", to " + event.annotations.at("to");
    if (event.annotations.count("outcome")) line += ", " + event.annotations.at("outcome");
    shown.push_back(line);
  }
  EXPECT_EQ(shown, (std::vector<std::string>{
                       "SIGTERM from timeout (4242), to process",
                       "SIGCHLD from worker (302), to process, ignored",
                       "SIGTERM from timeout (4242), to process group (one kill for many "
                       "processes)",
                       "SIGALRM from an interrupt, to process, merged into the same signal still "
                       "pending"}));
}

TEST(PerfettoWriter, NamesThePathItCannotWrite) {
  std::string path = testing::TempDir() + "no-such-directory/trace.perfetto-trace";
  Status written = WritePerfettoTrace(MakeSession(), path);
  ASSERT_FALSE(written.ok());
  EXPECT_NE(written.message().find(path), std::string::npos) << written.message();
}

// ---------------------------------------------------------------------------------------------
// The real schema: protoc must decode the trace as perfetto.protos.Trace, with no unknown field.

std::filesystem::path SchemaPath() { return gprof::test::PerfettoSchemaPath(); }

bool ProtocOnPath() { return std::system("command -v protoc >/dev/null 2>&1") == 0; }

// Runs `command`, returning its exit status and standard output.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, output};
  std::array<char, 4096> chunk;
  size_t read;
  while ((read = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) output.append(chunk.data(), read);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Decodes the trace at `path` with protoc against the real schema: it must decode, contain every
// `expected` line fragment, and hold no field the schema does not know.
void ExpectDecodesWithTheRealSchema(const std::string& path,
                                    const std::vector<std::string>& expected) {
  std::filesystem::path schema = SchemaPath();
  if (!ProtocOnPath()) GTEST_SKIP() << "protoc is not on PATH";
  if (!std::filesystem::exists(schema)) {
    GTEST_SKIP() << "no Perfetto schema at " << schema << " (GPROF_PERFETTO_SCHEMA names another)";
  }
  auto [status, text] = RunCommand("protoc --proto_path='" + schema.parent_path().string() +
                                   "' --decode=perfetto.protos.Trace '" +
                                   schema.filename().string() + "' < '" + path + "'");
  ASSERT_EQ(status, 0) << text;
  for (const std::string& fragment : expected) {
    EXPECT_NE(text.find(fragment), std::string::npos) << "missing " << fragment;
  }
  // protoc prints fields the schema does not know by number ("123: 4"): there must be none.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t first = line.find_first_not_of(' ');
    ASSERT_FALSE(first != std::string::npos &&
                 std::isdigit(static_cast<unsigned char>(line[first])))
        << "unknown field: " << line;
  }
}

TEST_F(PerfettoWriterTest, DecodesWithTheRealSchema) {
  ExpectDecodesWithTheRealSchema(
      path_, {"thread_name: \"pt_data_pin\"", "thread_name: \"worker\"",
              "process_name: \"python3.12\"", "name: \"cudaLaunchKernel\"",
              "name: \"S futex_wait_queue\"",
              "name: \"runnable (woken by pt_data_pin (101) of python3.12 (pid 100))\"",
              "name: \"FUTEX_WAKE 0x7f1234\"", "primary_trace_clock: BUILTIN_CLOCK_MONOTONIC",
              "timestamp_clock_id: 64", "is_incremental: true", "terminating_flow_ids_old: "});
}

// ---------------------------------------------------------------------------------------------
// The GPU timeline: the session above with CUPTI capture in both processes. Launch arrows from
// runtime and driver calls, work of two calls with one correlation id in different processes, work
// whose call was not recorded or seems to start before it, two activities overlapping on one
// stream, host waits that overlap each other, and CUPTI's losses.

constexpr uint32_t kSpin = 0, kAdd = 1;  // Session::kernel_names

GpuActivity Work(uint32_t pid, uint32_t stream, uint64_t start, uint64_t end,
                 uint64_t correlation_id, decltype(GpuActivity::detail) detail) {
  GpuActivity activity;
  activity.pid = pid;
  activity.stream_id = stream;
  activity.context_id = 1;
  activity.start_ns = At(start);
  activity.end_ns = At(end);
  activity.correlation_id = correlation_id;
  activity.detail = std::move(detail);
  return activity;
}

GpuKernel KernelNamed(uint32_t name_index) {
  GpuKernel kernel;
  kernel.name_index = name_index;
  kernel.grid = {128, 1, 1};
  kernel.block = {256, 1, 1};
  kernel.registers_per_thread = 32;
  kernel.shared_memory_bytes = 4096;
  return kernel;
}

ApiCall* FindCall(Session& session, uint32_t tid, uint32_t name_index) {
  for (ApiCall& call : session.api_calls) {
    if (call.tid == tid && call.name_index == name_index) return &call;
  }
  return nullptr;
}

Session MakeGpuSession() {
  Session session = MakeSession();
  for (uint32_t pid : {kMain, kWorker}) {
    session.processes[pid].capture = {CaptureMode::kCupti, 130001, "libcupti.so.13"};
  }
  session.kernel_names = {"Spin(long long)", "Add(float*)"};
  // Main: cudaLaunchKernel (correlation 1), cuLaunchKernel inside it (2), cudaMemcpyAsync (3); a
  // launch of the pin thread (4) whose kernel's clock puts it before the call.
  FindCall(session, kMain, kCudaMemcpyAsync)->correlation_id = 3;
  ApiCall early = Call(kMain, kPinThread, kCudaLaunchKernel, 7000, 7100);
  early.correlation_id = 4;
  session.api_calls.push_back(early);
  // Worker: cudaLaunchKernel and the cuLaunchKernel inside it share correlation 1, like main's.
  FindCall(session, kWorker, kCudaLaunchKernel)->correlation_id = 1;
  FindCall(session, kWorker, kCuLaunchKernel)->correlation_id = 1;
  std::sort(session.api_calls.begin(), session.api_calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.enter_ns < b.enter_ns; });

  GpuActivity in_graph = Work(kMain, 13, 9000, 9500, 1, KernelNamed(kAdd));
  in_graph.graph_id = 3;
  in_graph.graph_node_id = 77;
  session.gpu_activities = {
      Work(kMain, 13, 6000, 9000, 1, KernelNamed(kSpin)),
      in_graph,
      Work(kMain, 15, 4200, 4300, 2, KernelNamed(kAdd)),
      Work(kMain, 14, 6500, 7500, 3, GpuMemcpy{1 << 20, 1, 1, 3, false}),  // overlaps the memset
      Work(kMain, 14, 7000, 8000, 0, GpuMemset{4096, 0, 3, true}),
      Work(kMain, 16, 6900, 7050, 4, KernelNamed(kSpin)),   // before its call entered
      Work(kMain, 13, 9600, 9700, 99, KernelNamed(kSpin)),  // its call was not recorded
      Work(kWorker, 13, 8600, 8700, 1, KernelNamed(kSpin)),
      Work(kMain, kNoStream, 8000, 9200, 0, GpuSync{4, 0}),  // overlaps the stream wait
      Work(kMain, 13, 7500, 8900, 0, GpuSync{3, 0}),
  };
  std::sort(session.gpu_activities.begin(), session.gpu_activities.end(),
            [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  session.lost.push_back({"GPU activity records of pid 100 (CUPTI buffers full)", 5, {}});
  return session;
}

class PerfettoGpuTest : public PerfettoWriterTest {
 protected:
  Session BuildSession() const override { return MakeGpuSession(); }

  // "name (track)": a thread's track by tid, a GPU track by its process and name.
  std::string Where(const DecodedEvent& event) const {
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.uuid != event.track_uuid) continue;
      if (track.is_thread) return event.name + " (" + std::to_string(track.tid) + ")";
      for (const DecodedTrack& process : trace_.tracks) {
        if (process.is_process && process.uuid == track.parent_uuid) {
          return event.name + " (" + std::to_string(process.pid) + " " + track.name + ")";
        }
      }
    }
    return event.name + " (?)";
  }
};

TEST_F(PerfettoGpuTest, FollowsTheFormatsRulesWithTheGpuTimeline) {
  EXPECT_TRUE(trace_.errors.empty()) << testing::PrintToString(trace_.errors);
}

TEST_F(PerfettoGpuTest, GivesEachProcessATrackPerGpuStream) {
  std::map<int64_t, std::set<std::string>> names;
  for (const DecodedTrack& process : trace_.tracks) {
    if (!process.is_process) continue;
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.parent_uuid == process.uuid && !track.is_thread)
        names[process.pid].insert(track.name);
    }
  }
  EXPECT_EQ(names[kMain],
            (std::set<std::string>{"GPU 0 stream 13", "GPU 0 stream 14", "GPU 0 stream 15",
                                   "GPU 0 stream 16", "GPU synchronization"}));
  EXPECT_EQ(names[kWorker], (std::set<std::string>{"GPU 0 stream 13"}));
}

TEST_F(PerfettoGpuTest, WritesKernelsInOrderWithTheirAnnotations) {
  std::vector<Slice> slices = Slices(ProcessChildTrack(kMain, "GPU 0 stream 13"));
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].name, "Spin(long long)");
  EXPECT_EQ(slices[0].begin_ns, At(6000));
  EXPECT_EQ(slices[0].end_ns, At(9000));
  EXPECT_EQ(slices[0].begin->categories, std::vector<std::string>{"gpu"});
  EXPECT_EQ(slices[0].begin->annotations,
            (std::map<std::string, std::string>{{"grid", "(128, 1, 1)"},
                                                {"block", "(256, 1, 1)"},
                                                {"registers_per_thread", "32"},
                                                {"shared_memory_bytes", "4096"},
                                                {"correlation_id", "1"}}));
  EXPECT_EQ(slices[1].name, "Add(float*)");
  EXPECT_EQ(slices[1].begin_ns, At(9000));
  EXPECT_EQ(slices[1].begin->annotations.at("graph_id"), "3");
  EXPECT_EQ(slices[1].begin->annotations.at("graph_node_id"), "77");
  EXPECT_EQ(slices[2].begin->annotations.at("correlation_id"), "99");
  for (const Slice& slice : slices) EXPECT_EQ(slice.depth, 0u);
}

TEST_F(PerfettoGpuTest, CutsAnActivityThatOverlapsTheNextOnItsStreamAndSaysSo) {
  std::vector<Slice> slices = Slices(ProcessChildTrack(kMain, "GPU 0 stream 14"));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "Memcpy HtoD");
  EXPECT_EQ(slices[0].begin_ns, At(6500));
  EXPECT_EQ(slices[0].end_ns, At(7000));
  EXPECT_EQ(slices[0].begin->annotations,
            (std::map<std::string, std::string>{{"bytes", "1048576"},
                                                {"from", "pageable"},
                                                {"to", "device"},
                                                {"async", "false"},
                                                {"correlation_id", "3"},
                                                {"recorded_duration_ns", "1000"},
                                                {"overlapped_next_ns", "500"}}));
  EXPECT_EQ(slices[1].name, "Memset");
  EXPECT_EQ(slices[1].begin_ns, At(7000));
  EXPECT_EQ(slices[1].end_ns, At(8000));
  EXPECT_EQ(slices[1].depth, 0u);
  EXPECT_EQ(slices[1].begin->annotations.at("memory"), "device");
  EXPECT_EQ(slices[1].begin->annotations.count("recorded_duration_ns"), 0u);
}

TEST_F(PerfettoGpuTest, WritesHostWaitsOnTheProcesssSynchronizationTrack) {
  std::vector<Slice> slices = Slices(ProcessChildTrack(kMain, "GPU synchronization"));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "cudaStreamSynchronize wait");
  EXPECT_EQ(slices[0].begin->annotations.at("type"), "stream synchronize");
  EXPECT_EQ(slices[0].begin->annotations.at("stream"), "13");
  // Two threads' waits overlap: the later one nests, cut where the first ends.
  EXPECT_EQ(slices[1].name, "cudaDeviceSynchronize wait");
  EXPECT_EQ(slices[1].depth, 1u);
  EXPECT_EQ(slices[1].end_ns, At(8900));
  EXPECT_EQ(slices[1].begin->annotations.at("recorded_duration_ns"), "1200");
  EXPECT_EQ(slices[1].begin->annotations.count("stream"), 0u);
}

TEST_F(PerfettoGpuTest, PairsEveryLaunchArrowOnceAndNeverWithAWakeArrow) {
  std::map<uint64_t, std::vector<const DecodedEvent*>> origins, ends;
  for (const DecodedEvent& event : trace_.events) {
    for (uint64_t id : event.flow_ids) origins[id].push_back(&event);
    for (uint64_t id : event.terminating_flow_ids) ends[id].push_back(&event);
  }
  std::set<std::string> launches, wakes;
  for (const auto& [id, from] : origins) {
    ASSERT_EQ(from.size(), 1u) << "flow " << id << " starts twice";
    ASSERT_EQ(ends[id].size(), 1u) << "flow " << id << " does not end exactly once";
    const DecodedEvent& to = *ends[id][0];
    EXPECT_LE(from[0]->timestamp_ns, to.timestamp_ns) << "flow " << id << " goes back in time";
    bool is_launch = from[0]->categories == std::vector<std::string>{"cuda"};
    (is_launch ? launches : wakes).insert(Where(*from[0]) + " -> " + Where(to));
  }
  EXPECT_EQ(origins.size(), ends.size()) << "an arrow ends without a start";
  EXPECT_EQ(launches, (std::set<std::string>{
                          "cudaLaunchKernel (100) -> Spin(long long) (100 GPU 0 stream 13)",
                          "cudaLaunchKernel (100) -> Add(float*) (100 GPU 0 stream 13)",
                          "cuLaunchKernel (100) -> Add(float*) (100 GPU 0 stream 15)",
                          "cudaMemcpyAsync (100) -> Memcpy HtoD (100 GPU 0 stream 14)",
                          "cudaLaunchKernel (200) -> Spin(long long) (200 GPU 0 stream 13)",
                      }));
  EXPECT_EQ(wakes, (std::set<std::string>{
                       "wake python (100) of python3.12 (101) -> runnable (woken by pt_data_pin (101) of python3.12 (pid 100)) (?)",
                       "wake python (100) of python3.12 (200) -> runnable (woken by worker (200) of python3.12) (?)",
                   }));
  // Both arrows of main's cudaLaunchKernel (a graph of two kernels) leave its one slice.
  std::vector<Slice> main_calls = Slices(ThreadTrack(kMain));
  ASSERT_FALSE(main_calls.empty());
  EXPECT_EQ(main_calls[0].name, "cudaLaunchKernel");
  EXPECT_EQ(main_calls[0].begin->flow_ids.size(), 2u);
}

TEST_F(PerfettoGpuTest, ShowsCuptisLossesOnTheGprofRunTrack) {
  bool shown = false;
  for (const DecodedEvent* event : Instants(NamedTrack("gprof-run"))) {
    if (event->name == "lost: GPU activity records of pid 100 (CUPTI buffers full)") {
      shown = true;
      EXPECT_EQ(event->annotations.at("count"), "5");
    }
  }
  EXPECT_TRUE(shown);
}

TEST_F(PerfettoGpuTest, KeepsEveryTrackInOrderWithTheGpuTimeline) {
  std::set<uint64_t> event_tracks;
  for (const DecodedEvent& event : trace_.events) event_tracks.insert(event.track_uuid);
  std::set<uint64_t> described;
  for (const DecodedTrack& track : trace_.tracks) {
    EXPECT_TRUE(described.insert(track.uuid).second) << "track " << track.uuid << " twice";
  }
  for (uint64_t uuid : event_tracks) {
    EXPECT_EQ(described.count(uuid), 1u) << "events on undescribed track " << uuid;
    std::vector<std::string> errors;
    SlicesOf(trace_, uuid, &errors);
    EXPECT_TRUE(errors.empty()) << testing::PrintToString(errors);
  }
}

TEST_F(PerfettoGpuTest, DecodesWithTheRealSchemaWithTheGpuTimeline) {
  ExpectDecodesWithTheRealSchema(
      path_,
      {"name: \"GPU 0 stream 13\"", "name: \"GPU synchronization\"", "name: \"Spin(long long)\"",
       "name: \"Memcpy HtoD\"", "name: \"cudaStreamSynchronize wait\"",
       "flow_ids_old: ", "terminating_flow_ids_old: "});
}

// ---------------------------------------------------------------------------------------------
// What the kernel recorder adds: the main thread unmaps 77 MiB while the pin thread faults and
// sleeps on the mmap_lock; the main thread's ioctl and poll on the driver; the worker's kernel
// mutex and futex_waitv; user stacks of a sleep and of its waker, named through the process's maps
// (the library is not on this machine: module and offset).

constexpr uint64_t kLibfoo = 0x7f5500000000;
constexpr int32_t kSleepUserStack = 7, kWakerUserStack = 8;
constexpr uint64_t kMmapLock = 0xffff888100a0c1e8, kKernelMutex = 0xffff888100b00000;

Session MakeKernelSession() {
  Session session = MakeSession();
  session.processes[kMain].maps = {
      {0, {Mapping{kLibfoo, kLibfoo + 0x100000, 0, "r-xp", "/nonexistent/libfoo.so", 0}}}};
  session.user_stacks[kSleepUserStack] = {{kLibfoo + 0x1010, kLibfoo + 0x2020}, false};
  session.user_stacks[kWakerUserStack] = {{kLibfoo + 0x4040, kLibfoo + 0x5050}, true};

  MemoryMapCall munmap;
  munmap.pid = kMain;
  munmap.tid = kMain;
  munmap.start_ns = At(20000);
  munmap.end_ns = At(30000);
  munmap.syscall = MemorySyscall::kMunmap;
  munmap.address = 0x7e0000000000;
  munmap.length = 77ull << 20;
  session.memory_map_calls = {munmap};

  PageFault fault;
  fault.pid = kMain;
  fault.tid = kPinThread;
  fault.start_ns = At(21000);
  fault.end_ns = At(29000);
  fault.address = kLibfoo + 0x3000;
  fault.flags = 0x41;  // write, user
  session.page_faults = {fault};

  LockWait mmap_lock;
  mmap_lock.pid = kMain;
  mmap_lock.tid = kPinThread;
  mmap_lock.start_ns = At(21100);
  mmap_lock.end_ns = At(28900);
  mmap_lock.lock_address = kMmapLock;
  mmap_lock.flags = GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK;
  mmap_lock.owner_pid = kMain;
  mmap_lock.owner_tid = kMain;
  mmap_lock.owner_comm = "python";
  mmap_lock.kstack_id = kIoStack;
  mmap_lock.user_stack_id = kSleepUserStack;
  LockWait mutex;
  mutex.pid = kWorker;
  mutex.tid = kWorker;
  mutex.start_ns = At(26000);
  mutex.end_ns = At(27000);
  mutex.lock_address = kKernelMutex;
  mutex.flags = GPROF_LOCK_MUTEX;
  mutex.ret = -4;  // -EINTR
  session.lock_waits = {mmap_lock, mutex};

  DeviceWait ioctl;
  ioctl.pid = kMain;
  ioctl.tid = kMain;
  ioctl.start_ns = At(31000);
  ioctl.end_ns = At(32000);
  ioctl.call = DeviceCall::kIoctl;
  ioctl.fd = 5;
  ioctl.request = 0xc020462a;
  ioctl.device = "nvidiactl";
  DeviceWait poll = ioctl;
  poll.start_ns = At(33000);
  poll.end_ns = At(34000);
  poll.call = DeviceCall::kPoll;
  poll.request = 1;
  poll.ret = 1;
  poll.device = "nvidia0";
  session.device_waits = {ioctl, poll};

  FutexWaitvCall waitv;
  waitv.pid = kWorker;
  waitv.tid = kWorker;
  waitv.start_ns = At(20000);
  waitv.end_ns = At(25000);
  waitv.count = 2;
  waitv.addresses = {kGil, 0x7f5678};
  waitv.ret = 1;
  session.futex_waitv_calls = {waitv};

  OffCpuInterval sleep = Woken(session, OffCpu(kMain, kPinThread, 21200, 28800, 2, kIoStack), 28700,
                               kMain, kMain, "python", -1);
  sleep.user_stack_id = kSleepUserStack;
  sleep.waker_user_stack_id = kWakerUserStack;
  session.off_cpu.push_back(sleep);
  // The native stack of the pin thread's cudaDeviceSynchronize, named by the injected library
  // but for its outermost frame.
  session.call_stacks[{kPinThread, At(1500)}] =
      NativeStack{kMain,
                  {kLibfoo + 0x7000, kLibfoo + 0x7100, kLibfoo + 0x6060},
                  {"cudaDeviceSynchronize+0x10", "Step(int)+0x1c", ""}};
  std::sort(session.off_cpu.begin(), session.off_cpu.end(),
            [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  session.signals = {SignalSent{At(35000), kMain, kMain, SIGTERM, 0, 4242,
                                session.CommIndex("timeout"), GPROF_SIGNAL_TO_MANY,
                                GPROF_SIGNAL_IGNORED}};
  return session;
}

class PerfettoKernelTest : public PerfettoWriterTest {
 protected:
  Session BuildSession() const override { return MakeKernelSession(); }
};

TEST_F(PerfettoKernelTest, FollowsTheFormatsRulesWithKernelFacts) {
  EXPECT_TRUE(trace_.errors.empty()) << testing::PrintToString(trace_.errors);
}

TEST_F(PerfettoKernelTest, NestsALockWaitInThePageFaultItBlocked) {
  std::vector<Slice> slices = Slices(ChildTrack(kPinThread, "kernel"));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "page fault in libfoo.so");
  EXPECT_EQ(slices[0].depth, 0u);
  EXPECT_EQ(slices[0].begin_ns, At(21000));
  EXPECT_EQ(slices[0].end_ns, At(29000));
  EXPECT_EQ(slices[0].begin->annotations,
            (std::map<std::string, std::string>{{"address", "0x7f5500003000"},
                                                {"location", "libfoo.so+0x3000"},
                                                {"flags", "write, user"},
                                                {"major", "false"}}));
  EXPECT_EQ(slices[1].name, "mmap_lock (held by python (100) of python3.12)");
  EXPECT_EQ(slices[1].depth, 1u);
  EXPECT_EQ(slices[1].begin_ns, At(21100));
  EXPECT_EQ(slices[1].end_ns, At(28900));
  EXPECT_EQ(slices[1].begin->categories, std::vector<std::string>{"kernel"});
  EXPECT_EQ(slices[1].begin->annotations,
            (std::map<std::string, std::string>{
                {"lock", "0xffff888100a0c1e8"},
                {"lock_kind", "rwsem"},
                {"owner", "python (100) of python3.12"}}));
  EXPECT_EQ(CallstackText(*slices[1].begin, true),
            "__schedule+0x2f0 <- schedule+0x5e <- io_schedule+0x46 <- folio_wait_bit_common+0x13d");
  EXPECT_EQ(CallstackText(*slices[1].begin, false), "libfoo.so+0x1010 <- libfoo.so+0x2020");
}

TEST_F(PerfettoKernelTest, WritesDeviceAndMemoryMapCallsInOrder) {
  std::vector<Slice> slices = Slices(ChildTrack(kMain, "kernel"));
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].name, "munmap 77.0 MiB");
  EXPECT_EQ(slices[0].begin->annotations,
            (std::map<std::string, std::string>{
                {"address", "0x7e0000000000"}, {"length", "80740352"}, {"return", "0"}}));
  EXPECT_EQ(slices[1].name, "ioctl nvidiactl 0xc020462a");
  EXPECT_EQ(slices[1].begin->annotations,
            (std::map<std::string, std::string>{
                {"fd", "5"}, {"request", "0xc020462a"}, {"return", "0"}}));
  EXPECT_EQ(slices[2].name, "poll nvidia0");
  EXPECT_EQ(slices[2].begin->annotations,
            (std::map<std::string, std::string>{{"fd", "5"}, {"count", "1"}, {"return", "1"}}));
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i].depth, 0u);
    if (i > 0) {
      EXPECT_GE(slices[i].begin_ns, slices[i - 1].end_ns);
    }
  }
}

TEST_F(PerfettoKernelTest, NamesAKernelMutexWithoutAnOwner) {
  std::vector<Slice> slices = Slices(ChildTrack(kWorker, "kernel"));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].name, "mutex 0xffff888100b00000");
  EXPECT_EQ(slices[0].begin->annotations.at("lock_kind"), "mutex");
  EXPECT_EQ(slices[0].begin->annotations.at("return"), "-4");
  EXPECT_EQ(slices[0].begin->annotations.count("owner"), 0u);
}

TEST_F(PerfettoKernelTest, WritesFutexWaitvOnTheFutexTrack) {
  std::vector<Slice> slices = Slices(ChildTrack(kWorker, "futex"));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].name, "futex_waitv 0x7f1234 (+1)");
  EXPECT_EQ(slices[0].begin->categories, std::vector<std::string>{"futex"});
  EXPECT_EQ(slices[0].begin->annotations,
            (std::map<std::string, std::string>{
                {"uaddrs", "0x7f1234, 0x7f5678"}, {"count", "2"}, {"return", "1"}}));
}

TEST_F(PerfettoKernelTest, OffCpuSlicesCarryTheUserStacksOfTheSleepAndTheWaker) {
  std::vector<Slice> slices = Slices(ChildTrack(kPinThread, "off-CPU"));
  const Slice* sleep = nullptr;
  const Slice* runnable = nullptr;
  for (const Slice& slice : slices) {
    if (slice.begin_ns == At(21200)) sleep = &slice;
    if (slice.begin_ns == At(28700)) runnable = &slice;
  }
  ASSERT_NE(sleep, nullptr);
  ASSERT_NE(runnable, nullptr);
  EXPECT_EQ(sleep->name, "D folio_wait_bit_common");
  EXPECT_EQ(CallstackText(*sleep->begin, false), "libfoo.so+0x1010 <- libfoo.so+0x2020");
  EXPECT_EQ(runnable->name, "runnable (woken by python (100) of python3.12)");
  EXPECT_EQ(CallstackText(*runnable->begin, false),
            "libfoo.so+0x4040 <- libfoo.so+0x5050 <- ... (truncated)");
  // Intervals without a user stack say nothing of one.
  for (const Slice& slice : Slices(ChildTrack(kMain, "off-CPU")))
    EXPECT_EQ(CallstackText(*slice.begin, false), "") << slice.name;
}

// Stacks are interned Perfetto callstacks, not text, so that the UI shows and aggregates them: a
// sleep's user frames then its kernel frames, outermost first, each kernel frame in the kernel's
// mapping at its offset into its function; the waker's on the runnable slice, its walk's
// truncation a frame; a slow call's native stack on its slice. (The decoder checks that each
// frame, name and callstack is carried once per sequence, before its first use.)
TEST_F(PerfettoKernelTest, StacksAreInternedCallstacks) {
  const std::vector<std::string> sleep_stack = {
      "libfoo.so+0x2020", "libfoo.so+0x1010", "[k] folio_wait_bit_common",
      "[k] io_schedule",  "[k] schedule",     "[k] __schedule"};
  const Slice* sleep = nullptr;
  const Slice* runnable = nullptr;
  for (const Slice& slice : Slices(ChildTrack(kPinThread, "off-CPU"))) {
    if (slice.begin_ns == At(21200)) sleep = &slice;
    if (slice.begin_ns == At(28700)) runnable = &slice;
  }
  ASSERT_NE(sleep, nullptr);
  ASSERT_NE(runnable, nullptr);
  EXPECT_EQ(sleep->begin->callstack, sleep_stack);
  // Each user frame in its file (libfoo.so is mapped from its start, at offset 0); the kernel's
  // in none.
  EXPECT_EQ(sleep->begin->callstack_where,
            (std::vector<std::string>{"libfoo.so+0x2020", "libfoo.so+0x1010",
                                      "[kernel.kallsyms]+0x13d", "[kernel.kallsyms]+0x46",
                                      "[kernel.kallsyms]+0x5e", "[kernel.kallsyms]+0x2f0"}));
  EXPECT_EQ(runnable->begin->callstack,
            (std::vector<std::string>{"... (truncated)", "libfoo.so+0x5050", "libfoo.so+0x4040"}))
      << "the waker's user stack, its walk cut short; it has no kernel stack";
  EXPECT_EQ(runnable->begin->callstack_where,
            (std::vector<std::string>{"", "libfoo.so+0x5050", "libfoo.so+0x4040"}));
  // The mmap_lock wait: the same user and kernel stacks.
  bool found_lock = false;
  for (const Slice& slice : Slices(ChildTrack(kPinThread, "kernel"))) {
    if (slice.begin_ns != At(21100)) continue;
    found_lock = true;
    EXPECT_EQ(slice.begin->callstack, sleep_stack);
  }
  EXPECT_TRUE(found_lock);
  bool found_call = false;
  for (const Slice& slice : Slices(ThreadTrack(kPinThread))) {
    if (slice.name != "cudaDeviceSynchronize") continue;
    found_call = true;
    ASSERT_EQ(slice.begin->callstack.size(), 3u);
    EXPECT_EQ(slice.begin->callstack[0].rfind("libfoo.so+0x", 0), 0u) << slice.begin->callstack[0];
    EXPECT_EQ(slice.begin->callstack[1], "Step(int)") << "a function, not one call site of it";
    EXPECT_EQ(slice.begin->callstack[2], "cudaDeviceSynchronize");
    EXPECT_EQ(slice.begin->callstack_where,
              (std::vector<std::string>{"libfoo.so+0x6060", "libfoo.so+0x7100",
                                        "libfoo.so+0x7000"}));
  }
  EXPECT_TRUE(found_call);
  // No native or kernel stack is carried a second time as text.
  for (const DecodedEvent& event : trace_.events) {
    for (const auto& [name, value] : event.annotations)
      EXPECT_FALSE(name.ends_with("kernel_stack") || name.ends_with("user_stack"))
          << event.name << ": " << name << "=" << value;
  }
}

// A recursion's frame is carried once, then a frame that says how many more times it came, as the
// text report folds it (a walk caught in a loop would carry its depth limit's frames each wait).
class PerfettoRecursionTest : public PerfettoWriterTest {
 protected:
  Session BuildSession() const override {
    Session session = MakeKernelSession();
    session.user_stacks[kSleepUserStack] = {
        {kLibfoo + 0x1010, kLibfoo + 0x3030, kLibfoo + 0x3030, kLibfoo + 0x3030, kLibfoo + 0x3030,
         kLibfoo + 0x2020},
        true};
    return session;
  }
};

TEST_F(PerfettoRecursionTest, FoldsARepeatedFrameIntoOneThatCountsTheRest) {
  EXPECT_TRUE(trace_.errors.empty()) << testing::PrintToString(trace_.errors);
  bool found = false;
  for (const Slice& slice : Slices(ChildTrack(kPinThread, "off-CPU"))) {
    if (slice.begin_ns != At(21200)) continue;
    found = true;
    EXPECT_EQ(slice.begin->callstack,
              (std::vector<std::string>{"... (truncated)", "libfoo.so+0x2020",
                                        "... libfoo.so+0x3030 repeated 3 more times",
                                        "libfoo.so+0x3030", "libfoo.so+0x1010",
                                        "[k] folio_wait_bit_common", "[k] io_schedule",
                                        "[k] schedule", "[k] __schedule"}));
    EXPECT_EQ(slice.begin->callstack_where[3], "libfoo.so+0x3030");
    EXPECT_EQ(slice.begin->callstack_where[2], "") << "the count is in no file";
  }
  EXPECT_TRUE(found);
}

TEST_F(PerfettoKernelTest, KeepsEveryTrackInOrderWithKernelFacts) {
  std::set<uint64_t> event_tracks;
  for (const DecodedEvent& event : trace_.events) event_tracks.insert(event.track_uuid);
  std::set<uint64_t> described;
  for (const DecodedTrack& track : trace_.tracks) {
    EXPECT_TRUE(described.insert(track.uuid).second) << "track " << track.uuid << " twice";
  }
  for (uint64_t uuid : event_tracks) {
    EXPECT_EQ(described.count(uuid), 1u) << "events on undescribed track " << uuid;
    std::vector<std::string> errors;
    SlicesOf(trace_, uuid, &errors);
    EXPECT_TRUE(errors.empty()) << testing::PrintToString(errors);
  }
}

TEST_F(PerfettoKernelTest, DecodesWithTheRealSchemaWithKernelFacts) {
  ExpectDecodesWithTheRealSchema(
      path_, {"name: \"kernel\"", "name: \"munmap 77.0 MiB\"",
              "name: \"mmap_lock (held by python (100) of python3.12)\"", "name: \"page fault in libfoo.so\"",
              "name: \"ioctl nvidiactl 0xc020462a\"", "name: \"futex_waitv 0x7f1234 (+1)\"",
              "callstack_iid: ", "rel_pc: 317", "str: \"[kernel.kallsyms]\"",
              "str: \"... (truncated)\"", "name: \"signals\"",
              "name: \"SIGTERM from timeout (4242)\"", "name: \"outcome\""});
}

// ---------------------------------------------------------------------------------------------
// The writer's protobuf encoder, read back with protozero: nested messages short and long (a length
// of one, two and three bytes), empty ones left out, negative ints sign-extended.

enum class OuterField : uint32_t { kInner = 1, kNumber = 2, kEmpty = 3, kFixed = 4, kNegative = 5 };
enum class InnerField : uint32_t { kText = 1, kValue = 2 };

std::string Encoded(size_t text_size) {
  ProtoBuffer buffer;
  {
    ProtoMessage<OuterField> outer{buffer};
    {
      ProtoMessage<InnerField> inner{outer, OuterField::kInner};
      inner.AddString(InnerField::kText, std::string(text_size, 'x'));
      inner.AddUint64(InnerField::kValue, 300);
    }
    { ProtoMessage<InnerField> empty{outer, OuterField::kEmpty}; }
    outer.AddUint32(OuterField::kNumber, 7);
    outer.AddFixed64(OuterField::kFixed, 0x0102030405060708);
    outer.AddInt32(OuterField::kNegative, -4);
  }
  return std::string(buffer.data(), buffer.size());
}

// Issue 22's long-run guard: a session whose trace would pass the limit is written with its
// shortest off-CPU intervals only counted, on the counter tracks; the long ones stay slices.
TEST(PerfettoLongRunGuardTest, ATraceTooLargeLeavesItsShortestWaitsToTheCounters) {
  Session session = MakeSession();
  session.off_cpu.clear();
  session.futex_calls.clear();
  constexpr uint32_t kTid = 4242;
  session.threads[kTid] = Thread{kMain, kTid, "busy"};
  for (uint64_t i = 0; i < 1000; ++i)  // 5 us each, preempted
    session.off_cpu.push_back(OffCpu(kMain, kTid, 100'000 * i, 100'000 * i + 5'000, 0, -1));
  session.off_cpu.push_back(OffCpu(kMain, kTid, 200'000'000, 202'000'000, 0, -1));  // 2 ms
  session.off_cpu.push_back(OffCpu(kMain, kTid, 300'000'000, 302'000'000, 0, -1));
  const uint64_t others = session.api_calls.size() + session.gpu_activities.size();

  uint64_t full = 0;
  EXPECT_EQ(TraceDetailFor(session, (1002 + others) * kTraceBytesPerRecord, &full), 0u)
      << "it fits: full detail";
  EXPECT_EQ(full, (1002 + others) * kTraceBytesPerRecord);
  // Room for the long ones and the others: the 5-us ones go, under the next power of two.
  session.trace_detail_under_ns =
      TraceDetailFor(session, (2 + others) * kTraceBytesPerRecord, &full);
  EXPECT_EQ(session.trace_detail_under_ns, 8000u);

  std::string path = TracePath("long_run_guard");
  ASSERT_TRUE(WritePerfettoTrace(session, path).ok());
  DecodedTrace trace = TraceDecoder().Decode(ReadFile(path));
  std::filesystem::remove(path);
  ASSERT_TRUE(trace.errors.empty()) << testing::PrintToString(trace.errors);
  size_t waits = 0;
  int64_t counted = -1;
  for (const DecodedTrack& track : trace.tracks) {
    if (track.name == "off-CPU" || track.name == "off-CPU < 8.0 us (count)") {
      for (const DecodedEvent& event : trace.events) {
        if (event.track_uuid != track.uuid) continue;
        if (event.type == kSliceBegin) ++waits;
        if (event.type == kCounter) counted = *event.counter_value;
      }
    }
  }
  EXPECT_EQ(waits, 2u) << "the two long waits, only";
  EXPECT_EQ(counted, 1000) << "the short ones counted";
}

TEST(ProtoEncoderTest, EncodesNestedMessagesOfEveryLengthSize) {
  for (size_t text_size : {0, 5, 120, 126, 127, 200, 16'400, 70'000}) {
    std::string bytes = Encoded(text_size);
    protozero::pbf_reader outer(bytes);
    std::map<uint32_t, int> seen;
    while (outer.next()) {
      ++seen[outer.tag()];
      switch (outer.tag()) {
        case 1: {
          protozero::pbf_reader inner = outer.get_message();
          ASSERT_TRUE(inner.next(1)) << text_size;
          EXPECT_EQ(inner.get_string(), std::string(text_size, 'x'));
          ASSERT_TRUE(inner.next(2)) << text_size;
          EXPECT_EQ(inner.get_uint64(), 300u);
          EXPECT_FALSE(inner.next());
          break;
        }
        case 2:
          EXPECT_EQ(outer.get_uint32(), 7u);
          break;
        case 4:
          EXPECT_EQ(outer.get_fixed64(), 0x0102030405060708u);
          break;
        case 5:
          EXPECT_EQ(outer.get_int32(), -4);
          break;
        default:
          ADD_FAILURE() << "field " << outer.tag();
          outer.skip();
      }
    }
    EXPECT_EQ(seen, (std::map<uint32_t, int>{{1, 1}, {2, 1}, {4, 1}, {5, 1}}))
        << "the empty message leaves nothing; text of " << text_size;
  }
}

}  // namespace
}  // namespace gprof::collector
