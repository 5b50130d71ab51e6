// Several sessions in one Perfetto trace (WriteMergedPerfettoTrace): two sessions of the same
// program with the same pids and tids, as two hosts record them, the second 5 s later on the
// job's clock. Checked by decoding (tests/trace_decoder.h) and with protoc against the real schema.
#include "collector/writers/perfetto/merged_trace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <protozero/pbf_reader.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/writers/perfetto/perfetto_writer.h"
#include "tests/analysis_sessions.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::collector {
namespace {

using namespace gprof::test;  // the trace decoder

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kLater = 5 * kSecond;  // the second session's offset

constexpr uint64_t kStart = kMs / 2;  // the sessions' start on their own clock

// Lock convoys (wake arrows between threads of the model, a diagnosis with its flows) in a
// process named python3, pid kPid: every session built here has the same pids and tids.
Session ConvoySession() {
  SessionBuilder builder;
  builder.session().meta.start_monotonic_ns = kStart;
  builder.session().meta.start_boottime_ns = kStart + 7;
  builder.session().meta.kernel_recording = true;
  builder.session().processes[kPid].pid = kPid;
  builder.session().processes[kPid].exe = "/usr/bin/python3";
  MutexConvoy(&builder);
  AddConvoy(&builder, 2 * kSecond);
  return builder.Build();
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// What the decoder does not keep: each sequence's default track, and the trace-wide snapshots.
struct PacketScan {
  std::map<uint64_t, uint32_t> sequence_of_track;  // event track uuid -> its sequence
  int trace_clock_snapshots = 0;                   // snapshots that set the trace's clock
};

PacketScan ScanPackets(const std::string& bytes) {
  PacketScan scan;
  protozero::pbf_reader trace(bytes);
  while (trace.next(1)) {
    protozero::pbf_reader packet = trace.get_message();
    uint32_t sequence = 0;
    uint64_t default_track = 0;
    while (packet.next()) {
      if (packet.tag() == 10) {  // trusted_packet_sequence_id
        sequence = packet.get_uint32();
      } else if (packet.tag() == 59) {  // trace_packet_defaults
        protozero::pbf_reader defaults = packet.get_message();
        while (defaults.next()) {
          if (defaults.tag() != 11) {  // track_event_defaults
            defaults.skip();
            continue;
          }
          protozero::pbf_reader track_event = defaults.get_message();
          while (track_event.next(11)) default_track = track_event.get_uint64();  // track_uuid
        }
      } else if (packet.tag() == 6) {  // clock_snapshot
        protozero::pbf_reader snapshot = packet.get_message();
        while (snapshot.next(2)) {  // primary_trace_clock
          snapshot.skip();
          ++scan.trace_clock_snapshots;
        }
      } else {
        packet.skip();
      }
    }
    if (default_track != 0) scan.sequence_of_track[default_track] = sequence;
  }
  return scan;
}

class MergedTraceTest : public testing::Test {
 protected:
  void SetUp() override {
    first_ = ConvoySession();
    second_ = ConvoySession();
    first_analysis_ = Analyze(first_, {});
    second_analysis_ = Analyze(second_, {});
    ASSERT_TRUE(!first_analysis_.freezes.empty() && first_analysis_.freezes[0].of_stalls())
        << "the convoys must give the diagnosis a track";
    path_ = dir_.path() + "/merged.perfetto-trace";
    Status written = WriteMergedPerfettoTrace(
        {{&first_, &first_analysis_, 0, "rank 0"},
         {&second_, &second_analysis_, second_offset_, "rank 1"}},
        AT_FDCWD, path_, path_);
    ASSERT_TRUE(written.ok()) << written.message();
    bytes_ = ReadFile(path_);
    trace_ = TraceDecoder().Decode(bytes_);
  }

  const DecodedTrack* ProcessNamed(const std::string& name) const {
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.is_process && track.process_name == name) return &track;
    }
    return nullptr;
  }

  // The uuids of every track under the process named `process_name`, the process's own first.
  std::vector<uint64_t> TracksOf(const std::string& process_name) const {
    const DecodedTrack* process = ProcessNamed(process_name);
    if (process == nullptr) return {};
    std::vector<uint64_t> uuids = {process->uuid};
    for (size_t i = 0; i < uuids.size(); ++i) {  // the tree below it, breadth first
      for (const DecodedTrack& track : trace_.tracks) {
        if (track.parent_uuid == uuids[i]) uuids.push_back(track.uuid);
      }
    }
    return uuids;
  }

  // The thread track of `tid` under the process named `process_name`.
  const DecodedTrack* ThreadOf(const std::string& process_name, int64_t tid) const {
    const DecodedTrack* process = ProcessNamed(process_name);
    for (const DecodedTrack& track : trace_.tracks) {
      if (process != nullptr && track.is_thread && track.tid == tid &&
          track.parent_uuid == process->uuid)
        return &track;
    }
    return nullptr;
  }

