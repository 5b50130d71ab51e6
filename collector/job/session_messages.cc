#include "collector/job/session_messages.h"

#include "collector/analysis/tcp_streams.h"

namespace gprof::collector {

std::vector<SessionMessage> MessagesBetween(const std::vector<const Session*>& sessions) {
  std::vector<SessionMessage> messages;
  std::vector<TcpStreams::Source> sources;
  for (const Session* session : sessions) sources.push_back({session, 0});
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

}  // namespace gprof::collector
