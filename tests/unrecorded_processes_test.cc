// Processes that loaded CUDA without gprof-run's injected library (issue 17, section 4): named
// from what the kernel's record shows (mmaps of libraries, maps snapshots, execs, forks), and only
// where it shows enough; the report's header and report.json say so.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "collector/collect.h"
#include "collector/session/session_reader.h"
#include "collector/session/unrecorded_processes.h"
#include "tests/clean_utf8.h"
#include "tests/session_builder.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

constexpr uint64_t kMs = 1000000;
constexpr uint32_t kShell = 100, kCleared = 200, kNormal = 300, kWorker = 400;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Records of a kernel.gpr, written as one chunk by Write.
class KernelRecord {
 public:
  void Fork(uint32_t pid, uint32_t parent, uint64_t time_ns, const char* comm) {
    gprof_task_new task{};
    task.pid = task.tid = pid;
    task.parent_pid = task.parent_tid = parent;
    task.time_ns = time_ns;
    task.parent_kstack_id = -1;
    snprintf(task.comm, sizeof(task.comm), "%s", comm);
    batch_.Add(task, GPROF_REC_TASK_NEW);
  }
  void Exec(uint32_t pid, uint64_t time_ns, const char* comm) {
    gprof_task_rename exec{};
    exec.pid = exec.tid = pid;
    exec.time_ns = time_ns;
    exec.is_exec = 1;
    snprintf(exec.comm, sizeof(exec.comm), "%s", comm);
    batch_.Add(exec, GPROF_REC_TASK_RENAME);
  }
  // An mmap of `file` as the dynamic loader maps a library's code.
  void Load(uint32_t pid, uint64_t time_ns, const std::string& file, uint32_t prot = PROT_READ | PROT_EXEC) {
    gprof_memory_map map = MemoryMapEvent(pid, pid, time_ns, time_ns + 1000, 9, 0, 4096);
    map.prot = prot;
    map.flags = MAP_PRIVATE | MAP_FIXED;
    map.ret = 0x7f0000000000 + (next_address_ += 0x100000);
    snprintf(map.file, sizeof(map.file), "%s", file.c_str());
    batch_.Add(map, GPROF_REC_MEMORY_MAP);
  }
  void Maps(uint32_t pid, uint64_t time_ns, const std::string& text) {
    AddProcessMaps(&batch_, pid, time_ns, text);
  }
  void Lost(uint32_t record_type, uint64_t count) {
    batch_.Add(LostEvent(GPROF_LOST_RINGBUF, record_type, count, 0), GPROF_REC_LOST);
  }
  void Write(const std::string& path) {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(path.c_str(), format::Source::kKernel, 1), 0);
    batch_.WriteTo(&file);
  }

 private:
  RecordBatch batch_;
  uint64_t next_address_ = 0;
};

// An inject file of process `pid`, with one CUDA call at `call_ns`.
void WriteInjectFile(const TempDir& dir, uint32_t pid, uint64_t call_ns) {
  ChunkFileWriter file;
  std::string path = dir.Sub("inject-" + std::to_string(pid) + ".gpr");
  ASSERT_EQ(file.Create(path.c_str(), format::Source::kInject, pid), 0);
  RecordBatch batch;
  AddApiName(&batch, 1, "cudaLaunchKernel");
  batch.Add(ApiCall(pid, 1, call_ns, call_ns + 1000), format::kApiCall);
  batch.WriteTo(&file);
}

const char kMeta[] =
    R"({"version": 1, "root_pid": 100, "start": {"monotonic_ns": 1000000}, "finished": true,
        "exit": {"code": 0}, "kernel_recording": {"enabled": true},
        "inject_library": "/opt/gprof/lib/gprof-run/libgprof_inject.so", "cuda_mode": "auto"})";

