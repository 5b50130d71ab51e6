// The collector's readers: every record type read back as written, and damaged input salvaged as
// far as it is valid, with a message that names the file and the offset.
#include "collector/session/session_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "collector/analysis/analysis.h"
#include "collector/session/chunk_reader.h"
#include "collector/symbols/demangle.h"
#include "collector/writers/perfetto/perfetto_writer.h"
#include "collector/writers/report.h"
#include "tests/session_builder.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using collector::GpuActivity;
using collector::ReadSession;
using collector::Session;

constexpr uint32_t kPid = 100;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string MetaJson(int version = 1) {
  return R"({"version": )" + std::to_string(version) +
         R"(, "command": ["./app", "--x"], "root_pid": 100,
    "start": {"monotonic_ns": 1000, "realtime_ns": 5, "boottime_ns": 2000},
    "end": {"monotonic_ns": 90000}, "exit": {"signal": 9},
    "kernel_recording": {"enabled": true, "note": ""}})";
}

// An inject file of `chunks` chunks with `calls_per_chunk` cudaLaunchKernel calls each.
std::string WriteInjectFile(const TempDir& dir, int chunks, int calls_per_chunk) {
  std::string path = dir.Sub("inject-100.gpr");
  ChunkFileWriter file;
  EXPECT_EQ(file.Create(path.c_str(), format::Source::kInject, kPid), 0);
  RecordBatch batch;
  AddApiName(&batch, 1, "cudaLaunchKernel");
  batch.WriteTo(&file);
  uint64_t time = 10000;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    for (int i = 0; i < calls_per_chunk; ++i, time += 100) {
      batch.Add(ApiCall(101, 1, time, time + 50), format::kApiCall);
    }
    batch.WriteTo(&file);
  }
  return path;
}

std::vector<uint64_t> ChunkOffsets(const std::string& path) {
  std::string data = ReadFile(path);
  std::vector<uint64_t> offsets;
  uint64_t offset = sizeof(format::FileHeader);
  while (offset + sizeof(format::ChunkHeader) <= data.size()) {
    format::ChunkHeader chunk;
    memcpy(&chunk, data.data() + offset, sizeof(chunk));
    offsets.push_back(offset);
    offset += sizeof(chunk) + chunk.stored_size;
  }
  return offsets;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x5a;
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(&byte, 1);
}

TEST(SessionReader, ReadsEveryRecordAsWritten) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), MetaJson());
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
    RecordBatch batch;
    format::ProcessInfoRecord info{};
    info.pid = kPid;
    info.ppid = 1;
    std::string exe = "/usr/bin/app";
    std::string cmdline("./app\0--x\0", 10);
    info.exe_len = static_cast<uint32_t>(exe.size());
    info.cmdline_len = static_cast<uint32_t>(cmdline.size());
    batch.Add(info, format::kProcessInfo, exe + cmdline);
    AddApiName(&batch, 7, "cudaDeviceSynchronize");
    auto call = ApiCall(101, 7, 5000, 9000);
    call.stream = 0xabc;
    call.flags = format::kApiCallHasStream;
    call.return_code = 3;
    batch.Add(call, format::kApiCall);
    batch.Add(ApiCall(102, 99, 6000, 6500), format::kApiCall);  // an id never named
    AddThreadName(&batch, 101, "holder");
    std::string maps =
        "7f0000000000-7f0000010000 rw-p 00002000 08:01 42   /usr/lib/libcudart.so.13\n";
    format::MapsSnapshotRecord maps_record{};
    maps_record.text_len = static_cast<uint32_t>(maps.size());
    batch.Add(maps_record, format::kMapsSnapshot, maps);
    format::DroppedRecord dropped{};
    dropped.count = 4;
    batch.Add(dropped, format::kDropped);
    batch.Add(format::DroppedRecord{}, 777);  // a type from a newer writer: skipped
    batch.WriteTo(&file);
  }
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
    RecordBatch batch;
    batch.Add(OffCpu(kPid, 102, 6000, 8000, 7900, 101, 3), GPROF_REC_OFFCPU);
    batch.Add(Futex(kPid, 102, 5990, 8010, 0x7f0000000040, 0x80), GPROF_REC_FUTEX);
    gprof_task_new task{};
    task.pid = kPid;
    task.tid = 103;
    task.parent_pid = kPid;
    task.parent_tid = 101;
    task.flags = GPROF_TASK_NEW_THREAD;
    memcpy(task.comm, "worker", 6);
    batch.Add(task, GPROF_REC_TASK_NEW);
    gprof_task_rename rename{};
    rename.pid = kPid;
    rename.tid = 103;
    rename.time_ns = 7000;
    memcpy(rename.comm, "renamed", 7);
    batch.Add(rename, GPROF_REC_TASK_RENAME);
    AddKernelStack(&batch, 3, {{0xffff1, "__schedule"}, {0xffff2, "futex_wait_queue"}});
    gprof_lost lost{};
    lost.kind = GPROF_LOST_RINGBUF;
    lost.record_type = GPROF_REC_OFFCPU;
    lost.count = 12;
    batch.Add(lost, GPROF_REC_LOST);
    batch.WriteTo(&file);
  }

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_TRUE(session->diagnostics.empty());
  EXPECT_EQ(session->meta.command, (std::vector<std::string>{"./app", "--x"}));
  EXPECT_EQ(session->meta.exit_signal, 9);
  EXPECT_FALSE(session->meta.exit_code.has_value());
  EXPECT_EQ(session->meta.start_boottime_ns, 2000u);

  const auto& process = session->processes.at(kPid);
  EXPECT_EQ(process.exe, "/usr/bin/app");
  EXPECT_EQ(process.cmdline, (std::vector<std::string>{"./app", "--x"}));
  ASSERT_EQ(process.maps.size(), 1u);
  const collector::Mapping* mapping = session->FindMapping(kPid, 0x7f0000000040);
  ASSERT_NE(mapping, nullptr);
  EXPECT_EQ(mapping->path, "/usr/lib/libcudart.so.13");
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000010000), nullptr);

  ASSERT_EQ(session->api_calls.size(), 2u);
  const auto& sync = session->api_calls[0];
  EXPECT_EQ(session->ApiName(sync), "cudaDeviceSynchronize");
  EXPECT_EQ(sync.pid, kPid);
  EXPECT_EQ(sync.stream, 0xabcu);
  EXPECT_EQ(sync.return_code, 3);
  EXPECT_EQ(session->ApiName(session->api_calls[1]), "api#99");

  EXPECT_EQ(session->threads.at(101).name, "holder");
  EXPECT_EQ(session->threads.at(103).name, "renamed");  // the later name wins
  EXPECT_EQ(session->ThreadLabel(101), "holder (101)");

  ASSERT_EQ(session->off_cpu.size(), 1u);
  EXPECT_EQ(session->off_cpu[0].waker_tid, 101u);
  EXPECT_EQ(session->off_cpu[0].state(), collector::OffCpuState::kSleeping);
  ASSERT_EQ(session->futex_calls.size(), 1u);
  EXPECT_TRUE(session->futex_calls[0].is_wait());
  EXPECT_EQ(session->KernelStack(3),
            (std::vector<std::string>{"__schedule+0x0", "futex_wait_queue+0x0"}));
  ASSERT_EQ(session->task_starts.size(), 1u);
  EXPECT_TRUE(session->task_starts[0].is_thread);

  uint64_t lost_total = 0;
  for (const auto& lost : session->lost) lost_total += lost.count;
  EXPECT_EQ(lost_total, 12u + 4u);
}

// The records of a file come in whatever order its writer had them; the model holds them by time,
// records of equal times in the order they were written. Orders a recorder writes (nearly sorted,
// a thread's buffer at a time) and ones it never would (reversed, shuffled) alike.
// Real CUPTI asks for its first activity buffers on the thread that initialises CUDA, the
// program's main thread: a record that names a process's main thread as gprof-run's is not
// believed (an older library wrote such records), or the whole program would be taken for ours.
TEST(SessionReader, AProcessesMainThreadIsNeverTakenForGprofRuns) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), MetaJson());
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
    RecordBatch batch;
    for (uint32_t tid : {uint32_t{kPid}, kPid + 5u}) {
      format::ProfilerThreadRecord thread{};
      thread.time_ns = 1000;
      thread.tid = tid;
      thread.role = static_cast<uint32_t>(format::ProfilerThreadRole::kCupti);
      batch.Add(thread, format::kProfilerThread);
    }
    AddThreadName(&batch, kPid, "python3");
    AddThreadName(&batch, kPid + 5, "cupti-worker");
    batch.WriteTo(&file);
  }
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_FALSE(session->IsProfilerThread(kPid));
  EXPECT_TRUE(session->IsProfilerThread(kPid + 5));
}

