// TargetProcess's forwarding of the signals gprof-run gets, decided by what the kernel recorder
// saw (SettleForwards). The handler's runs are real (this process signals itself, as a sender
// outside the command would signal gprof-run); the kernel's records of them are made up here, so
// that each case is the exact interleaving it names, however the machine schedules the test.
// The command counts what reaches it (job_app count-exits); the test's own last signal to it,
// sent directly, makes it print how many came.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "cli/target_process.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using bpf::SignalRecord;
using cli::TargetProcess;

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

class SignalForwarding : public testing::Test {
 protected:
  explicit SignalForwarding(int signal = SIGUSR1) : signal_(signal) {}

  void SetUp() override {
    // The command's output to a file: it inherits this process's stdout at the fork.
    int saved = dup(STDOUT_FILENO);
    int fd = open(dir_.Sub("command.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    dup2(fd, STDOUT_FILENO);
    cli::LaunchSettings settings;
    settings.argv = {AppPath("job_app"), "count-exits", std::to_string(signal_), "300"};
    auto spawned = TargetProcess::Spawn(settings);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fd);
    ASSERT_TRUE(spawned.ok());
    target_.emplace(std::move(*spawned));
    ASSERT_FALSE(target_->Release().has_value());
    // Until it catches the signal, one would end it.
    for (int i = 0; i < 500 && ReadFile(dir_.Sub("command.txt")).find("ready") == std::string::npos;
         ++i) {
      usleep(10'000);
    }
    target_->ForwardSignals(/*witnessed=*/true);
  }

  void TearDown() override {
    if (target_ && !reaped_) {
      kill(target_->pid(), SIGKILL);
      int status = 0;
      target_->Reap(/*block=*/true, &status);
    }
  }

  // One run of gprof-run's handler, for a signal this process sends it; returns a time just
  // before the signal was sent (the kernel's record of it is made up at or after it).
  uint64_t SignalGprofRun() {
    uint64_t before = MonotonicNs();
    kill(getpid(), signal_);  // the handler has run when kill returns
    return before;
  }

  SignalRecord Record(uint64_t time_ns, pid_t target, bool to_many, bool made_pending) {
    SignalRecord record;
    record.time_ns = time_ns;
    record.signal = signal_;
    record.target_pid = target;
    record.sender_pid = getpid();
    record.to_many = to_many;
    record.made_pending = made_pending;
    record.merged = !made_pending;
    return record;
  }
  pid_t self() const { return getpid(); }
  pid_t command() const { return target_->pid(); }

  // Decides every waiting run with all the records in, as gprof-run's wait loop would once
  // they are drained; `records` are those seen since the last call.
  void Settle(const std::vector<SignalRecord>& records) {
    usleep(60'000);  // past every wait for a record of the same signal to the command
    EXPECT_EQ(target_->SettleForwards(records, MonotonicNs()), -1) << "a forward still waits";
    usleep(50'000);  // the command takes what was forwarded before anything more comes
  }

  // How many signals reached the command: what was forwarded, and the test's own last one.
  int Received() {
    kill(command(), signal_);
    int status = 0;
    target_->Reap(/*block=*/true, &status);
    reaped_ = true;
    std::string out = ReadFile(dir_.Sub("command.txt"));
    size_t at = out.find("job_app got ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "the command printed no count: " << out;
      return -1;
    }
    return atoi(out.c_str() + at + 12) - 1;
  }

  const int signal_;
  TempDir dir_;
  std::optional<TargetProcess> target_;
  bool reaped_ = false;
};

TEST_F(SignalForwarding, ASignalOnlyGprofRunGotIsForwardedOnce) {
  uint64_t sent = SignalGprofRun();
  Settle({Record(sent, self(), false, true)});
  EXPECT_EQ(Received(), 1);
}

TEST_F(SignalForwarding, AGroupKillReachedTheCommandAlready) {
  uint64_t sent = SignalGprofRun();
  Settle({Record(sent, command(), true, true), Record(sent + 1, self(), true, true)});
  EXPECT_EQ(Received(), 0);
}

// timeout: kill(gprof-run), then kill(0) of its group, which holds the command. The second came
// after the kernel took the first from the pending set, before the handler's first run read its
// clock: two runs. gprof-run, throttled, ran the second 100 ms after the first, past the window
// in which a sender's signals to gprof-run and to the command count as one.
TEST_F(SignalForwarding, TimeoutsTwoSignalsRunningTheHandlerTwiceFarApartReachTheCommandOnce) {
  uint64_t sent = SignalGprofRun();
  usleep(100'000);
  SignalGprofRun();
  Settle({Record(sent, self(), false, true), Record(sent + 1, command(), true, true),
          Record(sent + 1, self(), true, true)});
  EXPECT_EQ(Received(), 0);
}

// The same two signals merged into one pending signal: one run stands for both.
TEST_F(SignalForwarding, TimeoutsTwoSignalsMergedReachTheCommandOnce) {
  uint64_t sent = SignalGprofRun();
  Settle({Record(sent, self(), false, true), Record(sent + 1, command(), true, true),
          Record(sent + 1, self(), true, false)});
  EXPECT_EQ(Received(), 0);
}

// A group kill, then a kill of gprof-run alone 25 ms later: the group kill's signal to the command
// was that call's, not the second sender's "also to the command".
TEST_F(SignalForwarding, AGroupKillThenAKillOfGprofRunAloneSoonAfterIsForwarded) {
  uint64_t group = SignalGprofRun();
  usleep(25'000);
  uint64_t alone = SignalGprofRun();
  Settle({Record(group, command(), true, true), Record(group + 1, self(), true, true),
          Record(alone, self(), false, true)});
  EXPECT_EQ(Received(), 1);
}

// Two kills of gprof-run's pid alone, one after the other is handled: two signals for the
// command, decided one at a time.
TEST_F(SignalForwarding, EachSeparateKillOfGprofRunIsForwarded) {
  uint64_t first = SignalGprofRun();
  Settle({Record(first, self(), false, true)});
  uint64_t second = SignalGprofRun();
  Settle({Record(second, self(), false, true)});
  EXPECT_EQ(Received(), 2);
}

// The ring buffer lost the record of a run: it is forwarded (what its sender sent is unknown),
// and the run after it is still paired with its own record.
TEST_F(SignalForwarding, ARunWhoseRecordWasLostIsForwardedAndTheNextPairsWithItsOwn) {
  SignalGprofRun();
  Settle({});
  uint64_t sent = SignalGprofRun();
  Settle({Record(sent, command(), true, true), Record(sent + 1, self(), true, true)});
  EXPECT_EQ(Received(), 1);
}

// A storm past what the handler's queue holds: the runs it had no room to note are counted, and
// the last run is decided by its own record, not by one of theirs.
TEST_F(SignalForwarding, RunsTheQueueHadNoRoomForDoNotShiftThePairing) {
  std::vector<SignalRecord> records;
  for (int i = 0; i < 70; ++i) {  // group kills, which reached the command already
    uint64_t sent = SignalGprofRun();
    records.push_back(Record(sent, command(), true, true));
    records.push_back(Record(sent + 1, self(), true, true));
  }
  Settle(records);
  uint64_t last = SignalGprofRun();  // a kill of gprof-run alone
  Settle({Record(last, self(), false, true)});
  EXPECT_EQ(Received(), 1);
}

// gprof-run stopped for longer than it keeps what it saw (kill -TSTP %1 stops the command, and
// gprof-run with it, before it decided; `fg` seconds later): the run is decided by its records.
TEST_F(SignalForwarding, ARunDecidedLongAfterItCameKeepsItsRecords) {
  uint64_t group = SignalGprofRun();
  usleep(2'100'000);
  Settle({Record(group, command(), true, true), Record(group + 1, self(), true, true)});
  EXPECT_EQ(Received(), 0);
}

// A group kill that stayed pending for gprof-run for seconds (gprof-run stopped with the command,
// `fg` later): its handler runs long after its record, which is kept for it.
TEST_F(SignalForwarding, ASignalPendingForSecondsKeepsItsRecord) {
  sigset_t only, before;
  sigemptyset(&only);
  sigaddset(&only, signal_);
  sigprocmask(SIG_BLOCK, &only, &before);
  uint64_t group = MonotonicNs();
  kill(getpid(), signal_);
  const std::vector<SignalRecord> records = {Record(group, command(), true, true),
                                             Record(group + 1, self(), true, true)};
  usleep(100'000);
  EXPECT_EQ(target_->SettleForwards(records, MonotonicNs()), -1) << "no run yet";
  usleep(2'100'000);
  sigprocmask(SIG_SETMASK, &before, nullptr);  // the run, 2.2 s after the signal
  Settle({});
  EXPECT_EQ(Received(), 0);
}

// tgkill of gprof-run's thread: pending in the thread's own set, taken before one of the process
// pending with it, so not numbered with those: decided by what its sender sent, by the clock.
// Alone, it is forwarded; a group kill after it is paired with its own record.
TEST_F(SignalForwarding, ASignalToGprofRunsThreadIsForwardedAndLeavesThePairingAlone) {
  uint64_t thread = MonotonicNs();
  syscall(SYS_tgkill, getpid(), gettid(), signal_);
  SignalRecord to_thread = Record(thread, self(), false, true);
  to_thread.to_thread = true;
  to_thread.code = SI_TKILL;
  Settle({to_thread});
  uint64_t group = SignalGprofRun();
  Settle({Record(group, command(), true, true), Record(group + 1, self(), true, true)});
  EXPECT_EQ(Received(), 1);
}

class StopSignalForwarding : public SignalForwarding {
 protected:
  StopSignalForwarding() : SignalForwarding(SIGTSTP) {}
};

// A SIGTSTP pending for gprof-run that a SIGCONT flushed ran no handler: the next run is paired
// with its own record. Here a kill of gprof-run alone, then later a group kill: one forward.
TEST_F(StopSignalForwarding, ASigtstpThatASigcontFlushedIsNobodysRun) {
  uint64_t flushed = MonotonicNs();
  SignalRecord continued = Record(flushed + 1, self(), false, true);
  continued.signal = SIGCONT;
  usleep(100'000);
  uint64_t alone = SignalGprofRun();
  Settle({Record(flushed, self(), false, true), continued, Record(alone, self(), false, true)});
  usleep(100'000);
  uint64_t group = SignalGprofRun();
  Settle({Record(group, command(), true, true), Record(group + 1, self(), true, true)});
  EXPECT_EQ(Received(), 1);
}

}  // namespace
}  // namespace gprof::test
