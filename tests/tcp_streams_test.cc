// Issue 37, item 4: every read and write of a TCP socket by the tree is recorded with its
// connection and the bytes of the stream it moved, and a receive is matched to the send that
// queued its bytes, in one session or across sessions of two "hosts" (network namespaces joined by
// a veth pair), by connection and byte position. A wait that an interrupt ended, followed by a
// TCP read, is ended by that send's thread.
#include "collector/analysis/tcp_streams.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collector/analysis/wait_reader.h"
#include "collector/session/session_reader.h"
#include "tests/analysis_sessions.h"
#include "tests/scenario_facts.h"
#include "tests/session_builder.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using collector::ReadSession;
using collector::Session;
using collector::TcpEndpoint;
using collector::TcpSendRef;
using collector::TcpStreams;
using collector::TcpTransfer;

// ---- Reading the record -----------------------------------------------------------------------

gprof_tcp_transfer TransferEvent(uint32_t tid, uint64_t start_ns, uint64_t end_ns,
                                 uint16_t direction, uint32_t seq_start, uint32_t seq_end) {
  gprof_tcp_transfer event{};
  event.pid = 500;
  event.tid = tid;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.direction = direction;
  event.seq_start = seq_start;
  event.seq_end = seq_end;
  event.local_addr[10] = event.local_addr[11] = 0xff;
  event.local_addr[12] = 10;
  event.local_addr[15] = 1;
  event.remote_addr[10] = event.remote_addr[11] = 0xff;
  event.remote_addr[12] = 10;
  event.remote_addr[15] = 2;
  event.local_port = 40000;
  event.remote_port = 5000;
  event.syscall_nr = 45;
  event.fd = 7;
  return event;
}

size_t Malformed(const Session& session) {
  size_t count = 0;
  for (const auto& d : session.diagnostics)
    count += d.message.find("malformed") != std::string::npos;
  return count;
}

TEST(TcpStreams, TheRecordIsReadAsWrittenAndDamagedOnesAreSkipped) {
  TempDir dir;
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
    RecordBatch batch;
    gprof_tcp_transfer receive =
        TransferEvent(101, 5000, 9000, GPROF_TCP_RECEIVE, 0xfffffff0u, 0x10u);  // wraps
    receive.wait_start_ns = 1000;
    receive.wake_ns = 4000;
    batch.Add(receive, GPROF_REC_TCP_TRANSFER);
    batch.Add(TransferEvent(102, 100, 200, GPROF_TCP_SEND, 7, 9), GPROF_REC_TCP_TRANSFER);
    // Damaged: no direction; nothing moved; more than any call moves; end before start; a wake
    // after the receive's end; a wait on a send; cut short.
    batch.Add(TransferEvent(103, 1, 2, 0, 1, 2), GPROF_REC_TCP_TRANSFER);
    batch.Add(TransferEvent(103, 1, 2, GPROF_TCP_SEND, 5, 5), GPROF_REC_TCP_TRANSFER);
    batch.Add(TransferEvent(103, 1, 2, GPROF_TCP_SEND, 0, 0x90000000u), GPROF_REC_TCP_TRANSFER);
    batch.Add(TransferEvent(103, 3, 2, GPROF_TCP_SEND, 1, 2), GPROF_REC_TCP_TRANSFER);
    gprof_tcp_transfer late = TransferEvent(103, 10, 20, GPROF_TCP_RECEIVE, 1, 2);
    late.wait_start_ns = 5;
    late.wake_ns = 21;
    batch.Add(late, GPROF_REC_TCP_TRANSFER);
    gprof_tcp_transfer waited_send = TransferEvent(103, 10, 20, GPROF_TCP_SEND, 1, 2);
    waited_send.wait_start_ns = 5;
    waited_send.wake_ns = 6;
    batch.Add(waited_send, GPROF_REC_TCP_TRANSFER);
    batch.AddFirstBytes(TransferEvent(103, 1, 2, GPROF_TCP_SEND, 1, 2), GPROF_REC_TCP_TRANSFER,
                        offsetof(gprof_tcp_transfer, seq_start));
    batch.WriteTo(&file);
  }
  auto session = ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(Malformed(*session), 7u);
  ASSERT_EQ(session->tcp_transfers.size(), 2u);
  const TcpTransfer& send = session->tcp_transfers[0];  // sorted by start
  EXPECT_TRUE(send.is_send);
  EXPECT_EQ(send.tid, 102u);
  EXPECT_EQ(send.bytes(), 2u);
  EXPECT_EQ(send.wake_ns, 0u);
  const TcpTransfer& receive = session->tcp_transfers[1];
  EXPECT_FALSE(receive.is_send);
  EXPECT_EQ(receive.bytes(), 0x20u);
  EXPECT_TRUE(receive.Holds(0xfffffff0u));
  EXPECT_TRUE(receive.Holds(0x0fu));
  EXPECT_FALSE(receive.Holds(0x10u));
  EXPECT_EQ(receive.wait_start_ns, 1000u);
  EXPECT_EQ(receive.wake_ns, 4000u);
  EXPECT_EQ(receive.local.port, 40000);
  EXPECT_EQ(receive.remote.port, 5000);
  EXPECT_EQ(receive.remote.address[15], 2);
  EXPECT_EQ(receive.fd, 7);
  EXPECT_EQ(receive.syscall_nr, 45);
  EXPECT_TRUE(session->threads.contains(101));
}

