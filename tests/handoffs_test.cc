// Issue 35: a wait that another thread or process ended is a cause when it held the program up,
// ranked by that time, and followed to why the producer was late. Each program of
// tests/apps/handoffs/ measures its own handoff waits (and its producer's work, in whatever
// process): under gprof-run, the SUMMARY names the handoff, its cost is within 5% of what the
// program measured, and the root is the producer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/scenario_facts.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using json = nlohmann::json;

constexpr uint64_t kThresholdNs = 1'000'000;  // the report's default: shorter waits are not stalls

struct Span {
  uint32_t tid = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct HandoffRun {
  uint32_t consumer = 0;
  std::vector<Span> waits;   // the consumer's, as it measured them
  std::set<uint32_t> producers;  // the threads whose work made it wait
  json report;
  std::string text;
};

// Runs `argv` under gprof-run and reads what the program printed (common.py's lines).
bool Record(const std::vector<std::string>& argv, const TempDir& dir, HandoffRun* run) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q", "-o", dir.Sub("session"), "--"};
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.timeout_s = 120;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.err;
  if (result.exit_code() != 0) return false;
  for (const Fact& fact : ParseFacts(result.out)) {
    const uint32_t tid = static_cast<uint32_t>(fact.Number("tid"));
    if (fact.kind == "thread" && fact["role"] == "consumer") run->consumer = tid;
    if (fact.kind == "thread" && fact["role"] == "producer") run->producers.insert(tid);
    if (fact.kind == "work") run->producers.insert(tid);
    if (fact.kind == "wait" && fact.Number("end_ns") - fact.Number("start_ns") >= kThresholdNs)
      run->waits.push_back({tid, fact.Number("start_ns"), fact.Number("end_ns")});
  }
  run->text = ReadFile(dir.Sub("session/report.txt"));
  run->report = json::parse(ReadFile(dir.Sub("session/report.json")), nullptr, false);
  EXPECT_FALSE(run->report.is_discarded());
  EXPECT_NE(run->consumer, 0u) << result.out;
  EXPECT_FALSE(run->waits.empty()) << result.out;
  return !run->report.is_discarded() && run->consumer != 0 && !run->waits.empty();
}

// The handoff cause of the consumer: in the SUMMARY, its cost the measured waits' within 5%, its
// root one of the producers.
void ExpectHandoffFound(const HandoffRun& run) {
  const json& diagnosis = run.report["diagnosis"];
  uint64_t measured_ns = 0;
  for (const Span& wait : run.waits) measured_ns += wait.end_ns - wait.start_ns;
  // Its cost over the waits the program measured (a handoff at the thread's start, Python's
  // Thread.start, or torch's rendezvous is the program's too but not one it measured).
  auto measured_cost = [&](const json& cause) {
    uint64_t cost_ns = 0;
    for (int index : cause["stalls"]) {
      const json& wait = diagnosis["stalls"][index]["wait"];
      const uint64_t start = wait["start_ns"], end = wait["end_ns"];
      for (const Span& span : run.waits) {
        if (start < span.end_ns && span.start_ns < end) {
          cost_ns += end - start;
          break;
        }
      }
    }
    return cost_ns;
  };
  // The consumer's handoff cause over the measured waits: of its handoff causes, the one that
  // covers most of them.
  int found = -1;
  uint64_t cost_ns = 0;
  const json& causes = diagnosis["causes"];
  for (size_t c = 0; c < causes.size(); ++c) {
    if (causes[c]["kind"] != "handoff") continue;
    for (const json& thread : causes[c]["threads"]) {
      if (thread["tid"] != run.consumer) continue;
      const uint64_t cost = measured_cost(causes[c]);
      if (found < 0 || cost > cost_ns) {
        found = static_cast<int>(c);
        cost_ns = cost;
      }
      break;
    }
  }
  ASSERT_GE(found, 0) << "no handoff cause of the consumer " << run.consumer << "\n" << run.text;
  const json& cause = causes[found];
  EXPECT_NEAR(static_cast<double>(cost_ns), static_cast<double>(measured_ns),
              0.05 * static_cast<double>(measured_ns))
      << run.text;
  // In the SUMMARY, ranked among the first.
  const std::string summary = run.text.substr(0, run.text.find("\nCAUSES"));
  EXPECT_NE(summary.find(std::to_string(found + 1) + ". [handoff]"), std::string::npos) << summary;
  EXPECT_LT(found, 3) << summary;
  // The root is the producer: the thread whose work made the consumer wait.
  ASSERT_FALSE(cause["root"].is_null()) << run.text;
  EXPECT_TRUE(run.producers.contains(cause["root"]["thread"]["tid"].get<uint32_t>()))
      << cause["root"].dump() << "\n" << run.text;
}