TEST(SessionReader, SortsRecordsByTimeKeepingTiesInWrittenOrder) {
  std::mt19937_64 random(6);
  auto nearly_sorted = [&](size_t count) {
    std::vector<uint64_t> times;
    for (size_t i = 0; i < count; ++i) times.push_back(1000 + i * 10 - random() % 200);
    return times;
  };
  auto thread_buffers = [&](size_t count) {
    std::vector<uint64_t> times;  // 8 threads' buffers of 500 calls, over the same span
    for (size_t i = 0; times.size() < count; ++i)
      times.push_back(1000 + (i % 500 + i / 4000 * 500) * 80 + (i / 500 % 8) * 7);
    return times;
  };
  auto reversed = [&](size_t count) {
    std::vector<uint64_t> times;
    for (size_t i = 0; i < count; ++i) times.push_back(1000 + (count - i) / 3 * 10);
    return times;
  };
  auto shuffled = [&](size_t count) {
    std::vector<uint64_t> times;
    for (size_t i = 0; i < count; ++i) times.push_back(1000 + random() % (count / 4) * 10);
    return times;
  };
  std::vector<std::pair<const char*, std::vector<uint64_t>>> orders = {
      {"nearly sorted", nearly_sorted(150000)},
      {"thread buffers", thread_buffers(150000)},
      {"reversed", reversed(150000)},
      {"shuffled", shuffled(150000)},
      {"few", shuffled(40)},
  };
  for (const auto& [order, times] : orders) {
    SCOPED_TRACE(order);
    TempDir dir;
    ChunkFileWriter inject;
    ASSERT_EQ(inject.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
    ChunkFileWriter kernel;
    ASSERT_EQ(kernel.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
    RecordBatch calls, events;
    AddApiName(&calls, 1, "cudaLaunchKernel");
    for (size_t i = 0; i < times.size(); ++i) {
      format::ApiCallRecord call = ApiCall(101, 1, times[i], times[i] + 5);
      call.correlation_id = i;  // the order written
      calls.Add(call, format::kApiCall);
      events.Add(Futex(kPid, 101, times[i], times[i] + 5, i, 0), GPROF_REC_FUTEX);
      events.Add(OffCpu(kPid, 101, times[i], times[i] + 5 + i, 0, 0, -1), GPROF_REC_OFFCPU);
      if (i % 10000 == 9999) {
        calls.WriteTo(&inject);
        events.WriteTo(&kernel);
      }
    }
    calls.WriteTo(&inject);
    events.WriteTo(&kernel);
    inject.Close();
    kernel.Close();

    auto session = ReadSession(dir.path());
    ASSERT_TRUE(session.ok()) << session.status().message();
    std::vector<size_t> expected(times.size());
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
    std::stable_sort(expected.begin(), expected.end(),
                     [&](size_t a, size_t b) { return times[a] < times[b]; });
    ASSERT_EQ(session->api_calls.size(), times.size());
    ASSERT_EQ(session->futex_calls.size(), times.size());
    ASSERT_EQ(session->off_cpu.size(), times.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      size_t written = expected[i];
      ASSERT_EQ(session->api_calls[i].correlation_id, written) << "at " << i;
      ASSERT_EQ(session->api_calls[i].enter_ns, times[written]);
      ASSERT_EQ(session->futex_calls[i].uaddr, written) << "at " << i;
      ASSERT_EQ(session->futex_calls[i].start_ns, times[written]);
      ASSERT_EQ(session->off_cpu[i].end_ns, times[written] + 5 + written) << "at " << i;
    }
  }
}

// A waker's name is the bytes of its comm field up to the first NUL, whatever follows it; one
// name is stored once however many intervals carry it.
TEST(SessionReader, WakerNamesEndAtTheirFirstNul) {
  const std::vector<std::pair<std::string, std::string>> comms = {
      {std::string("gpu-worker\0xyz!", 15), "gpu-worker"},
      {"gpu-worker", "gpu-worker"},
      {"", ""},
      {std::string("\0garbage", 8), ""},
      {"abcdefghijklmnop", "abcdefghijklmnop"},  // all 16 bytes, no NUL
      {std::string("abcdefgh\0tail", 13), "abcdefgh"},
      {std::string("abcdefg\0\x01\x02", 10), "abcdefg"},
      {"abcdefghi", "abcdefghi"},
      {std::string("\x80\x01\xff\0\x80", 5), "\\x80\\x01\\xff"},
  };
  TempDir dir;
  ChunkFileWriter kernel;
  ASSERT_EQ(kernel.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch events;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < comms.size(); ++i) {
      gprof_offcpu event = OffCpu(kPid, 101, 1000 + i, 2000 + i, 1500, 102, -1);
      memcpy(event.waker_comm, comms[i].first.data(), comms[i].first.size());
      events.Add(event, GPROF_REC_OFFCPU);
    }
  }
  events.WriteTo(&kernel);
  kernel.Close();

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_EQ(session->off_cpu.size(), comms.size() * 3);
  std::map<std::string, uint32_t> index_of;
  for (size_t at = 0; at < session->off_cpu.size(); ++at) {
    const auto& interval = session->off_cpu[at];
    const std::string& expected = comms[interval.start_ns - 1000].second;
    EXPECT_EQ(session->WakerComm(interval), expected) << "interval " << at;
    auto [known, inserted] = index_of.try_emplace(expected, interval.waker_comm);
    EXPECT_EQ(known->second, interval.waker_comm) << expected << " stored twice";
  }
  EXPECT_EQ(session->comms.size(), index_of.size() + (index_of.count("") ? 0 : 1));
}

// The kernel recorder leaves a waker in the tree unnamed: it is named by what its start, rename
// and exec records called it by the wakeup, whatever order the records came in. One outside the
// tree keeps its own name; one the records never name stays unnamed.
TEST(SessionReader, WakersInTheTreeAreNamedAsTheyWereAtTheWakeup) {
  TempDir dir;
  ChunkFileWriter kernel;
  ASSERT_EQ(kernel.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch events;
  auto woken_by = [&](uint32_t waker, uint64_t wake_ns, const char* comm) {
    gprof_offcpu event = OffCpu(kPid, 101, wake_ns - 100, wake_ns + 100, wake_ns, waker, -1);
    memcpy(event.waker_comm, comm, strlen(comm));
    events.Add(event, GPROF_REC_OFFCPU);
  };
  auto renamed = [&](uint32_t tid, uint64_t time_ns, const char* comm, uint32_t is_exec) {
    gprof_task_rename rename{};
    rename.pid = kPid;
    rename.tid = tid;
    rename.time_ns = time_ns;
    rename.is_exec = is_exec;
    memcpy(rename.comm, comm, strlen(comm));
    events.Add(rename, GPROF_REC_TASK_RENAME);
  };
  woken_by(103, 5000, "");  // before its rename below, after its start
  woken_by(103, 9000, "");  // after the rename
  renamed(103, 7000, "loader-2", 0);
  gprof_task_new start{};
  start.pid = kPid;
  start.tid = 103;
  start.parent_pid = kPid;
  start.parent_tid = 102;
  start.time_ns = 1000;
  start.flags = GPROF_TASK_NEW_THREAD;
  memcpy(start.comm, "python3", 7);
  events.Add(start, GPROF_REC_TASK_NEW);
  renamed(102, 3000, "train", 1);  // the main thread: named first by its exec
  woken_by(102, 2000, "");         // before it: the first name it is known by
  woken_by(102, 4000, "");
  woken_by(104, 4000, "");      // never named
  woken_by(900, 4000, "bash");  // outside the tree
  events.WriteTo(&kernel);
  kernel.Close();

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::map<std::pair<uint32_t, uint64_t>, std::string> names;
  for (const auto& interval : session->off_cpu)
    names[{interval.waker_tid, interval.wake_ns}] = session->WakerComm(interval);
  const std::map<std::pair<uint32_t, uint64_t>, std::string> expected = {
      {{103, 5000}, "python3"}, {{103, 9000}, "loader-2"}, {{102, 2000}, "train"},
      {{102, 4000}, "train"},   {{104, 4000}, ""},         {{900, 4000}, "bash"}};
  EXPECT_EQ(names, expected);
}

TEST(SessionReader, TruncatedFileKeepsEveryCompleteChunk) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 3, 10);
  auto offsets = ChunkOffsets(path);
  ASSERT_EQ(offsets.size(), 4u);  // names + 3 call chunks
  uint64_t cut = offsets[3] + sizeof(format::ChunkHeader) + 5;
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(cut)), 0);

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(session->api_calls.size(), 20u);
  ASSERT_EQ(session->diagnostics.size(), 2u);  // the cut, and session.json missing
  const auto& cut_message =
      session->diagnostics[1].file == path ? session->diagnostics[1] : session->diagnostics[0];
  EXPECT_EQ(cut_message.file, path);
  EXPECT_EQ(cut_message.offset, offsets[3]);
  EXPECT_NE(cut_message.message.find("mid-chunk"), std::string::npos) << cut_message.message;
}

