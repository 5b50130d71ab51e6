// A packet sequence's state: what the packet writer (packet_writer.h) must know of the packets
// already written on it. Each event track (track_registry.h) has one; so does the metadata.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/perfetto_fields.h"
#include "collector/writers/perfetto/proto_encoder.h"

namespace gprof::collector::perfetto {

// One packet sequence (trusted_packet_sequence_id). Interned entries, packet defaults and the
// incremental clock are valid per sequence, so each remembers which entries its packets have
// already carried and the time of its last timestamped packet.
class Sequence {
 public:
  explicit Sequence(uint32_t id) : id_(id) {
    char* end = ProtoBuffer::WriteVarint(
        ProtoBuffer::WriteTag(
            id_field_, static_cast<uint32_t>(PacketField::kTrustedPacketSequenceId), kVarintWire),
        id);
    id_field_size_ = static_cast<uint8_t>(end - id_field_);
  }

  uint32_t id() const { return id_; }
  // trusted_packet_sequence_id as encoded, tag and value: the same on each of its packets.
  // (8 bytes readable at id_field(), RawFields::AddEncoded's way)
  const char* id_field() const { return id_field_; }
  size_t id_field_size() const { return id_field_size_; }

  // SEQ_INCREMENTAL_STATE_CLEARED on the first packet, nothing on the rest. The other flag,
  // SEQ_NEEDS_INCREMENTAL_STATE, only tells a reader to skip the packet when the sequence's state
  // was lost (a ring buffer that wrapped); a file written in one go loses none, and trace_processor
  // resolves interned data and defaults the same without it, so the 2 bytes a packet are saved.
  // 0: no flags to write.
  uint32_t TakePacketFlags() {
    if (started_) return 0;
    started_ = true;
    return kSeqIncrementalStateCleared;
  }

  // Set once the sequence's clock snapshot declared kIncrementalClock, anchored at 0.
  bool incremental_clock = false;
  uint64_t last_timestamp_ns = 0;  // kIncrementalClock's value after the last timestamped packet

  // True the first time this sequence meets `iid` of `table`. The first 64 iids of each table (the
  // categories and annotation names among them, on every event) are bits of a word.
  bool MarkInterned(InternTable table, uint64_t iid) {
    if (iid < 64) [[likely]] {
      uint64_t& seen = interned_first_[static_cast<size_t>(table)];
      uint64_t bit = uint64_t{1} << iid;
      if (seen & bit) return false;
      seen |= bit;
      return true;
    }
    std::vector<uint8_t>& seen = interned_[static_cast<size_t>(table)];
    if (iid >= seen.size()) [[unlikely]]
      seen.resize(std::max<size_t>(iid + 1, seen.size() * 2));
    if (seen[iid]) return false;
    seen[iid] = 1;
    return true;
  }

 private:
  uint32_t id_;
  char id_field_[16] = {};
  uint8_t id_field_size_;
  bool started_ = false;
  std::array<uint64_t, kInternTableCount> interned_first_{};      // bit iid: carried
  std::array<std::vector<uint8_t>, kInternTableCount> interned_;  // by iid: 1 once carried
};

}  // namespace gprof::collector::perfetto
