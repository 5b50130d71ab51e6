// The encoding of TracePackets onto the trace file (trace_file.h): the clock snapshot, track
// descriptors, and TrackEvents as the writers of events describe them (TrackEventSpec), with the
// interned entries new to their sequence.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collector/model/model.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_sequence.h"
#include "collector/writers/perfetto/perfetto_fields.h"
#include "collector/writers/perfetto/proto_encoder.h"
#include "collector/writers/perfetto/trace_file.h"

namespace gprof::collector::perfetto {

// No default member values: an event's array of them is left unset past its count (zeroing it
// for every event was a good part of the writer's time).
struct Annotation {
  enum class Kind : uint8_t { kUint, kInt, kPointer, kBool, kInternedString };
  uint64_t name_iid;
  Kind kind;
  uint64_t value;  // kInt: the int64's bits; kInternedString: an iid of kAnnotationStrings
};

constexpr size_t kMaxAnnotations = 10;

// One TrackEvent to write. Its track comes from the sequence's defaults.
struct TrackEventSpec {
  TrackEventType type = TrackEventType::kInstant;
  uint64_t timestamp_ns = 0;
  uint64_t name_iid = 0;               // 0 on slice ends
  uint64_t category_iid = 0;           // 0 on slice ends
  std::span<const uint64_t> flow_ids;  // flows starting here; valid until written
  uint64_t terminating_flow_id = 0;    // 0: none
  // The most an event carries is 9: a kernel of a graph, cut short on its stream.
  std::array<Annotation, kMaxAnnotations> annotations;  // the first annotation_count are set
  size_t annotation_count = 0;
  uint64_t callstack_iid = 0;  // CallstackInterner's; 0: none