// ---- Matching, on made-up transfers -----------------------------------------------------------

TcpEndpoint Endpoint(uint8_t last, uint16_t port, bool v6 = false) {
  TcpEndpoint end;
  if (v6) {
    end.address[0] = 0xfd;
  } else {
    end.address[10] = end.address[11] = 0xff;
    end.address[12] = 10;
  }
  end.address[15] = last;
  end.port = port;
  return end;
}

TcpTransfer Transfer(uint32_t tid, uint64_t start_ns, bool send, const TcpEndpoint& local,
                     const TcpEndpoint& remote, uint32_t seq, uint32_t bytes) {
  TcpTransfer transfer;
  transfer.pid = tid / 10 * 10;
  transfer.tid = tid;
  transfer.start_ns = start_ns;
  transfer.end_ns = start_ns + 1000;
  transfer.is_send = send;
  transfer.local = local;
  transfer.remote = remote;
  transfer.seq_start = seq;
  transfer.seq_end = seq + bytes;
  return transfer;
}

// Two hosts' sessions, each end seeing the connection its own way, their clocks seconds apart; the
// sender's stream crosses 2^32 and a later connection between the same ports reuses positions.
TEST(TcpStreams, AReceiveIsMatchedToTheSendThatQueuedItsBytesAcrossSessions) {
  for (bool v6 : {false, true}) {
    const TcpEndpoint client = Endpoint(2, 40000, v6), server = Endpoint(1, 5000, v6);
    Session sender, receiver;
    const uint32_t isn = 0xffffff00u;
    const uint64_t host_b = 7'000'000'000;  // the receiver's clock runs 7 s ahead
    // Three sends of 0x80 bytes by threads 11, 12, 11; the second crosses 2^32.
    sender.tcp_transfers.push_back(Transfer(11, 1000, true, client, server, isn, 0x80));
    sender.tcp_transfers.push_back(Transfer(12, 2000, true, client, server, isn + 0x80, 0x80));
    sender.tcp_transfers.push_back(Transfer(11, 3000, true, client, server, isn + 0x100, 0x80));
    // A later connection between the same ports (the client's port reused), its own ISN that
    // happens to be near the first's: its position isn + 0x90 is held by the second send too.
    sender.tcp_transfers.push_back(
        Transfer(13, 900'000'000, true, client, server, isn + 0x90, 0x10));
    // A send of another connection (another port) at the same positions: never a match.
    sender.tcp_transfers.push_back(
        Transfer(14, 2000, true, Endpoint(2, 40001, v6), server, isn + 0x80, 0x80));
    // The receiver's reads: its first read holds bytes of the first two sends.
    receiver.tcp_transfers.push_back(
        Transfer(21, host_b + 2500, false, server, client, isn + 0x40, 0x80));
    receiver.tcp_transfers.push_back(
        Transfer(21, host_b + 3500, false, server, client, isn + 0x100, 0x80));
    receiver.tcp_transfers.push_back(
        Transfer(21, host_b + 900'000'500, false, server, client, isn + 0x90, 0x10));
    const TcpStreams::Source sources[] = {{&sender, 0}, {&receiver, -int64_t{host_b}}};
    TcpStreams streams(sources);

    const TcpTransfer& first = receiver.tcp_transfers[0];
    std::optional<TcpSendRef> sent = streams.SenderOf(1, first);
    ASSERT_TRUE(sent) << v6;
    EXPECT_EQ(sent->session, 0u);
    EXPECT_EQ(sent->send, &sender.tcp_transfers[0]);
    sent = streams.SenderOf(1, first, first.seq_start + 0x40);  // 0x00000000: past the wrap
    ASSERT_TRUE(sent);
    EXPECT_EQ(sent->send->tid, 12u);
    sent = streams.SenderOf(1, receiver.tcp_transfers[1]);
    ASSERT_TRUE(sent);
    EXPECT_EQ(sent->send, &sender.tcp_transfers[2]);
    // The same position in the later connection: the send nearest in time.
    sent = streams.SenderOf(1, receiver.tcp_transfers[2]);
    ASSERT_TRUE(sent);
    EXPECT_EQ(sent->send->tid, 13u);
    // Bytes nobody recorded sending, and a send asked as if it were a receive.
    EXPECT_FALSE(streams.SenderOf(1, first, isn + 0x200));
    EXPECT_FALSE(streams.SenderOf(0, sender.tcp_transfers[0]));
  }
}

