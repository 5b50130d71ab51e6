// The numbers of the Perfetto trace format (field numbers, clock ids, enum values) and the builders
// of a TracePacket and a TrackDescriptor: every file of the writer that encodes a field names it
// from here.
#pragma once

#include <cstdint>

#include "collector/writers/perfetto/proto_encoder.h"

namespace gprof::collector::perfetto {

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
  kCounter = 8,
};
enum class CounterDescriptorField : uint32_t { kUnitName = 6 };
enum class ProcessDescriptorField : uint32_t { kPid = 1, kCmdline = 2, kProcessName = 6 };
enum class ThreadDescriptorField : uint32_t { kPid = 1, kTid = 2, kThreadName = 5 };
enum class InternedDataField : uint32_t {
  kEventCategories = 1,
  kEventNames = 2,
  kDebugAnnotationNames = 3,
  kFunctionNames = 5,
  kFrames = 6,
  kCallstacks = 7,
  kMappingPaths = 17,
  kMappings = 19,
  kDebugAnnotationStringValues = 29,
};
enum class FrameField : uint32_t {
  kIid = 1,
  kFunctionNameId = 2,
  kMappingId = 3,
  kRelPc = 4,
  kKind = 7
};
enum class MappingField : uint32_t { kIid = 1, kPathStringIds = 7 };
enum class CallstackField : uint32_t { kIid = 1, kFrameIds = 2 };
// EventCategory, EventName, DebugAnnotationName and InternedString all hold an iid and its text.
enum class InternedEntryField : uint32_t { kIid = 1, kText = 2 };
enum class TrackEventField : uint32_t {
  kCategoryIids = 3,
  kDebugAnnotations = 4,
  kType = 9,
  kNameIid = 10,
  // Flow ids as varints: the fields trace_processor still reads for older writers, used since
  // the ids here are small (see FlowIds) and fixed64 flow_ids (47, 48) take 8 bytes each.
  kCounterValue = 30,
  kFlowIdsOld = 36,
  kTerminatingFlowIdsOld = 42,
  kCallstackIid = 56,
};
enum class DebugAnnotationField : uint32_t {
  kNameIid = 1,
  kBoolValue = 2,
  kUintValue = 3,
  kIntValue = 4,
  kPointerValue = 7,
  kStringValueIid = 17,
};

constexpr uint32_t kBuiltinClockRealtime = 1;
constexpr uint32_t kBuiltinClockMonotonic = 3;
constexpr uint32_t kBuiltinClockBoottime = 6;
// A sequence-scoped clock (ids 64-127) that counts nanoseconds of MONOTONIC as deltas: each
// packet's timestamp is the time since the sequence's previous timestamped packet, 2-3 bytes
// instead of 7 for an absolute MONOTONIC time.
constexpr uint32_t kIncrementalClock = 64;
constexpr uint32_t kSeqIncrementalStateCleared = 1;
enum class TrackEventType : int32_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4 };

using PacketBuilder = ProtoMessage<PacketField>;
using DescriptorBuilder = ProtoMessage<TrackDescriptorField>;

}  // namespace gprof::collector::perfetto
