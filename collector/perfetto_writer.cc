#include "perfetto_writer.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu_timeline.h"
#include "gpu_vocabulary.h"
#include "kernel_events.h"
#include "kernel_stack.h"
#include "kernel_vocabulary.h"
#include "output_file.h"
#include "proto_encoder.h"
#include "report_format.h"
#include "session_format.h"
#include "user_symbols.h"

namespace gprof::collector {
namespace {

// Field numbers, from perfetto_trace.proto (shared/schemas): only the fields this writer sets.
enum class TraceField : uint32_t { kPacket = 1 };
enum class PacketField : uint32_t {
  kClockSnapshot = 6,
  kTimestamp = 8,
  kTimestampClockId = 58,
  kTrustedPacketSequenceId = 10,
  kTrackEvent = 11,
  kInternedData = 12,
  kSequenceFlags = 13,
  kTracePacketDefaults = 59,
  kTrackDescriptor = 60,
};
enum class PacketDefaultsField : uint32_t { kTrackEventDefaults = 11, kTimestampClockId = 58 };
enum class TrackEventDefaultsField : uint32_t { kTrackUuid = 11 };
enum class ClockSnapshotField : uint32_t { kClocks = 1, kPrimaryTraceClock = 2 };
enum class ClockField : uint32_t { kClockId = 1, kTimestamp = 2, kIsIncremental = 3 };
enum class TrackDescriptorField : uint32_t {
  kUuid = 1,
  kName = 2,
  kProcess = 3,
  kThread = 4,
  kParentUuid = 5,
};
enum class ProcessDescriptorField : uint32_t { kPid = 1, kCmdline = 2, kProcessName = 6 };
enum class ThreadDescriptorField : uint32_t { kPid = 1, kTid = 2, kThreadName = 5 };
enum class InternedDataField : uint32_t {
  kEventCategories = 1,
  kEventNames = 2,
  kDebugAnnotationNames = 3,
  kDebugAnnotationStringValues = 29,
};
// EventCategory, EventName, DebugAnnotationName and InternedString all hold an iid and its text.
enum class InternedEntryField : uint32_t { kIid = 1, kText = 2 };
enum class TrackEventField : uint32_t {
  kCategoryIids = 3,
  kDebugAnnotations = 4,
  kType = 9,
  kNameIid = 10,
  // Flow ids as varints: the fields trace_processor still reads for older writers, used since
  // the ids here are small (see FlowIds) and fixed64 flow_ids (47, 48) take 8 bytes each.
  kFlowIdsOld = 36,
  kTerminatingFlowIdsOld = 42,
};
enum class DebugAnnotationField : uint32_t {
  kNameIid = 1,
  kBoolValue = 2,
  kUintValue = 3,
  kIntValue = 4,
  kPointerValue = 7,
  kStringValueIid = 17,
};

constexpr uint32_t kBuiltinClockMonotonic = 3;
constexpr uint32_t kBuiltinClockBoottime = 6;
// A sequence-scoped clock (ids 64-127) that counts nanoseconds of MONOTONIC as deltas: each
// packet's timestamp is the time since the sequence's previous timestamped packet, 2-3 bytes
// instead of 7 for an absolute MONOTONIC time.
constexpr uint32_t kIncrementalClock = 64;
constexpr uint32_t kSeqIncrementalStateCleared = 1;
enum class TrackEventType : int32_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3 };

using PacketBuilder = ProtoMessage<PacketField>;
using DescriptorBuilder = ProtoMessage<TrackDescriptorField>;

// The output file. Packets are encoded into a buffer that goes to the file whenever it passes
// kFlushBytes, so memory stays flat however long the session.
class TraceFile {
 public:
  TraceFile(int dir_fd, std::string name, std::string path)
      : dir_fd_(dir_fd), name_(std::move(name)), path_(std::move(path)) {}

  Status Open() {
    auto file = CreateOutputFile(dir_fd_, name_, path_);
    if (!file.ok()) return Status::Error("cannot write Perfetto trace " + file.status().message());
    file_ = std::move(*file);
    return {};
  }

  // Appends one TracePacket; `fill` writes its fields.
  template <typename Fill>
  void AppendPacket(Fill&& fill) {
    {
      ProtoMessage<TraceField> trace{buffer_};
      PacketBuilder packet{trace, TraceField::kPacket};
      fill(packet);
    }
    PacketDone();
  }

  // For a writer that encodes a packet straight into the buffer; PacketDone() after each.
  ProtoBuffer& buffer() { return buffer_; }
  void PacketDone() {
    if (buffer_.size() >= kFlushBytes) Flush();
  }

  Status Close() {
    Flush();
    FILE* file = file_.release();
    if (std::fclose(file) != 0 && write_errno_ == 0) write_errno_ = errno;
    if (write_errno_ != 0) return Failure(write_errno_);
    return {};
  }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;

  void Flush() {
    if (write_errno_ == 0 &&
        std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size()) {
      write_errno_ = errno != 0 ? errno : EIO;
    }
    buffer_.clear();
  }

  Status Failure(int error) const {
    return Status::Error("cannot write Perfetto trace " + path_ + ": " + std::strerror(error));
  }