// A reader woken by an interrupt (loopback or veth data arrives in softirq) reads bytes that the
// first of two writers queued; the second wrote to the connection last before the wakeup, so the
// "last writers" guess names it. The bytes name the first.
TEST(TcpStreams, AWaitEndedByAnInterruptIsEndedByTheSendOfTheBytesItRead) {
  using namespace collector;
  constexpr uint32_t kReader = 31, kFirst = 32, kSecond = 33;
  SessionBuilder builder;
  builder.Thread(kReader, "reader");
  builder.Thread(kFirst, "first");
  builder.Thread(kSecond, "second");
  builder.session().meta.end_monotonic_ns = 100 * kMs;
  OffCpuInterval& sleep = builder.Sleep(kReader, 10 * kMs, 30 * kMs, 30 * kMs + 5000, 0);
  sleep.waker_comm = builder.session().CommIndex("[irq]");
  const TcpEndpoint client = Endpoint(2, 40000), server = Endpoint(1, 5000);
  // The first queued 1000 bytes at 20 ms (a slow send, until 29 ms); the second 10 more at 29.5.
  TcpTransfer first = Transfer(kFirst, 20 * kMs, true, client, server, 5000, 1000);
  first.end_ns = 29 * kMs;
  first.pid = kPid;
  TcpTransfer second = Transfer(kSecond, 29 * kMs + 500 * kUs, true, client, server, 6000, 10);
  second.pid = kPid;
  TcpTransfer read = Transfer(kReader, 9 * kMs, false, server, client, 5000, 1010);
  read.pid = kPid;
  read.end_ns = 30 * kMs + 9000;
  read.wait_start_ns = sleep.start_ns;
  read.wake_ns = sleep.wake_ns;
  builder.session().tcp_transfers = {first, second, read};
  StreamRead guess;
  guess.pid = kPid;
  guess.tid = kReader;
  guess.start_ns = read.start_ns;
  guess.end_ns = read.end_ns;
  guess.wait_start_ns = sleep.start_ns;
  guess.wake_ns = sleep.wake_ns;
  guess.kind = GPROF_STREAM_INET;
  guess.writers[0] = {second.start_ns, kPid, kSecond};
  guess.writers[1] = {first.start_ns, kPid, kFirst};
  builder.session().stream_reads[{kReader, sleep.start_ns}] = guess;
  Session session = builder.Build();
  WaitReader reader(session);
  const OffCpuInterval* interval = nullptr;
  for (const OffCpuInterval& i : session.off_cpu)
    if (i.tid == kReader) interval = &i;
  ASSERT_NE(interval, nullptr);
  const Wait& wait = reader.WaitOf(*interval);
  EXPECT_EQ(wait.waker_tid, kFirst);
  EXPECT_EQ(wait.data_written_ns, 20 * kMs);
  ASSERT_NE(wait.data_send, nullptr);
  EXPECT_EQ(wait.data_send->seq_start, 5000u);
}

// ---- Recorded ---------------------------------------------------------------------------------

struct Printed {
  uint32_t tid = 0;
  uint64_t start_ns = 0, end_ns = 0, offset = 0, bytes = 0;
};

// What tcp_ends.py printed: its threads by role, its sends and receives.
struct Ends {
  std::map<std::string, uint32_t> roles;
  std::vector<Printed> sends, receives;
};

