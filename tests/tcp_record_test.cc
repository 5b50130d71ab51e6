// Issue 37's benchmark: the TCP recording made cheaper without the collector losing anything. A
// TCP read after a wait that an interrupt ended is said by its transfer record alone (no
// stream-read record, no note of the sender's writes in a map), and still ends the wait at the
// send of its bytes; a peek (MSG_PEEK, which moves no bytes) leaves the wait to the read that moves
// them; the raw_tp programs, which read the socket with probe reads where the tp_btf ones use
// plain loads, record every transfer alike. Recorded over loopback (tests/apps/tcp_ends.py).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collector/analysis/wait_reader.h"
#include "collector/session/session_reader.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using collector::Session;
using collector::TcpTransfer;

// A send or recv tcp_ends.py printed: its thread, and its bytes' place in the stream.
struct Printed {
  uint32_t tid = 0;
  uint64_t offset = 0, bytes = 0;
  bool send = false;
};

struct Ends {
  std::map<std::string, uint32_t> roles;
  std::vector<Printed> calls;
};

Ends ReadEnds(const std::string& out) {
  Ends ends;
  for (const Fact& fact : ParseFacts(out)) {
    if (fact.kind == "thread") ends.roles[fact["role"]] = static_cast<uint32_t>(fact.Number("tid"));
    if (fact.kind == "send" || fact.kind == "recv")
      ends.calls.push_back({static_cast<uint32_t>(fact.Number("tid")), fact.Number("offset"),
                            fact.Number("bytes"), fact.kind == "send"});
  }
  return ends;
}

class TcpRecord : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }

  // Both ends of tcp_ends.py over loopback at `address`, in one session; the server `server_role`.
  Session Record(const std::string& address, const std::string& server_role,
                 const std::vector<std::string>& env = {}) {
    const std::string script = SourceDir() + "/tests/apps/tcp_ends.py";
    const std::string port = std::to_string(20000 + (getpid() + ++runs_) % 20000);
    const std::string launch = "/usr/bin/python3 " + script + " " + server_role + " " + address +
                               " " + port + " & /usr/bin/python3 " + script + " client " +
                               address + " " + port + "; client=$?; wait $!; exit $((client | $?))";
    const std::string out = dir_.Sub("session" + std::to_string(runs_));
    ProcessSpec spec =
        Command({GprofRunPath(), "-q", "-o", out, "--", "/bin/sh", "-c", launch});
    spec.set_env = env;
    ProcessResult run = RunProcess(spec);
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    printed_ = ReadEnds(run.out);
    auto session = collector::ReadSession(out);
    EXPECT_TRUE(session.ok()) << session.status().message();
    if (!session.ok()) return Session();
    return std::move(*session);
  }

  // Every send and recv the program printed is one recorded transfer of its thread with its
  // bytes, at its place in the stream (positions relative to the direction's first transfer).
  void ExpectEveryCallRecorded(const Session& session) {
    const uint32_t server = printed_.roles["server"];
    ASSERT_NE(server, 0u) << "the server printed no thread line";
    // The client's threads send to the server, the server answers: a direction by who sends.
    auto to_server = [&](const Printed& p) { return p.send != (p.tid == server); };
    std::map<bool, uint32_t> base;  // by direction: its first recorded position
    for (const TcpTransfer& t : session.tcp_transfers) {
      const bool direction = t.is_send != (t.tid == server);
      if (!base.contains(direction)) base[direction] = t.seq_start;
    }
    ASSERT_EQ(base.size(), 2u) << "transfers recorded in both directions";
    size_t calls = 0;
    for (const Printed& p : printed_.calls) {
      ++calls;
      bool found = false;
      for (const TcpTransfer& t : session.tcp_transfers)
        found |= t.tid == p.tid && t.is_send == p.send && t.bytes() == p.bytes &&
                 static_cast<uint32_t>(t.seq_start - base[to_server(p)]) == p.offset;
      EXPECT_TRUE(found) << (p.send ? "send" : "recv") << " of " << p.bytes << " bytes at "
                         << p.offset << " by " << p.tid << " not recorded";
    }
    EXPECT_GE(calls, 2u * 12) << "12 messages and 12 answers";
  }

  // Both ends' addresses, as each transfer names them: loopback's, IPv4 as ::ffff:127.0.0.1.
  static void ExpectLoopbackAddresses(const Session& session, bool ipv6) {
    std::array<uint8_t, 16> loopback{};
    if (ipv6) {
      loopback[15] = 1;
    } else {
      loopback[10] = loopback[11] = 0xff;
      loopback[12] = 127;
      loopback[15] = 1;
    }
    for (const TcpTransfer& t : session.tcp_transfers) {
      EXPECT_EQ(t.local.address, loopback) << "a transfer of " << t.tid;
      EXPECT_EQ(t.remote.address, loopback) << "a transfer of " << t.tid;
    }
  }

  // The server's waits that a message's arrival ended, named by the send of its bytes.
  size_t WaitsEndedByTheirBytes(const Session& session) {
    const uint32_t server = printed_.roles["server"];
    const std::set<uint32_t> writers = {printed_.roles["client-a"], printed_.roles["client-b"]};
    collector::WaitReader reader(session);
    size_t by_bytes = 0;
    for (const collector::OffCpuInterval& interval : session.off_cpu) {
      if (interval.tid != server) continue;
      const collector::Wait& wait = reader.WaitOf(interval);
      if (wait.data_send == nullptr) continue;
      ++by_bytes;
      EXPECT_TRUE(writers.contains(wait.waker_tid)) << wait.waker_tid;
      EXPECT_EQ(wait.data_send->tid, wait.waker_tid);
    }
    return by_bytes;
  }

  TempDir dir_;
  Ends printed_;
  int runs_ = 0;
};

