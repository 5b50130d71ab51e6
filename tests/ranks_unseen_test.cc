// Issue 37's straggler diagnosis against programs of other shapes than straggler_ranks.py
// (tests/apps/ranks/unseen_ranks.py): other causes (a child process, a page-fault storm, a
// checkpoint thread's RLock), another collective (broadcast), two late ranks in one run. And what
// those runs found, on synthetic sessions: a gloo socket thread that polls with timeouts, woken
// by one a moment before the bytes that ended its wait were sent, or sleeping a moment more after
// them, hid the rank that sent them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/rank_waits.h"
#include "tests/analysis_sessions.h"
#include "tests/scenario_facts.h"
#include "tests/straggler_support.h"
#include "tests/test_support.h"

namespace gprof {
namespace collector {
namespace {

constexpr uint32_t kMain = kPid, kPoller = 31, kSender = 32, kWorker = 33;
constexpr uint64_t kUs = 1000;

TcpEndpoint Loopback(uint16_t port) {
  TcpEndpoint end;
  end.address[10] = end.address[11] = 0xff;
  end.address[12] = 127;
  end.address[15] = 1;
  end.port = port;
  return end;
}

// The main thread waits (10-60 ms) for its socket thread, which polls with timeouts (5-50 ms,
// then from 50 ms) and reads bytes that the sender, another rank's thread (here one of the same
// session), sent at `sent_ns`; the sender was asleep until the worker woke it, a moment before.
// `poll_wake_ns`: when an interrupt woke the last poll (a timeout when before `sent_ns`);
// `after`: a short sleep of the socket thread after that poll that nobody ended.
Session PollingSocketThread(uint64_t poll_wake_ns, uint64_t sent_ns, bool after) {
  constexpr int32_t kPollStack = 7;
  SessionBuilder builder;
  builder.session().kernel_stacks[kPollStack] = {1, 2, 6};
  builder.session().kernel_symbols[6] = "ep_poll+0x6";
  builder.Thread(kMain, "main");
  builder.Thread(kPoller, "poller");
  builder.Thread(kSender, "sender");
  builder.Thread(kWorker, "worker");
  builder.session().meta.root_pid = kMain;
  builder.session().meta.end_monotonic_ns = 100 * kMs;
  builder.FutexSleep(kMain, kCondvar, 10 * kMs, 60 * kMs, 60 * kMs + 1000, kPoller);
  builder.Sleep(kPoller, 5 * kMs, 50 * kMs, 50 * kMs + 1000, 0, 1, kPollStack);  // a timeout
  OffCpuInterval& poll =
      builder.Sleep(kPoller, 50 * kMs + 2000, poll_wake_ns, poll_wake_ns + 100 * kUs, 0, 1,
                    kPollStack);
  poll.waker_comm = builder.session().CommIndex("[irq]");
  const uint64_t poll_start = poll.start_ns, poll_wake = poll.wake_ns, poll_end = poll.end_ns;
  if (after) builder.Sleep(kPoller, poll_end + 200 * kUs, poll_end + 230 * kUs,
                           poll_end + 240 * kUs, 0, 1, kPollStack);
  builder.FutexSleep(kSender, kCondvar + 0x100, 11 * kMs, sent_ns - 100 * kUs, sent_ns - 50 * kUs,
                     kWorker);
  TcpTransfer send;
  send.pid = kPid;
  send.tid = kSender;
  send.start_ns = sent_ns;
  send.end_ns = sent_ns + 10 * kUs;
  send.is_send = true;
  send.local = Loopback(40000);
  send.remote = Loopback(5000);
  send.seq_start = 7000;
  send.seq_end = 7100;
  TcpTransfer read = send;
  read.tid = kPoller;
  read.is_send = false;
  read.local = send.remote;
  read.remote = send.local;
  read.start_ns = std::max(poll_end, sent_ns) + 20 * kUs;
  read.end_ns = read.start_ns + 10 * kUs;
  read.wait_start_ns = poll_start;
  read.wake_ns = poll_wake;
  builder.session().tcp_transfers = {send, read};
  return builder.Build();
}

void ExpectChainToTheWorker(const Session& session) {
  Analysis diagnosis = Analyze(session, {});
  const std::string text = RenderDiagnosisText(session, diagnosis, 0);
  const Stall* waited = nullptr;
  for (const Stall& stall : diagnosis.stalls)
    if (stall.tid == kMain) waited = &stall;
  ASSERT_NE(waited, nullptr) << text;
  ASSERT_GE(waited->chain.size(), 3u) << text;
  EXPECT_EQ(waited->chain[0].tid, kPoller) << text;
  EXPECT_EQ(waited->chain[1].tid, kSender) << text;
  EXPECT_EQ(waited->chain[2].tid, kWorker) << text;
}

// The last poll timed out at 55 ms; the sender, woken at 55.9 ms, sent at 56 ms, and the socket
// thread read those bytes after its wake: the sender held it up until 56 ms, and was itself held
// up by the worker. Cut at the poll's wake, the sender's window ended before it was woken, and the
// chain stopped at it asleep, named as the root.
TEST(PollingSocketThread, ASendJustAfterAPollsTimeoutIsFollowedIntoItsSender) {
  ExpectChainToTheWorker(PollingSocketThread(55 * kMs, 56 * kMs, false));
}

// The sender's bytes woke the last poll (sent at 54 ms, woken at 54.1 ms); the socket thread then
// slept 30 us more (a timeout) before it woke the main thread. That short sleep, ended by nobody,
// hid the wait the bytes ended: its longest sleep, a timeout, was taken for what it waited on.
TEST(PollingSocketThread, AShortSleepAfterTheDataDoesNotHideTheSender) {
  ExpectChainToTheWorker(PollingSocketThread(54 * kMs + 100 * kUs, 54 * kMs, true));
}

// Rank 1 late in one step, rank 2 in the next (alternate): rank 1's wait for rank 2 begins
// before rank 0's wait for rank 1 has ended (rank 0 was woken a moment after rank 1 went on).
// The two steps are two collectives: rank 1 arrived last in one and waited in the other. Taken
// for one (they overlap), rank 1 was said to have waited in the collective it was late to.
TEST(RankCollectives, TwoStepsThatTouchAreTwoCollectives) {
  auto wait = [](int waiting, int late, uint64_t start, uint64_t end) {
    RankWait w;
    w.waiting_rank = waiting;
    w.late_rank = late;
    w.start_ns = start;
    w.end_ns = end;
    return w;
  };
  std::vector<RankWait> waits = {wait(0, 1, 0, 205 * kMs), wait(2, 1, 1 * kMs, 202 * kMs),
                                 wait(1, 2, 201 * kMs, 405 * kMs),
                                 wait(0, 2, 206 * kMs, 405 * kMs)};
  RankWaits found = FindRankWaits({}, {}, [](int, uint32_t) { return std::optional<int>(); }, 3,
                                  {}, waits);
  ASSERT_EQ(found.collectives.size(), 2u);
  for (const Collective& collective : found.collectives) {
    EXPECT_EQ(collective.waits.size(), 2u);
    for (int w : collective.waits) {
      EXPECT_EQ(found.waits[w].late_rank, collective.late_rank);
      EXPECT_NE(found.waits[w].waiting_rank, collective.late_rank);
    }
  }
}

}  // namespace
}  // namespace collector

namespace test {
namespace {

using nlohmann::json;

std::string Program() { return SourceDir() + "/tests/apps/ranks/unseen_ranks.py"; }

// Runs `argv`; each wait the program printed, with the rank it says was late in that step.
struct UnseenRun {
  JobRun run;
  std::vector<int> late;  // per run.waits entry
};

UnseenRun Launch(const std::vector<std::string>& argv) {
  UnseenRun result;
  ProcessSpec spec;
  spec.argv = argv;
  spec.timeout_s = 180;
  ProcessResult done = RunProcess(spec);
  EXPECT_EQ(done.exit_code(), 0) << done.out << done.err;
  result.run.out = done.out + done.err;
  for (const Fact& fact : ParseFacts(done.out)) {
    if (fact.kind == "cause") result.run.loggers.insert(static_cast<uint32_t>(fact.Number("tid")));
    if (fact.kind != "wait") continue;
    result.run.waits.push_back(
        {static_cast<int>(fact.Number("rank")), fact.Number("start_ns"), fact.Number("end_ns")});
    result.late.push_back(static_cast<int>(fact.Number("late")));
  }
  return result;
}

json ReadJson(const std::string& path) {
  json report = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(report.is_discarded()) << path;
  return report;
}

// The waits of the steps in which `late` was late.
JobRun StepsOf(const UnseenRun& all, int late) {
  JobRun run = all.run;
  run.waits.clear();
  for (size_t i = 0; i < all.run.waits.size(); ++i)
    if (all.late[i] == late) run.waits.push_back(all.run.waits[i]);
  return run;
}

class RanksUnseen : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  std::vector<std::string> OneSession(const std::string& how, const std::string& program,
                                      int world) {
    return {GprofRunPath(), "-q", "-o", dir_.Sub("job"), "--", "/usr/bin/python3", Program(), how,
            "--world", std::to_string(world), "--program", program};
  }
  json Merged(int world) {
    std::vector<std::string> merge = {GprofRunPath(), "merge", "-o", dir_.Sub("job")};
    for (int r = 0; r < world; ++r) merge.push_back(dir_.Sub("r" + std::to_string(r)));
    ProcessResult merged = RunProcess(Command(merge));
    EXPECT_EQ(merged.exit_code(), 0) << merged.err;
    return ReadJson(dir_.Sub("job/report.json"));
  }
  TempDir dir_;
};

// Rank 0 runs `sleep 0.2` (subprocess.run) before each all_reduce: the rank that waited polls
// its socket with timeouts, and the root is the child's sleep in rank 0.
TEST_F(RanksUnseen, ARankWaitingForItsChildProcess) {
  UnseenRun run = Launch(OneSession("launch", "subproc", 2));
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run.run, {.late = 0, .cause = "of sleep of rank 0 asleep"});
}

// The same, one session per rank merged.
TEST_F(RanksUnseen, ARankWaitingForItsChildProcessMerged) {
  UnseenRun run = Launch({"/usr/bin/python3", Program(), "launch", "--world", "2", "--program",
                          "subproc", "--prefix", GprofRunPath(), "-q", "-o",
                          dir_.Sub("r%q{RANK}"), "--"});
  json report = Merged(2);
  ExpectStraggler(report["ranks"], run.run, {.late = 0, .cause = "of sleep of rank 0 asleep"});
}

// The same under torch.multiprocessing.spawn: the child `sleep`, read between its fork and its
// exec with its parent's Python frames (spawn_main), is no multiprocessing child.
TEST_F(RanksUnseen, ARankWaitingForItsChildProcessUnderSpawn) {
  UnseenRun run = Launch(OneSession("spawn", "subproc", 2));
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run.run, {.late = 0, .cause = "of sleep of rank 0 asleep"});
}