// A file cut while it is being read (its writer still at work on a damaged disk, a user's
// truncate) reads as cut short at the new end: the records before it are kept, and the reader
// neither crashes (a memory-mapped file past its new end raises SIGBUS) nor reads stale bytes.
TEST(SessionReader, AFileThatShrinksWhileItIsReadKeepsWhatCameBefore) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 400, 10);
  auto offsets = ChunkOffsets(path);
  constexpr uint64_t kCut = 4096;  // a page: past it, a mapping of the old size has no file
  ASSERT_GT(offsets.back(), 4 * kCut) << "the file must span pages past the cut";
  size_t whole_chunks = 0;
  while (whole_chunks + 1 < offsets.size() && offsets[whole_chunks + 1] <= kCut) ++whole_chunks;

  uint64_t calls = 0;
  bool cut = false;
  std::vector<collector::Diagnostic> diagnostics;
  auto summary = collector::ReadChunkFile(
      path,
      [&](const collector::RecordView& record) {
        if (!cut) {
          ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(kCut)), 0);
          cut = true;
        }
        calls += record.type == format::kApiCall;
      },
      &diagnostics);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->chunks, whole_chunks);
  EXPECT_EQ(calls, (whole_chunks - 1) * 10);  // the first chunk holds the API name
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_EQ(diagnostics[0].offset, offsets[whole_chunks]);
  EXPECT_NE(diagnostics[0].message.find("file ends inside chunk"), std::string::npos)
      << diagnostics[0].message;
}

TEST(SessionReader, CutInsideAChunkHeaderIsSalvagedToo) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 2, 10);
  auto offsets = ChunkOffsets(path);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(offsets[2] + 7)), 0);
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->api_calls.size(), 10u);
}

TEST(SessionReader, DamagedPayloadIsSkippedAndTheRestRead) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 3, 10);
  auto offsets = ChunkOffsets(path);
  FlipByte(path, offsets[2] + sizeof(format::ChunkHeader) + 3);

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->api_calls.size(), 20u);
  bool named = false;
  for (const auto& d : session->diagnostics) {
    if (d.file == path && d.offset == offsets[2]) {
      named = true;
      EXPECT_NE(d.message.find("checksum"), std::string::npos) << d.message;
    }
  }
  EXPECT_TRUE(named);
}

TEST(SessionReader, DamagedChunkHeaderResyncsOnTheNextChunk) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 3, 10);
  auto offsets = ChunkOffsets(path);
  FlipByte(path, offsets[2]);  // its magic
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->api_calls.size(), 20u);
  EXPECT_FALSE(session->diagnostics.empty());
}

TEST(SessionReader, UncompressedChunksAreRead) {
  TempDir dir;
  std::string path = WriteInjectFile(dir, 0, 0);
  RecordBatch unused;
  std::string payload;
  auto call = ApiCall(5, 1, 100, 200);
  call.header = {sizeof(call), format::kApiCall, 0};
  payload.append(reinterpret_cast<const char*>(&call), sizeof(call));
  format::ChunkHeader chunk{format::kChunkMagic,
                            0,
                            static_cast<uint32_t>(payload.size()),
                            static_cast<uint32_t>(payload.size()),
                            1,
                            format::Fnv1a32(payload.data(), payload.size()),
                            1};
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(reinterpret_cast<const char*>(&chunk), sizeof(chunk));
  out << payload;
  out.close();
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->api_calls.size(), 1u);
  EXPECT_EQ(session->ApiName(session->api_calls[0]), "cudaLaunchKernel");
}

TEST(SessionReader, MalformedRecordsAreSkippedWithAMessage) {
  TempDir dir;
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch batch;
  batch.Add(format::RecordHeader{}, GPROF_REC_OFFCPU);  // far too short for an off-CPU record
  batch.Add(OffCpu(1, 2, 10, 5, 0, 0, -1), GPROF_REC_OFFCPU);  // ends before it starts
  batch.Add(OffCpu(1, 2, 10, 20, 0, 0, -1), GPROF_REC_OFFCPU);
  batch.WriteTo(&file);
  file.Close();
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->off_cpu.size(), 1u);
  int malformed = 0;
  for (const auto& d : session->diagnostics)
    malformed += d.message.find("malformed") != std::string::npos;
  EXPECT_EQ(malformed, 2);
}

TEST(SessionReader, GarbageAndNewerFilesAreNamedNotFatal) {
  TempDir dir;
  WriteInjectFile(dir, 1, 10);
  WriteText(dir.Sub("inject-7.gpr"), "this is not a session file at all, but long enough........");
  format::FileHeader newer{};
  memcpy(newer.magic, format::kFileMagic, 8);
  newer.version = 99;
  newer.header_size = sizeof(newer);
  newer.clock_id = format::kClockMonotonic;
  WriteText(dir.Sub("inject-8.gpr"), std::string(reinterpret_cast<char*>(&newer), sizeof(newer)));

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->api_calls.size(), 10u);
  std::string all;
  for (const auto& d : session->diagnostics) all += d.file + ": " + d.message + "\n";
  EXPECT_NE(all.find(dir.Sub("inject-7.gpr") + ": not a gprof-run session file"), std::string::npos)
      << all;
  EXPECT_NE(all.find("newer gprof-run (format version 99"), std::string::npos) << all;
}

