// `gprof-run merge` holds one session at a time (issue 37, item 6): its peak memory over several
// sessions stays near what `gprof-run report` needs for the largest of them, however many are
// merged, with the collector's whole memory or with little (--collector-memory). Synthetic
// sessions of different sizes and thread counts (bench_session_gen); peak RSS of each child as
// wait4 reports it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/test_support.h"

extern char** environ;

namespace gprof::test {
namespace {

// The peak resident memory, in KiB, of `argv` run to its end (its output thrown away); -1 when it
// could not be run or failed.
long PeakRssKiB(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return usage.ru_maxrss;
}

class MergeMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    // Three sessions unlike each other: records and threads.
    const std::vector<std::pair<const char*, const char*>> made = {
        {"200000", "2"}, {"300000", "4"}, {"400000", "6"}};
    for (const auto& [records, threads] : made) {
      const std::string session = dir_.Sub(std::string("s") + records);
      ProcessResult generated = RunProcess(
          Command({BuildDir() + "/bin/bench_session_gen", session, records, "--threads", threads}));
      ASSERT_EQ(generated.exit_code(), 0) << generated.err;
      sessions_.push_back(session);
    }
    // Each twice, as copies: merge refuses one directory given twice.
    for (const std::string& session : std::vector<std::string>(sessions_)) {
      ASSERT_EQ(Shell("cp -a '" + session + "' '" + session + "-copy'"), 0);
      sessions_.push_back(session + "-copy");
    }
  }

  // The largest peak of `report` over the sessions, and the peak of `merge` over the six, both
  // with `options`.
  void Measure(const std::vector<std::string>& options, long* report_kib, long* merge_kib) {
    *report_kib = 0;
    for (const std::string& session : sessions_) {
      std::vector<std::string> argv = {GprofRunPath(), "report"};
      argv.insert(argv.end(), options.begin(), options.end());
      argv.push_back(session);
      const long peak = PeakRssKiB(argv);
      ASSERT_GT(peak, 0) << session;
      *report_kib = std::max(*report_kib, peak);
    }
    std::vector<std::string> argv = {GprofRunPath(), "merge", "-o", dir_.Sub("merged")};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), sessions_.begin(), sessions_.end());
    *merge_kib = PeakRssKiB(argv);
    ASSERT_GT(*merge_kib, 0);
    EXPECT_NE(ReadFile(dir_.Sub("merged/report.txt")).find("sessions  6"), std::string::npos);
  }

  TempDir dir_;
  std::vector<std::string> sessions_;
};

// Six sessions merged, holding what `report` holds for the largest and a little more (their
// summaries, the merged outputs' state): not the six sessions' records, indexes and analyses
// together (today's merge before this: 3.9x).
TEST_F(MergeMemory, SixSessionsPeakNearTheLargestOnesReport) {
  long report_kib = 0, merge_kib = 0;
  Measure({}, &report_kib, &merge_kib);
  EXPECT_LT(merge_kib, report_kib * 3 / 2)
      << "merge " << merge_kib << " KiB, report " << report_kib << " KiB";
}

// With little memory for records (past it they go to files in OUT), the merge keeps to the same
// bound as `report` does with it.
TEST_F(MergeMemory, SixSessionsWithLittleCollectorMemoryPeakAsOneReport) {
  long report_kib = 0, merge_kib = 0;
  Measure({"--collector-memory", "8M"}, &report_kib, &merge_kib);
  EXPECT_LT(merge_kib, report_kib * 3 / 2)
      << "merge " << merge_kib << " KiB, report " << report_kib << " KiB";
}

}  // namespace
}  // namespace gprof::test