// Three ranks started by torch.multiprocessing.spawn; rank 2's checkpoint thread holds an RLock
// that its main thread waits for on a Condition: the root is that thread.
TEST_F(RanksUnseen, ACheckpointThreadsRLockUnderSpawn) {
  UnseenRun run = Launch(OneSession("spawn", "saver", 3));
  ASSERT_FALSE(run.run.loggers.empty()) << run.run.out;
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run.run, {.late = 2, .root_tids = run.run.loggers});
}

// Rank 1 faults in 64 MB page by page, several times, before each broadcast: the root, on CPU,
// says how much of it went in page faults.
TEST_F(RanksUnseen, APageFaultStormBeforeABroadcast) {
  UnseenRun run = Launch(OneSession("launch", "pagefault", 2));
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], run.run, {.late = 1, .cause = "page faults"});
}

// Rank 1 late (asleep) in odd steps, rank 2 (on CPU) in even ones: each step's waits name its
// own late rank and cause.
TEST_F(RanksUnseen, TwoLateRanksInTurn) {
  UnseenRun run = Launch(OneSession("launch", "alternate", 3));
  json report = ReadJson(dir_.Sub("job/report.json"));
  ExpectStraggler(report["ranks"], StepsOf(run, 1), {.late = 1, .cause = "nanosleep"});
  ExpectStraggler(report["ranks"], StepsOf(run, 2), {.late = 2, .cause = "spin_until"});
}

}  // namespace
}  // namespace test
}  // namespace gprof
