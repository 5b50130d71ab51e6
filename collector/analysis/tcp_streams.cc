#include "collector/analysis/tcp_streams.h"

#include <algorithm>
#include <limits>

namespace gprof::collector {
namespace {

constexpr int64_t kSequenceSpace = int64_t{1} << 32;
constexpr int64_t kRunBreak = kSequenceSpace / 4;

}  // namespace

int64_t TcpStreams::CommonTime(size_t session, uint64_t time_ns) const {
  return static_cast<int64_t>(time_ns) + sources_[session].to_common_ns;
}

TcpStreams::TcpStreams(std::span<const Source> sessions)
    : sources_(sessions.begin(), sessions.end()) {
  std::map<Key, std::vector<TcpSendRef>> sends;
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (sources_[i].session == nullptr) continue;
    for (const TcpTransfer& transfer : sources_[i].session->tcp_transfers) {
      if (transfer.is_send) {
        sends[{transfer.local, transfer.remote}].push_back({i, &transfer});
      } else if (transfer.wake_ns != 0) {
        after_wait_[{i, transfer.tid, transfer.wait_start_ns}] = &transfer;
      }
    }
  }
  for (auto& [key, refs] : sends) {
    // In the order the sender made them: its bytes follow each other in that order.
    std::stable_sort(refs.begin(), refs.end(), [&](const TcpSendRef& a, const TcpSendRef& b) {
      return CommonTime(a.session, a.send->start_ns) < CommonTime(b.session, b.send->start_ns);
    });
    std::vector<Run>& runs = runs_[key];
    const TcpTransfer* previous = nullptr;
    for (const TcpSendRef& ref : refs) {
      const TcpTransfer& send = *ref.send;
      const int64_t gap =
          previous == nullptr ? 0 : static_cast<int32_t>(send.seq_start - previous->seq_end);
      if (previous == nullptr || gap >= kRunBreak || gap <= -kRunBreak) {
        runs.push_back({});
        runs.back().end = send.seq_start;  // a run starts where its first send does
      }
      Run& run = runs.back();
      const int64_t begin = previous == nullptr || run.sends.empty()
                                ? static_cast<int64_t>(send.seq_start)
                                : run.sends.back().end + gap;
      // run.sends.back() is the previous send only until the sort below.
      run.sends.push_back({begin, begin + send.bytes(), ref});
      run.end = std::max(run.end, begin + static_cast<int64_t>(send.bytes()));
      previous = &send;
    }
    for (Run& run : runs)
      std::stable_sort(run.sends.begin(), run.sends.end(),
                       [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
  }
}

const TcpTransfer* TcpStreams::ReceiveAfterWait(size_t session, uint32_t tid,
                                                uint64_t wait_start_ns) const {
  auto found = after_wait_.find({session, tid, wait_start_ns});
  return found == after_wait_.end() ? nullptr : found->second;
}

std::optional<TcpSendRef> TcpStreams::SenderOf(size_t session, const TcpTransfer& receive,
                                               uint32_t seq) const {
  if (receive.is_send || session >= sources_.size()) return std::nullopt;
  auto runs = runs_.find({receive.remote, receive.local});
  if (runs == runs_.end()) return std::nullopt;
  const int64_t received_at = CommonTime(session, receive.start_ns);
  std::optional<TcpSendRef> best;
  int64_t best_distance = std::numeric_limits<int64_t>::max();
  for (const Run& run : runs->second) {
    const int64_t first = run.sends.front().begin;
    // Every position of the run whose low 32 bits are `seq`.
    for (int64_t at = first + static_cast<uint32_t>(seq - static_cast<uint32_t>(first));
         at < run.end; at += kSequenceSpace) {
      auto after = std::upper_bound(
          run.sends.begin(), run.sends.end(), at,
          [](int64_t position, const Placed& placed) { return position < placed.begin; });
      // The send that begins last at or before it holds it, or one just before: two threads'
      // sends on one socket overlap, and so may a later connection's between the same ports.
      for (int looked = 0; looked < 4 && after != run.sends.begin(); ++looked) {
        const Placed& placed = *--after;
        if (at >= placed.end) continue;
        const int64_t sent_at = CommonTime(placed.ref.session, placed.ref.send->start_ns);
        const int64_t distance =
            sent_at > received_at ? sent_at - received_at : received_at - sent_at;
        if (distance < best_distance) best = placed.ref, best_distance = distance;
      }
    }
  }
  return best;
}

}  // namespace gprof::collector