  int dir_fd_;
  std::string name_;
  std::string path_;
  OutputFile file_{nullptr, &std::fclose};
  ProtoBuffer buffer_;
  int write_errno_ = 0;  // the first write error; later packets are encoded but not written
};

// The string tables of InternedData this writer fills.
enum class InternTable : uint8_t { kEventNames, kCategories, kAnnotationNames, kAnnotationStrings };
constexpr size_t kInternTableCount = 4;

constexpr InternedDataField InternedDataFieldOf(InternTable table) {
  switch (table) {
    case InternTable::kEventNames:
      return InternedDataField::kEventNames;
    case InternTable::kCategories:
      return InternedDataField::kEventCategories;
    case InternTable::kAnnotationNames:
      return InternedDataField::kDebugAnnotationNames;
    case InternTable::kAnnotationStrings:
      return InternedDataField::kDebugAnnotationStringValues;
  }
  return InternedDataField::kEventNames;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

// Assigns iids (from 1) to strings, one numbering per table for the whole trace. A sequence emits
// an entry the first time one of its packets refers to it (see Sequence), so every string travels
// once per sequence, whatever number of events use it.
class StringInterner {
 public:
  uint64_t Intern(InternTable table, std::string_view text) {
    Table& entries = tables_[static_cast<size_t>(table)];
    auto found = entries.iids.find(text);
    if (found != entries.iids.end()) return found->second;
    auto [inserted, unused] = entries.iids.emplace(std::string(text), entries.texts.size() + 1);
    entries.texts.push_back(&inserted->first);
    return inserted->second;
  }

  const std::string& Text(InternTable table, uint64_t iid) const {
    return *tables_[static_cast<size_t>(table)].texts[iid - 1];
  }

 private:
  struct Table {
    std::unordered_map<std::string, uint64_t, StringHash, std::equal_to<>> iids;
    std::vector<const std::string*> texts;  // by iid - 1; the map's nodes do not move
  };
  std::array<Table, kInternTableCount> tables_;
};

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

// Encodes packets onto the trace file.
class PacketWriter {
 public:
  PacketWriter(TraceFile& file, const StringInterner& interner)
      : file_(file), interner_(interner) {}

  // MONOTONIC and BOOTTIME read at the same moment, and MONOTONIC as the trace's clock.
  void WriteClockSnapshot(Sequence& sequence, const SessionMeta& meta) {
    file_.AppendPacket([&](PacketBuilder& packet) {
      WriteSequenceHeader(packet, sequence);
      ProtoMessage<ClockSnapshotField> snapshot{packet, PacketField::kClockSnapshot};
      AddClock(snapshot, kBuiltinClockMonotonic, meta.start_monotonic_ns);
      if (meta.start_boottime_ns != 0)
        AddClock(snapshot, kBuiltinClockBoottime, meta.start_boottime_ns);
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

    ProtoBuffer& buffer = file_.buffer();
    RawFields out(buffer.Reserve(bound));
    char* packet = out.Open(TraceField::kPacket);
    WriteEventHeader(out, sequence, event.timestamp_ns);
    if (fresh_count != 0) {
      char* interned = out.Open(PacketField::kInternedData);
      for (size_t i = 0; i < fresh_count; ++i) {
        char* entry = out.Open(InternedDataFieldOf(fresh[i].table));
        out.AddUint64(InternedEntryField::kIid, fresh[i].iid);
        out.AddString(InternedEntryField::kText, *fresh[i].text);
        out.Close(entry);
      }
      out.Close(interned);
    }
    char* body = out.Open(PacketField::kTrackEvent);
    out.AddUint64(TrackEventField::kType, static_cast<uint64_t>(event.type));
    if (event.name_iid != 0) out.AddUint64(TrackEventField::kNameIid, event.name_iid);
    if (event.category_iid != 0) out.AddUint64(TrackEventField::kCategoryIids, event.category_iid);
    for (uint64_t flow_id : event.flow_ids) out.AddUint64(TrackEventField::kFlowIdsOld, flow_id);
    if (event.terminating_flow_id != 0)
      out.AddUint64(TrackEventField::kTerminatingFlowIdsOld, event.terminating_flow_id);
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

 private:
  // An event packet's first fields: its time, then its sequence and the sequence's flags.
  static void WriteEventHeader(RawFields& out, Sequence& sequence, uint64_t timestamp_ns) {
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
};

// Flow ids, small so that their varints are short, in three ranges that never meet: wake arrows by
// off-CPU interval from 1, then launch arrows (an API call to the GPU work it caused) by GPU
// activity, then the diagnosis's arrows (a waiter to what let it go).
struct FlowIds {
  explicit FlowIds(const Session& session)
      : first_launch(session.off_cpu.size() + 1),
        first_diagnosis(first_launch + session.gpu_activities.size()) {}
  static uint64_t Wake(size_t off_cpu_index) { return off_cpu_index + 1; }
  uint64_t Launch(size_t gpu_index) const { return first_launch + gpu_index; }
  uint64_t first_launch;
  uint64_t first_diagnosis;
};

// Track uuids are derived from the pid/tid they belong to (a GPU stream: its ordinal in the
// trace), so they are stable and never collide. Four bits: 15 is the last kind there is room for.

enum class TrackKind : uint64_t {
  kProcess = 1,
  kThread = 2,
  kOffCpu = 3,
  kFutex = 4,
  kGprofRun = 5,
  kGpuStream = 6,
  kGpuSync = 7,
  kKernel = 8,
  kDiagnosis = 9,
  kWhy = 10,
  kSignals = 11,
};

uint64_t TrackUuid(TrackKind kind, uint32_t id) {
  return (uint64_t{id} << 4) | static_cast<uint64_t>(kind);
}

// A track that carries events. Each has its own sequence, whose defaults name the track, so its
// events do not repeat the track uuid.
struct EventTrack {
  explicit EventTrack(uint32_t sequence_id) : sequence(sequence_id) {}
  Sequence sequence;
  std::vector<uint64_t> open_slice_ends;  // innermost last
};

struct ThreadTracks {
  ThreadTracks(uint32_t tid_, uint32_t sequence_id) : tid(tid_), thread(sequence_id) {}
  uint32_t tid;
  bool in_model = false;  // a thread of Session::threads
  EventTrack thread;
  std::optional<EventTrack> off_cpu;  // made on the thread's first off-CPU interval
  std::optional<EventTrack> futex;    // made on its first futex call
  std::optional<EventTrack> kernel;   // made on its first lock wait, fault, device or memory call
  std::optional<EventTrack> why;      // the diagnosis's flow ends: waits for, and holds for others
  std::optional<EventTrack> signals;  // made on the first signal generated for it
};

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view ProcessName(const Process& process) {
  if (!process.exe.empty()) return BaseName(process.exe);
  if (!process.cmdline.empty()) return BaseName(process.cmdline.front());
  return {};
}

// Every track of the trace, each described when it is made. Child tracks are made when their first
// event comes, so threads without off-CPU or futex records show none.
class TrackRegistry {
 public:
  TrackRegistry(const Session& session, PacketWriter& packets, Sequence& metadata)
      : session_(session), packets_(packets), metadata_(metadata) {}

  // The processes and threads of the model, each thread with its track.
  void DescribeModel() {
    for (const auto& [pid, process] : session_.processes) DescribeProcess(pid);
    for (const auto& [tid, thread] : session_.threads)
      AddThread(thread.pid, tid, thread.name).in_model = true;
  }

  // A thread's tracks; a tid the model's thread list lacks gets tracks on first use, so no event is
  // lost for want of one.
  ThreadTracks& Thread(uint32_t tid, uint32_t pid) {
    if (ThreadTracks* found = Find(tid)) [[likely]]
      return *found;
    return AddThread(pid, tid, "");
  }

  // Whether `tid` is a thread of the model (Session::threads).
  bool InModel(uint32_t tid) {
    const ThreadTracks* found = Find(tid);
    return found != nullptr && found->in_model;
  }

  EventTrack& OffCpu(ThreadTracks& thread) {
    return ChildTrack(thread.off_cpu, thread, TrackKind::kOffCpu, "off-CPU");
  }

  EventTrack& Futex(ThreadTracks& thread) {
    return ChildTrack(thread.futex, thread, TrackKind::kFutex, "futex");
  }

  // The thread's system calls on GPU devices and memory maps, slow page faults and kernel lock
  // waits, nested as they happened (a lock wait in a page fault in an ioctl).
  EventTrack& Kernel(ThreadTracks& thread) {
    return ChildTrack(thread.kernel, thread, TrackKind::kKernel, "kernel");
  }

  EventTrack& Why(ThreadTracks& thread) {
    return ChildTrack(thread.why, thread, TrackKind::kWhy, "why");
  }

  EventTrack& Signals(ThreadTracks& thread) {
    return ChildTrack(thread.signals, thread, TrackKind::kSignals, "signals");
  }

  // The lane of one stream of one GPU of a process: "GPU 0 stream 13".
  EventTrack& GpuStream(uint32_t pid, uint32_t device, uint32_t stream) {
    auto key = std::make_tuple(pid, device, stream);
    auto found = gpu_streams_.find(key);
    if (found != gpu_streams_.end()) return found->second;
    EventTrack& track = gpu_streams_.try_emplace(key, NextSequenceId()).first->second;
    std::string name = "GPU " + std::to_string(device) + " stream " + std::to_string(stream);
    DescribeProcessChild(track, TrackUuid(TrackKind::kGpuStream, gpu_streams_.size()), pid, name);
    return track;
  }

  // A process's host-side waits for its GPU.
  EventTrack& GpuSync(uint32_t pid) {
    auto found = gpu_syncs_.find(pid);
    if (found != gpu_syncs_.end()) return found->second;
    EventTrack& track = gpu_syncs_.try_emplace(pid, NextSequenceId()).first->second;
    DescribeProcessChild(track, TrackUuid(TrackKind::kGpuSync, pid), pid, "GPU synchronization");
    return track;
  }

  // The global track of what gprof-run has to say about the recording itself.
  // Lane `lane` of the diagnosis: freezes and GPU gaps overlap, and a track's slices must nest.
  EventTrack& Diagnosis(uint32_t lane) {
    auto [entry, inserted] = diagnosis_lanes_.try_emplace(lane, NextSequenceId());
    if (inserted) {
      uint64_t uuid = TrackUuid(TrackKind::kDiagnosis, lane);
      std::string name = lane == 0 ? "diagnosis" : "diagnosis " + std::to_string(lane + 1);
      packets_.WriteEventTrackDescriptor(entry->second.sequence, uuid,
                                         [&](DescriptorBuilder& descriptor) {
                                           descriptor.AddString(TrackDescriptorField::kName, name);
                                         });
    }
    return entry->second;
  }

  EventTrack& GprofRun() {
    if (!gprof_run_) {
      uint64_t uuid = TrackUuid(TrackKind::kGprofRun, 0);
      gprof_run_.emplace(NextSequenceId());
      packets_.WriteEventTrackDescriptor(
          gprof_run_->sequence, uuid, [](DescriptorBuilder& descriptor) {
            descriptor.AddString(TrackDescriptorField::kName, "gprof-run");
          });
    }
    return *gprof_run_;
  }

 private:
  // The tracks of `tid`, or null: through a small table of threads asked for before, as each
  // event asks for its thread's tracks, and a session's events name a few threads over and over.
  ThreadTracks* Find(uint32_t tid) {
    RecentThread& recent = recent_threads_[tid % kRecentThreads];
    if (recent.tracks != nullptr && recent.tid == tid) [[likely]]
      return recent.tracks;
    auto found = threads_.find(tid);
    if (found == threads_.end()) return nullptr;
    recent = {tid, &found->second};
    return &found->second;
  }

  uint32_t NextSequenceId() { return next_sequence_id_++; }

  void DescribeProcess(uint32_t pid) {
    if (!described_pids_.insert(pid).second) return;
    auto process = session_.processes.find(pid);
    packets_.WriteTrackDescriptor(
        metadata_, TrackUuid(TrackKind::kProcess, pid), [&](DescriptorBuilder& descriptor) {
          ProtoMessage<ProcessDescriptorField> encoded{descriptor, TrackDescriptorField::kProcess};
          encoded.AddInt32(ProcessDescriptorField::kPid, static_cast<int32_t>(pid));
          if (process == session_.processes.end()) return;
          for (const std::string& argument : process->second.cmdline) {
            encoded.AddString(ProcessDescriptorField::kCmdline, argument);
          }
          std::string_view name = ProcessName(process->second);
          if (!name.empty()) encoded.AddString(ProcessDescriptorField::kProcessName, name);
        });
  }

  ThreadTracks& AddThread(uint32_t pid, uint32_t tid, const std::string& name) {
    DescribeProcess(pid);
    auto [entry, unused] = threads_.try_emplace(tid, tid, NextSequenceId());
    ThreadTracks& thread = entry->second;
    uint64_t uuid = TrackUuid(TrackKind::kThread, tid);
    packets_.WriteEventTrackDescriptor(
        thread.thread.sequence, uuid, [&](DescriptorBuilder& descriptor) {
          descriptor.AddUint64(TrackDescriptorField::kParentUuid,
                               TrackUuid(TrackKind::kProcess, pid));
          ProtoMessage<ThreadDescriptorField> encoded{descriptor, TrackDescriptorField::kThread};
          encoded.AddInt32(ThreadDescriptorField::kPid, static_cast<int32_t>(pid));
          encoded.AddInt64(ThreadDescriptorField::kTid, tid);
          if (!name.empty()) encoded.AddString(ThreadDescriptorField::kThreadName, name);
        });
    return thread;
  }

  void DescribeProcessChild(EventTrack& track, uint64_t uuid, uint32_t pid,
                            const std::string& name) {
    DescribeProcess(pid);
    packets_.WriteEventTrackDescriptor(track.sequence, uuid, [&](DescriptorBuilder& descriptor) {
      descriptor.AddUint64(TrackDescriptorField::kParentUuid, TrackUuid(TrackKind::kProcess, pid));
      descriptor.AddString(TrackDescriptorField::kName, name);
    });
  }

  EventTrack& ChildTrack(std::optional<EventTrack>& track, const ThreadTracks& thread,
                         TrackKind kind, const char* name) {
    if (!track) {
      track.emplace(NextSequenceId());
      uint64_t uuid = TrackUuid(kind, thread.tid);
      packets_.WriteEventTrackDescriptor(track->sequence, uuid, [&](DescriptorBuilder& descriptor) {
        descriptor.AddUint64(TrackDescriptorField::kParentUuid,
                             TrackUuid(TrackKind::kThread, thread.tid));
        descriptor.AddString(TrackDescriptorField::kName, name);
      });
    }
    return *track;
  }

  const Session& session_;
  PacketWriter& packets_;
  Sequence& metadata_;  // the sequence of packets that need no track: clock snapshot, processes
  uint32_t next_sequence_id_ = metadata_.id() + 1;
  std::optional<EventTrack> gprof_run_;
  std::map<uint32_t, EventTrack> diagnosis_lanes_;
  std::unordered_map<uint32_t, ThreadTracks> threads_;  // by tid; elements never move
  struct RecentThread {
    uint32_t tid = 0;
    ThreadTracks* tracks = nullptr;
  };
  static constexpr size_t kRecentThreads = 256;
  std::array<RecentThread, kRecentThreads> recent_threads_{};  // by tid % kRecentThreads
  std::unordered_set<uint32_t> described_pids_;
  // By pid, device and stream; elements never move.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, EventTrack> gpu_streams_;
  std::unordered_map<uint32_t, EventTrack> gpu_syncs_;  // by pid
};

// The fixed strings of the trace: categories and annotation names, interned once.
struct Vocabulary {
  explicit Vocabulary(StringInterner& interner)
      : cuda(interner.Intern(InternTable::kCategories, "cuda")),
        sched(interner.Intern(InternTable::kCategories, "sched")),
        futex(interner.Intern(InternTable::kCategories, "futex")),
        gprof_run(interner.Intern(InternTable::kCategories, "gprof-run")),
        gpu(interner.Intern(InternTable::kCategories, "gpu")),
        kernel(interner.Intern(InternTable::kCategories, "kernel")),
        signal(interner.Intern(InternTable::kCategories, "signal")),
        stream(Name(interner, "stream")),
        correlation_id(Name(interner, "correlation_id")),
        return_code(Name(interner, "return_code")),
        recorded_duration_ns(Name(interner, "recorded_duration_ns")),
        state(Name(interner, "state")),
        kernel_stack(Name(interner, "kernel_stack")),
        still_off_cpu_at_end(Name(interner, "still_off_cpu_at_end")),
        waker(Name(interner, "waker")),
        waker_kernel_stack(Name(interner, "waker_kernel_stack")),
        op(Name(interner, "op")),
        uaddr(Name(interner, "uaddr")),
        uaddr2(Name(interner, "uaddr2")),
        val(Name(interner, "val")),
        timeout_ns(Name(interner, "timeout_ns")),
        return_value(Name(interner, "return")),
        count(Name(interner, "count")),
        file(Name(interner, "file")),
        offset(Name(interner, "offset")),
        grid(Name(interner, "grid")),
        block(Name(interner, "block")),
        registers_per_thread(Name(interner, "registers_per_thread")),
        shared_memory_bytes(Name(interner, "shared_memory_bytes")),
        graph_id(Name(interner, "graph_id")),
        graph_node_id(Name(interner, "graph_node_id")),
        bytes(Name(interner, "bytes")),
        from(Name(interner, "from")),
        to(Name(interner, "to")),
        async(Name(interner, "async")),
        value(Name(interner, "value")),
        memory(Name(interner, "memory")),
        sync_type(Name(interner, "type")),
        event(Name(interner, "event")),
        overlapped_next_ns(Name(interner, "overlapped_next_ns")),
        user_stack(Name(interner, "user_stack")),
        waker_user_stack(Name(interner, "waker_user_stack")),
        location(Name(interner, "location")),
        uaddrs(Name(interner, "uaddrs")),
        lock(Name(interner, "lock")),
        lock_kind(Name(interner, "lock_kind")),
        owner(Name(interner, "owner")),
        owner_inferred(Name(interner, "owner_inferred")),
        explanation(Name(interner, "explanation")),
        cause(Name(interner, "cause")),
        cause_rank(Name(interner, "cause_rank")),
        fd(Name(interner, "fd")),
        request(Name(interner, "request")),
        length(Name(interner, "length")),
        address(Name(interner, "address")),
        prot(Name(interner, "prot")),
        flags(Name(interner, "flags")),
        major(Name(interner, "major")),
        outcome(Name(interner, "outcome")) {}

  static uint64_t Name(StringInterner& interner, std::string_view name) {
    return interner.Intern(InternTable::kAnnotationNames, name);
  }

  // Categories.
  uint64_t cuda, sched, futex, gprof_run, gpu, kernel, signal;
  // Annotation names.
  uint64_t stream, correlation_id, return_code, recorded_duration_ns;
  uint64_t state, kernel_stack, still_off_cpu_at_end, waker, waker_kernel_stack;
  uint64_t op, uaddr, uaddr2, val, timeout_ns, return_value;
  uint64_t count, file, offset;
  uint64_t grid, block, registers_per_thread, shared_memory_bytes, graph_id, graph_node_id;
  uint64_t bytes, from, to, async, value, memory, sync_type, event, overlapped_next_ns;
  uint64_t user_stack, waker_user_stack, location, uaddrs;
  uint64_t lock, lock_kind, owner, owner_inferred, explanation, cause, cause_rank, fd, request,
      length, address, prot, flags, major, outcome;
};

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// Innermost first: "futex_wait_queue+0x5c <- futex_wait+0xf2 <- do_futex+0x106"
std::string StackText(const std::vector<std::string>& frames) {
  std::string text;
  for (const std::string& frame : frames) {
    if (!text.empty()) text += " <- ";
    text += frame;
  }
  return text;
}

const char* StateLetter(OffCpuState state) {
  switch (state) {
    case OffCpuState::kRunnable:
      return "R";
    case OffCpuState::kSleeping:
      return "S";
    case OffCpuState::kDiskSleep:
      return "D";
    case OffCpuState::kOther:
      return "?";
  }
  return "?";
}

// The wait's name when the stack names no function.
const char* StateWord(OffCpuState state) {
  return state == OffCpuState::kRunnable ? "preempted" : StateName(state);
}

std::string StateText(const OffCpuInterval& interval) {
  return std::string(StateLetter(interval.state())) + " (" + StateWord(interval.state()) +
         ", prev_state " + Hex(interval.raw_state) + ")";
}

// Names and annotation strings of the off-CPU track and the wake instants, computed once per kernel
// stack, state or thread rather than per event.
class SchedulerNames {
 public:
  SchedulerNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner) {}

  // "S futex_wait_queue", "D folio_wait_bit_common", "R preempted".
  uint64_t WaitName(const OffCpuInterval& interval) {
    OffCpuState state = interval.state();
    uint64_t& iid = Stack(interval.kstack_id).wait_name_iids[static_cast<size_t>(state)];
    if (iid == 0)
      iid = interner_.Intern(InternTable::kEventNames, WaitNameText(interval.kstack_id, state));
    return iid;
  }

  uint64_t State(const OffCpuInterval& interval) {
    auto [entry, inserted] = state_iids_.try_emplace(interval.raw_state, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kAnnotationStrings, StateText(interval));
    return entry->second;
  }

  // 0 when the interval has no recorded stack.
  uint64_t StackTextIid(int32_t stack_id) { return Stack(stack_id).text_iid; }

  // "runnable (woken by pt_data_pin (101))"
  uint64_t RunnableName(const OffCpuInterval& interval) {
    return Waker(interval).runnable_name_iid;
  }

  // "pt_data_pin (101)"
  uint64_t WakerLabel(const OffCpuInterval& interval) { return Waker(interval).label_iid; }

  // "wake python (100)", on the waker's track.
  uint64_t WakeName(uint32_t woken_tid) {
    auto [entry, inserted] = wake_names_.try_emplace(woken_tid, 0);
    if (inserted) {
      entry->second =
          interner_.Intern(InternTable::kEventNames, "wake " + session_.ThreadLabel(woken_tid));
    }
    return entry->second;
  }

 private:
  struct StackNames {
    uint64_t text_iid = 0;
    std::string blocking_function;
    std::array<uint64_t, 4> wait_name_iids{};  // by OffCpuState
  };

  struct WakerNames {
    uint32_t comm = 0;  // the kernel's name of the waker these were made for (Session::comms)
    uint64_t label_iid = 0;
    uint64_t runnable_name_iid = 0;
  };

  // By waker tid; remade when the kernel names that tid differently (a tid reused outside the
  // tree).
  const WakerNames& Waker(const OffCpuInterval& interval) {
    auto [entry, inserted] = wakers_.try_emplace(interval.waker_tid);
    WakerNames& names = entry->second;
    if (inserted || names.comm != interval.waker_comm) {
      std::string label = WakerText(interval);
      names.comm = interval.waker_comm;
      names.label_iid = interner_.Intern(InternTable::kAnnotationStrings, label);
      names.runnable_name_iid =
          interner_.Intern(InternTable::kEventNames, "runnable (woken by " + label + ")");
    }
    return names;
  }

  StackNames& Stack(int32_t stack_id) {
    // Asked three times an off-CPU interval: ids of the kernel's stack map (its slots, from 0)
    // are looked up in a table, others in the map that holds them all.
    bool small = stack_id >= 0 && stack_id < kStackTableSize;
    if (small && static_cast<size_t>(stack_id) < stack_table_.size() &&
        stack_table_[static_cast<size_t>(stack_id)] != nullptr) {
      return *stack_table_[static_cast<size_t>(stack_id)];
    }
    auto [entry, inserted] = stacks_.try_emplace(stack_id);
    if (small) {
      if (static_cast<size_t>(stack_id) >= stack_table_.size())
        stack_table_.resize(static_cast<size_t>(stack_id) + 1, nullptr);
      stack_table_[static_cast<size_t>(stack_id)] = &entry->second;
    }
    if (inserted) {
      std::vector<std::string> frames = session_.KernelStack(stack_id);
      if (!frames.empty())
        entry->second.text_iid =
            interner_.Intern(InternTable::kAnnotationStrings, StackText(frames));
      entry->second.blocking_function = BlockingFunction(frames);
    }
    return entry->second;
  }

  std::string WaitNameText(int32_t stack_id, OffCpuState state) {
    std::string name = StateLetter(state);
    const std::string& function = Stack(stack_id).blocking_function;
    name += ' ';
    name += (state == OffCpuState::kRunnable || function.empty()) ? StateWord(state) : function;
    return name;
  }

  // The waker as a thread of the model, or as the kernel named it when it is outside the tree.
  std::string WakerText(const OffCpuInterval& interval) const {
    if (interval.waker_tid == 0) return "interrupt/idle";
    if (session_.threads.count(interval.waker_tid) != 0)
      return session_.ThreadLabel(interval.waker_tid);
    std::string tid = std::to_string(interval.waker_tid);
    const std::string& comm = session_.WakerComm(interval);
    return comm.empty() ? tid : comm + " (" + tid + ")";
  }

  const Session& session_;
  StringInterner& interner_;
  static constexpr int32_t kStackTableSize = 1 << 20;
  std::unordered_map<int32_t, StackNames> stacks_;     // its nodes do not move
  std::vector<StackNames*> stack_table_;               // by id below kStackTableSize; null: not yet
  std::unordered_map<uint32_t, uint64_t> state_iids_;  // by raw prev_state
  std::unordered_map<uint32_t, WakerNames> wakers_;
  std::unordered_map<uint32_t, uint64_t> wake_names_;  // by woken tid
};

const char* FutexCommandName(uint32_t command) {
  static constexpr const char* kNames[] = {
      "FUTEX_WAIT",           "FUTEX_WAKE",        "FUTEX_FD",          "FUTEX_REQUEUE",
      "FUTEX_CMP_REQUEUE",    "FUTEX_WAKE_OP",     "FUTEX_LOCK_PI",     "FUTEX_UNLOCK_PI",
      "FUTEX_TRYLOCK_PI",     "FUTEX_WAIT_BITSET", "FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI",
      "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2"};
  return command < std::size(kNames) ? kNames[command] : nullptr;
}

std::string FutexCommandText(const FutexCall& call) {
  const char* name = FutexCommandName(call.command());
  return name != nullptr ? name : "FUTEX_" + std::to_string(call.command());
}

// "FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG"
std::string FutexOpText(const FutexCall& call) {
  constexpr uint32_t kPrivateFlag = 128, kClockRealtime = 256;
  std::string text = FutexCommandText(call);
  if (call.op & kPrivateFlag) text += "|FUTEX_PRIVATE_FLAG";
  if (call.op & kClockRealtime) text += "|FUTEX_CLOCK_REALTIME";
  return text;
}

// Names of futex slices, made once per operation and address: a lock's waits and wakes repeat them.
class FutexNames {
 public:
  explicit FutexNames(StringInterner& interner) : interner_(interner) {}

  // "FUTEX_WAIT_BITSET 0x7f1234"
  uint64_t SliceName(const FutexCall& call) {
    // A table of the names asked for before first: a lock's calls come again and again.
    // (Waits and wakes on one word alternate: both have their place.)
    RecentName& recent = recent_names_[((call.uaddr >> 2) + call.command() * 97) % kRecentNames];
    if (recent.iid != 0 && recent.uaddr == call.uaddr && recent.command == call.command())
        [[likely]]
      return recent.iid;
    auto [entry, inserted] = slice_names_.try_emplace({call.command(), call.uaddr}, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kEventNames,
                                       FutexCommandText(call) + " " + Hex(call.uaddr));
    recent = {call.uaddr, call.command(), entry->second};
    return entry->second;
  }

  uint64_t OpText(const FutexCall& call) {
    auto [entry, inserted] = op_texts_.try_emplace(call.op, 0);
    if (inserted)
      entry->second = interner_.Intern(InternTable::kAnnotationStrings, FutexOpText(call));
    return entry->second;
  }

 private:
  using CommandAndAddress = std::pair<uint32_t, uint64_t>;
  struct CommandAndAddressHash {
    size_t operator()(const CommandAndAddress& key) const {
      return std::hash<uint64_t>{}(key.second * 31 + key.first);
    }
  };

  struct RecentName {
    uint64_t uaddr = 0;
    uint32_t command = 0;
    uint64_t iid = 0;  // 0: none yet
  };
  static constexpr size_t kRecentNames = 256;

  StringInterner& interner_;
  std::unordered_map<CommandAndAddress, uint64_t, CommandAndAddressHash> slice_names_;
  std::array<RecentName, kRecentNames> recent_names_{};  // by address and command
  std::unordered_map<uint32_t, uint64_t> op_texts_;      // by op, flags included
};

// User stacks as annotation strings, symbolized once per stack and address space: a thread that
// waits in one place over and over has one stack.
class UserStackNames {
 public:
  UserStackNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner) {}

  // Stack `stack_id` of process `pid` at `time_ns`; 0 when it is not known.
  uint64_t TextIid(uint32_t pid, int32_t stack_id, uint64_t time_ns) {
    if (stack_id < 0) return 0;
    auto process = session_.processes.find(pid);
    std::pair<int64_t, size_t> epoch{-1, 0};
    if (process != session_.processes.end()) epoch = process->second.MapsEpoch(time_ns);
    auto [entry, inserted] = iids_.try_emplace({pid, stack_id, epoch.first, epoch.second}, 0);
    if (inserted) {
      std::vector<std::string> frames = UserStackFrames(session_, pid, stack_id, time_ns);
      if (!frames.empty())
        entry->second = interner_.Intern(InternTable::kAnnotationStrings,
                                         StackText(CollapseFrameRepeats(frames)));
    }
    return entry->second;
  }

 private:
  const Session& session_;
  StringInterner& interner_;
  // By process, stack id and the maps epoch (Process::MapsEpoch) that names its addresses.
  std::map<std::tuple<uint32_t, int32_t, int64_t, size_t>, uint64_t> iids_;
};

// Names of the kernel track's slices and of futex_waitv calls. They are made per event (these
// events are far fewer than scheduler events) and interned, so each text travels once.
class KernelNames {
 public:
  KernelNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner) {}

  // "mmap_lock (held by trainer (13))", "mutex 0xffff888104a0c1e8"
  uint64_t LockName(const LockWait& lock) {
    std::string name = LockText(lock);
    std::string owner = LockOwnerLabel(session_, lock);
    if (!owner.empty()) name += " (held by " + owner + ")";
    return Name(name);
  }

  // "ioctl nvidiactl 0xc020462a", "poll nvidia0", "epoll_wait", "mmap nvidia0"
  uint64_t DeviceName(const DeviceWait& wait) {
    std::string name = DeviceCallName(wait.call);
    if (!wait.device.empty()) name += " " + wait.device;
    if (wait.call == DeviceCall::kIoctl) name += " " + Hex(wait.request);
    return Name(name);
  }

  // "page fault in libtorch_cuda.so", "major page fault in anonymous memory"
  uint64_t PageFaultName(const PageFault& fault, const UserLocation& location) {
    std::string name = fault.is_major() ? "major page fault" : "page fault";
    if (!location.module.empty()) name += " in " + location.module;
    return Name(name);
  }

  // "munmap 77.0 MiB", "mremap 1.0 MiB to 2.0 MiB"
  uint64_t MemoryMapName(const MemoryMapCall& call) {
    return Name(std::string(MemorySyscallName(call.syscall)) + " " + MemoryMapSize(call));
  }

  // "futex_waitv 0x7f1234", "futex_waitv 0x7f1234 (+2)"
  uint64_t FutexWaitvName(const FutexWaitvCall& call) {
    std::string name = "futex_waitv";
    if (!call.addresses.empty()) name += " " + Hex(call.addresses.front());
    if (call.count > 1) name += " (+" + std::to_string(call.count - 1) + ")";
    return Name(name);
  }

  // "0x7f1234, 0x7f5678": the words a futex_waitv call recorded.
  uint64_t AddressList(const std::vector<uint64_t>& addresses) {
    std::string text;
    for (uint64_t address : addresses) text += (text.empty() ? "" : ", ") + Hex(address);
    return Text(text);
  }

  uint64_t Text(std::string_view text) {
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

 private:
  uint64_t Name(const std::string& name) {
    return interner_.Intern(InternTable::kEventNames, name);
  }

  const Session& session_;
  StringInterner& interner_;
};

// Names and annotation strings of GPU slices: kernel names made once per kernel, the rest interned
// from their few values.
class GpuNames {
 public:
  GpuNames(const Session& session, StringInterner& interner)
      : session_(session), interner_(interner), kernel_name_iids_(session.kernel_names.size(), 0) {}

  // The kernel's demangled name, "Memcpy HtoD", "Memset", "cudaStreamSynchronize wait".
  uint64_t SliceName(const GpuActivity& activity) {
    const auto* kernel = std::get_if<GpuKernel>(&activity.detail);
    if (kernel == nullptr) {
      return interner_.Intern(InternTable::kEventNames, GpuActivityName(session_, activity));
    }
    if (kernel->name_index >= kernel_name_iids_.size()) {
      return interner_.Intern(InternTable::kEventNames,
                              "kernel#" + std::to_string(kernel->name_index));
    }
    uint64_t& iid = kernel_name_iids_[kernel->name_index];
    if (iid == 0) iid = interner_.Intern(InternTable::kEventNames, session_.KernelName(*kernel));
    return iid;
  }

  // "(128, 1, 1)"
  uint64_t Dimensions(const std::array<int32_t, 3>& dimensions) {
    char text[48];
    std::snprintf(text, sizeof(text), "(%d, %d, %d)", dimensions[0], dimensions[1], dimensions[2]);
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

  uint64_t Text(std::string_view text) {
    return interner_.Intern(InternTable::kAnnotationStrings, text);
  }

 private:
  const Session& session_;
  StringInterner& interner_;
  std::vector<uint64_t> kernel_name_iids_;  // by Session::kernel_names index; 0: not yet
};

// Where each GPU activity's slice ends on its stream's lane, for those that do not end at their
// recorded end: a stream runs one thing at a time, so one that overlaps the next on its stream is
// inconsistent data, and is cut where the next starts to keep the lane a sequence. By index into
// Session::gpu_activities.
std::unordered_map<size_t, uint64_t> ClipOverlapsOnStreams(const Session& session);

// Events that wait for their time, the next to run first out. Each has a key(), unique; the
// smallest runs first. Usually a handful wait at once (about threads x nesting depth): they are
// kept in a vector sorted largest key first, where a new one takes its place after a short scan
// from the end and the next is taken off the end, with fewer mispredicted branches than a heap's.
// Past kSortedMost (many threads blocked at once) they become a heap, so no session makes it
// quadratic.
template <typename Item>
class PendingQueue {
 public:
  bool empty() const { return items_.empty(); }
  const Item& next() const { return heap_ ? items_.front() : items_.back(); }

  void Push(const Item& item) {
    if (!heap_ && items_.size() == kSortedMost) {
      std::make_heap(items_.begin(), items_.end(), RunsLater{});
      heap_ = true;
    }
    if (heap_) {
      items_.push_back(item);
      std::push_heap(items_.begin(), items_.end(), RunsLater{});
      return;
    }
    items_.push_back(item);
    size_t position = items_.size() - 1;
    for (; position != 0 && items_[position - 1].key() < item.key(); --position)
      items_[position] = items_[position - 1];
    items_[position] = item;
  }

  Item Pop() {
    if (heap_) {
      std::pop_heap(items_.begin(), items_.end(), RunsLater{});
      Item next = items_.back();
      items_.pop_back();
      if (items_.size() == kSortedMost / 2) {
        std::sort(items_.begin(), items_.end(), RunsLater{});  // largest key first
        heap_ = false;
      }
      return next;
    }
    Item next = items_.back();
    items_.pop_back();
    return next;
  }

 private:
  static constexpr size_t kSortedMost = 64;
  struct RunsLater {
    bool operator()(const Item& a, const Item& b) const { return a.key() > b.key(); }
  };
  std::vector<Item> items_;
  bool heap_ = false;
};

// Writes the events of the record vectors in one pass, in global timestamp order, so every
// track's events are in order. What a record causes later (a slice end, the runnable half of an
// off-CPU interval, a wake instant) waits in a queue that holds only what is open at the moment
// (about threads x nesting depth), never the session.
class TimelineWriter {
 public:
  TimelineWriter(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                 StringInterner& interner, const Vocabulary& vocabulary)
      : session_(session),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary),
        scheduler_names_(session, interner),
        futex_names_(interner),
        user_stacks_(session, interner),
        kernel_names_(session, interner),
        gpu_names_(session, interner),
        correlation_(session),
        flow_ids_(session),
        clipped_gpu_ends_(ClipOverlapsOnStreams(session)),
        api_name_iids_(session.api_names.size(), 0) {}

  void Write();

 private:
  // What a queued event does. At one timestamp, ends come first (innermost first), then instants,
  // then begins: a slice that ends where the next starts closes before it, and a flow starts before
  // the event it ends in.
  enum class Action : uint8_t { kEndSlice, kWakeInstant, kBeginRunnable };

  struct Pending {
    // What runs first has the smallest key: the time, then the action, then the later queued
    // (of two equal ends, the later queued is the inner slice), in one integer compared at once.
    // Kept as two words: a 16-byte load of what was just stored as two 8-byte ones stalls.
    uint64_t time;
    uint64_t action_and_order;
    EventTrack* track;     // kEndSlice, kBeginRunnable
    size_t off_cpu_index;  // kWakeInstant, kBeginRunnable
    unsigned __int128 key() const {
      return (static_cast<unsigned __int128>(time) << 64) | action_and_order;
    }
    uint64_t time_ns() const { return time; }
    Action action() const { return static_cast<Action>(action_and_order >> 62); }
  };

  static constexpr uint64_t kOrderMask = (uint64_t{1} << 62) - 1;

  void Schedule(uint64_t time_ns, Action action, EventTrack* track, size_t off_cpu_index) {
    uint64_t low = (uint64_t{static_cast<uint8_t>(action)} << 62) | (kOrderMask - next_order_++);
    pending_.Push(Pending{time_ns, low, track, off_cpu_index});
  }

  void RunPendingUpTo(uint64_t time_ns);
  void Run(const Pending& pending);
  void BeginApiCall(const ApiCall& call);
  void BeginOffCpu(size_t index);
  void BeginRunnable(EventTrack& track, size_t index);
  void WriteWakeInstant(size_t index);
  void BeginFutex(const FutexCall& call);
  void BeginFutexWaitv(const FutexWaitvCall& call);
  void BeginMemoryMapCall(const MemoryMapCall& call);
  void BeginDeviceWait(const DeviceWait& wait);
  void BeginPageFault(const PageFault& fault);
  void BeginLockWait(const LockWait& lock);
  EventTrack& KernelTrack(uint32_t tid, uint32_t pid) {
    return tracks_.Kernel(tracks_.Thread(tid, pid));
  }
  void BeginGpuActivity(size_t index);
  void AnnotateGpuDetail(TrackEventSpec& event, const GpuActivity& activity);
  void BeginSlice(EventTrack& track, TrackEventSpec& event, uint64_t end_ns);
  void EndSlice(EventTrack& track, uint64_t time_ns);

  uint64_t ApiNameIid(uint32_t name_index);
  uint64_t StreamIid(uint64_t stream);
  bool HasWakeFlow(const OffCpuInterval& interval);
  const ApiCall* LaunchFlowOrigin(const GpuActivity& activity) const;
  static uint64_t WakeTime(const OffCpuInterval& interval);
  size_t IndexOf(const GpuActivity& activity) const {
    return static_cast<size_t>(&activity - session_.gpu_activities.data());
  }

  const Session& session_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
  SchedulerNames scheduler_names_;
  FutexNames futex_names_;
  UserStackNames user_stacks_;
  KernelNames kernel_names_;
  GpuNames gpu_names_;
  GpuCorrelation correlation_;
  FlowIds flow_ids_;
  std::unordered_map<size_t, uint64_t> clipped_gpu_ends_;
  std::vector<uint64_t> launch_flow_ids_;               // of the API call being written
  std::vector<uint64_t> api_name_iids_;                 // by Session::api_names index; 0: not yet
  std::unordered_map<uint64_t, uint64_t> stream_iids_;  // by stream handle
  PendingQueue<Pending> pending_;
  uint64_t next_order_ = 0;
};

uint64_t StartOf(const ApiCall& call) { return call.enter_ns; }
uint64_t EndOf(const ApiCall& call) { return call.exit_ns; }
template <typename Record>
uint64_t StartOf(const Record& record) {
  return record.start_ns;
}
template <typename Record>
uint64_t EndOf(const Record& record) {
  return record.end_ns;
}

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// Walks a vector sorted by start time. Records that start in the same nanosecond come longest
// first, so that of two nested slices the outer one opens first.
template <typename Record>
class RecordCursor {
 public:
  explicit RecordCursor(const RecordVector<Record>& records) : records_(records) { LoadGroup(); }

  uint64_t next_start() const { return next_start_; }

  size_t Take() {
    size_t index = group_.back();
    group_.pop_back();
    if (group_.empty()) LoadGroup();
    return index;
  }

 private:
  // The next run of records with one start time, ordered so that the longest is at the back.
  void LoadGroup() {
    if (group_end_ == records_.size()) {
      next_start_ = kNever;
      return;
    }
    next_start_ = StartOf(records_[group_end_]);
    // The records are read once, in order, in between the other vectors' and the trace's bytes.
    __builtin_prefetch(&records_[std::min(group_end_ + kPrefetchAhead, records_.size() - 1)]);
    group_.push_back(group_end_++);
    // Most runs are one record long: nothing to order.
    if (group_end_ == records_.size() || StartOf(records_[group_end_]) != next_start_) return;
    while (group_end_ < records_.size() && StartOf(records_[group_end_]) == next_start_)
      group_.push_back(group_end_++);
    std::sort(group_.begin(), group_.end(), [&](size_t a, size_t b) {
      uint64_t end_a = EndOf(records_[a]), end_b = EndOf(records_[b]);
      return end_a != end_b ? end_a < end_b : a > b;
    });
  }

  static constexpr size_t kPrefetchAhead = 8;
  const RecordVector<Record>& records_;
  size_t group_end_ = 0;
  uint64_t next_start_ = kNever;  // of the records at the back of group_
  std::vector<size_t> group_;
};

std::unordered_map<size_t, uint64_t> ClipOverlapsOnStreams(const Session& session) {
  std::unordered_map<size_t, uint64_t> clipped;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t> last_on_stream;
  // In the order the writer begins them, so that each is compared with the slice before it.
  RecordCursor cursor(session.gpu_activities);
  while (cursor.next_start() != kNever) {
    size_t index = cursor.Take();
    const GpuActivity& activity = session.gpu_activities[index];
    if (!activity.occupies_gpu()) continue;
    auto [last, first_on_stream] = last_on_stream.try_emplace(
        std::make_tuple(activity.pid, activity.device_id, activity.stream_id), index);
    if (first_on_stream) continue;
    size_t previous = std::exchange(last->second, index);
    auto previous_end = clipped.find(previous);
    uint64_t end = previous_end != clipped.end() ? previous_end->second
                                                 : session.gpu_activities[previous].end_ns;
    if (activity.start_ns < end) clipped[previous] = activity.start_ns;
  }
  return clipped;
}

void TimelineWriter::Write() {
  RecordCursor api_calls(session_.api_calls);
  RecordCursor off_cpu(session_.off_cpu);
  RecordCursor futex_calls(session_.futex_calls);
  RecordCursor futex_waitv_calls(session_.futex_waitv_calls);
  RecordCursor memory_map_calls(session_.memory_map_calls);
  RecordCursor device_waits(session_.device_waits);
  RecordCursor page_faults(session_.page_faults);
  RecordCursor lock_waits(session_.lock_waits);
  RecordCursor gpu_activities(session_.gpu_activities);
  while (true) {
    // Pairwise, without branches: which vector comes next changes from one record to the next.
    uint64_t next =
        std::min(std::min(std::min(api_calls.next_start(), off_cpu.next_start()),
                          std::min(futex_calls.next_start(), futex_waitv_calls.next_start())),
                 std::min(std::min(memory_map_calls.next_start(), device_waits.next_start()),
                          std::min(std::min(page_faults.next_start(), lock_waits.next_start()),
                                   gpu_activities.next_start())));
    RunPendingUpTo(next);
    if (next == kNever) return;
    // An API call before the GPU work that starts in the same nanosecond: its launch arrow starts
    // before the slice it ends in. On the kernel track, what holds the others first: a system
    // call, then a page fault in it, then a lock wait in that.
    if (api_calls.next_start() == next) {
      BeginApiCall(session_.api_calls[api_calls.Take()]);
    } else if (off_cpu.next_start() == next) {
      BeginOffCpu(off_cpu.Take());
    } else if (futex_calls.next_start() == next) {
      BeginFutex(session_.futex_calls[futex_calls.Take()]);
    } else if (futex_waitv_calls.next_start() == next) {
      BeginFutexWaitv(session_.futex_waitv_calls[futex_waitv_calls.Take()]);
    } else if (memory_map_calls.next_start() == next) {
      BeginMemoryMapCall(session_.memory_map_calls[memory_map_calls.Take()]);
    } else if (device_waits.next_start() == next) {
      BeginDeviceWait(session_.device_waits[device_waits.Take()]);
    } else if (page_faults.next_start() == next) {
      BeginPageFault(session_.page_faults[page_faults.Take()]);
    } else if (lock_waits.next_start() == next) {
      BeginLockWait(session_.lock_waits[lock_waits.Take()]);
    } else {
      BeginGpuActivity(gpu_activities.Take());
    }
  }
}

void TimelineWriter::RunPendingUpTo(uint64_t time_ns) {
  while (!pending_.empty() && pending_.next().time_ns() <= time_ns) Run(pending_.Pop());
}

void TimelineWriter::Run(const Pending& pending) {
  switch (pending.action()) {
    case Action::kEndSlice:
      EndSlice(*pending.track, pending.time_ns());
      break;
    case Action::kWakeInstant:
      WriteWakeInstant(pending.off_cpu_index);
      break;
    case Action::kBeginRunnable:
      BeginRunnable(*pending.track, pending.off_cpu_index);
      break;
  }
}

void TimelineWriter::BeginApiCall(const ApiCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.enter_ns;
  event.name_iid = ApiNameIid(call.name_index);
  event.category_iid = vocabulary_.cuda;
  if (call.flags & format::kApiCallHasStream) {
    event.Annotate(vocabulary_.stream, Annotation::Kind::kInternedString, StreamIid(call.stream));
  }
  if (call.correlation_id != 0)
    event.Annotate(vocabulary_.correlation_id, Annotation::Kind::kUint, call.correlation_id);
  if (call.return_code != 0) event.AnnotateInt(vocabulary_.return_code, call.return_code);
  launch_flow_ids_.clear();
  for (const GpuActivity* activity : correlation_.ActivitiesOf(call)) {
    if (LaunchFlowOrigin(*activity) == &call)
      launch_flow_ids_.push_back(flow_ids_.Launch(IndexOf(*activity)));
  }
  event.flow_ids = launch_flow_ids_;
  BeginSlice(tracks_.Thread(call.tid, call.pid).thread, event, call.exit_ns);
}

// Kernels, copies and memsets on their stream's lane, ending a launch arrow from the API call
// that caused them; host waits for the GPU on the process's synchronization track.
void TimelineWriter::BeginGpuActivity(size_t index) {
  const GpuActivity& activity = session_.gpu_activities[index];
  TrackEventSpec event;
  event.timestamp_ns = activity.start_ns;
  event.name_iid = gpu_names_.SliceName(activity);
  event.category_iid = vocabulary_.gpu;
  if (activity.correlation_id != 0) {
    event.Annotate(vocabulary_.correlation_id, Annotation::Kind::kUint, activity.correlation_id);
  }
  AnnotateGpuDetail(event, activity);
  if (!activity.occupies_gpu()) {
    BeginSlice(tracks_.GpuSync(activity.pid), event, activity.end_ns);
    return;
  }
  if (activity.graph_id != 0) {
    event.Annotate(vocabulary_.graph_id, Annotation::Kind::kUint, activity.graph_id);
    event.Annotate(vocabulary_.graph_node_id, Annotation::Kind::kUint, activity.graph_node_id);
  }
  if (LaunchFlowOrigin(activity) != nullptr) event.terminating_flow_id = flow_ids_.Launch(index);
  uint64_t end = activity.end_ns;
  if (auto clipped = clipped_gpu_ends_.find(index); clipped != clipped_gpu_ends_.end()) {
    end = clipped->second;
    event.Annotate(vocabulary_.recorded_duration_ns, Annotation::Kind::kUint, activity.duration());
    event.Annotate(vocabulary_.overlapped_next_ns, Annotation::Kind::kUint, activity.end_ns - end);
  }
  BeginSlice(tracks_.GpuStream(activity.pid, activity.device_id, activity.stream_id), event, end);
}

void TimelineWriter::AnnotateGpuDetail(TrackEventSpec& event, const GpuActivity& activity) {
  using Kind = Annotation::Kind;
  if (const auto* kernel = std::get_if<GpuKernel>(&activity.detail)) {
    event.Annotate(vocabulary_.grid, Kind::kInternedString, gpu_names_.Dimensions(kernel->grid));
    event.Annotate(vocabulary_.block, Kind::kInternedString, gpu_names_.Dimensions(kernel->block));
    event.Annotate(vocabulary_.registers_per_thread, Kind::kUint, kernel->registers_per_thread);
    event.Annotate(vocabulary_.shared_memory_bytes, Kind::kUint, kernel->shared_memory_bytes);
  } else if (const auto* copy = std::get_if<GpuMemcpy>(&activity.detail)) {
    event.Annotate(vocabulary_.bytes, Kind::kUint, copy->bytes);
    event.Annotate(vocabulary_.from, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(copy->src_kind)));
    event.Annotate(vocabulary_.to, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(copy->dst_kind)));
    event.Annotate(vocabulary_.async, Kind::kBool, copy->async);
  } else if (const auto* memset = std::get_if<GpuMemset>(&activity.detail)) {
    event.Annotate(vocabulary_.bytes, Kind::kUint, memset->bytes);
    event.Annotate(vocabulary_.value, Kind::kUint, memset->value);
    event.Annotate(vocabulary_.memory, Kind::kInternedString,
                   gpu_names_.Text(MemoryKindName(memset->memory_kind)));
    event.Annotate(vocabulary_.async, Kind::kBool, memset->async);
  } else if (const auto* sync = std::get_if<GpuSync>(&activity.detail)) {
    event.Annotate(vocabulary_.sync_type, Kind::kInternedString,
                   gpu_names_.Text(SyncTypeName(sync->type)));
    if (activity.stream_id != kNoStream)
      event.Annotate(vocabulary_.stream, Kind::kUint, activity.stream_id);
    if (sync->event_id != 0) event.Annotate(vocabulary_.event, Kind::kUint, sync->event_id);
  }
}

// The wait: from the switch-out to the wakeup, or to the switch-in when the thread was preempted.
void TimelineWriter::BeginOffCpu(size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  EventTrack& track = tracks_.OffCpu(tracks_.Thread(interval.tid, interval.pid));
  TrackEventSpec wait;
  wait.timestamp_ns = interval.start_ns;
  wait.name_iid = scheduler_names_.WaitName(interval);
  wait.category_iid = vocabulary_.sched;
  wait.Annotate(vocabulary_.state, Annotation::Kind::kInternedString,
                scheduler_names_.State(interval));
  if (uint64_t stack = scheduler_names_.StackTextIid(interval.kstack_id); stack != 0) {
    wait.Annotate(vocabulary_.kernel_stack, Annotation::Kind::kInternedString, stack);
  }
  if (uint64_t stack =
          user_stacks_.TextIid(interval.pid, interval.user_stack_id, interval.start_ns);
      stack != 0) {
    wait.Annotate(vocabulary_.user_stack, Annotation::Kind::kInternedString, stack);
  }
  if (interval.flags & GPROF_OFFCPU_UNFINISHED)
    wait.Annotate(vocabulary_.still_off_cpu_at_end, Annotation::Kind::kBool, 1);
  if (interval.wake_ns == 0) {
    BeginSlice(track, wait, interval.end_ns);
    return;
  }
  uint64_t wake_ns = WakeTime(interval);
  Schedule(wake_ns, Action::kBeginRunnable, &track, index);
  if (HasWakeFlow(interval)) Schedule(wake_ns, Action::kWakeInstant, nullptr, index);
  BeginSlice(track, wait, wake_ns);
}

// The time a woken thread waited for a CPU, from the wakeup to the switch-in.
void TimelineWriter::BeginRunnable(EventTrack& track, size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  TrackEventSpec runnable;
  runnable.timestamp_ns = WakeTime(interval);
  runnable.name_iid = scheduler_names_.RunnableName(interval);
  runnable.category_iid = vocabulary_.sched;
  if (HasWakeFlow(interval)) runnable.terminating_flow_id = FlowIds::Wake(index);
  runnable.Annotate(vocabulary_.waker, Annotation::Kind::kInternedString,
                    scheduler_names_.WakerLabel(interval));
  if (uint64_t stack = scheduler_names_.StackTextIid(interval.waker_kstack_id); stack != 0) {
    runnable.Annotate(vocabulary_.waker_kernel_stack, Annotation::Kind::kInternedString, stack);
  }
  if (uint64_t stack = user_stacks_.TextIid(interval.waker_pid, interval.waker_user_stack_id,
                                            runnable.timestamp_ns);
      stack != 0) {
    runnable.Annotate(vocabulary_.waker_user_stack, Annotation::Kind::kInternedString, stack);
  }
  BeginSlice(track, runnable, interval.end_ns);
}

// "wake X" on the waker's thread track: where the flow arrow to X's runnable slice starts.
void TimelineWriter::WriteWakeInstant(size_t index) {
  const OffCpuInterval& interval = session_.off_cpu[index];
  TrackEventSpec wake;
  wake.timestamp_ns = WakeTime(interval);
  wake.name_iid = scheduler_names_.WakeName(interval.tid);
  wake.category_iid = vocabulary_.sched;
  uint64_t flow_id = FlowIds::Wake(index);
  wake.flow_ids = std::span<const uint64_t>(&flow_id, 1);
  packets_.WriteTrackEvent(tracks_.Thread(interval.waker_tid, interval.waker_pid).thread.sequence,
                           wake);
}

void TimelineWriter::BeginFutex(const FutexCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = futex_names_.SliceName(call);
  event.category_iid = vocabulary_.futex;
  event.Annotate(vocabulary_.op, Annotation::Kind::kInternedString, futex_names_.OpText(call));
  event.Annotate(vocabulary_.uaddr, Annotation::Kind::kPointer, call.uaddr);
  event.Annotate(vocabulary_.val, Annotation::Kind::kUint, call.val);
  if (call.timeout_ns >= 0) event.AnnotateInt(vocabulary_.timeout_ns, call.timeout_ns);
  if (call.uaddr2 != 0) event.Annotate(vocabulary_.uaddr2, Annotation::Kind::kPointer, call.uaddr2);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(tracks_.Futex(tracks_.Thread(call.tid, call.pid)), event, call.end_ns);
}

void TimelineWriter::BeginFutexWaitv(const FutexWaitvCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = kernel_names_.FutexWaitvName(call);
  event.category_iid = vocabulary_.futex;
  event.Annotate(vocabulary_.uaddrs, Annotation::Kind::kInternedString,
                 kernel_names_.AddressList(call.addresses));
  event.Annotate(vocabulary_.count, Annotation::Kind::kUint, call.count);
  if (call.timeout_ns >= 0) event.AnnotateInt(vocabulary_.timeout_ns, call.timeout_ns);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(tracks_.Futex(tracks_.Thread(call.tid, call.pid)), event, call.end_ns);
}

void TimelineWriter::BeginMemoryMapCall(const MemoryMapCall& call) {
  TrackEventSpec event;
  event.timestamp_ns = call.start_ns;
  event.name_iid = kernel_names_.MemoryMapName(call);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.address, Annotation::Kind::kPointer, call.address);
  event.Annotate(vocabulary_.length, Annotation::Kind::kUint, call.length);
  if (call.syscall == MemorySyscall::kMmap || call.syscall == MemorySyscall::kMprotect)
    event.Annotate(vocabulary_.prot, Annotation::Kind::kUint, call.prot);
  if (call.syscall == MemorySyscall::kMmap)
    event.Annotate(vocabulary_.flags, Annotation::Kind::kUint, call.flags);
  event.AnnotateInt(vocabulary_.return_value, call.ret);
  BeginSlice(KernelTrack(call.tid, call.pid), event, call.end_ns);
}

void TimelineWriter::BeginDeviceWait(const DeviceWait& wait) {
  TrackEventSpec event;
  event.timestamp_ns = wait.start_ns;
  event.name_iid = kernel_names_.DeviceName(wait);
  event.category_iid = vocabulary_.kernel;
  event.AnnotateInt(vocabulary_.fd, wait.fd);
  switch (wait.call) {
    case DeviceCall::kIoctl:
      event.Annotate(vocabulary_.request, Annotation::Kind::kPointer, wait.request);
      break;
    case DeviceCall::kMmap:
      event.Annotate(vocabulary_.length, Annotation::Kind::kUint, wait.request);
      break;
    case DeviceCall::kPoll:
    case DeviceCall::kEpoll:
      event.Annotate(vocabulary_.count, Annotation::Kind::kUint, wait.request);
      break;
    case DeviceCall::kUnknown:
      break;
  }
  event.AnnotateInt(vocabulary_.return_value, wait.ret);
  BeginSlice(KernelTrack(wait.tid, wait.pid), event, wait.end_ns);
}

void TimelineWriter::BeginPageFault(const PageFault& fault) {
  UserLocation location =
      LocateUserAddress(session_, fault.pid, fault.address, fault.start_ns, AddressUse::kData);
  TrackEventSpec event;
  event.timestamp_ns = fault.start_ns;
  event.name_iid = kernel_names_.PageFaultName(fault, location);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.address, Annotation::Kind::kPointer, fault.address);
  if (std::string where = DataText(location); !where.empty()) {
    event.Annotate(vocabulary_.location, Annotation::Kind::kInternedString,
                   kernel_names_.Text(where));
  }
  if (std::string flags = PageFaultFlagsText(fault.flags); !flags.empty()) {
    event.Annotate(vocabulary_.flags, Annotation::Kind::kInternedString, kernel_names_.Text(flags));
  }
  event.Annotate(vocabulary_.major, Annotation::Kind::kBool, fault.is_major());
  BeginSlice(KernelTrack(fault.tid, fault.pid), event, fault.end_ns);
}