TEST(SessionReader, RefusesWhatIsNotASession) {
  TempDir dir;
  auto missing = ReadSession(dir.Sub("nothing-here"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no such session directory"), std::string::npos);

  auto empty = ReadSession(dir.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("not a gprof-run session"), std::string::npos);

  WriteText(dir.Sub("session.json"), MetaJson(/*version=*/7));
  auto newer = ReadSession(dir.path());
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("newer gprof-run"), std::string::npos);

  WriteText(dir.Sub("session.json"), "{ not json");
  auto broken = ReadSession(dir.path());
  ASSERT_TRUE(broken.ok());
  ASSERT_EQ(broken->diagnostics.size(), 1u);
  EXPECT_NE(broken->diagnostics[0].message.find("not valid JSON"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// CUPTI capture: how the process was captured, the GPU timeline, CUPTI's losses and clock, stacks.

constexpr uint32_t kLaunchId = format::CuptiApiId(format::ApiDomain::kRuntime, 211);
constexpr uint32_t kMemcpyId = format::CuptiApiId(format::ApiDomain::kRuntime, 31);
constexpr char kLibcupti[] = "/usr/local/cuda/lib64/libcupti.so.13";

// An inject file of process kPid that `fill` writes, as one chunk.
template <typename Fill>
void WriteCaptureFile(const TempDir& dir, Fill&& fill) {
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
  RecordBatch batch;
  fill(batch);
  batch.WriteTo(&file);
  file.Close();
}

std::string AllDiagnostics(const Session& session) {
  std::string all;
  for (const auto& d : session.diagnostics) all += d.file + ": " + d.message + "\n";
  return all;
}

size_t MalformedCount(const Session& session) {
  size_t malformed = 0;
  for (const auto& d : session.diagnostics)
    malformed += d.message.find("malformed") != std::string::npos;
  return malformed;
}

TEST(SessionReader, ReadsEveryCaptureRecordAsWritten) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    AddCaptureInfo(&batch, format::CaptureMode::kCupti, 130001, kLibcupti);
    AddApiName(&batch, kLaunchId, "cudaLaunchKernel");
    AddApiName(&batch, kMemcpyId, "cudaMemcpy");
    auto launch = ApiCall(101, kLaunchId, 1000, 2000);
    launch.correlation_id = 7;
    batch.Add(launch, format::kApiCall);
    auto copy = ApiCall(101, kMemcpyId, 3000, 9000);
    copy.correlation_id = 8;
    batch.Add(copy, format::kApiCall);
    AddGpuName(&batch, 1, "_Z4Spinx");
    auto kernel = KernelRecord(Placement(2500, 6000, 7, 13), 1);
    kernel.placement.graph_id = 3;
    kernel.placement.graph_node_id = 44;
    batch.Add(kernel, format::kGpuKernel);
    format::GpuMemcpyRecord memcpy{};
    memcpy.placement = Placement(6100, 8000, 8, 14, 1);
    memcpy.bytes = 1 << 20;
    memcpy.copy_kind = 1;  // HtoD
    memcpy.src_kind = 1;   // pageable
    memcpy.dst_kind = 3;   // device
    batch.Add(memcpy, format::kGpuMemcpy);
    format::GpuMemsetRecord memset{};
    memset.placement = Placement(2000, 2100, 0, 13);
    memset.bytes = 64;
    memset.value = 0xff;
    memset.memory_kind = 3;
    memset.async = 1;
    batch.Add(memset, format::kGpuMemset);
    format::GpuSyncRecord sync{};
    sync.start_ns = 8500;
    sync.end_ns = 8900;
    sync.correlation_id = 8;
    sync.stream_id = 14;
    sync.type = 3;  // stream synchronize
    batch.Add(sync, format::kGpuSync);
    format::GpuDroppedRecord dropped{};
    dropped.count = 5;
    batch.Add(dropped, format::kGpuDropped);
    batch.Add(dropped, format::kGpuDropped);
    AddCallStack(&batch, 101, 3000, {0x401000, 0x402000, 0x403000},
                 {"cudaMemcpy+0x10", "_ZN5Model4StepEi+0x2c", ""});
  });

  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(MalformedCount(*session), 0u) << AllDiagnostics(*session);

  const collector::Process& process = session->processes.at(kPid);
  EXPECT_EQ(process.capture.mode, collector::CaptureMode::kCupti);
  EXPECT_EQ(process.capture.cupti_version, 130001u);
  EXPECT_EQ(process.capture.note, kLibcupti);
  EXPECT_EQ(process.gpu_dropped_records, 10u);
  bool lost_named = false;
  for (const auto& lost : session->lost) {
    if (lost.what == "GPU activity records of pid 100 (CUPTI buffers full)") {
      lost_named = true;
      EXPECT_EQ(lost.count, 10u);
    }
  }
  EXPECT_TRUE(lost_named);

  // Sorted by start, whatever the order they were written in.
  const auto& gpu = session->gpu_activities;
  ASSERT_EQ(gpu.size(), 4u);
  EXPECT_TRUE(std::is_sorted(gpu.begin(), gpu.end(),
                             [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; }));
  const auto& memset_activity = gpu[0];
  const auto* memset_detail = std::get_if<collector::GpuMemset>(&memset_activity.detail);
  ASSERT_NE(memset_detail, nullptr);
  EXPECT_EQ(memset_detail->bytes, 64u);
  EXPECT_EQ(memset_detail->value, 0xffu);
  EXPECT_TRUE(memset_detail->async);

  const GpuActivity& kernel = gpu[1];
  const auto* kernel_detail = std::get_if<collector::GpuKernel>(&kernel.detail);
  ASSERT_NE(kernel_detail, nullptr);
  EXPECT_EQ(session->KernelName(*kernel_detail), "Spin(long long)");
  EXPECT_EQ(kernel.pid, kPid);
  EXPECT_EQ(kernel.start_ns, 2500u);
  EXPECT_EQ(kernel.end_ns, 6000u);
  EXPECT_EQ(kernel.correlation_id, 7u);
  EXPECT_EQ(kernel.stream_id, 13u);
  EXPECT_EQ(kernel.context_id, 1u);
  EXPECT_EQ(kernel.graph_id, 3u);
  EXPECT_EQ(kernel.graph_node_id, 44u);
  EXPECT_EQ(kernel_detail->grid, (std::array<int32_t, 3>{128, 1, 1}));
  EXPECT_EQ(kernel_detail->block, (std::array<int32_t, 3>{256, 1, 1}));
  EXPECT_EQ(kernel_detail->registers_per_thread, 32u);
  EXPECT_EQ(kernel_detail->shared_memory_bytes, 4096u);
  EXPECT_TRUE(kernel.occupies_gpu());

  const GpuActivity& copy = gpu[2];
  const auto* copy_detail = std::get_if<collector::GpuMemcpy>(&copy.detail);
  ASSERT_NE(copy_detail, nullptr);
  EXPECT_EQ(copy.device_id, 1u);
  EXPECT_EQ(copy_detail->bytes, 1u << 20);
  EXPECT_EQ(copy_detail->copy_kind, 1);
  EXPECT_EQ(copy_detail->src_kind, 1);
  EXPECT_EQ(copy_detail->dst_kind, 3);
  EXPECT_FALSE(copy_detail->async);

  const GpuActivity& sync = gpu[3];
  const auto* sync_detail = std::get_if<collector::GpuSync>(&sync.detail);
  ASSERT_NE(sync_detail, nullptr);
  EXPECT_EQ(sync_detail->type, 3u);
  EXPECT_EQ(sync.stream_id, 14u);
  EXPECT_FALSE(sync.occupies_gpu());

  ASSERT_EQ(session->api_calls.size(), 2u);
  EXPECT_EQ(session->ApiName(session->api_calls[0]), "cudaLaunchKernel");
  EXPECT_EQ(session->api_calls[0].correlation_id, 7u);
  const collector::NativeStack* stack = session->CallStackOf(session->api_calls[1]);
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(stack->pid, kPid);
  EXPECT_EQ(stack->ips, (std::vector<uint64_t>{0x401000, 0x402000, 0x403000}));
  EXPECT_EQ(stack->symbols,
            (std::vector<std::string>{"cudaMemcpy+0x10", "Model::Step(int)+0x2c", ""}));
  EXPECT_EQ(session->CallStackOf(session->api_calls[0]), nullptr);
}

TEST(SessionReader, PutsGpuTimesOnMonotonicWithTheOffsetInEffect) {
  TempDir dir;
  constexpr int64_t kRealtimeLike = 1'700'000'000'000'000'000;  // a Kineto-style clock
  WriteCaptureFile(dir, [&](RecordBatch& batch) {
    AddGpuName(&batch, 1, "k");
    // Activities first: CUPTI delivers its buffers after the work, the offsets may come later.
    batch.Add(KernelRecord(Placement(800, 900, 0, 1), 1), format::kGpuKernel);    // before any
    batch.Add(KernelRecord(Placement(5000, 5100, 0, 1), 1), format::kGpuKernel);  // first offset
    batch.Add(KernelRecord(Placement(kRealtimeLike + 60'000, kRealtimeLike + 61'000, 0, 1), 1),
              format::kGpuKernel);  // stamped by the realtime-like clock
    batch.Add(KernelRecord(Placement(200'000, 200'500, 0, 1), 1), format::kGpuKernel);  // back
    batch.Add(KernelRecord(Placement(10, 20, 0, 1), 1), format::kGpuKernel);  // below zero
    batch.Add(ClockOffsetAt(1000, 500), format::kClockOffset);
    batch.Add(ClockOffsetAt(50'000, kRealtimeLike), format::kClockOffset);
    batch.Add(ClockOffsetAt(100'000, -2000), format::kClockOffset);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::vector<std::pair<uint64_t, uint64_t>> times;
  for (const GpuActivity& activity : session->gpu_activities)
    times.emplace_back(activity.start_ns, activity.end_ns);
  EXPECT_EQ(times, (std::vector<std::pair<uint64_t, uint64_t>>{
                       {300, 400},          // before the first measurement: the first offset
                       {4500, 4600},        // +500
                       {60'000, 61'000},    // the realtime-like offset, though written later
                       {202'000, 202'500},  // -2000
                   }));
  // 10 - 500 falls before CLOCK_MONOTONIC's zero: skipped and said.
  EXPECT_NE(AllDiagnostics(*session).find("1 GPU activity records skipped"), std::string::npos)
      << AllDiagnostics(*session);
  const auto& offsets = session->processes.at(kPid).clock_offsets;
  ASSERT_EQ(offsets.size(), 3u);
  EXPECT_EQ(offsets[1].offset_ns, kRealtimeLike);
}

// The driver's module loading and the GPUs' UUIDs: loads on CLOCK_MONOTONIC like GPU work, UUIDs
// spelled as nvidia-smi spells them.
TEST(SessionReader, ReadsModuleLoadsAndDeviceUuids) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    format::GpuOverheadRecord load{};
    load.start_ns = 5000;
    load.end_ns = 9000;
    load.correlation_id = 42;
    load.overhead_kind = 5 << 16;  // CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING
    load.tid = 101;
    batch.Add(load, format::kGpuOverhead);
    format::GpuDeviceRecord device{};
    device.device_id = 1;
    for (uint8_t i = 0; i < 16; ++i) device.uuid[i] = static_cast<uint8_t>(i * 17);
    batch.Add(device, format::kGpuDevice);
    batch.Add(ClockOffsetAt(1000, 500), format::kClockOffset);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_EQ(session->module_loads.size(), 1u);
  const collector::ModuleLoad& load = session->module_loads[0];
  EXPECT_EQ(load.start_ns, 4500u);
  EXPECT_EQ(load.end_ns, 8500u);
  EXPECT_EQ(load.correlation_id, 42u);
  EXPECT_EQ(load.pid, kPid);
  EXPECT_EQ(load.tid, 101u);
  EXPECT_EQ(load.overhead_kind, 5u << 16);
  EXPECT_EQ(session->processes.at(kPid).device_uuids,
            (std::map<uint32_t, std::string>{{1, "GPU-00112233-4455-6677-8899-aabbccddeeff"}}));
}

TEST(SessionReader, WithoutClockOffsetsGpuTimesAreTakenAsMonotonic) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    AddGpuName(&batch, 1, "k");
    batch.Add(KernelRecord(Placement(7000, 8000, 0, 1), 1), format::kGpuKernel);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->gpu_activities.size(), 1u);
  EXPECT_EQ(session->gpu_activities[0].start_ns, 7000u);
  EXPECT_TRUE(session->processes.at(kPid).clock_offsets.empty());
}

TEST(SessionReader, MalformedCaptureRecordsAreSkippedWithAMessage) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    // Each type cut to its record header.
    for (uint16_t type :
         {format::kCaptureInfo, format::kGpuName, format::kGpuKernel, format::kGpuMemcpy,
          format::kGpuMemset, format::kGpuSync, format::kGpuDropped, format::kClockOffset,
          format::kCallStack, format::kGpuOverhead, format::kGpuDevice}) {
      batch.Add(format::RecordHeader{}, type);
    }
    // Trailing lengths past the record's end.
    format::CaptureInfoRecord info{};
    info.text_len = 1000;
    batch.Add(info, format::kCaptureInfo, "short");
    format::GpuNameRecord name{};
    name.name_len = 1u << 31;
    batch.Add(name, format::kGpuName, "_Z1fv");
    format::CallStackRecord stack{};
    stack.frame_count = 0x20000000;  // frame bytes that would wrap a 32-bit size
    batch.Add(stack, format::kCallStack, std::string(16, '\0'));
    stack.frame_count = 1;
    stack.text_len = 100;
    batch.Add(stack, format::kCallStack, std::string(8, '\0') + "f+0x1\n");
    // Time running backwards.
    batch.Add(KernelRecord(Placement(5000, 4000, 0, 1), 1), format::kGpuKernel);
    format::GpuSyncRecord sync{};
    sync.start_ns = 10;
    sync.end_ns = 5;
    batch.Add(sync, format::kGpuSync);
    // And a good one after all that.
    AddGpuName(&batch, 1, "_Z4Spinx");
    batch.Add(KernelRecord(Placement(1000, 2000, 0, 1), 1), format::kGpuKernel);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(MalformedCount(*session), 11u + 4u + 2u) << AllDiagnostics(*session);
  for (const auto& d : session->diagnostics) {
    if (d.message.find("malformed") == std::string::npos) continue;
    EXPECT_EQ(d.file, dir.Sub("inject-100.gpr"));
    EXPECT_EQ(d.offset, sizeof(format::FileHeader)) << "the chunk that holds it";
  }
  ASSERT_EQ(session->gpu_activities.size(), 1u);
  EXPECT_EQ(session->KernelName(std::get<collector::GpuKernel>(session->gpu_activities[0].detail)),
            "Spin(long long)");
  EXPECT_TRUE(session->call_stacks.empty());
  EXPECT_EQ(session->processes.at(kPid).capture.mode, collector::CaptureMode::kUnknown);
}

TEST(SessionReader, CaptureFileCutShortKeepsItsCompleteChunks) {
  TempDir dir;
  std::string path = dir.Sub("inject-100.gpr");
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(path.c_str(), format::Source::kInject, kPid), 0);
    RecordBatch batch;
    AddCaptureInfo(&batch, format::CaptureMode::kCupti, 130001, kLibcupti);
    AddGpuName(&batch, 1, "_Z4Spinx");
    batch.WriteTo(&file);
    for (uint64_t chunk = 0; chunk < 3; ++chunk) {
      for (uint64_t i = 0; i < 10; ++i) {
        uint64_t start = (chunk * 10 + i + 1) * 1000;  // 0 is CUPTI_TIMESTAMP_UNKNOWN
        batch.Add(KernelRecord(Placement(start, start + 500, 0, 1), 1), format::kGpuKernel);
      }
      batch.WriteTo(&file);
    }
  }
  auto offsets = ChunkOffsets(path);
  ASSERT_EQ(offsets.size(), 4u);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(offsets[3] + 40)), 0);
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->gpu_activities.size(), 20u);
  EXPECT_EQ(session->processes.at(kPid).capture.mode, collector::CaptureMode::kCupti);
}