class Handoffs : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  std::string Script(const std::string& name) const {
    return SourceDir() + "/tests/apps/handoffs/" + name;
  }
  TempDir dir_;
  HandoffRun run_;
};

TEST_F(Handoffs, ASlowQueueProducerThread) {
  ASSERT_TRUE(Record({"/usr/bin/python3", Script("queue_producer.py")}, dir_, &run_));
  ExpectHandoffFound(run_);
  // The root is the producer at its work: on CPU in make_item, as the samples say.
  EXPECT_NE(run_.text.find("in make_item"), std::string::npos) << run_.text;
}

TEST_F(Handoffs, AChildProcessOverAPipe) {
  ASSERT_TRUE(Record({"/usr/bin/python3", Script("pipe_child.py")}, dir_, &run_));
  ExpectHandoffFound(run_);
  EXPECT_NE(run_.text.find("in compute_record"), std::string::npos) << run_.text;
}

TEST_F(Handoffs, AMultiprocessingPoolWithASlowTask) {
  ASSERT_TRUE(Record({"/usr/bin/python3", Script("mp_pool.py")}, dir_, &run_));
  ExpectHandoffFound(run_);
}

// Debian's PyTorch (python3-torch, scripts/setup.sh installs it for CI): two worker processes, one sometimes
// slow in its __getitem__; the trainer's waits in next() go through the worker's result queue
// (its feeder thread, a pipe) to the worker's Python line.
TEST_F(Handoffs, ADataLoaderWithASlowWorker) {
  ASSERT_TRUE(Record({"/usr/bin/python3", Script("dataloader_slow_worker.py")}, dir_, &run_));
  ExpectHandoffFound(run_);
  EXPECT_NE(run_.text.find("in decode_sample"), std::string::npos) << run_.text;
}

// Two gloo ranks over loopback TCP, rank 1 late at every step: rank 0's data arrives in softirq
// (its socket's reader is woken by an interrupt, not by rank 1), so the chain reaches rank 1
// through what rank 1 wrote to the socket, and ends at its augment.
TEST_F(Handoffs, TwoGlooRanksOneLate) {
  ASSERT_TRUE(Record({"/usr/bin/python3", Script("gloo_ranks.py")}, dir_, &run_));
  ExpectHandoffFound(run_);
  EXPECT_NE(run_.text.find("in augment"), std::string::npos) << run_.text;
}

TEST_F(Handoffs, ANativeProducerBusyInALibcCall) {
  ASSERT_TRUE(Record({AppPath("native_producer")}, dir_, &run_));
  ExpectHandoffFound(run_);
  // The producer was at work, on CPU or short of one, never asleep (what it ran comes from
  // native samples, issue 35 item 3).
  for (const json& cause : run_.report["diagnosis"]["causes"]) {
    if (cause["kind"] == "handoff" && !cause["root"].is_null())
      EXPECT_NE(cause["root"]["state"], "asleep") << cause["root"].dump();
  }
}

}  // namespace
}  // namespace gprof::test
