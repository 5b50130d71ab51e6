// The collector's readers: every record type read back as written, and damaged input salvaged as
// far as it is valid, with a message that names the file and the offset.
#include "session_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "session_builder.h"
#include "test_support.h"

namespace gprof::test {
namespace {

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

}  // namespace
}  // namespace gprof::test
