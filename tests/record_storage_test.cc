// The collector's memory bound: records past the budget held in files of the spill directory,
// the same outputs either way, a failed spill kept in memory and said, the cgroup's limit found.
#include "collector/model/record_storage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>

#include "collector/collect.h"
#include "tests/test_support.h"

namespace gprof::collector {
namespace {

using test::TempDir;

// The /proc/self/maps line of the mapping that holds `address`, or empty.
std::string MappingOf(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto at = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &start, &end) == 2 && start <= at && at < end)
      return line;
  }
  return {};
}

// Configures the storage for one test and puts it back as the collector leaves it.
class StorageScope {
 public:
  StorageScope(const std::string& directory, uint64_t budget) {
    RecordStorage::Configure(directory, budget);
  }
  ~StorageScope() { RecordStorage::Configure("", 0); }
};

TEST(RecordStorage, BlocksPastTheBudgetAreFilesOfTheSpillDirectory) {
  TempDir dir;
  StorageScope scope(dir.path(), 8 << 20);
  RecordVector<uint64_t> in_memory(512 << 10);  // 4 MiB: within the budget
  RecordVector<uint64_t> spilled(1 << 20);      // 8 MiB more: past it
  std::iota(spilled.begin(), spilled.end(), 0);

  EXPECT_EQ(MappingOf(in_memory.data()).find(dir.path()), std::string::npos)
      << MappingOf(in_memory.data());
  // O_TMPFILE's file has no name: the maps show the directory, "#inode (deleted)".
  EXPECT_NE(MappingOf(spilled.data()).find(dir.path() + "/"), std::string::npos)
      << MappingOf(spilled.data());
  EXPECT_EQ(spilled[12345], 12345u);
  EXPECT_EQ(spilled.back(), (1u << 20) - 1);

  RecordStorageStats stats = RecordStorage::Stats();
  EXPECT_EQ(stats.in_memory_bytes, 4u << 20);
  EXPECT_EQ(stats.spilled_bytes, 8u << 20);
  EXPECT_EQ(stats.spill_files, 1u);
  EXPECT_TRUE(stats.spill_error.empty()) << stats.spill_error;

  const void* spilled_data = spilled.data();
  spilled = {};
  spilled.shrink_to_fit();
  EXPECT_EQ(RecordStorage::Stats().spilled_bytes, 0u);
  EXPECT_EQ(MappingOf(spilled_data), "");
  EXPECT_EQ(RecordStorage::Stats().peak_spilled_bytes, 8u << 20);
  // Nothing is left in the directory: the file had no name.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Resident pages of mapped files (statm's "shared").
uint64_t ResidentFileBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0, shared = 0;
  statm >> size >> resident >> shared;
  return shared * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Once touched, a spill file's pages stay mapped and count in the RSS: past the budget they are
// unmapped again, and their data is still there when next read.
TEST(RecordStorage, SpillFilePagesDoNotStayInTheRss) {
  TempDir dir;
  const uint64_t before = ResidentFileBytes();
  StorageScope scope(dir.path(), 4 << 20);
  RecordVector<uint64_t> records(8 << 20);  // 64 MiB, all spilled
  std::iota(records.begin(), records.end(), 0);
  uint64_t resident = ResidentFileBytes();
  for (int i = 0; i < 100 && resident > before + (16 << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    resident = ResidentFileBytes();
  }
  EXPECT_LE(resident, before + (16 << 20)) << "mapped file pages stayed resident";
  EXPECT_GT(RecordStorage::Stats().trims, 0u);
  EXPECT_EQ(std::accumulate(records.begin(), records.end(), uint64_t{0}),
            uint64_t{8 << 20} * ((8 << 20) - 1) / 2);
}

TEST(RecordStorage, ASpillThatFailsKeepsTheRecordsInMemoryAndSaysWhy) {
  const std::string missing = "/nonexistent-gprof-spill-dir";
  StorageScope scope(missing, 1);
  RecordVector<uint64_t> records(1 << 20);
  std::iota(records.begin(), records.end(), 0);
  EXPECT_EQ(records.back(), (1u << 20) - 1);
  RecordStorageStats stats = RecordStorage::Stats();
  EXPECT_EQ(stats.in_memory_bytes, 8u << 20);
  EXPECT_EQ(stats.spilled_bytes, 0u);
  EXPECT_NE(stats.spill_error.find(missing), std::string::npos) << stats.spill_error;
}

TEST(RecordStorage, SmallVectorsAreTheHeaps) {
  TempDir dir;
  StorageScope scope(dir.path(), 1);
  RecordVector<uint64_t> records(1000);
  EXPECT_EQ(MappingOf(records.data()).find(dir.path()), std::string::npos);
  EXPECT_EQ(RecordStorage::Stats().spilled_bytes, 0u);
  EXPECT_EQ(RecordStorage::Stats().in_memory_bytes, 0u);
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(RecordStorage, TheLowestCgroupLimitOnThePathCounts) {
  TempDir dir;
  const std::filesystem::path root = dir.path();
  // cgroup v1: the memory controller's hierarchy, a limit on the parent lower than the child's;
  // the unlimited root reads as a huge number.
  WriteText(root / "proc-v1", "12:pids:/job\n4:cpu,memory:/job/step\n0::/job\n");
  WriteText(root / "v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
  WriteText(root / "v1/memory/job/memory.limit_in_bytes", "1073741824\n");
  WriteText(root / "v1/memory/job/step/memory.limit_in_bytes", "2147483648\n");
  EXPECT_EQ(CgroupMemoryLimit((root / "proc-v1").string(), (root / "v1").string()), 1u << 30);

  // cgroup v2 in "unified" beside v1 hierarchies, "max" meaning none.
  WriteText(root / "proc-v2", "0::/user.slice/run\n");
  WriteText(root / "v2/unified/user.slice/memory.max", "max\n");
  WriteText(root / "v2/unified/user.slice/run/memory.max", "536870912\n");
  EXPECT_EQ(CgroupMemoryLimit((root / "proc-v2").string(), (root / "v2").string()), 512u << 20);

  // No limit anywhere, and no file at all.
  WriteText(root / "v3/memory.max", "max\n");
  WriteText(root / "proc-v3", "0::/\n");
  EXPECT_EQ(CgroupMemoryLimit((root / "proc-v3").string(), (root / "v3").string()), UINT64_MAX);
  EXPECT_EQ(CgroupMemoryLimit((root / "missing").string(), (root / "v3").string()), UINT64_MAX);

  EXPECT_GT(DefaultMemoryBudget(), 0u);
  EXPECT_LE(DefaultMemoryBudget(), PhysicalMemoryBytes() / 2);  // MemAvailable is less
}

// A synthetic session of every kind of record the collector holds many of (CUDA calls, futex
// calls, off-CPU intervals with wakers and stacks), collected with all the memory it wants and
// with 1 MiB: the reports and the trace are the same bytes, and the records were in files.
TEST(Collect, ASessionPastTheCollectorsMemoryGivesTheSameOutputs) {
  TempDir dir;
  const std::string session = dir.path() + "/session";
  auto generated = test::RunProcess(
      test::Command({test::BuildDir() + "/bin/bench_session_gen", session, "400000"}));
  ASSERT_EQ(generated.exit_code(), 0) << generated.err;

  auto outputs = [&] {
    std::vector<std::string> texts;
    for (const char* file : {kTextReportFile, kJsonReportFile, kTraceFile})
      texts.push_back(test::ReadFile(session + "/" + file));
    return texts;
  };
  auto in_memory = Collect(session, CollectOptions{});
  ASSERT_TRUE(in_memory.ok()) << in_memory.status().message();
  EXPECT_EQ(in_memory->storage.peak_spilled_bytes, 0u);
  EXPECT_GT(in_memory->storage.peak_in_memory_bytes, 20u << 20);
  const std::vector<std::string> expected = outputs();
  ASSERT_GT(expected[2].size(), 10u << 20);

  CollectOptions options;
  options.memory_budget_bytes = 1 << 20;
  auto spilled = Collect(session, options);
  ASSERT_TRUE(spilled.ok()) << spilled.status().message();
  EXPECT_TRUE(spilled->warnings.empty()) << spilled->warnings.front();
  EXPECT_LE(spilled->storage.peak_in_memory_bytes, 1u << 20);
  EXPECT_GE(spilled->storage.peak_spilled_bytes, in_memory->storage.peak_in_memory_bytes / 2);
  EXPECT_EQ(spilled->text_report, in_memory->text_report);
  const std::vector<std::string> actual = outputs();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(actual[i] == expected[i]) << i;
  // The spill files went with the collector.
  for (const auto& entry : std::filesystem::directory_iterator(session))
    EXPECT_EQ(entry.path().filename().string().find(".gprof-spill"), std::string::npos);
  EXPECT_EQ(RecordStorage::Stats().spilled_bytes, 0u);
}

}  // namespace
}  // namespace gprof::collector