TEST(SessionReader, KernelNamesAreDemangledWhereTheyCanBe) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    AddGpuName(&batch, 1, "_ZN2at6native13reduce_kernelEPfi");
    AddGpuName(&batch, 2, "triton_poi_fused_add_0");  // not C++: as it is
    AddGpuName(&batch, 3, "_Z_not_really_mangled");   // fails to demangle: kept mangled
    for (uint32_t id : {1u, 2u, 3u, 4u}) {            // 4 was never named
      batch.Add(KernelRecord(Placement(id * 1000, id * 1000 + 10, 0, 1), id), format::kGpuKernel);
    }
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  std::vector<std::string> names;
  for (const GpuActivity& activity : session->gpu_activities)
    names.push_back(session->KernelName(std::get<collector::GpuKernel>(activity.detail)));
  EXPECT_EQ(names, (std::vector<std::string>{"at::native::reduce_kernel(float*, int)",
                                             "triton_poi_fused_add_0", "_Z_not_really_mangled",
                                             "kernel#4"}));
}

TEST(Demangle, ReadsNamesAndStackFrames) {
  EXPECT_EQ(collector::Demangle("_Z4Spinx"), "Spin(long long)");
  EXPECT_EQ(collector::Demangle("main"), "main");
  EXPECT_EQ(collector::Demangle("i"), "i") << "a plain word is not a type name";
  EXPECT_EQ(collector::DemangleFrame("_ZN2at5emptyEv+0x1c"), "at::empty()+0x1c");
  EXPECT_EQ(collector::DemangleFrame("start_thread+0x8b"), "start_thread+0x8b");
  EXPECT_EQ(collector::DemangleFrame("_Z4Spinx"), "Spin(long long)");
  EXPECT_EQ(collector::DemangleFrame(""), "");
}