void TimelineWriter::BeginLockWait(const LockWait& lock) {
  TrackEventSpec event;
  event.timestamp_ns = lock.start_ns;
  event.name_iid = kernel_names_.LockName(lock);
  event.category_iid = vocabulary_.kernel;
  event.Annotate(vocabulary_.lock, Annotation::Kind::kPointer, lock.lock_address);
  event.Annotate(vocabulary_.lock_kind, Annotation::Kind::kInternedString,
                 kernel_names_.Text(LockKindName(lock.flags)));
  if (std::string owner = LockOwnerLabel(session_, lock); !owner.empty()) {
    event.Annotate(vocabulary_.owner, Annotation::Kind::kInternedString, kernel_names_.Text(owner));
    if (lock.owner_inferred) event.Annotate(vocabulary_.owner_inferred, Annotation::Kind::kBool, 1);
  }
  if (lock.ret != 0) event.AnnotateInt(vocabulary_.return_value, lock.ret);
  if (uint64_t stack = scheduler_names_.StackTextIid(lock.kstack_id); stack != 0) {
    event.Annotate(vocabulary_.kernel_stack, Annotation::Kind::kInternedString, stack);
  }
  if (uint64_t stack = user_stacks_.TextIid(lock.pid, lock.user_stack_id, lock.start_ns);
      stack != 0) {
    event.Annotate(vocabulary_.user_stack, Annotation::Kind::kInternedString, stack);
  }
  BeginSlice(KernelTrack(lock.tid, lock.pid), event, lock.end_ns);
}

