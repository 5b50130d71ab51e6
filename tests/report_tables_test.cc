// The nsys-stats-like tables against sessions whose figures are known.
#include "collector/writers/report_tables.h"

#include <gtest/gtest.h>

namespace gprof::test {
namespace {

using collector::ApiCallTable;
using collector::KernelTable;
using collector::Session;

collector::ApiCall Call(uint32_t tid, uint32_t name, uint64_t enter, uint64_t exit) {
  collector::ApiCall call;
  call.tid = tid;
  call.pid = 1;
  call.name_index = name;
  call.enter_ns = enter;
  call.exit_ns = exit;
  return call;
}

collector::OffCpuInterval OffCpu(uint32_t tid, uint64_t start, uint64_t wake, uint64_t end,
                                 uint32_t raw_state) {
  collector::OffCpuInterval interval;
  interval.tid = tid;
  interval.pid = 1;
  interval.start_ns = start;
  interval.wake_ns = wake;
  interval.end_ns = end;
  interval.raw_state = raw_state;
  return interval;
}

TEST(ReportTables, ApiCallsByNameWithMedianMaxAndTimeBlocked) {
  Session session;
  session.api_names = {"cudaLaunchKernel", "cudaDeviceSynchronize", "cudaMalloc"};
  // Launches of 10, 20, 30, 40 ns on two threads; one synchronize of 1000 ns.
  session.api_calls = {Call(7, 0, 0, 10), Call(8, 0, 5, 25), Call(7, 1, 100, 1100),
                       Call(7, 0, 2000, 2030), Call(8, 0, 2000, 2040)};
  // Thread 7 slept 100..700 (woken at 700, ran at 750) inside the synchronize, and was preempted
  // 800..900 (runnable: not blocked); thread 8 slept 2010..2020 inside its second launch, and
  // 3000..4000 outside any call.
  session.off_cpu = {OffCpu(7, 100, 700, 750, 1), OffCpu(7, 800, 0, 900, 0),
                     OffCpu(8, 2010, 2020, 2030, 1), OffCpu(8, 3000, 4000, 4000, 1)};
  auto table = ApiCallTable(session);
  ASSERT_EQ(table.size(), 2u);  // cudaMalloc was never called
  EXPECT_EQ(table[0].name, "cudaDeviceSynchronize");
  EXPECT_EQ(table[0].count, 1u);
  EXPECT_EQ(table[0].total_ns, 1000u);
  EXPECT_EQ(table[0].median_ns, 1000u);
  EXPECT_EQ(table[0].max_ns, 1000u);
  EXPECT_EQ(table[0].blocked_ns, 600u);
  EXPECT_EQ(table[1].name, "cudaLaunchKernel");
  EXPECT_EQ(table[1].count, 4u);
  EXPECT_EQ(table[1].total_ns, 100u);
  EXPECT_EQ(table[1].median_ns, 20u);
  EXPECT_EQ(table[1].max_ns, 40u);
  EXPECT_EQ(table[1].blocked_ns, 10u);
}

TEST(ReportTables, KernelsByNameLongestTotalFirst) {
  Session session;
  session.kernel_names = {"short(int)", "long(float*)"};
  auto kernel = [](uint32_t name, uint64_t start, uint64_t end) {
    collector::GpuActivity activity;
    activity.start_ns = start;
    activity.end_ns = end;
    activity.detail = collector::GpuKernel{name};
    return activity;
  };
  collector::GpuActivity copy;
  copy.start_ns = 0;
  copy.end_ns = 100000;
  copy.detail = collector::GpuMemcpy{};
  session.gpu_activities = {kernel(0, 0, 3), kernel(0, 10, 11), kernel(0, 20, 22), copy,
                            kernel(1, 30, 130)};
  auto table = KernelTable(session);
  ASSERT_EQ(table.size(), 2u);  // the copy is no kernel
  EXPECT_EQ(table[0].name, "long(float*)");
  EXPECT_EQ(table[0].count, 1u);
  EXPECT_EQ(table[0].total_ns, 100u);
  EXPECT_EQ(table[1].name, "short(int)");
  EXPECT_EQ(table[1].count, 3u);
  EXPECT_EQ(table[1].total_ns, 6u);
  EXPECT_EQ(table[1].median_ns, 2u);
  EXPECT_EQ(table[1].max_ns, 3u);
}

}  // namespace
}  // namespace gprof::test
