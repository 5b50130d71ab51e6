// Which send wrote the bytes a TCP receive read, in one session or across sessions of any hosts.
//
// Both ends of a connection number the bytes of each direction alike (TCP's sequence numbers), so
// the bytes [a, b) a receiver consumed were queued by the send whose [seq_start, seq_end) holds
// them: matched by connection and byte position, not by time, since the hosts' clocks disagree.
// A receiver knows the connection as (local = receiver, remote = sender), the sender as the two
// swapped. Sequence numbers wrap at 4 GiB: a connection's sends are laid end to end in the order
// their sender made them, and where a byte position is held by more than one of them (a stream
// that wrapped, or a later connection between the same ports), the send nearest the receive in
// time, on the clock the caller gives (each session's offset to it), is the one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// A send of one of the sessions a TcpStreams was made from.
struct TcpSendRef {
  size_t session = 0;  // its index in them
  const TcpTransfer* send = nullptr;
};

class TcpStreams {
 public:
  struct Source {
    const Session* session = nullptr;
    // Added to the session's times to put them on the clock the sessions share; used only to
    // choose between sends that hold the same byte position.
    int64_t to_common_ns = 0;
  };

  explicit TcpStreams(std::span<const Source> sessions);
  TcpStreams(const TcpStreams&) = delete;
  TcpStreams& operator=(const TcpStreams&) = delete;

  // The receive of thread `tid` of session `session` that was its first read after its off-CPU
  // interval that started at `wait_start_ns`, which an interrupt, a kernel thread or a task
  // outside the tree ended; nullptr when it read no TCP socket then.
  const TcpTransfer* ReceiveAfterWait(size_t session, uint32_t tid, uint64_t wait_start_ns) const;

  // The send that queued byte `seq` of the stream `receive` (of session `session`) read from.
  std::optional<TcpSendRef> SenderOf(size_t session, const TcpTransfer& receive,
                                     uint32_t seq) const;
  // ... of the first byte it read: the one whose arrival ended its wait.
  std::optional<TcpSendRef> SenderOf(size_t session, const TcpTransfer& receive) const {
    return SenderOf(session, receive, receive.seq_start);
  }

 private:
  // A send, its bytes at [begin, end) of its run: sequence numbers unwrapped to 64 bits.
  struct Placed {
    int64_t begin = 0;
    int64_t end = 0;
    TcpSendRef ref;
  };
  // Sends of one direction of a connection that follow each other, sorted by begin; a jump of
  // a quarter of the sequence space or more starts another run (another connection between the
  // same ports).
  struct Run {
    std::vector<Placed> sends;
    int64_t end = 0;  // the furthest any of them reaches
  };
  using Key = std::pair<TcpEndpoint, TcpEndpoint>;  // (sender, receiver)

  int64_t CommonTime(size_t session, uint64_t time_ns) const;

  std::vector<Source> sources_;
  std::map<Key, std::vector<Run>> runs_;
  // By (session, tid, wait_start_ns).
  std::map<std::tuple<size_t, uint32_t, uint64_t>, const TcpTransfer*> after_wait_;
};

}  // namespace gprof::collector