void TimelineWriter::BeginSlice(EventTrack& track, TrackEventSpec& event, uint64_t end_ns) {
  uint64_t end = std::max(end_ns, event.timestamp_ns);
  if (!track.open_slice_ends.empty() && end > track.open_slice_ends.back()) {
    // It outlives the slice it started in: drawn ending with that one, so nesting stays proper,
    // with its recorded length kept.
    event.Annotate(vocabulary_.recorded_duration_ns, Annotation::Kind::kUint,
                   end - event.timestamp_ns);
    end = track.open_slice_ends.back();
  }
  event.type = TrackEventType::kSliceBegin;
  track.open_slice_ends.push_back(end);
  packets_.WriteTrackEvent(track.sequence, event);
  Schedule(end, Action::kEndSlice, &track, 0);
}

void TimelineWriter::EndSlice(EventTrack& track, uint64_t time_ns) {
  assert(!track.open_slice_ends.empty() && track.open_slice_ends.back() == time_ns);
  track.open_slice_ends.pop_back();
  packets_.WriteSliceEnd(track.sequence, time_ns);
}

uint64_t TimelineWriter::ApiNameIid(uint32_t name_index) {
  if (name_index >= api_name_iids_.size()) {
    return interner_.Intern(InternTable::kEventNames, "CUDA call #" + std::to_string(name_index));
  }
  uint64_t& iid = api_name_iids_[name_index];
  if (iid == 0) iid = interner_.Intern(InternTable::kEventNames, session_.api_names[name_index]);
  return iid;
}

