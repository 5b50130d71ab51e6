// What the tests of a job's ranks share (ranks_test's gloo ranks, nccl_test's NCCL ranks): the
// waits the program measured, and the check that the report names the late rank, each waiting
// rank's waits within 5% of them, and the cause on the late rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace gprof::test {

struct Span {
  int rank = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct JobRun {
  std::vector<Span> waits;     // each rank's collective call, as it measured it
  std::set<uint32_t> loggers;  // the lock mode's logging threads
  std::string out;
};

struct StragglerExpected {
  int late = 0;
  std::string cause;                // in the root's words; or
  std::set<uint32_t> root_tids;     // (given) the root is one of those threads
  int64_t shift_ns = 0;             // the program's clock minus the report's (a time namespace)
  bool nccl = false;                // each wait is an NCCL collective's
};

// Every wait of a waiting rank the program measured (20 ms or more, all in the late rank's
// steps) is matched by the report's waits of that rank for the late one, their total within 5% of
// the measured total, each with its root on the late rank as `expected` says.
inline void ExpectStraggler(const nlohmann::json& ranks, const JobRun& run,
                            const StragglerExpected& expected) {
  using nlohmann::json;
  ASSERT_TRUE(ranks.is_object()) << run.out;
  uint64_t measured_ns = 0, reported_ns = 0;
  size_t measured = 0;
  for (const Span& span : run.waits) {
    if (span.rank == expected.late || span.end_ns - span.start_ns < 20'000'000) continue;
    measured_ns += span.end_ns - span.start_ns;
    ++measured;
    const int64_t start = static_cast<int64_t>(span.start_ns) - expected.shift_ns;
    const int64_t end = static_cast<int64_t>(span.end_ns) - expected.shift_ns;
    const json* found = nullptr;
    for (const json& wait : ranks["waits"]) {
      if (wait["waiting_rank"] != span.rank) continue;
      const int64_t wait_start = wait["start_ns"], wait_end = wait["end_ns"];
      if (wait_start < end && start < wait_end) found = &wait;
    }
    ASSERT_NE(found, nullptr) << "rank " << span.rank << "'s wait at " << span.start_ns
                              << " is in no wait of the report\n"
                              << ranks.dump(1);
    EXPECT_EQ((*found)["late_rank"], expected.late) << found->dump(1);
    if (expected.nccl) EXPECT_FALSE((*found)["nccl"].is_null()) << found->dump(1);
    reported_ns += (*found)["end_ns"].get<uint64_t>() - (*found)["start_ns"].get<uint64_t>();
    ASSERT_FALSE((*found)["root"].is_null()) << found->dump(1);
    if (expected.root_tids.empty()) {
      EXPECT_NE((*found)["root"]["text"].get<std::string>().find(expected.cause),
                std::string::npos)
          << found->dump(1);
    } else {
      EXPECT_TRUE(expected.root_tids.contains((*found)["root"]["tid"].get<uint32_t>()))
          << found->dump(1);
    }
  }
  EXPECT_GE(measured, 3u) << run.out;
  EXPECT_NEAR(static_cast<double>(reported_ns), static_cast<double>(measured_ns),
              0.05 * static_cast<double>(measured_ns));
}

}  // namespace gprof::test