TEST(SessionReader, CallStackTextShorterThanItsFramesLeavesThemUnknown) {
  TempDir dir;
  WriteCaptureFile(dir, [](RecordBatch& batch) {
    format::CallStackRecord stack{};
    stack.tid = 101;
    stack.enter_ns = 5;
    stack.frame_count = 3;
    std::string text = "_Z1fv+0x1";  // one line, no newline, for three frames
    stack.text_len = static_cast<uint32_t>(text.size());
    std::string ips(3 * sizeof(uint64_t), '\1');
    batch.Add(stack, format::kCallStack, ips + text);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->call_stacks.size(), 1u);
  const auto& stack = session->call_stacks.begin()->second;
  EXPECT_EQ(stack.ips.size(), 3u);
  EXPECT_EQ(stack.symbols, (std::vector<std::string>{"f()+0x1", "", ""}));
}

// ---------------------------------------------------------------------------------------------
// What the kernel recorder knows besides scheduling: kernel lock waits, device waits, slow page
// faults, memory map calls, futex_waitv, user stacks, process maps, per-CPU losses.

// Writes kernel.gpr with what `fill` adds, as one chunk.
template <typename Fill>
void WriteKernelFile(const TempDir& dir, Fill fill) {
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch batch;
  fill(batch);
  batch.WriteTo(&file);
}

constexpr uint64_t kMmapLock = 0xffff888100a0c1e8;
constexpr char kLibcudaMaps[] =
    "7f0000000000-7f0000100000 r-xp 00000000 08:01 77   /usr/lib/libcuda.so.1\n"
    "7f0000100000-7f0000110000 rw-p 00100000 08:01 77   /usr/lib/libcuda.so.1\n";

TEST(SessionReader, ReadsEveryKernelFactAsWritten) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    batch.Add(LockWaitEvent(kPid, 102, 1000, 9000, kMmapLock,
                            GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK, 101, "trainer"),
              GPROF_REC_LOCK_WAIT);
    batch.Add(DeviceWaitEvent(kPid, 103, 2000, 3000, GPROF_DEVICE_IOCTL, "nvidiactl", 0xc020462a),
              GPROF_REC_DEVICE_WAIT);
    batch.Add(DeviceWaitEvent(kPid, 103, 4000, 5000, 99, "nvidia0", 1), GPROF_REC_DEVICE_WAIT);
    batch.Add(PageFaultEvent(kPid, 102, 900, 9100, 0x7f0000001234), GPROF_REC_PAGE_FAULT);
    batch.Add(MemoryMapEvent(kPid, 101, 500, 9500, 11, 0x7e0000000000, 512ull << 20),
              GPROF_REC_MEMORY_MAP);
    batch.Add(FutexWaitvEvent(kPid, 104, 100, 200, 6, 2), GPROF_REC_FUTEX_WAITV);
    AddUserStack(&batch, 4, {0x7f0000001000, 0x7f0000002000}, /*truncated=*/true);
    AddProcessMaps(&batch, kPid, 50, kLibcudaMaps);
    AddProcessMaps(&batch, kPid, 10, "7f0000000000-7f0000001000 r--p 00000000 08:01 5 /bin/sh\n");
    gprof_task_rename exec{};  // the shell execs the program at 40
    exec.pid = exec.tid = kPid;
    exec.time_ns = 40;
    exec.is_exec = 1;
    memcpy(exec.comm, "python3", 7);
    batch.Add(exec, GPROF_REC_TASK_RENAME);
    batch.Add(LostEvent(GPROF_LOST_RINGBUF, GPROF_REC_LOCK_WAIT, 5, 0), GPROF_REC_LOST);
    batch.Add(LostEvent(GPROF_LOST_RINGBUF, GPROF_REC_LOCK_WAIT, 7, 3), GPROF_REC_LOST);
    batch.Add(LostEvent(GPROF_LOST_RINGBUF, GPROF_REC_LOCK_WAIT, 1, GPROF_ALL_CPUS),
              GPROF_REC_LOST);
    batch.Add(LostEvent(GPROF_LOST_STACK, GPROF_REC_OFFCPU, 2, 1), GPROF_REC_LOST);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(MalformedCount(*session), 0u) << AllDiagnostics(*session);

  ASSERT_EQ(session->lock_waits.size(), 1u);
  const collector::LockWait& lock = session->lock_waits[0];
  EXPECT_EQ(lock.lock_address, kMmapLock);
  EXPECT_TRUE(lock.is_mmap_lock());
  EXPECT_EQ(lock.owner_tid, 101u);
  EXPECT_EQ(lock.owner_comm, "trainer");
  EXPECT_EQ(lock.duration(), 8000u);

  ASSERT_EQ(session->device_waits.size(), 2u);
  EXPECT_EQ(session->device_waits[0].call, collector::DeviceCall::kIoctl);
  EXPECT_EQ(session->device_waits[0].device, "nvidiactl");
  EXPECT_EQ(session->device_waits[0].request, 0xc020462au);
  EXPECT_EQ(session->device_waits[1].call, collector::DeviceCall::kUnknown)
      << "a kind from a newer recorder is kept, named generically";

  ASSERT_EQ(session->page_faults.size(), 1u);
  EXPECT_EQ(session->page_faults[0].address, 0x7f0000001234u);
  EXPECT_TRUE(session->page_faults[0].is_major());
  EXPECT_TRUE(session->page_faults[0].is_write());

  ASSERT_EQ(session->memory_map_calls.size(), 1u);
  EXPECT_EQ(session->memory_map_calls[0].syscall, collector::MemorySyscall::kMunmap);
  EXPECT_EQ(session->memory_map_calls[0].length, 512ull << 20);

  ASSERT_EQ(session->futex_waitv_calls.size(), 1u);
  const collector::FutexWaitvCall& waitv = session->futex_waitv_calls[0];
  EXPECT_EQ(waitv.count, 6u);
  ASSERT_EQ(waitv.addresses.size(), size_t{GPROF_WAITV_MAX}) << "only the first four are recorded";
  EXPECT_EQ(waitv.woken_address(), 0x7f0000000180u);

  ASSERT_EQ(session->user_stacks.count(4), 1u);
  EXPECT_EQ(session->user_stacks.at(4).ips,
            (std::vector<uint64_t>{0x7f0000001000, 0x7f0000002000}));
  EXPECT_TRUE(session->user_stacks.at(4).truncated);

  // Snapshots in time order, whatever order they came in; an address is named by those of the
  // program that ran at its time.
  const collector::Process& process = session->processes.at(kPid);
  ASSERT_EQ(process.maps.size(), 2u);
  EXPECT_EQ(process.maps[0].time_ns, 10u);
  EXPECT_EQ(process.maps[1].time_ns, 50u);
  EXPECT_EQ(process.exec_ns, std::vector<uint64_t>{40});
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000000010, 30)->path, "/bin/sh");
  const collector::Mapping* libcuda = session->FindMapping(kPid, 0x7f0000000010, 60);
  ASSERT_NE(libcuda, nullptr);
  EXPECT_EQ(libcuda->path, "/usr/lib/libcuda.so.1");
  EXPECT_EQ(libcuda->inode, 77u);
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000100010, 30), nullptr)
      << "only the program exec'ed later mapped it";

  // One entry per kind and record type, summed over CPUs; each CPU's count kept.
  ASSERT_EQ(session->lost.size(), 2u);
  EXPECT_EQ(session->lost[0].what, "kernel lock waits: ring buffer full");
  EXPECT_EQ(session->lost[0].count, 13u);
  EXPECT_EQ(session->lost[0].by_cpu,
            (std::map<uint32_t, uint64_t>{{0, 5}, {3, 7}, {collector::kAllCpus, 1}}));
  EXPECT_EQ(session->lost[1].what, "kernel off-CPU intervals: stack unavailable");

  // Threads seen only in these records are threads of the model.
  for (uint32_t tid : {101u, 102u, 103u, 104u}) {
    ASSERT_EQ(session->threads.count(tid), 1u) << tid;
    EXPECT_EQ(session->threads.at(tid).pid, kPid);
  }
}

gprof_event_count EventCount(uint32_t kind, uint32_t cpu, uint32_t tid, uint64_t count,
                             uint64_t total_ns) {
  gprof_event_count event{};
  event.kind = kind;
  event.cpu = cpu;
  event.pid = tid == 0 ? 0 : kPid;
  event.tid = tid;
  event.count = count;
  event.total_ns = total_ns;
  event.limit_ns = kind == GPROF_COUNT_QUICK_PAGE_FAULTS ? 50'000 : 0;
  return event;
}