// The tree of the issue: a shell whose one child runs a CUDA program through `env -i`, the other
// as it is; both load libcudart.so.13, only the second gprof-run's library.
void WriteClearedEnvironmentTree(const TempDir& dir, const std::string& meta = kMeta) {
  WriteText(dir.Sub("session.json"), meta);
  KernelRecord kernel;
  kernel.Exec(kShell, 2 * kMs, "sh");
  kernel.Load(kShell, 2 * kMs + 10, "libgprof_inject.so");
  kernel.Fork(kCleared, kShell, 3 * kMs, "sh");
  kernel.Exec(kCleared, 3 * kMs + 100, "env");
  kernel.Load(kCleared, 3 * kMs + 110, "libgprof_inject.so");  // env had LD_PRELOAD
  kernel.Exec(kCleared, 4 * kMs, "app");  // env -i: no LD_PRELOAD from here
  kernel.Load(kCleared, 4 * kMs + 10, "libcudart.so.13");
  kernel.Fork(kNormal, kShell, 5 * kMs, "sh");
  kernel.Exec(kNormal, 5 * kMs + 100, "app");
  kernel.Load(kNormal, 5 * kMs + 110, "libgprof_inject.so");
  kernel.Load(kNormal, 5 * kMs + 120, "libcudart.so.13");
  kernel.Write(dir.Sub("kernel.gpr"));
  WriteInjectFile(dir, kNormal, 6 * kMs);
}

std::vector<uint32_t> Pids(const collector::Session& session) {
  std::vector<uint32_t> pids;
  for (const auto& process : session.unrecorded_processes) pids.push_back(process.pid);
  return pids;
}

TEST(UnrecordedProcesses, TheChildWithAClearedEnvironmentIsNamedAndTheOtherIsNot) {
  TempDir dir;
  WriteClearedEnvironmentTree(dir);
  auto result = collector::Collect(dir.path(), collector::CollectOptions{});
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string& text = result->text_report;
  EXPECT_NE(text.find("  UNRECORDED pid 200 (app) loaded libcudart.so.13 at +0.003 s but not "
                      "gprof-run's libgprof_inject.so: any CUDA calls it made were not recorded"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("pid 300 (app) loaded"), std::string::npos) << text;
  EXPECT_EQ(text.find("lost      nothing"), std::string::npos)
      << "a CUDA process went unrecorded: the session lost something\n"
      << text;

  json report = json::parse(ReadFile(dir.Sub(collector::kJsonReportFile)));
  const json& unrecorded = report["session"]["unrecorded_processes"];
  ASSERT_EQ(unrecorded.size(), 1u) << unrecorded.dump();
  EXPECT_EQ(unrecorded[0]["pid"], kCleared);
  EXPECT_EQ(unrecorded[0]["name"], "app");
  EXPECT_EQ(unrecorded[0]["cuda_library"], "libcudart.so.13");
  EXPECT_EQ(unrecorded[0]["evidence"], "memory_map");
  EXPECT_EQ(unrecorded[0]["seen_ns"], 4 * kMs + 1010);
  EXPECT_TRUE(unrecorded[0]["forked_from"].is_null());
  EXPECT_NE(unrecorded[0]["reason"].get<std::string>().find("env -i"), std::string::npos);
}

TEST(UnrecordedProcesses, WhenEveryCudaProcessIsInjectedNothingIsLost) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  kernel.Exec(kNormal, 5 * kMs, "app");
  kernel.Load(kNormal, 5 * kMs + 10, "libgprof_inject.so");
  kernel.Load(kNormal, 5 * kMs + 20, "libcudart.so.13");
  kernel.Write(dir.Sub("kernel.gpr"));
  auto result = collector::Collect(dir.path(), collector::CollectOptions{});
  ASSERT_TRUE(result.ok());
  EXPECT_NE(result->text_report.find("lost      nothing"), std::string::npos)
      << result->text_report;
  EXPECT_EQ(result->text_report.find("UNRECORDED"), std::string::npos) << result->text_report;
}

TEST(UnrecordedProcesses, OnlyWhatTheRecordShows) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  // Started before the record did (a --delay window, a process followed late): its loading of
  // the injected library may have come before; nothing is said.
  kernel.Load(501, 5 * kMs, "libcudart.so.13");
  // Mapped readable only (a linker, a packager reading the file): not loaded to run.
  kernel.Exec(502, 5 * kMs, "ld");
  kernel.Load(502, 5 * kMs + 10, "libcudart.so.13", PROT_READ);
  // A recorded CUDA call: it was injected, whatever the record missed of its loading.
  kernel.Exec(503, 5 * kMs, "app");
  kernel.Load(503, 5 * kMs + 10, "libcudart.so.13");
  // A control: a program started by exec that loaded the runtime and nothing of gprof-run's.
  kernel.Exec(504, 5 * kMs, "app");
  kernel.Load(504, 5 * kMs + 10, "libcudart.so.13");
  // Not CUDA: a profiler's library, a debugger's.
  kernel.Exec(505, 5 * kMs, "app");
  kernel.Load(505, 5 * kMs + 10, "libcupti.so.13");
  kernel.Load(505, 5 * kMs + 20, "libcudadebugger.so.1");
  kernel.Write(dir.Sub("kernel.gpr"));
  WriteInjectFile(dir, 503, 6 * kMs);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(Pids(*session), std::vector<uint32_t>{504});
}