// Streams are few and repeat on every call: an interned "0x..." costs less than a pointer value.
uint64_t TimelineWriter::StreamIid(uint64_t stream) {
  auto [entry, inserted] = stream_iids_.try_emplace(stream, 0);
  if (inserted) entry->second = interner_.Intern(InternTable::kAnnotationStrings, Hex(stream));
  return entry->second;
}

// Arrows only join threads of the model: a waker outside the tree (or an interrupt, tid 0) has no
// track, and stays named in the runnable slice's annotations.
bool TimelineWriter::HasWakeFlow(const OffCpuInterval& interval) {
  return interval.waker_tid != 0 && interval.waker_tid != interval.tid &&
         tracks_.InModel(interval.waker_tid);
}

// The call whose slice the launch arrow to `activity` starts from: the outermost call of its
// correlation, so that the arrow is drawn once. None for a host wait, for work whose call was not
// recorded, and for work that seems to start before its call entered (a clock gone wrong: an arrow
// back in time would not pair up).
const ApiCall* TimelineWriter::LaunchFlowOrigin(const GpuActivity& activity) const {
  if (!activity.occupies_gpu()) return nullptr;
  const ApiCall* launcher = correlation_.LauncherOf(activity);
  return launcher != nullptr && activity.start_ns >= launcher->enter_ns ? launcher : nullptr;
}