// Quick page faults and spinning-lock contention are counted in the kernel, not recorded one by
// one: the counts reach the model and both reports, summed per thread and per CPU.
TEST(SessionReader, CountedEventsReachTheReports) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    batch.Add(EventCount(GPROF_COUNT_QUICK_PAGE_FAULTS, GPROF_ALL_CPUS, 102, 1000, 3'000'000),
              GPROF_REC_EVENT_COUNT);
    // The same tid again (it exec'ed as another thread, or lived past the recording's end).
    batch.Add(EventCount(GPROF_COUNT_QUICK_PAGE_FAULTS, GPROF_ALL_CPUS, 102, 234, 1'000'000),
              GPROF_REC_EVENT_COUNT);
    batch.Add(EventCount(GPROF_COUNT_QUICK_PAGE_FAULTS, GPROF_ALL_CPUS, 103, 1, 2'000),
              GPROF_REC_EVENT_COUNT);
    batch.Add(EventCount(GPROF_COUNT_SPIN_CONTENTION, 0, 0, 40, 0), GPROF_REC_EVENT_COUNT);
    batch.Add(EventCount(GPROF_COUNT_SPIN_CONTENTION, 3, 0, 2, 0), GPROF_REC_EVENT_COUNT);
    batch.Add(EventCount(99, 3, 0, 7, 0), GPROF_REC_EVENT_COUNT);  // a newer recorder's kind
    // A thread's count that names no thread is malformed, not a thread 0.
    batch.Add(EventCount(GPROF_COUNT_QUICK_PAGE_FAULTS, GPROF_ALL_CPUS, 0, 5, 5),
              GPROF_REC_EVENT_COUNT);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(MalformedCount(*session), 1u) << AllDiagnostics(*session);

  ASSERT_EQ(session->threads.count(102), 1u);
  EXPECT_EQ(session->threads.at(102).pid, kPid);
  EXPECT_EQ(session->threads.at(102).quick_page_faults, 1234u);
  EXPECT_EQ(session->threads.at(102).quick_page_fault_ns, 4'000'000u);
  EXPECT_EQ(session->threads.at(103).quick_page_faults, 1u);
  EXPECT_EQ(session->threads.count(0), 0u);
  EXPECT_EQ(session->quick_page_fault_limit_ns, 50'000u);
  EXPECT_EQ(session->spin_contention_by_cpu, (std::map<uint32_t, uint64_t>{{0, 40}, {3, 2}}));

  collector::Analysis analysis = collector::Analyze(*session, {});
  std::string text = collector::RenderTextReport(*session, analysis);
  EXPECT_NE(text.find("  counted   1,235 page faults under 50.0 us (4.0 ms in all), 42 contended "
                      "spinning locks: not recorded one by one\n"),
            std::string::npos)
      << text;
  nlohmann::json json = collector::RenderJsonReport(*session, analysis);
  EXPECT_EQ(json["session"]["counts"]["quick_page_faults"], 1235);
  EXPECT_EQ(json["session"]["counts"]["spin_lock_contentions"], 42);
  EXPECT_EQ(json["session"]["counted"]["quick_page_faults"]["total_ns"], 4'002'000);
  EXPECT_EQ(json["session"]["counted"]["quick_page_faults"]["under_ns"], 50'000);
  EXPECT_EQ(json["session"]["counted"]["spin_lock_contentions"]["by_cpu"][1]["cpu"], 3);
  EXPECT_EQ(json["session"]["counted"]["spin_lock_contentions"]["by_cpu"][1]["count"], 2);
  bool listed = false;
  for (const nlohmann::json& thread : json["session"]["threads"]) {
    if (thread["tid"] != 102) continue;
    listed = true;
    EXPECT_EQ(thread["quick_page_faults"], 1234);
    EXPECT_EQ(thread["quick_page_fault_ns"], 4'000'000);
  }
  EXPECT_TRUE(listed);
}

gprof_wait_count WaitCount(uint32_t kind, uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                           uint64_t count, uint64_t total_ns) {
  gprof_wait_count event{};
  event.kind = kind;
  event.how = kind == GPROF_WAIT_COUNT_OFFCPU ? 1 : 128;  // asleep; FUTEX_WAIT_PRIVATE
  event.pid = kPid;
  event.tid = tid;
  event.syscall_nr = 202;
  event.object = 0x7f0000001000;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.count = count;
  event.total_ns = total_ns;
  event.runnable_ns = kind == GPROF_WAIT_COUNT_OFFCPU ? total_ns / 4 : 0;
  event.woken = kind == GPROF_WAIT_COUNT_OFFCPU ? count : 0;
  event.limit_ns = 20'000;
  return event;
}

// Issue 22: short waits counted in the kernel reach the model, both reports' headers, and the
// trace as running totals on counter tracks of their thread.
TEST(SessionReader, ShortWaitCountsReachTheReportsAndTheTrace) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    batch.Add(WaitCount(GPROF_WAIT_COUNT_OFFCPU, 102, 1'000'000, 2'000'000, 1000, 5'000'000),
              GPROF_REC_WAIT_COUNT);
    batch.Add(WaitCount(GPROF_WAIT_COUNT_OFFCPU, 102, 2'000'000, 3'000'000, 500, 2'000'000),
              GPROF_REC_WAIT_COUNT);
    batch.Add(WaitCount(GPROF_WAIT_COUNT_FUTEX, 102, 1'000'000, 3'000'000, 3000, 6'000'000),
              GPROF_REC_WAIT_COUNT);
    batch.Add(WaitCount(99, 102, 1, 2, 3, 4), GPROF_REC_WAIT_COUNT);  // a newer recorder's kind
    // Malformed: no thread; a period that ends before it starts.
    batch.Add(WaitCount(GPROF_WAIT_COUNT_OFFCPU, 0, 1, 2, 3, 4), GPROF_REC_WAIT_COUNT);
    batch.Add(WaitCount(GPROF_WAIT_COUNT_OFFCPU, 102, 5, 2, 3, 4), GPROF_REC_WAIT_COUNT);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(MalformedCount(*session), 2u) << AllDiagnostics(*session);
  ASSERT_EQ(session->counted_waits.size(), 3u);
  EXPECT_EQ(session->counted_waits_limit_ns, 20'000u);
  ASSERT_EQ(session->threads.count(102), 1u);

  collector::Analysis analysis = collector::Analyze(*session, {});
  std::string text = collector::RenderTextReport(*session, analysis);
  EXPECT_NE(text.find("  counted   1,500 off-CPU intervals (7.0 ms in all) and 3,000 futex calls "
                      "(6.0 ms) under 20.0 us: per thread and reason, not recorded one by one"),
            std::string::npos)
      << text;
  nlohmann::json json = collector::RenderJsonReport(*session, analysis);
  EXPECT_EQ(json["session"]["counts"]["short_off_cpu_intervals"], 1500);
  EXPECT_EQ(json["session"]["counts"]["short_futex_calls"], 3000);
  EXPECT_EQ(json["session"]["counted"]["short_off_cpu_intervals"]["total_ns"], 7'000'000);
  EXPECT_EQ(json["session"]["counted"]["short_futex_calls"]["under_ns"], 20'000);
  for (const nlohmann::json& thread : json["session"]["threads"]) {
    if (thread["tid"] == 102) {
      EXPECT_EQ(thread["short_off_cpu_intervals"], 1500);
    }
  }

  const std::string trace_path = dir.Sub("trace.perfetto-trace");
  ASSERT_TRUE(collector::WritePerfettoTrace(*session, trace_path).ok());
  DecodedTrace trace = DecodeTraceFile(trace_path);
  ASSERT_TRUE(trace.errors.empty()) << trace.errors.front();
  std::map<std::string, std::vector<std::pair<uint64_t, int64_t>>> counters;  // by track name
  for (const DecodedTrack& track : trace.tracks) {
    if (!track.is_counter) continue;
    bool under_thread = false;
    for (const DecodedTrack& parent : trace.tracks)
      under_thread |= parent.uuid == track.parent_uuid && parent.is_thread && parent.tid == 102;
    EXPECT_TRUE(under_thread) << track.name;
    for (const DecodedEvent& event : trace.events) {
      if (event.track_uuid == track.uuid) {
        EXPECT_EQ(event.type, kCounter);
        counters[track.name].emplace_back(event.timestamp_ns, *event.counter_value);
      }
    }
  }
  using Steps = std::vector<std::pair<uint64_t, int64_t>>;
  EXPECT_EQ(counters["off-CPU < 20.0 us (count)"],
            (Steps{{1'000'000, 0}, {2'000'000, 1000}, {3'000'000, 1500}}));
  EXPECT_EQ(counters["off-CPU < 20.0 us (us)"],
            (Steps{{1'000'000, 0}, {2'000'000, 5000}, {3'000'000, 7000}}));
  EXPECT_EQ(counters["futex < 20.0 us (count)"], (Steps{{1'000'000, 0}, {3'000'000, 3000}}));
  EXPECT_EQ(counters.size(), 3u);
}

TEST(SessionReader, OffCpuIntervalsCarryTheirUserStacks) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    gprof_offcpu event = OffCpu(kPid, 102, 6000, 8000, 7900, 101, 3);
    event.user_stack_id = 0;  // a valid id
    event.waker_user_stack_id = 9;
    batch.Add(event, GPROF_REC_OFFCPU);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->off_cpu.size(), 1u);
  EXPECT_EQ(session->off_cpu[0].user_stack_id, 0);
  EXPECT_EQ(session->off_cpu[0].waker_user_stack_id, 9);
}

TEST(SessionReader, RecordsFromBeforeTheirStructGrewAreRead) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    // The first gprof_offcpu ended after waker_comm, with a reserved 0 where user_stack_id is now.
    gprof_offcpu event = OffCpu(kPid, 102, 6000, 8000, 7900, 101, 3);
    event.user_stack_id = 0;
    batch.AddFirstBytes(event, GPROF_REC_OFFCPU, offsetof(gprof_offcpu, waker_user_stack_id));
    // The first gprof_lost had no CPU.
    batch.AddFirstBytes(LostEvent(GPROF_LOST_RINGBUF, GPROF_REC_OFFCPU, 3, 0), GPROF_REC_LOST,
                        offsetof(gprof_lost, cpu));
    // The first gprof_futex read no mutex owner.
    gprof_futex futex = Futex(kPid, 102, 5990, 8010, 0x7f0000000040, 0x80);
    futex.owner_tid = 101;
    batch.AddFirstBytes(futex, GPROF_REC_FUTEX, offsetof(gprof_futex, owner_tid));
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(MalformedCount(*session), 0u) << AllDiagnostics(*session);
  ASSERT_EQ(session->off_cpu.size(), 1u);
  EXPECT_EQ(session->off_cpu[0].waker_tid, 101u);
  EXPECT_LT(session->off_cpu[0].user_stack_id, 0) << "no stack, not stack 0";
  EXPECT_LT(session->off_cpu[0].waker_user_stack_id, 0);
  ASSERT_EQ(session->lost.size(), 1u);
  EXPECT_EQ(session->lost[0].by_cpu, (std::map<uint32_t, uint64_t>{{collector::kAllCpus, 3}}));
  ASSERT_EQ(session->futex_calls.size(), 1u);
  EXPECT_EQ(session->futex_calls[0].uaddr, 0x7f0000000040u);
  EXPECT_EQ(session->futex_calls[0].owner_tid, 0u);
}