TEST(UnrecordedProcesses, AnInjectionLibraryOfAnotherNameCountsCutOrWhole) {
  TempDir dir;
  std::string meta = kMeta;
  const std::string path = "/opt/gprof/lib/gprof-run/libgprof_inject.so";
  meta.replace(meta.find(path), path.size(), "/opt/x/libmy_own_build_of_the_injection_library.so");
  WriteText(dir.Sub("session.json"), meta);
  KernelRecord kernel;
  kernel.Exec(601, 5 * kMs, "app");
  kernel.Load(601, 5 * kMs + 10, "libmy_own_build_of_the_injection_library.so");  // cut to 31
  kernel.Load(601, 5 * kMs + 20, "libcudart.so.13");
  kernel.Exec(602, 5 * kMs, "app");
  kernel.Load(602, 5 * kMs + 10, "libgprof_inject.so");  // gprof-run's own name counts too
  kernel.Load(602, 5 * kMs + 20, "libcudart.so.13");
  kernel.Exec(603, 5 * kMs, "app");
  kernel.Load(603, 5 * kMs + 10, "libmy_own.so");
  kernel.Load(603, 5 * kMs + 20, "libcudart.so.13");
  kernel.Write(dir.Sub("kernel.gpr"));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(Pids(*session), std::vector<uint32_t>{603});
  ASSERT_NE(session->unrecorded_processes.size(), 0u);
  EXPECT_NE(session->unrecorded_processes[0].reason.find(
                "but not gprof-run's libmy_own_build_of_the_injection_library.so"),
            std::string::npos)
      << session->unrecorded_processes[0].reason;
  ASSERT_EQ(session->processes[601].loaded_files.size(), 2u);
  EXPECT_EQ(session->processes[601].loaded_files[0].name, "libmy_own_build_of_the_injectio");
}

TEST(UnrecordedProcesses, AForkedChildInheritsWhatItsParentLoaded) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  kernel.Exec(kCleared, 3 * kMs, "python");
  kernel.Load(kCleared, 3 * kMs + 10, "libcuda.so.580.95.05");  // dlopen: a static runtime
  kernel.Fork(kWorker, kCleared, 4 * kMs, "pt_worker");
  // A child of an injected process is injected, through the same memory.
  kernel.Exec(kNormal, 3 * kMs, "python");
  kernel.Load(kNormal, 3 * kMs + 10, "libgprof_inject.so");
  kernel.Load(kNormal, 3 * kMs + 20, "libcuda.so.1");
  kernel.Fork(kNormal + 1, kNormal, 4 * kMs, "pt_worker");
  kernel.Write(dir.Sub("kernel.gpr"));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(Pids(*session), (std::vector<uint32_t>{kCleared, kWorker}));
  const collector::UnrecordedProcess& worker = session->unrecorded_processes[1];
  EXPECT_EQ(worker.forked_from, kCleared);
  EXPECT_EQ(worker.cuda_library, "libcuda.so.580.95.05");
  EXPECT_NE(worker.reason.find("was forked from pid 200 with libcuda.so.580.95.05 loaded"),
            std::string::npos)
      << worker.reason;
}