  void Annotate(uint64_t annotation_name_iid, Annotation::Kind kind, uint64_t value) {
    assert(annotation_count < annotations.size());
    annotations[annotation_count++] = Annotation{annotation_name_iid, kind, value};
  }
  void AnnotateInt(uint64_t annotation_name_iid, int64_t value) {
    Annotate(annotation_name_iid, Annotation::Kind::kInt, static_cast<uint64_t>(value));
  }
};

// The value of an annotation, by its kind: an int64's bits as the varint protobuf writes for a
// negative int64, a bool as 0 or 1 (written by the caller).
constexpr DebugAnnotationField AnnotationValueField(Annotation::Kind kind) {
  switch (kind) {
    case Annotation::Kind::kUint:
      return DebugAnnotationField::kUintValue;
    case Annotation::Kind::kInt:
      return DebugAnnotationField::kIntValue;
    case Annotation::Kind::kPointer:
      return DebugAnnotationField::kPointerValue;
    case Annotation::Kind::kBool:
      return DebugAnnotationField::kBoolValue;
    case Annotation::Kind::kInternedString:
      return DebugAnnotationField::kStringValueIid;
  }
  return DebugAnnotationField::kUintValue;
}

// A field's tag as encoded, 8 bytes readable (RawFields::AddEncoded).
struct EncodedTag {
  char bytes[8];
  size_t size;
};
constexpr EncodedTag EncodeTag(DebugAnnotationField field) {
  EncodedTag tag{};
  uint32_t value = static_cast<uint32_t>(field) << 3 | kVarintWire;
  while (value >= 0x80) {
    tag.bytes[tag.size++] = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  tag.bytes[tag.size++] = static_cast<char>(value);
  return tag;
}
// By Annotation::Kind.
constexpr std::array<EncodedTag, 5> kAnnotationValueTags = {
    EncodeTag(AnnotationValueField(Annotation::Kind::kUint)),
    EncodeTag(AnnotationValueField(Annotation::Kind::kInt)),
    EncodeTag(AnnotationValueField(Annotation::Kind::kPointer)),
    EncodeTag(AnnotationValueField(Annotation::Kind::kBool)),
    EncodeTag(AnnotationValueField(Annotation::Kind::kInternedString))};

// Where one session's packets go in a trace of several (merged_trace.h); a trace of one session
// has both 0.
struct SessionPlacement {
  uint64_t time_offset_ns = 0;  // added to every time (mod 2^64: a negative offset's bits)
  uint64_t flow_id_offset = 0;  // added to every flow id: flow ids are global within a trace
};

// Encodes packets onto the trace file.
class PacketWriter {
 public:
  PacketWriter(TraceFile& file, const StringInterner& interner, const CallstackInterner& callstacks,
               SessionPlacement placement = {})
      : file_(file), interner_(interner), callstacks_(callstacks), placement_(placement) {}

  // The largest flow id written, offset included (0: none).
  uint64_t max_flow_id() const { return max_flow_id_; }

  // MONOTONIC, BOOTTIME and REALTIME read at the same moment (the start's clock anchor), and
  // MONOTONIC as the trace's clock. REALTIME lets trace_processor and the UI place traces of
  // several ranks and hosts on one timeline.
  void WriteClockSnapshot(Sequence& sequence, const SessionMeta& meta) {
    file_.AppendPacket([&](PacketBuilder& packet) {
      WriteSequenceHeader(packet, sequence);
      ProtoMessage<ClockSnapshotField> snapshot{packet, PacketField::kClockSnapshot};
      AddClock(snapshot, kBuiltinClockMonotonic,
               meta.start_monotonic_ns + placement_.time_offset_ns);
      if (meta.start_boottime_ns != 0)
        AddClock(snapshot, kBuiltinClockBoottime,
                 meta.start_boottime_ns + placement_.time_offset_ns);
      // REALTIME as it was read: it agrees across hosts already, only the other clocks move.
      if (meta.start_anchor && meta.start_anchor->monotonic_ns == meta.start_monotonic_ns)
        AddClock(snapshot, kBuiltinClockRealtime, meta.start_anchor->realtime_ns);
      snapshot.AddUint32(ClockSnapshotField::kPrimaryTraceClock, kBuiltinClockMonotonic);
    });
  }

  // A track that carries no events of its own (a process).
  template <typename Describe>
  void WriteTrackDescriptor(Sequence& sequence, uint64_t uuid, Describe&& describe) {
    file_.AppendPacket([&](PacketBuilder& packet) {
      WriteSequenceHeader(packet, sequence);
      WriteDescriptor(packet, uuid, describe);
    });
  }

  // The first packets of an event track's own sequence: the defaults that let its events leave out
  // their track and clock, with the clock snapshot that declares that clock (trace_processor reads
  // no other field of a packet with a snapshot but defaults and interned data), then the track.
  template <typename Describe>
  void WriteEventTrackDescriptor(Sequence& sequence, uint64_t uuid, Describe&& describe) {
    file_.AppendPacket([&](PacketBuilder& packet) {
      WriteSequenceHeader(packet, sequence);
      WriteEventDefaults(packet, uuid);
      WriteIncrementalClockSnapshot(packet, sequence);
    });
    file_.AppendPacket([&](PacketBuilder& packet) {
      WriteSequenceHeader(packet, sequence);
      WriteDescriptor(packet, uuid, describe);
    });
  }

  // The hot path, a few million packets: each encoded straight into the file's buffer under one
  // reservation that bounds it. Fields in this order: timestamp (and its clock when not the
  // sequence's), sequence id and flags, the strings new to the sequence, the event.
  void WriteTrackEvent(Sequence& sequence, const TrackEventSpec& event) {
    std::array<NewEntry, 2 + 2 * kMaxAnnotations> fresh;
    size_t fresh_count = 0;
    size_t bound = kEventBytes + event.flow_ids.size() * kFlowBytes +
                   event.annotation_count * kAnnotationBytes;
    auto note = [&](InternTable table, uint64_t iid) {
      if (iid == 0 || !sequence.MarkInterned(table, iid)) return;
      const std::string& text = interner_.Text(table, iid);
      fresh[fresh_count++] = NewEntry{table, iid, &text};
      bound += kEntryBytes + text.size();
    };
    note(InternTable::kEventNames, event.name_iid);
    note(InternTable::kCategories, event.category_iid);
    for (size_t i = 0; i < event.annotation_count; ++i) {
      const Annotation& annotation = event.annotations[i];
      note(InternTable::kAnnotationNames, annotation.name_iid);
      if (annotation.kind == Annotation::Kind::kInternedString)
        note(InternTable::kAnnotationStrings, annotation.value);
    }
    // A callstack new to the sequence comes with those of its frames, and of their functions'
    // names, that are new to it too.
    const bool new_callstack = event.callstack_iid != 0 &&
                               sequence.MarkInterned(InternTable::kCallstacks, event.callstack_iid);
    new_frames_.clear();
    new_strings_.clear();
    new_mappings_.clear();
    if (new_callstack) {
      const std::vector<uint64_t>& frames = callstacks_.FramesOf(event.callstack_iid);
      bound += kEntryBytes + frames.size() * 10;
      auto new_string = [&](InternTable table, uint64_t iid) {
        if (!sequence.MarkInterned(table, iid)) return;
        new_strings_.push_back({table, iid, &interner_.Text(table, iid)});
        bound += kEntryBytes + new_strings_.back().text->size();
      };
      for (uint64_t frame_iid : frames) {
        if (!sequence.MarkInterned(InternTable::kFrames, frame_iid)) continue;
        new_frames_.push_back(frame_iid);
        bound += kEntryBytes;
        const CallstackInterner::Frame& frame = callstacks_.FrameOf(frame_iid);
        new_string(InternTable::kFunctionNames, frame.function_iid);
        if (frame.mapping_iid != 0 &&
            sequence.MarkInterned(InternTable::kMappings, frame.mapping_iid)) {
          new_mappings_.push_back(frame.mapping_iid);
          bound += kEntryBytes;
          new_string(InternTable::kMappingPaths, callstacks_.MappingPath(frame.mapping_iid));
        }
      }
    }

    ProtoBuffer& buffer = file_.buffer();
    RawFields out(buffer.Reserve(bound));
    char* packet = out.Open(TraceField::kPacket);
    WriteEventHeader(out, sequence, event.timestamp_ns);
    if (fresh_count != 0 || new_callstack) {
      char* interned = out.Open(PacketField::kInternedData);
      for (size_t i = 0; i < fresh_count; ++i) {
        char* entry = out.Open(InternedDataFieldOf(fresh[i].table));
        out.AddUint64(InternedEntryField::kIid, fresh[i].iid);
        out.AddString(InternedEntryField::kText, *fresh[i].text);
        out.Close(entry);
      }
      if (new_callstack) WriteCallstack(out, event.callstack_iid);
      out.Close(interned);
    }
    char* body = out.Open(PacketField::kTrackEvent);
    out.AddUint64(TrackEventField::kType, static_cast<uint64_t>(event.type));
    if (event.name_iid != 0) out.AddUint64(TrackEventField::kNameIid, event.name_iid);
    if (event.category_iid != 0) out.AddUint64(TrackEventField::kCategoryIids, event.category_iid);
    for (uint64_t flow_id : event.flow_ids)
      out.AddUint64(TrackEventField::kFlowIdsOld, PlacedFlowId(flow_id));
    if (event.terminating_flow_id != 0)
      out.AddUint64(TrackEventField::kTerminatingFlowIdsOld,
                    PlacedFlowId(event.terminating_flow_id));
    if (event.callstack_iid != 0)
      out.AddUint64(TrackEventField::kCallstackIid, event.callstack_iid);
    for (size_t i = 0; i < event.annotation_count; ++i) {
      const Annotation& annotation = event.annotations[i];
      char* encoded = out.Open(TrackEventField::kDebugAnnotations);
      out.AddUint64(DebugAnnotationField::kNameIid, annotation.name_iid);
      const EncodedTag& tag = kAnnotationValueTags[static_cast<size_t>(annotation.kind)];
      out.AddEncoded(tag.bytes, tag.size);
      out.AddVarint(annotation.kind == Annotation::Kind::kBool ? annotation.value != 0
                                                               : annotation.value);
      out.CloseShort(encoded);  // two varints and a tag: 23 bytes at most
    }
    out.Close(body);
    out.Close(packet);
    buffer.Commit(out.end());
    file_.PacketDone();
  }

  // A slice's end: WriteTrackEvent's packet for a kSliceEnd with nothing else set, without its
  // checks for the fields that are not there (four packets in ten are ends).
  void WriteSliceEnd(Sequence& sequence, uint64_t timestamp_ns) {
    ProtoBuffer& buffer = file_.buffer();
    RawFields out(buffer.Reserve(kEventBytes));
    char* packet = out.Open(TraceField::kPacket);
    WriteEventHeader(out, sequence, timestamp_ns);
    char* body = out.Open(PacketField::kTrackEvent);
    out.AddUint64(TrackEventField::kType, static_cast<uint64_t>(TrackEventType::kSliceEnd));
    out.Close(body);
    out.Close(packet);
    buffer.Commit(out.end());
    file_.PacketDone();
  }

  // A counter track's value from `timestamp_ns` on (the track is the sequence's default).
  void WriteCounter(Sequence& sequence, uint64_t timestamp_ns, int64_t value) {
    ProtoBuffer& buffer = file_.buffer();
    RawFields out(buffer.Reserve(kEventBytes));
    char* packet = out.Open(TraceField::kPacket);
    WriteEventHeader(out, sequence, timestamp_ns);
    char* body = out.Open(PacketField::kTrackEvent);
    out.AddUint64(TrackEventField::kType, static_cast<uint64_t>(TrackEventType::kCounter));
    out.AddUint64(TrackEventField::kCounterValue, static_cast<uint64_t>(value));
    out.Close(body);
    out.Close(packet);
    buffer.Commit(out.end());
    file_.PacketDone();
  }

 private:
  // The interned entries of a callstack new to the sequence: the names and paths new to it, the
  // mappings, the frames, then the callstack.
  void WriteCallstack(RawFields& out, uint64_t callstack_iid) {
    for (const NewEntry& text : new_strings_) {
      char* entry = out.Open(InternedDataFieldOf(text.table));
      out.AddUint64(InternedEntryField::kIid, text.iid);
      out.AddString(InternedEntryField::kText, *text.text);
      out.Close(entry);
    }
    for (uint64_t mapping : new_mappings_) {
      char* entry = out.Open(InternedDataField::kMappings);
      out.AddUint64(MappingField::kIid, mapping);
      out.AddUint64(MappingField::kPathStringIds, callstacks_.MappingPath(mapping));
      out.Close(entry);
    }
    for (uint64_t item : new_frames_) {
      const CallstackInterner::Frame& frame = callstacks_.FrameOf(item);
      char* entry = out.Open(InternedDataField::kFrames);
      out.AddUint64(FrameField::kIid, item);
      out.AddUint64(FrameField::kFunctionNameId, frame.function_iid);
      if (frame.mapping_iid != 0) {
        out.AddUint64(FrameField::kMappingId, frame.mapping_iid);
        out.AddUint64(FrameField::kRelPc, frame.rel_pc);
      }
      out.AddUint64(FrameField::kKind, static_cast<uint64_t>(frame.kind));
      out.Close(entry);
    }
    char* entry = out.Open(InternedDataField::kCallstacks);
    out.AddUint64(CallstackField::kIid, callstack_iid);
    for (uint64_t frame : callstacks_.FramesOf(callstack_iid))
      out.AddUint64(CallstackField::kFrameIds, frame);
    out.Close(entry);
  }

  uint64_t PlacedFlowId(uint64_t flow_id) {
    flow_id += placement_.flow_id_offset;
    max_flow_id_ = std::max(max_flow_id_, flow_id);
    return flow_id;
  }

  // An event packet's first fields: its time, then its sequence and the sequence's flags.
  void WriteEventHeader(RawFields& out, Sequence& sequence, uint64_t timestamp_ns) const {
    timestamp_ns += placement_.time_offset_ns;
    // The delta from the sequence's last timestamp; a time before it (no track's events go back in
    // time, but a sequence without the clock has none) is written as an absolute MONOTONIC time,
    // which leaves the incremental clock where it was.
    if (sequence.incremental_clock && timestamp_ns >= sequence.last_timestamp_ns) [[likely]] {
      out.AddUint64(PacketField::kTimestamp, timestamp_ns - sequence.last_timestamp_ns);
      sequence.last_timestamp_ns = timestamp_ns;
    } else {
      out.AddUint64(PacketField::kTimestamp, timestamp_ns);
      out.AddUint64(PacketField::kTimestampClockId, kBuiltinClockMonotonic);
    }
    out.AddEncoded(sequence.id_field(), sequence.id_field_size());
    if (uint32_t flags = sequence.TakePacketFlags(); flags != 0) [[unlikely]]
      out.AddUint64(PacketField::kSequenceFlags, flags);
  }

  static void AddClock(ProtoMessage<ClockSnapshotField>& snapshot, uint32_t clock_id,
                       uint64_t timestamp_ns) {
    ProtoMessage<ClockField> clock{snapshot, ClockSnapshotField::kClocks};
    clock.AddUint32(ClockField::kClockId, clock_id);
    clock.AddUint64(ClockField::kTimestamp, timestamp_ns);
  }

  static void WriteSequenceHeader(PacketBuilder& packet, Sequence& sequence) {
    packet.AddUint32(PacketField::kTrustedPacketSequenceId, sequence.id());
    if (uint32_t flags = sequence.TakePacketFlags(); flags != 0)
      packet.AddUint32(PacketField::kSequenceFlags, flags);
  }

  // kIncrementalClock and MONOTONIC both at 0: the clock is MONOTONIC, sent as deltas (the first
  // one is the absolute time). Each sequence's snapshot is its own series in trace_processor's
  // clock tracker (series are per set of clocks), so the repeated 0 does not go back in time.
  static void WriteIncrementalClockSnapshot(PacketBuilder& packet, Sequence& sequence) {
    ProtoMessage<ClockSnapshotField> snapshot{packet, PacketField::kClockSnapshot};
    {
      ProtoMessage<ClockField> clock{snapshot, ClockSnapshotField::kClocks};
      clock.AddUint32(ClockField::kClockId, kIncrementalClock);
      clock.AddUint64(ClockField::kTimestamp, 0);
      clock.AddBool(ClockField::kIsIncremental, true);
    }
    AddClock(snapshot, kBuiltinClockMonotonic, 0);
    sequence.incremental_clock = true;
    sequence.last_timestamp_ns = 0;
  }

  static void WriteEventDefaults(PacketBuilder& packet, uint64_t track_uuid) {
    ProtoMessage<PacketDefaultsField> defaults{packet, PacketField::kTracePacketDefaults};
    defaults.AddUint32(PacketDefaultsField::kTimestampClockId, kIncrementalClock);
    ProtoMessage<TrackEventDefaultsField> track_event_defaults{
        defaults, PacketDefaultsField::kTrackEventDefaults};
    track_event_defaults.AddUint64(TrackEventDefaultsField::kTrackUuid, track_uuid);
  }

  template <typename Describe>
  static void WriteDescriptor(PacketBuilder& packet, uint64_t uuid, Describe& describe) {
    DescriptorBuilder descriptor{packet, PacketField::kTrackDescriptor};
    descriptor.AddUint64(TrackDescriptorField::kUuid, uuid);
    describe(descriptor);
  }

  // A string a packet carries because its sequence has not carried it yet.
  struct NewEntry {
    InternTable table;
    uint64_t iid;
    const std::string* text;
  };

  // The most a packet's fixed fields take (each varint at its longest, each nested message's length
  // grown), one flow id, one annotation, one interned entry besides its text.
  static constexpr size_t kEventBytes = 128;
  static constexpr size_t kFlowBytes = 12;
  static constexpr size_t kAnnotationBytes = 32;
  static constexpr size_t kEntryBytes = 32;

  TraceFile& file_;
  const StringInterner& interner_;
  const CallstackInterner& callstacks_;
  const SessionPlacement placement_;
  uint64_t max_flow_id_ = 0;
  // What the event being written brings of its callstack (WriteCallstack).
  std::vector<uint64_t> new_frames_, new_mappings_;
  std::vector<NewEntry> new_strings_;
};

}  // namespace gprof::collector::perfetto