// Loopback data arrives in softirq: the server's wakeups name no thread. Its reads after them are
// matched to their sends by their bytes, as before; no stream-read record is written for them
// (it said the same, with a guess at the writer).
TEST_F(TcpRecord, AReadAfterAnInterruptsWakeupIsSaidByItsTransferAlone) {
  Session session = Record("127.0.0.1", "server");
  ExpectEveryCallRecorded(session);
  ExpectLoopbackAddresses(session, false);
  const uint32_t server = printed_.roles["server"];
  size_t after_wait = 0;
  for (const TcpTransfer& t : session.tcp_transfers)
    after_wait += t.tid == server && !t.is_send && t.wake_ns != 0;
  EXPECT_GE(after_wait, 6u) << "of 12 messages, each after a sleep of 5 ms or more";
  for (const auto& [key, read] : session.stream_reads)
    EXPECT_NE(key.first, server) << "a stream-read record for a TCP read at " << key.second;
  EXPECT_GE(WaitsEndedByTheirBytes(session), 6u);
}

// A peek after the wait gets data but moves none: the read after it, which moves the bytes,
// carries the wait, so that the wait is still ended at their send.
TEST_F(TcpRecord, APeekLeavesTheWaitToTheReadThatMovesTheBytes) {
  Session session = Record("127.0.0.1", "server-peek");
  ExpectEveryCallRecorded(session);
  EXPECT_GE(WaitsEndedByTheirBytes(session), 6u) << "of 12 messages, each peeked at first";
}

// The raw_tp twins (GPROF_BPF_RAW_TP=1, as on a kernel whose tp_btf cannot be used) read the
// socket with probe reads: the same transfers and addresses, over IPv4 and IPv6; and the tp_btf
// ones over IPv6, whose addresses are read as words.
// Whether this machine's loopback takes IPv6 (a host may have it disabled).
bool LoopbackHasIpv6() {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return bound;
}

TEST_F(TcpRecord, BothKindsOfProgramsRecordEveryTransferWithItsAddresses) {
  if (!LoopbackHasIpv6()) {
    Session session = Record("127.0.0.1", "server", {"GPROF_BPF_RAW_TP=1"});
    ExpectEveryCallRecorded(session);
    ExpectLoopbackAddresses(session, false);
    GTEST_SKIP() << "no IPv6 on this machine's loopback: only the raw_tp twins over IPv4 checked";
  }
  for (const std::string address : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(address);
    Session session = Record(address, "server", {"GPROF_BPF_RAW_TP=1"});
    ExpectEveryCallRecorded(session);
    ExpectLoopbackAddresses(session, address == "::1");
    EXPECT_GE(WaitsEndedByTheirBytes(session), 6u);
  }
  {
    SCOPED_TRACE("tp_btf over ::1");
    Session session = Record("::1", "server");
    ExpectEveryCallRecorded(session);
    ExpectLoopbackAddresses(session, true);
    EXPECT_GE(WaitsEndedByTheirBytes(session), 6u);
  }
}

}  // namespace
}  // namespace gprof::test