  std::vector<const DecodedEvent*> EventsOn(const std::vector<uint64_t>& uuids) const {
    std::set<uint64_t> wanted(uuids.begin(), uuids.end());
    std::vector<const DecodedEvent*> events;
    for (const DecodedEvent& event : trace_.events) {
      if (wanted.count(event.track_uuid)) events.push_back(&event);
    }
    return events;
  }

  int64_t second_offset_ = kLater;
  TempDir dir_;
  Session first_, second_;
  Analysis first_analysis_, second_analysis_;
  std::string path_, bytes_;
  DecodedTrace trace_;
};

TEST_F(MergedTraceTest, DecodesWithoutABrokenRule) {
  // Sequence state (first packets, interned strings, incremental clocks) is per sequence: a
  // sequence id used by both sessions would clear its state twice or intern an iid twice.
  EXPECT_EQ(trace_.errors, std::vector<std::string>{});
  std::set<uint64_t> uuids;
  for (const DecodedTrack& track : trace_.tracks) {
    EXPECT_TRUE(uuids.insert(track.uuid).second) << "track uuid " << track.uuid << " twice";
  }
}

TEST_F(MergedTraceTest, EachSessionsProcessIsNamedWithItsLabel) {
  const DecodedTrack* first = ProcessNamed("rank 0: python3");
  const DecodedTrack* second = ProcessNamed("rank 1: python3");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->pid, kPid);
  EXPECT_EQ(second->pid, kPid);
  EXPECT_NE(first->uuid, second->uuid);
  std::set<std::string> global;
  for (const DecodedTrack& track : trace_.tracks) {
    if (track.parent_uuid == 0 && !track.is_process) global.insert(track.name);
  }
  EXPECT_TRUE(global.count("rank 0: diagnosis") && global.count("rank 1: diagnosis"))
      << testing::PrintToString(global);
}

TEST_F(MergedTraceTest, BothSessionsThreadsAreTracksOfTheirOwn) {
  for (int64_t tid : {kHolder, uint32_t{11}, uint32_t{12}, uint32_t{13}}) {
    const DecodedTrack* first = ThreadOf("rank 0: python3", tid);
    const DecodedTrack* second = ThreadOf("rank 1: python3", tid);
    ASSERT_NE(first, nullptr) << tid;
    ASSERT_NE(second, nullptr) << tid;
    EXPECT_NE(first->uuid, second->uuid) << tid;
    EXPECT_EQ(first->thread_name, second->thread_name) << tid;
  }
}

TEST_F(MergedTraceTest, TheSecondSessionsEventsAreFiveSecondsLater) {
  std::vector<const DecodedEvent*> first = EventsOn(TracksOf("rank 0: python3"));
  std::vector<const DecodedEvent*> second = EventsOn(TracksOf("rank 1: python3"));
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i]->name, second[i]->name) << i;
    EXPECT_EQ(second[i]->timestamp_ns, first[i]->timestamp_ns + kLater) << first[i]->name;
  }
  // The first session's times are its own: its first record's.
  uint64_t earliest = first.front()->timestamp_ns;
  for (const DecodedEvent* event : first) earliest = std::min(earliest, event->timestamp_ns);
  EXPECT_EQ(earliest,
            std::min(first_.futex_calls.front().start_ns, first_.api_calls.front().enter_ns));
}

TEST_F(MergedTraceTest, OneClockSnapshotTheFirstSessions) {
  EXPECT_EQ(ScanPackets(bytes_).trace_clock_snapshots, 1);
  EXPECT_EQ(trace_.clock_snapshot.at(kClockMonotonic), kStart);
  EXPECT_EQ(trace_.clock_snapshot.at(kClockBoottime), kStart + 7);
}

TEST_F(MergedTraceTest, SequencesAreDistinctAcrossSessions) {
  PacketScan scan = ScanPackets(bytes_);
  std::set<uint32_t> first, second;
  for (uint64_t uuid : TracksOf("rank 0: python3")) {
    if (scan.sequence_of_track.count(uuid)) first.insert(scan.sequence_of_track[uuid]);
  }
  for (uint64_t uuid : TracksOf("rank 1: python3")) {
    if (scan.sequence_of_track.count(uuid)) second.insert(scan.sequence_of_track[uuid]);
  }
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.size(), second.size());
  for (uint32_t sequence : second) EXPECT_EQ(first.count(sequence), 0u) << sequence;
}

TEST_F(MergedTraceTest, FlowIdsAreDistinctAcrossSessions) {
  // Flow ids are global within a trace: a wake arrow of one session must not end in the other's.
  auto flows_of = [&](const std::string& label) {
    std::vector<uint64_t> uuids = TracksOf(label + ": python3");
    for (const DecodedTrack& track : trace_.tracks) {
      if (track.name.rfind(label + ": diagnosis", 0) == 0) uuids.push_back(track.uuid);
    }
    std::set<uint64_t> ids;
    for (const DecodedEvent* event : EventsOn(uuids)) {
      ids.insert(event->flow_ids.begin(), event->flow_ids.end());
      ids.insert(event->terminating_flow_ids.begin(), event->terminating_flow_ids.end());
    }
    return ids;
  };
  std::set<uint64_t> first = flows_of("rank 0"), second = flows_of("rank 1");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.size(), second.size());
  for (uint64_t id : second) EXPECT_EQ(first.count(id), 0u) << id;
}