void ReadEnds(const std::string& out, Ends* ends) {
  for (const Fact& fact : ParseFacts(out)) {
    if (fact.kind == "thread")
      ends->roles[fact["role"]] = static_cast<uint32_t>(fact.Number("tid"));
    if (fact.kind != "send" && fact.kind != "recv") continue;
    Printed p{static_cast<uint32_t>(fact.Number("tid")), fact.Number("start_ns"),
              fact.Number("end_ns"), fact.Number("offset"), fact.Number("bytes")};
    (fact.kind == "send" ? ends->sends : ends->receives).push_back(p);
  }
}

// The recorded transfers of `tid` (in `session`) in one direction.
std::vector<const TcpTransfer*> TransfersOf(const Session& session, uint32_t tid, bool send) {
  std::vector<const TcpTransfer*> found;
  for (const TcpTransfer& t : session.tcp_transfers)
    if (t.tid == tid && t.is_send == send) found.push_back(&t);
  return found;
}

// Every receive the receiving threads printed is recorded with its bytes, and its every byte
// position (first and last) is matched to a recorded send whose thread printed the send that
// holds that position. Positions are relative to the first send's first byte.
void ExpectMatched(const TcpStreams& streams, size_t receiver_session,
                   const Session& receiver_record, const Ends& receiver_printed,
                   const std::set<uint32_t>& receiving_tids, const Ends& sender_printed,
                   const std::set<uint32_t>& sending_tids, const Session& sender_record) {
  // The earliest send's position (transfers are sorted by start).
  uint32_t base = 0;
  bool based = false;
  for (const TcpTransfer& t : sender_record.tcp_transfers) {
    if (t.is_send && sending_tids.contains(t.tid)) {
      base = t.seq_start;
      based = true;
      break;
    }
  }
  ASSERT_TRUE(based) << "no send recorded";
  size_t printed_receives = 0;
  for (const Printed& p : receiver_printed.receives) {
    if (!receiving_tids.contains(p.tid)) continue;
    ++printed_receives;
    const TcpTransfer* recorded = nullptr;
    for (const TcpTransfer* t : TransfersOf(receiver_record, p.tid, false))
      if (static_cast<uint32_t>(t->seq_start - base) == p.offset && t->bytes() == p.bytes)
        recorded = t;
    ASSERT_NE(recorded, nullptr) << "receive at " << p.offset << " of " << p.bytes << " bytes by "
                                 << p.tid << " not recorded";
    for (uint32_t at : {recorded->seq_start, recorded->seq_end - 1}) {
      const uint64_t offset = static_cast<uint32_t>(at - base);
      std::optional<TcpSendRef> sent = streams.SenderOf(receiver_session, *recorded, at);
      ASSERT_TRUE(sent) << "no send found for byte " << offset;
      const Printed* wrote = nullptr;
      for (const Printed& s : sender_printed.sends)
        if (sending_tids.contains(s.tid) && s.offset <= offset && offset < s.offset + s.bytes)
          wrote = &s;
      ASSERT_NE(wrote, nullptr) << "the program printed no send of byte " << offset;
      EXPECT_EQ(sent->send->tid, wrote->tid) << "byte " << offset;
      EXPECT_EQ(static_cast<uint32_t>(sent->send->seq_start - base), wrote->offset);
      EXPECT_EQ(sent->send->bytes(), wrote->bytes);
    }
  }
  EXPECT_GT(printed_receives, 10u);
}