uint64_t TimelineWriter::WakeTime(const OffCpuInterval& interval) {
  return std::clamp(interval.wake_ns, interval.start_ns,
                    std::max(interval.start_ns, interval.end_ns));
}

// Instants on the "gprof-run" track at the session's start: everything the trace is missing.
class GprofRunEventWriter {
 public:
  GprofRunEventWriter(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                      StringInterner& interner, const Vocabulary& vocabulary)
      : session_(session),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary) {}

  void Write() {
    for (const LostEvents& lost : session_.lost) WriteCount("lost: " + lost.what, lost.count);
    for (const Diagnostic& diagnostic : session_.diagnostics) WriteDiagnostic(diagnostic);
    for (const std::string& message : session_.messages) WriteEvent(Instant("message: " + message));
    if (!session_.meta.kernel_recording) WriteEvent(Instant(KernelRecordingOffText()));
    // What --delay/--duration kept, and where --max-size cut: from then on the trace is empty.
    if (std::string window = WindowText(session_); !window.empty())
      WriteEvent(Instant("window: " + window));
    if (std::string cap = MaxSizeText(session_); !cap.empty()) {
      TrackEventSpec event = Instant("max-size: " + cap);
      if (session_.meta.max_size->stopped_at_monotonic_ns != 0)
        event.timestamp_ns = session_.meta.max_size->stopped_at_monotonic_ns;
      WriteEvent(event);
    }
  }

 private:
  TrackEventSpec Instant(const std::string& name) {
    TrackEventSpec event;
    event.timestamp_ns = StartTime();
    event.name_iid = interner_.Intern(InternTable::kEventNames, name);
    event.category_iid = vocabulary_.gprof_run;
    return event;
  }

  void WriteCount(const std::string& name, uint64_t count) {
    TrackEventSpec event = Instant(name);
    event.Annotate(vocabulary_.count, Annotation::Kind::kUint, count);
    WriteEvent(event);
  }

  void WriteDiagnostic(const Diagnostic& diagnostic) {
    TrackEventSpec event = Instant("reader: " + diagnostic.message);
    event.Annotate(vocabulary_.file, Annotation::Kind::kInternedString,
                   interner_.Intern(InternTable::kAnnotationStrings, diagnostic.file));
    event.Annotate(vocabulary_.offset, Annotation::Kind::kUint, diagnostic.offset);
    WriteEvent(event);
  }

  std::string KernelRecordingOffText() const {
    const std::string& why = session_.meta.kernel_recording_note;
    return why.empty() ? "kernel recording off" : "kernel recording off: " + why;
  }

  void WriteEvent(const TrackEventSpec& event) {
    packets_.WriteTrackEvent(tracks_.GprofRun().sequence, event);
  }

  // The recorded start, or the first event when the session did not say.
  uint64_t StartTime() const {
    if (session_.meta.start_monotonic_ns != 0) return session_.meta.start_monotonic_ns;
    uint64_t first = kNever;
    if (!session_.api_calls.empty()) first = std::min(first, session_.api_calls.front().enter_ns);
    if (!session_.off_cpu.empty()) first = std::min(first, session_.off_cpu.front().start_ns);
    if (!session_.futex_calls.empty())
      first = std::min(first, session_.futex_calls.front().start_ns);
    return first == kNever ? 0 : first;
  }

  const Session& session_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
};