TEST(SessionReader, AFutexResultNoCallReturnsIsMalformed) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    gprof_futex futex = Futex(kPid, 102, 5990, 8010, 0x7f0000000040, 0x80);
    futex.ret = int64_t{1} << 40;
    batch.Add(futex, GPROF_REC_FUTEX);
    futex.ret = -110;  // -ETIMEDOUT
    batch.Add(futex, GPROF_REC_FUTEX);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(MalformedCount(*session), 1u) << AllDiagnostics(*session);
  ASSERT_EQ(session->futex_calls.size(), 1u);
  EXPECT_EQ(session->futex_calls[0].ret, -110);
}

TEST(SessionReader, RecordsGrownSinceThisReaderAreReadByThePartItKnows) {
  TempDir dir;
  std::string newer_fields(24, '\x5a');
  WriteKernelFile(dir, [&](RecordBatch& batch) {
    batch.Add(LockWaitEvent(kPid, 102, 1000, 9000, kMmapLock, GPROF_LOCK_MUTEX, 0, ""),
              GPROF_REC_LOCK_WAIT, newer_fields);
    batch.Add(PageFaultEvent(kPid, 102, 900, 9100, 0x1000), GPROF_REC_PAGE_FAULT, newer_fields);
    AddUserStack(&batch, 1, {0x1000});
    batch.Add(LostEvent(GPROF_LOST_RINGBUF, GPROF_REC_OFFCPU, 3, 0), GPROF_REC_LOST, newer_fields);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(MalformedCount(*session), 0u) << AllDiagnostics(*session);
  ASSERT_EQ(session->lock_waits.size(), 1u);
  EXPECT_EQ(session->lock_waits[0].owner_tid, 0u);
  EXPECT_EQ(session->page_faults.size(), 1u);
  EXPECT_EQ(session->lost.size(), 1u);
}

TEST(SessionReader, MalformedKernelFactsAreSkippedWithAMessage) {
  TempDir dir;
  WriteKernelFile(dir, [](RecordBatch& batch) {
    // Each type cut to its record header.
    for (uint16_t type :
         {GPROF_REC_LOCK_WAIT, GPROF_REC_DEVICE_WAIT, GPROF_REC_PAGE_FAULT, GPROF_REC_MEMORY_MAP,
          GPROF_REC_FUTEX_WAITV, GPROF_REC_USER_STACK, GPROF_REC_PROCESS_MAPS, GPROF_REC_LOST}) {
      batch.Add(format::RecordHeader{}, type);
    }
    // Time running backwards.
    batch.Add(LockWaitEvent(kPid, 102, 9000, 1000, kMmapLock, 0, 0, ""), GPROF_REC_LOCK_WAIT);
    batch.Add(DeviceWaitEvent(kPid, 103, 3000, 2000, GPROF_DEVICE_IOCTL, "nvidiactl", 1),
              GPROF_REC_DEVICE_WAIT);
    batch.Add(PageFaultEvent(kPid, 102, 9100, 900, 0x1000), GPROF_REC_PAGE_FAULT);
    batch.Add(MemoryMapEvent(kPid, 101, 9500, 500, 11, 0x1000, 4096), GPROF_REC_MEMORY_MAP);
    batch.Add(FutexWaitvEvent(kPid, 104, 200, 100, 1, 0), GPROF_REC_FUTEX_WAITV);
    // Frames past the record's end, and more than the recorder ever takes.
    gprof_user_stack stack{};
    stack.depth = 3;
    batch.Add(stack, GPROF_REC_USER_STACK, std::string(2 * sizeof(uint64_t), '\0'));
    stack.depth = GPROF_MAX_STACK_DEPTH + 1;
    batch.Add(stack, GPROF_REC_USER_STACK,
              std::string((GPROF_MAX_STACK_DEPTH + 1) * sizeof(uint64_t), '\0'));
    stack.depth = 0x40000000;  // frame bytes that would wrap a 32-bit size
    batch.Add(stack, GPROF_REC_USER_STACK, std::string(16, '\0'));
    // Maps text past the record's end.
    gprof_process_maps maps{};
    maps.text_len = 1000;
    batch.Add(maps, GPROF_REC_PROCESS_MAPS, "short");
    // And good ones after all that.
    batch.Add(LockWaitEvent(kPid, 102, 1000, 9000, kMmapLock, 0, 0, ""), GPROF_REC_LOCK_WAIT);
    AddUserStack(&batch, 2, {0x1000, 0x2000});
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(MalformedCount(*session), 8u + 5u + 3u + 1u) << AllDiagnostics(*session);
  for (const auto& d : session->diagnostics) {
    if (d.message.find("malformed") == std::string::npos) continue;
    EXPECT_EQ(d.file, dir.Sub("kernel.gpr"));
    EXPECT_EQ(d.offset, sizeof(format::FileHeader)) << "the chunk that holds it";
  }
  EXPECT_EQ(session->lock_waits.size(), 1u);
  EXPECT_TRUE(session->device_waits.empty());
  EXPECT_TRUE(session->page_faults.empty());
  EXPECT_TRUE(session->memory_map_calls.empty());
  EXPECT_TRUE(session->futex_waitv_calls.empty());
  ASSERT_EQ(session->user_stacks.size(), 1u);
  EXPECT_EQ(session->user_stacks.at(2).ips.size(), 2u);
  EXPECT_TRUE(session->lost.empty());
}

TEST(SessionReader, InjectedAndKernelMapsSnapshotsJoinInTimeOrder) {
  TempDir dir;
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
    RecordBatch batch;
    std::string maps =
        "7f0000000000-7f0000010000 rw-p 00000000 08:01 42 /usr/lib/libcudart.so.13\n";
    format::MapsSnapshotRecord record{};
    record.time_ns = 30;
    record.text_len = static_cast<uint32_t>(maps.size());
    batch.Add(record, format::kMapsSnapshot, maps);
    batch.WriteTo(&file);
  }
  WriteKernelFile(dir, [](RecordBatch& batch) {
    AddProcessMaps(&batch, kPid, 20, "7f0000000000-7f0000001000 r-xp 00000000 08:01 5 /bin/sh\n");
    AddProcessMaps(&batch, kPid, 40, kLibcudaMaps);
  });
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  const auto& maps = session->processes.at(kPid).maps;
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].time_ns, 20u);
  EXPECT_EQ(maps[1].time_ns, 30u);
  EXPECT_EQ(maps[1].mappings[0].path, "/usr/lib/libcudart.so.13");
  EXPECT_EQ(maps[2].time_ns, 40u);
  // Mapped after the snapshot before its time: named by the next snapshot that has it.
  const collector::Mapping* mapping = session->FindMapping(kPid, 0x7f0000002000, 25);
  ASSERT_NE(mapping, nullptr);
  EXPECT_EQ(mapping->path, "/usr/lib/libcudart.so.13");
  // Before the first snapshot, too; and the one in effect wins over later ones that differ.
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000002000, 5)->path, "/usr/lib/libcudart.so.13");
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000000010, 35)->path, "/usr/lib/libcudart.so.13");
  EXPECT_EQ(session->FindMapping(kPid, 0x7f0000000010, 45)->path, "/usr/lib/libcuda.so.1");
}

TEST(PrintableName, KeepsUtf8AndEscapesControlAndInvalidBytes) {
  EXPECT_EQ(collector::PrintableName("pt_data_pin"), "pt_data_pin");
  EXPECT_EQ(collector::PrintableName("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(collector::PrintableName("a\"b\x01\x7f"), "a\"b\\x01\\x7f");
  EXPECT_EQ(collector::PrintableName("\xff\xc3("), "\\xff\\xc3(");
  EXPECT_EQ(collector::PrintableName("\xe2\x82"), "\\xe2\\x82") << "a sequence cut short";
  EXPECT_EQ(collector::PrintableName(std::string_view("a\0b", 3)), "a\\x00b");
}

}  // namespace
}  // namespace gprof::test