TEST(UnrecordedProcesses, AMapsSnapshotShowsItWithoutTheStart) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  kernel.Maps(701, 5 * kMs,
              "7f0000000000-7f0000100000 r-xp 00000000 08:01 42 /usr/lib/libcudart.so.12.4.127\n"
              "7f0000200000-7f0000300000 r--p 00000000 08:01 43 /opt/x/libgprof_inject.so\n");
  kernel.Maps(702, 5 * kMs,
              "7f0000000000-7f0000100000 r-xp 00000000 08:01 42 /usr/lib/libcudart.so.12\n"
              "7f0000200000-7f0000300000 r-xp 00000000 08:01 43 /opt/x/libgprof_inject.so\n");
  kernel.Write(dir.Sub("kernel.gpr"));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(Pids(*session), std::vector<uint32_t>{701}) << "the injection's code is not mapped";
  EXPECT_EQ(session->unrecorded_processes[0].evidence, "maps_snapshot");
  EXPECT_EQ(session->unrecorded_processes[0].cuda_library, "libcudart.so.12.4.127");
  EXPECT_NE(session->unrecorded_processes[0].reason.find("had libcudart.so.12.4.127 mapped"),
            std::string::npos);
}

// A library's file name is the file system's bytes (found by the fuzzer): the report names it
// in valid UTF-8, a byte that is not written as \xNN.
TEST(UnrecordedProcesses, ALibraryNameThatIsNotUtf8IsNamedPrintably) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  kernel.Maps(701, 5 * kMs,
              "7f0000000000-7f0000100000 r-xp 00000000 08:01 42 /usr/lib/libcudart.so\xa8"
              "13\n");
  kernel.Write(dir.Sub("kernel.gpr"));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(Pids(*session), std::vector<uint32_t>{701});
  const collector::UnrecordedProcess& process = session->unrecorded_processes[0];
  EXPECT_EQ(process.cuda_library, "libcudart.so\\xa813");
  EXPECT_TRUE(IsCleanUtf8(process.reason)) << process.reason;
  EXPECT_NE(process.reason.find("had libcudart.so\\xa813 mapped"), std::string::npos)
      << process.reason;
}

TEST(UnrecordedProcesses, LostMemoryMapRecordsAreSaid) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  KernelRecord kernel;
  kernel.Exec(kCleared, 3 * kMs, "app");
  kernel.Load(kCleared, 3 * kMs + 10, "libcudart.so.13");
  kernel.Lost(GPROF_REC_MEMORY_MAP, 12);
  kernel.Write(dir.Sub("kernel.gpr"));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(Pids(*session), std::vector<uint32_t>{kCleared});
  EXPECT_NE(session->unrecorded_processes[0].reason.find("the kernel record lost 12 memory map "
                                                         "calls"),
            std::string::npos)
      << session->unrecorded_processes[0].reason;
}

TEST(UnrecordedProcesses, NoneUnderCudaOffWhereNothingIsInjectedByChoice) {
  TempDir dir;
  std::string meta = kMeta;
  meta.replace(meta.find("\"auto\""), 6, "\"off\"");
  WriteClearedEnvironmentTree(dir, meta);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(session->unrecorded_processes.empty());
}

TEST(UnrecordedProcesses, AMemoryMapRecordFromBeforeTheFileNameIsRead) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), kMeta);
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch batch;
  gprof_memory_map map = MemoryMapEvent(kCleared, kCleared, 3 * kMs, 3 * kMs + 10, 9, 0, 4096);
  map.prot = PROT_READ | PROT_EXEC;
  batch.AddFirstBytes(map, GPROF_REC_MEMORY_MAP, offsetof(gprof_memory_map, file));
  batch.WriteTo(&file);
  file.Close();
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(session->diagnostics.empty()) << session->diagnostics[0].message;
  ASSERT_EQ(session->memory_map_calls.size(), 1u);
  EXPECT_TRUE(session->processes[kCleared].loaded_files.empty());
}

TEST(UnrecordedProcesses, CudaLibrariesByTheirNames) {
  for (const char* name : {"libcuda.so", "libcuda.so.1", "libcuda.so.580.95.05", "libcudart.so",
                           "libcudart.so.13", "libcudart.so.12.4.127",
                           "libcudart-d0da41ae.so.11.0"}) {
    EXPECT_TRUE(collector::IsCudaLibrary(name)) << name;
  }
  for (const char* name : {"libcupti.so.13", "libcudnn.so.9", "libcublas.so.12",
                           "libcudadebugger.so.1", "libcudart_static.a", "libcuda", "cuda.so",
                           "libcudart.a", "libcudaX.so.1"}) {
    EXPECT_FALSE(collector::IsCudaLibrary(name)) << name;
  }
}

}  // namespace
}  // namespace gprof::test