// The diagnosis as slices: one per freeze and per GPU gap, named by what happened and carrying the
// explanation; laid out greedily on as many lanes as overlaps need.
class DiagnosisWriter {
 public:
  DiagnosisWriter(const Session& session, const Diagnosis& diagnosis, TrackRegistry& tracks,
                  PacketWriter& packets, StringInterner& interner, const Vocabulary& vocabulary)
      : session_(session),
        diagnosis_(diagnosis),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary) {}

  void Write() {
    struct Item {
      uint64_t start_ns, end_ns;
      std::string name, explanation;
      int cause;
    };
    std::vector<Item> items;
    for (const DiagnosedFreeze& freeze : diagnosis_.freezes) {
      std::string name = std::to_string(freeze.tids.size()) + " threads froze";
      std::string explanation;
      if (freeze.cause >= 0) {
        const Cause& cause = diagnosis_.causes[freeze.cause];
        name += " on " + std::string(WaitClassName(cause.wait_class));
        explanation = "waited on " + cause.identity;
        if (cause.holder_tid != 0)
          explanation += "; held by " + session_.ThreadLabel(cause.holder_tid);
        if (cause.root) explanation += "; root: " + DescribeLink(session_, *cause.root);
      }
      items.push_back({freeze.start_ns, freeze.end_ns, name, explanation, freeze.cause});
    }
    for (const GpuGap& gap : diagnosis_.gaps) {
      std::string name =
          GpuDeviceName(diagnosis_.devices[gap.device], diagnosis_.devices) + " idle";
      std::string explanation;
      if (gap.gpu_side) {
        explanation = "queued in time, held on the GPU side";
      } else if (gap.late_thread) {
        explanation = "waited for " + DescribeLink(session_, *gap.late_thread);
      }
      items.push_back({gap.start_ns, gap.end_ns, name, explanation, gap.cause});
    }
    for (const Stall& stall : diagnosis_.stalls) {
      if (!InDeadlock(stall)) continue;
      items.push_back({stall.wait.start_ns, stall.wait.end_ns, "DEADLOCK",
                       DescribeDeadlock(session_, stall), stall.cause});
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.start_ns < b.start_ns; });
    std::vector<uint64_t> lane_ends;
    for (const Item& item : items) {
      size_t lane = 0;
      while (lane < lane_ends.size() && lane_ends[lane] > item.start_ns) ++lane;
      if (lane == lane_ends.size()) lane_ends.push_back(0);
      lane_ends[lane] = item.end_ns;
      Sequence& sequence = tracks_.Diagnosis(static_cast<uint32_t>(lane)).sequence;
      TrackEventSpec begin;
      begin.type = TrackEventType::kSliceBegin;
      begin.timestamp_ns = item.start_ns;
      begin.name_iid = interner_.Intern(InternTable::kEventNames, item.name);
      begin.category_iid = vocabulary_.gprof_run;
      if (!item.explanation.empty()) {
        begin.Annotate(vocabulary_.explanation, Annotation::Kind::kInternedString,
                       interner_.Intern(InternTable::kAnnotationStrings, item.explanation));
      }
      if (item.cause >= 0) {
        const Cause& cause = diagnosis_.causes[item.cause];
        begin.Annotate(vocabulary_.cause_rank, Annotation::Kind::kUint, item.cause + 1);
        begin.Annotate(
            vocabulary_.cause, Annotation::Kind::kInternedString,
            interner_.Intern(InternTable::kAnnotationStrings,
                             std::string(WaitClassName(cause.wait_class)) + ": " + cause.identity));
      }
      packets_.WriteTrackEvent(sequence, begin);
      packets_.WriteSliceEnd(sequence, std::max(item.end_ns, item.start_ns));
    }
    WriteFlows();
  }

 private:
  // For each wait of a freeze: a "waits for" instant on the waiting thread's "why" track where the
  // wait began, with a flow to a "holds" instant on the holder's where it let the waiter go (the
  // wake). For each wait of a lock cycle, the flow goes to the holder the lock named, where the
  // wait began: nobody let it go. Written per track in time order, after everything else.
  void WriteFlows() {
    struct End {
      uint32_t tid, pid;
      uint64_t time_ns;
      std::string name;
      uint64_t flow_out = 0, flow_in = 0;
    };
    std::vector<End> ends;
    uint64_t next_flow = FlowIds(session_).first_diagnosis;
    for (const DiagnosedFreeze& freeze : diagnosis_.freezes) {
      for (int index : freeze.stalls) {
        const Stall& stall = diagnosis_.stalls[index];
        if (stall.chain.empty() || stall.wait.wake_ns == 0 || stall.chain.front().owner) continue;
        const ChainLink& ender = stall.chain.front();
        const ChainLink& root = stall.chain.back();
        uint64_t flow = next_flow++;
        ends.push_back({stall.tid, stall.pid, stall.wait.start_ns,
                        "waits for " + session_.ThreadLabel(root.tid), flow, 0});
        ends.push_back({ender.tid, ender.pid, stall.wait.wake_ns,
                        "lets " + session_.ThreadLabel(stall.tid) + " go", 0, flow});
      }
    }
    for (const Stall& stall : diagnosis_.stalls) {
      if (!InDeadlock(stall)) continue;
      const ChainLink& holder = stall.chain.front();
      uint64_t flow = next_flow++;
      ends.push_back({stall.tid, stall.pid, stall.wait.start_ns,
                      "waits for " + session_.ThreadLabel(holder.tid) + " (deadlock)", flow, 0});
      ends.push_back({holder.tid, holder.pid, stall.wait.start_ns,
                      "holds what " + session_.ThreadLabel(stall.tid) + " waits for", 0, flow});
    }
    std::stable_sort(ends.begin(), ends.end(),
                     [](const End& a, const End& b) { return a.time_ns < b.time_ns; });
    for (const End& end : ends) {
      TrackEventSpec instant;
      instant.type = TrackEventType::kInstant;
      instant.timestamp_ns = end.time_ns;
      instant.name_iid = interner_.Intern(InternTable::kEventNames, end.name);
      instant.category_iid = vocabulary_.gprof_run;
      if (end.flow_out != 0) instant.flow_ids = std::span<const uint64_t>(&end.flow_out, 1);
      instant.terminating_flow_id = end.flow_in;
      EventTrack& track = tracks_.Why(tracks_.Thread(end.tid, end.pid));
      packets_.WriteTrackEvent(track.sequence, instant);
    }
  }

  const Session& session_;
  const Diagnosis& diagnosis_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
};

