#include "collector/job/session_messages.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "collector/analysis/analysis.h"
#include "collector/analysis/tcp_streams.h"

namespace gprof::collector {
namespace {

// A session's receives by thread, in time order.
using ReceivesByThread = std::unordered_map<uint32_t, std::vector<const TcpTransfer*>>;

ReceivesByThread IndexReceives(const Session& session) {
  ReceivesByThread receives;
  for (const TcpTransfer& transfer : session.tcp_transfers)
    if (!transfer.is_send && transfer.bytes() != 0) receives[transfer.tid].push_back(&transfer);
  return receives;
}

// The receive with which `tid` read what ended its wait: its first receive after the wake, and
// before `handed_on_ns` (when it woke the thread that waited for it, if it was a link: a socket
// thread reads, then signals) if that is given.
const TcpTransfer* ReceiveAfter(const ReceivesByThread& receives, uint32_t tid, const Wait& wait,
                                uint64_t handed_on_ns) {
  constexpr uint64_t kReadSoonAfterNs = 5'000'000;  // it read what woke it as soon as it ran
  auto of = receives.find(tid);
  if (of == receives.end()) return nullptr;
  const uint64_t woke = wait.wake_ns != 0 ? wait.wake_ns : wait.end_ns;
  const uint64_t until = handed_on_ns != 0 ? handed_on_ns : wait.end_ns + kReadSoonAfterNs;
  for (const TcpTransfer* transfer : of->second) {
    if (transfer->start_ns >= woke && transfer->start_ns <= until) return transfer;
  }
  return nullptr;
}

bool EndedInItsSession(const Session& session, const Wait& wait) {
  return wait.waker_tid != 0 && session.threads.contains(wait.waker_tid);
}

int64_t ToSession(uint64_t time_ns, int64_t from_offset, int64_t to_offset) {
  return static_cast<int64_t>(time_ns) + from_offset - to_offset;
}

std::vector<TcpStreams::Source> Sources(const std::vector<const Session*>& sessions,
                                        const std::vector<int64_t>& offsets) {
  std::vector<TcpStreams::Source> sources;
  for (size_t s = 0; s < sessions.size(); ++s)
    sources.push_back({sessions[s], s < offsets.size() ? offsets[s] : 0});
  return sources;
}

}  // namespace

std::vector<SessionMessage> MessagesBetween(const std::vector<const Session*>& sessions) {
  std::vector<SessionMessage> messages;
  const std::vector<TcpStreams::Source> sources = Sources(sessions, {});
  const TcpStreams sends(sources);
  for (size_t r = 0; r < sessions.size(); ++r) {
    for (const TcpTransfer& receive : sessions[r]->tcp_transfers) {
      if (receive.is_send || receive.bytes() == 0) continue;
      auto sender = sends.SenderOf(r, receive);
      if (sender && sender->session != r)
        messages.push_back({static_cast<int>(sender->session), static_cast<int>(r),
                            sender->send->start_ns, receive.end_ns});
    }
  }
  return messages;
}

std::vector<JobChain> ChainsAcrossSessions(const std::vector<JobSession>& sessions,
                                           const std::vector<const ChainFollower*>& followers,
                                           size_t max_links) {
  std::vector<const Session*> models;
  std::vector<int64_t> offsets;
  for (const JobSession& session : sessions) {
    models.push_back(session.session);
    offsets.push_back(session.offset_ns);
  }
  const std::vector<TcpStreams::Source> sources = Sources(models, offsets);
  const TcpStreams sends(sources);
  std::vector<ReceivesByThread> receives;
  for (const Session* session : models) receives.push_back(IndexReceives(*session));
  std::vector<JobChain> chains;
  for (size_t r = 0; r < sessions.size(); ++r) {
    const std::vector<Stall>& stalls = sessions[r].analysis->stalls;
    for (size_t i = 0; i < stalls.size(); ++i) {
      const Stall& stall = stalls[i];
      if (stall.tid != stall.pid) continue;  // only a main thread's waits are a rank's
      JobChain chain{static_cast<int>(r), static_cast<int>(i), {}};
      for (const ChainLink& link : stall.chain) chain.links.push_back({static_cast<int>(r), link});
      // Where the chain ends asleep on bytes from elsewhere, it goes on in their sender's session.
      const Wait* wait = &stall.wait;
      uint32_t reader = stall.tid;
      int at = static_cast<int>(r);
      const uint64_t since = stall.wait.start_ns;  // on session r's clock
      while (chain.links.size() < max_links) {
        if (!chain.links.empty()) {
          const JobLink& last = chain.links.back();
          if (last.link.state != ChainLink::State::kAsleep || !last.link.wait) break;
          wait = &*last.link.wait;
          reader = last.link.tid;
          at = last.session;
        }
        const Session& here = *sessions[at].session;
        if (EndedInItsSession(here, *wait)) break;
        const TcpTransfer* receive = sends.ReceiveAfterWait(at, reader, wait->start_ns);
        if (receive == nullptr)
          receive = ReceiveAfter(receives[at], reader, *wait,
                                 chain.links.empty() ? 0 : chain.links.back().link.end_ns);
        if (receive == nullptr) break;
        std::optional<TcpSendRef> sender = sends.SenderOf(at, *receive);
        if (!sender || static_cast<int>(sender->session) == at) break;
        const JobSession& there = sessions[sender->session];
        const int64_t from = ToSession(since, sessions[r].offset_ns, there.offset_ns);
        const uint64_t start = static_cast<uint64_t>(std::max<int64_t>(from, 0));
        const uint64_t end = std::max(start, sender->send->start_ns);
        std::vector<ChainLink> links =
            followers[sender->session]->From(sender->send->tid, start, end);
        if (links.empty()) break;
        for (ChainLink& link : links) {
          if (chain.links.size() == max_links) break;
          chain.links.push_back({static_cast<int>(sender->session), std::move(link)});
        }
      }
      if (!chain.links.empty()) chains.push_back(std::move(chain));
    }
  }
  return chains;
}

}  // namespace gprof::collector