// Two network namespaces joined by a veth pair, made for the test and removed after.
class VethHosts {
 public:
  VethHosts() {
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "gprof-tcp-a" + id;
    b_ = "gprof-tcp-b" + id;
    const std::string link_a = "gta" + id, link_b = "gtb" + id;
    const std::string script =
        "set -e; ip netns add " + a_ + "; ip netns add " + b_ + "; ip link add " + link_a +
        " type veth peer name " + link_b + "; ip link set " + link_a + " netns " + a_ +
        "; ip link set " + link_b + " netns " + b_ + "; ip -n " + a_ +
        " addr add 10.77.0.1/24 dev " + link_a + "; ip -n " + b_ + " addr add 10.77.0.2/24 dev " +
        link_b + "; ip -n " + a_ + " addr add fd77::1/64 dev " + link_a + " nodad; ip -n " + b_ +
        " addr add fd77::2/64 dev " + link_b + " nodad; ip -n " + a_ + " link set " + link_a +
        " up; ip -n " + b_ + " link set " + link_b + " up; ip -n " + a_ +
        " link set lo up; ip -n " + b_ + " link set lo up";
    ProcessResult made = RunProcess(Command({"/bin/sh", "-c", script}));
    ok_ = made.exit_code() == 0;
    why_ = made.err;
  }
  ~VethHosts() {
    RunProcess(Command({"/bin/sh", "-c", "ip netns del " + a_ + "; ip netns del " + b_}));
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, why_;
  bool ok_ = false;
};

std::string EndsScript() { return SourceDir() + "/tests/apps/tcp_ends.py"; }

class RecordedTcp : public ::testing::Test {
 protected:
  void SetUp() override {
    GPROF_NEED_BPF();
    if (getuid() != 0) GPROF_SKIP_OR_FAIL("network namespaces need root");
  }
  TempDir dir_;
};

Session ReadOrFail(const std::string& directory) {
  auto session = ReadSession(directory);
  EXPECT_TRUE(session.ok()) << directory << ": " << session.status().message();
  return session.ok() ? std::move(*session) : Session{};
}

// Each end on its own "host", recorded by its own gprof-run: the server's receives are matched to
// the client's two writer threads' sends, and the client's to the server's answers, across the
// two sessions.
TEST_F(RecordedTcp, TwoHostsOverIpv4AreMatchedAcrossTheirSessions) {
  VethHosts hosts;
  if (!hosts.ok()) GPROF_SKIP_OR_FAIL("cannot make network namespaces: " + hosts.why());
  const std::string gprof = GprofRunPath();
  const std::string script =
      "ip netns exec " + hosts.a() + " " + gprof + " -q -o " + dir_.Sub("server") +
      " -- /usr/bin/python3 " + EndsScript() + " server 10.77.0.1 5077 > " +
      dir_.Sub("server.out") + " & ip netns exec " + hosts.b() + " " + gprof + " -q -o " +
      dir_.Sub("client") + " -- /usr/bin/python3 " + EndsScript() + " client 10.77.0.1 5077 > " +
      dir_.Sub("client.out") + "; client=$?; wait $!; server=$?; exit $((client | server))";
  ProcessResult run = RunProcess(Command({"/bin/sh", "-c", script}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Ends server_printed, client_printed;
  ReadEnds(ReadFile(dir_.Sub("server.out")), &server_printed);
  ReadEnds(ReadFile(dir_.Sub("client.out")), &client_printed);
  Session server = ReadOrFail(dir_.Sub("server")), client = ReadOrFail(dir_.Sub("client"));
  const TcpStreams::Source sources[] = {{&server, 0}, {&client, 0}};
  TcpStreams streams(sources);
  const uint32_t server_tid = server_printed.roles["server"];
  ExpectMatched(streams, 0, server, server_printed, {server_tid}, client_printed,
                {client_printed.roles["client-a"], client_printed.roles["client-b"]}, client);
  ExpectMatched(streams, 1, client, client_printed, {client_printed.roles["client-reader"]},
                server_printed, {server_tid}, server);
  // Each end's addresses as it sees them; of each host's transfers, only its own tree's (the
  // server's single thread: its tid is its pid).
  for (const TcpTransfer& t : server.tcp_transfers) {
    EXPECT_EQ(t.pid, server_tid);
    EXPECT_EQ(t.tid, server_tid);
    EXPECT_EQ(t.local.port, 5077);
    EXPECT_EQ(t.local.address[15], 1);
    EXPECT_EQ(t.remote.address[15], 2);
    EXPECT_EQ(t.local.address[10], 0xff) << "IPv4 as ::ffff:a.b.c.d";
  }
}

// Both ends in one session, over IPv6: the server's waits for each message, ended in softirq, are
// ended by the client thread that sent it, found by its bytes.
TEST_F(RecordedTcp, OneSessionOverIpv6EndsTheReadersWaitsAtTheirSenders) {
  VethHosts hosts;
  if (!hosts.ok()) GPROF_SKIP_OR_FAIL("cannot make network namespaces: " + hosts.why());
  const std::string launch = "ip netns exec " + hosts.a() + " /usr/bin/python3 " + EndsScript() +
                             " server fd77::1 5078 & ip netns exec " + hosts.b() +
                             " /usr/bin/python3 " + EndsScript() +
                             " client fd77::1 5078; client=$?; wait $!; exit $((client | $?))";
  ProcessResult run = RunProcess(
      Command({GprofRunPath(), "-q", "-o", dir_.Sub("session"), "--", "/bin/sh", "-c", launch}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Ends printed;
  ReadEnds(run.out, &printed);
  Session session = ReadOrFail(dir_.Sub("session"));
  const TcpStreams::Source source{&session, 0};
  TcpStreams streams(std::span(&source, 1));
  const uint32_t server_tid = printed.roles["server"];
  const std::set<uint32_t> writers = {printed.roles["client-a"], printed.roles["client-b"]};
  ExpectMatched(streams, 0, session, printed, {server_tid}, printed, writers, session);
  for (const TcpTransfer& t : session.tcp_transfers)
    if (t.tid == server_tid) EXPECT_EQ(t.local.address[0], 0xfd) << "IPv6 as it is";
  // The server's waits ended by data: each named a writer through its bytes.
  collector::WaitReader reader(session);
  size_t by_bytes = 0;
  for (const collector::OffCpuInterval& interval : session.off_cpu) {
    if (interval.tid != server_tid) continue;
    const collector::Wait& wait = reader.WaitOf(interval);
    if (wait.data_send == nullptr) continue;
    ++by_bytes;
    EXPECT_TRUE(writers.contains(wait.waker_tid)) << wait.waker_tid;
    EXPECT_EQ(wait.data_send->tid, wait.waker_tid);
  }
  EXPECT_GE(by_bytes, 6u) << "of 12 messages, each after a sleep of 5 ms or more";
}

// gloo over loopback: rank 0's reads are matched to rank 1's sends by their bytes, and rank 0's
// waits that data ended name a thread of rank 1.
TEST_F(RecordedTcp, GlooRanksOverLoopbackAreMatchedByTheirBytes) {
  ProcessResult run =
      RunProcess(Command({GprofRunPath(), "-q", "-o", dir_.Sub("session"), "--", "/usr/bin/python3",
                          SourceDir() + "/tests/apps/handoffs/gloo_ranks.py"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  uint32_t consumer_pid = 0, producer_pid = 0;
  for (const Fact& fact : ParseFacts(run.out)) {
    if (fact.kind != "thread") continue;
    (fact["role"] == "consumer" ? consumer_pid : producer_pid) =
        static_cast<uint32_t>(fact.Number("pid"));
  }
  ASSERT_NE(consumer_pid, 0u) << run.out;
  ASSERT_NE(producer_pid, 0u) << run.out;
  Session session = ReadOrFail(dir_.Sub("session"));
  const TcpStreams::Source source{&session, 0};
  TcpStreams streams(std::span(&source, 1));
  size_t matched = 0, unmatched = 0;
  uint64_t bytes = 0;
  for (const TcpTransfer& t : session.tcp_transfers) {
    if (t.is_send || t.pid != consumer_pid) continue;
    std::optional<TcpSendRef> sent = streams.SenderOf(0, t);
    if (!sent) {
      ++unmatched;  // the store's connection to itself: both ends in rank 0
      continue;
    }
    if (sent->send->pid != producer_pid) continue;
    ++matched;
    bytes += t.bytes();
    EXPECT_TRUE(sent->send->Holds(t.seq_start));
    EXPECT_EQ(sent->send->local, t.remote);
    EXPECT_EQ(sent->send->remote, t.local);
  }
  EXPECT_GE(matched, 5u) << "one all_reduce a step, 5 steps; " << unmatched << " unmatched";
  EXPECT_GE(bytes, 5u * 4096) << "gradients of 1024 floats";
  collector::WaitReader reader(session);
  // Rank 0's store server and its own client talk over loopback too: waits ended by rank 0's own
  // bytes are ended by its own threads.
  size_t by_producer = 0;
  for (const collector::OffCpuInterval& interval : session.off_cpu) {
    if (interval.pid != consumer_pid) continue;
    const collector::Wait& wait = reader.WaitOf(interval);
    if (wait.data_send == nullptr) continue;
    EXPECT_EQ(wait.waker_tid, wait.data_send->tid);
    EXPECT_NE(wait.waker_tid, interval.tid);
    by_producer += wait.waker_pid == producer_pid;
  }
  EXPECT_GE(by_producer, 5u) << "a wait for rank 1's data at each step";
}

}  // namespace
}  // namespace gprof::test