// Signals generated for the tree's threads: instants on each one's "signals" track, in time order
// (the records are, on each CPU only).
void WriteSignals(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                  StringInterner& interner, const Vocabulary& vocabulary) {
  std::vector<const SignalSent*> sorted;
  sorted.reserve(session.signals.size());
  for (const SignalSent& signal : session.signals) sorted.push_back(&signal);
  std::stable_sort(sorted.begin(), sorted.end(), [](const SignalSent* a, const SignalSent* b) {
    return a->time_ns < b->time_ns;
  });
  for (const SignalSent* signal : sorted) {
    TrackEventSpec instant;
    instant.type = TrackEventType::kInstant;
    instant.timestamp_ns = signal->time_ns;
    instant.name_iid = interner.Intern(InternTable::kEventNames, SignalText(session, *signal));
    instant.category_iid = vocabulary.signal;
    instant.Annotate(
        vocabulary.to, Annotation::Kind::kInternedString,
        interner.Intern(InternTable::kAnnotationStrings, SignalAddressee(signal->flags)));
    if (const char* outcome = SignalOutcome(signal->result); *outcome != '\0') {
      instant.Annotate(vocabulary.outcome, Annotation::Kind::kInternedString,
                       interner.Intern(InternTable::kAnnotationStrings, outcome));
    }
    packets.WriteTrackEvent(tracks.Signals(tracks.Thread(signal->tid, signal->pid)).sequence,
                            instant);
  }
}

Status WriteTrace(const Session& session, TraceFile& file, const PerfettoOptions& options) {
  StringInterner interner;
  Vocabulary vocabulary(interner);
  PacketWriter packets(file, interner);
  Sequence metadata(1);
  packets.WriteClockSnapshot(metadata, session.meta);
  TrackRegistry tracks(session, packets, metadata);
  tracks.DescribeModel();
  GprofRunEventWriter(session, tracks, packets, interner, vocabulary).Write();
  TimelineWriter(session, tracks, packets, interner, vocabulary).Write();
  WriteSignals(session, tracks, packets, interner, vocabulary);
  if (options.diagnosis != nullptr) {
    DiagnosisWriter(session, *options.diagnosis, tracks, packets, interner, vocabulary).Write();
  }
  return file.Close();
}

}  // namespace

Status WritePerfettoTrace(const Session& session, const std::string& path,
                          const PerfettoOptions& options) {
  return WritePerfettoTrace(session, AT_FDCWD, path, path, options);
}

Status WritePerfettoTrace(const Session& session, int dir_fd, const std::string& name,
                          const std::string& path, const PerfettoOptions& options) {
  TraceFile file(dir_fd, name, path);
  if (Status opened = file.Open(); !opened.ok()) return opened;
  // Exceptions stop at the module boundary; the only one expected here is running out of memory.
  try {
    return WriteTrace(session, file, options);
  } catch (const std::exception& error) {
    return Status::Error("cannot write Perfetto trace " + path + ": " + error.what());
  }
}

}  // namespace gprof::collector