TEST(MergedTrace, OneSessionIsWritePerfettoTracesFileByteForByte) {
  TempDir dir;
  Session session = ConvoySession();
  Analysis analysis = Analyze(session, {});
  std::string alone = dir.path() + "/alone.perfetto-trace";
  std::string merged = dir.path() + "/merged.perfetto-trace";
  ASSERT_TRUE(WritePerfettoTrace(session, alone, {&analysis}).ok());
  ASSERT_TRUE(
      WriteMergedPerfettoTrace({{&session, &analysis, 0, ""}}, AT_FDCWD, merged, merged).ok());
  std::string bytes = ReadFile(alone);
  ASSERT_FALSE(bytes.empty());
  EXPECT_TRUE(bytes == ReadFile(merged));
}

// The second session 2 s before the first, so before the job clock's 0 (another host's, recorded
// before the first's booted): the whole trace moves later by what that takes, the clock snapshot
// with it, and the sessions keep their 2 s apart.
class MergedTraceBeforeZeroTest : public MergedTraceTest {
 protected:
  MergedTraceBeforeZeroTest() { second_offset_ = -2 * kSecond; }
};

TEST_F(MergedTraceBeforeZeroTest, ASessionBeforeTheJobsClockMovesTheWholeTraceLater) {
  std::vector<const DecodedEvent*> first = EventsOn(TracksOf("rank 0: python3"));
  std::vector<const DecodedEvent*> second = EventsOn(TracksOf("rank 1: python3"));
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_EQ(first[i]->timestamp_ns, second[i]->timestamp_ns + 2 * kSecond) << first[i]->name;
  // The second session's start (kStart - 2 s) is the trace's 0.
  EXPECT_EQ(trace_.clock_snapshot.at(kClockMonotonic), 2 * kSecond);
  EXPECT_EQ(trace_.errors, std::vector<std::string>{});
}

// The long-run guard applies to the trace as a whole: two sessions that each fit alone but not
// together get one length under which their short waits are only counted.
TEST(MergedTrace, TheLongRunGuardCutsTheSessionsAlike) {
  Session first = ConvoySession();
  Session second = ConvoySession();
  uint64_t alone_bytes = 0;
  ASSERT_EQ(TraceDetailFor(first, ~uint64_t{0}, &alone_bytes), 0u);
  const uint64_t max_bytes = alone_bytes * 3 / 2;  // one fits, two do not
  uint64_t unused = 0;
  ASSERT_EQ(TraceDetailFor(first, max_bytes, &unused), 0u);
  Session* sessions[] = {&first, &second};
  ShareTraceDetail(sessions, max_bytes);
  EXPECT_NE(first.trace_detail_under_ns, 0u);
  EXPECT_EQ(first.trace_detail_under_ns, second.trace_detail_under_ns);
  EXPECT_EQ(first.trace_full_bytes, alone_bytes);
  EXPECT_EQ(second.trace_full_bytes, alone_bytes);
}

// ---------------------------------------------------------------------------------------------
// The real schema: protoc must decode the merged trace as perfetto.protos.Trace, with no unknown
// field (as perfetto_writer_test's DecodesWithTheRealSchema tests).

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

TEST_F(MergedTraceTest, DecodesWithTheRealSchema) {
  std::filesystem::path schema = PerfettoSchemaPath();
  if (std::system("command -v protoc >/dev/null 2>&1") != 0) GTEST_SKIP() << "no protoc on PATH";
  if (!std::filesystem::exists(schema)) {
    GTEST_SKIP() << "no Perfetto schema at " << schema << " (GPROF_PERFETTO_SCHEMA names another)";
  }
  auto [status, text] = RunCommand("protoc --proto_path='" + schema.parent_path().string() +
                                   "' --decode=perfetto.protos.Trace '" +
                                   schema.filename().string() + "' < '" + path_ + "'");
  ASSERT_EQ(status, 0) << text;
  for (const char* fragment :
       {"process_name: \"rank 0: python3\"", "process_name: \"rank 1: python3\"",
        "name: \"rank 1: diagnosis\"", "primary_trace_clock: BUILTIN_CLOCK_MONOTONIC"}) {
    EXPECT_NE(text.find(fragment), std::string::npos) << "missing " << fragment;
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t first = line.find_first_not_of(' ');
    ASSERT_FALSE(first != std::string::npos &&
                 std::isdigit(static_cast<unsigned char>(line[first])))
        << "unknown field: " << line;
  }
}

}  // namespace
}  // namespace gprof::collector
