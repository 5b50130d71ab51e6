// A reader for the Perfetto traces gprof-run writes, for tests: decodes with protozero against
// field numbers looked up in perfetto_trace.proto independently of the writer.
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <protozero/pbf_reader.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace gprof::test {

// A reader for what the writer produces: tracks, events with their interned strings resolved, and
// a list of every rule of the format the trace broke.

constexpr uint32_t kClockMonotonic = 3;
constexpr uint32_t kClockBoottime = 6;
constexpr uint32_t kFirstSequenceClock = 64, kEndSequenceClocks = 128;  // sequence-scoped ids
constexpr int kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4;
enum InternTable {
  kEventNames,
  kCategories,
  kAnnotationNames,
  kAnnotationStrings,
  kFunctionNames,
  kMappingPaths,
  kTableCount
};

struct DecodedTrack {
  uint64_t uuid = 0;
  uint64_t parent_uuid = 0;
  std::string name;
  bool is_process = false;
  bool is_thread = false;
  int64_t pid = 0;
  int64_t tid = 0;
  std::optional<std::string> thread_name;
  std::string process_name;
  std::vector<std::string> cmdline;
  bool is_counter = false;
  std::string counter_unit;  // CounterDescriptor's unit_name
};

struct DecodedEvent {
  uint64_t timestamp_ns = 0;       // on MONOTONIC
  uint32_t clock_id = 0;           // the clock its packet's timestamp is on
  uint64_t encoded_timestamp = 0;  // as the packet holds it (a delta on an incremental clock)
  int type = 0;
  uint64_t track_uuid = 0;
  std::string name;
  std::vector<std::string> categories;
  std::vector<uint64_t> flow_ids;
  std::vector<uint64_t> terminating_flow_ids;
  std::map<std::string, std::string> annotations;
  // Its callstack (callstack_iid resolved through the sequence's callstacks, frames and function
  // names), outermost frame first; a kernel frame (Frame.kind KIND_KERNEL) as "[k] name", an
  // interpreted one (KIND_INTERPRETED: Python) as "[py] name".
  std::vector<std::string> callstack;
  // Where each of its frames is: "libfoo.so+0x1c40" (the mapping's path and the frame's rel_pc),
  // empty for a frame without a mapping.
  std::vector<std::string> callstack_where;
  std::optional<int64_t> counter_value;  // kCounter events
};

struct DecodedTrace {
  // The trace-wide snapshot (builtin clocks only): clock id -> timestamp.
  std::map<uint32_t, uint64_t> clock_snapshot;
  uint32_t primary_trace_clock = 0;
  std::vector<DecodedTrack> tracks;
  std::vector<DecodedEvent> events;  // in file order
  std::vector<std::string> errors;   // every broken rule, with the packet's index
};

// A sequence-scoped clock as trace_processor's clock tracker reads it: its value at the snapshot
// that declared it, with MONOTONIC's at that moment; an incremental one advances by each packet's
// timestamp from there.
struct SequenceClock {
  bool incremental = false;
  uint64_t value = 0;           // at the snapshot, then (incremental) after the last packet
  uint64_t snapshot_value = 0;  // at the snapshot
  uint64_t monotonic_at_snapshot = 0;
};

struct SequenceState {
  bool started = false;
  uint32_t default_clock_id = 0;
  uint64_t default_track_uuid = 0;
  std::array<std::map<uint64_t, std::string>, kTableCount> interned;
  struct Frame {
    uint64_t function_iid = 0;
    uint64_t kind = 0;
    uint64_t mapping_iid = 0;
    std::optional<uint64_t> rel_pc;
  };
  std::map<uint64_t, Frame> frames;                     // by iid
  std::map<uint64_t, uint64_t> mappings;                // by iid: its path's string iid
  std::map<uint64_t, std::vector<uint64_t>> callstacks;  // by iid: frame iids
  std::map<uint32_t, SequenceClock> clocks;  // by sequence-scoped clock id
};

class TraceDecoder {
 public:
  DecodedTrace Decode(const std::string& bytes) {
    protozero::pbf_reader trace(bytes);
    while (trace.next(1)) DecodePacket(trace.get_view());
    return std::move(result_);
  }

 private:
  void Error(const std::string& what) {
    result_.errors.push_back("packet " + std::to_string(packet_index_) + ": " + what);
  }

  void DecodePacket(protozero::data_view bytes) {
    ++packet_index_;
    protozero::pbf_reader packet(bytes);
    std::optional<uint32_t> sequence_id, flags, clock_id;
    std::optional<uint64_t> timestamp;
    std::optional<protozero::data_view> defaults, interned, track_event, descriptor, snapshot;
    while (packet.next()) {
      switch (packet.tag()) {
        case 8:
          timestamp = packet.get_uint64();
          break;
        case 58:
          clock_id = packet.get_uint32();
          break;
        case 10:
          sequence_id = packet.get_uint32();
          break;
        case 13:
          flags = packet.get_uint32();
          break;
        case 59:
          defaults = packet.get_view();
          break;
        case 12:
          interned = packet.get_view();
          break;
        case 11:
          track_event = packet.get_view();
          break;
        case 60:
          descriptor = packet.get_view();
          break;
        case 6:
          snapshot = packet.get_view();
          break;
        default:
          Error("unexpected packet field " + std::to_string(packet.tag()));
          packet.skip();
      }
    }
    if (!sequence_id) return Error("no trusted_packet_sequence_id");
    SequenceState& sequence = sequences_[*sequence_id];
    CheckSequenceFlags(sequence, flags.value_or(0));
    // trace_processor's order: defaults, interned data, then a clock snapshot ends the packet.
    if (defaults) DecodeDefaults(sequence, *defaults);
    if (interned) DecodeInterned(sequence, *interned);
    if (snapshot) {
      if (descriptor || track_event || timestamp)
        Error("a packet with a clock snapshot carries more (trace_processor ignores it)");
      return DecodeSnapshot(sequence, *snapshot);
    }
    std::optional<uint64_t> monotonic_ns;
    if (timestamp) monotonic_ns = MonotonicTime(sequence, clock_id, *timestamp);
    if (descriptor) DecodeDescriptor(*descriptor);
    if (track_event) {
      if (!timestamp) Error("track event without timestamp");
      DecodeTrackEvent(sequence, *track_event, monotonic_ns.value_or(0));
      result_.events.back().clock_id = clock_id.value_or(sequence.default_clock_id);
      result_.events.back().encoded_timestamp = timestamp.value_or(0);
    }
  }

  // The first packet of a sequence clears its state; no later one may (that would drop the
  // sequence's interned strings). SEQ_NEEDS_INCREMENTAL_STATE is optional: a reader only uses it
  // to skip packets after a loss.
  void CheckSequenceFlags(SequenceState& sequence, uint32_t flags) {
    if (!sequence.started) {
      if (flags != 1)
        Error("first packet of a sequence without SEQ_INCREMENTAL_STATE_CLEARED alone");
      sequence.started = true;
    } else if (flags != 0 && flags != 2) {
      Error("later packet with flags other than SEQ_NEEDS_INCREMENTAL_STATE");
    }
  }

  // A packet's time on MONOTONIC, as trace_processor converts it: the packet's clock, else the
  // sequence's default; a sequence-scoped clock through the snapshot that declared it on this
  // sequence, an incremental one advancing by the packet's delta.
  std::optional<uint64_t> MonotonicTime(SequenceState& sequence, std::optional<uint32_t> clock_id,
                                        uint64_t timestamp) {
    uint32_t clock = clock_id.value_or(sequence.default_clock_id);
    if (clock == kClockMonotonic) return timestamp;
    if (clock < kFirstSequenceClock || clock >= kEndSequenceClocks) {
      Error("event not on MONOTONIC or a clock of its sequence: clock " + std::to_string(clock));
      return std::nullopt;
    }
    auto declared = sequence.clocks.find(clock);
    if (declared == sequence.clocks.end()) {
      Error("clock " + std::to_string(clock) + " not declared on this sequence");
      return std::nullopt;
    }
    SequenceClock& state = declared->second;
    state.value = state.incremental ? state.value + timestamp : timestamp;
    return state.value - state.snapshot_value + state.monotonic_at_snapshot;
  }

  void DecodeDefaults(SequenceState& sequence, protozero::data_view bytes) {
    protozero::pbf_reader defaults(bytes);
    while (defaults.next()) {
      if (defaults.tag() == 58) {
        sequence.default_clock_id = defaults.get_uint32();
      } else if (defaults.tag() == 11) {
        protozero::pbf_reader track_event_defaults = defaults.get_message();
        while (track_event_defaults.next(11))
          sequence.default_track_uuid = track_event_defaults.get_uint64();
      } else {
        defaults.skip();
      }
    }
  }

  void DecodeInterned(SequenceState& sequence, protozero::data_view bytes) {
    static const std::map<uint32_t, InternTable> kTables = {
        {2, kEventNames},
        {1, kCategories},
        {3, kAnnotationNames},
        {29, kAnnotationStrings},
        {5, kFunctionNames},
        {17, kMappingPaths}};
    protozero::pbf_reader interned(bytes);
    while (interned.next()) {
      if (interned.tag() == 6 || interned.tag() == 7 || interned.tag() == 19) {
        DecodeFrameOrCallstack(sequence, interned.tag(), interned.get_view());
        continue;
      }
      auto table = kTables.find(interned.tag());
      if (table == kTables.end()) {
        Error("unexpected interned field " + std::to_string(interned.tag()));
        interned.skip();
        continue;
      }
      protozero::pbf_reader entry = interned.get_message();
      uint64_t iid = 0;
      std::string text;
      while (entry.next()) {
        if (entry.tag() == 1)
          iid = entry.get_uint64();
        else if (entry.tag() == 2)
          text = entry.get_string();
        else
          entry.skip();
      }
      if (iid == 0) Error("interned entry without iid");
      if (!sequence.interned[table->second].emplace(iid, text).second) {
        Error("iid " + std::to_string(iid) + " interned twice on one sequence");
      }
    }
  }

  // InternedData.frames (6: iid 1, function_name_id 2, mapping_id 3, rel_pc 4, kind 7),
  // callstacks (7: iid 1, frame_ids 2) and mappings (19: iid 1, path_string_ids 7).
  void DecodeFrameOrCallstack(SequenceState& sequence, uint32_t field, protozero::data_view bytes) {
    protozero::pbf_reader entry(bytes);
    uint64_t iid = 0;
    SequenceState::Frame frame;
    std::vector<uint64_t> frame_ids;
    std::vector<uint64_t> paths;
    while (entry.next()) {
      if (entry.tag() == 1) {
        iid = entry.get_uint64();
      } else if (field == 19 && entry.tag() == 7) {
        paths.push_back(entry.get_uint64());
      } else if (field == 6 && entry.tag() == 2) {
        frame.function_iid = entry.get_uint64();
      } else if (field == 6 && entry.tag() == 3) {
        frame.mapping_iid = entry.get_uint64();
      } else if (field == 6 && entry.tag() == 4) {
        frame.rel_pc = entry.get_uint64();
      } else if (field == 6 && entry.tag() == 7) {
        frame.kind = entry.get_uint64();
      } else if (field == 7 && entry.tag() == 2) {
        frame_ids.push_back(entry.get_uint64());
      } else {
        Error("unexpected field " + std::to_string(entry.tag()) + " in interned field " +
              std::to_string(field));
        entry.skip();
      }
    }
    if (iid == 0) Error("interned frame or callstack without iid");
    if (field == 19) {
      if (paths.size() != 1 || !sequence.interned[kMappingPaths].contains(paths[0]))
        Error("mapping " + std::to_string(iid) + " without its one path before it");
      if (!sequence.mappings.emplace(iid, paths.empty() ? 0 : paths[0]).second)
        Error("mapping " + std::to_string(iid) + " interned twice on one sequence");
      return;
    }
    if (field == 6) {
      if (frame.mapping_iid != 0 &&
          (!sequence.mappings.contains(frame.mapping_iid) || !frame.rel_pc))
        Error("frame " + std::to_string(iid) + " without its mapping before it, or its rel_pc");
      if (!sequence.interned[kFunctionNames].contains(frame.function_iid))
        Error("frame " + std::to_string(iid) + " before its function name");
      if (!sequence.frames.emplace(iid, frame).second)
        Error("frame " + std::to_string(iid) + " interned twice on one sequence");
      return;
    }
    for (uint64_t id : frame_ids) {
      if (!sequence.frames.contains(id))
        Error("callstack " + std::to_string(iid) + " before its frame " + std::to_string(id));
    }
    if (frame_ids.empty()) Error("callstack without frames");
    if (!sequence.callstacks.emplace(iid, frame_ids).second)
      Error("callstack " + std::to_string(iid) + " interned twice on one sequence");
  }

  std::vector<std::string> ResolveCallstack(const SequenceState& sequence, uint64_t iid) {
    std::vector<std::string> frames;
    auto callstack = sequence.callstacks.find(iid);
    if (callstack == sequence.callstacks.end()) {
      Error("unresolved callstack " + std::to_string(iid));
      return frames;
    }
    for (uint64_t id : callstack->second) {
      auto frame = sequence.frames.find(id);
      if (frame == sequence.frames.end()) continue;  // said when the callstack came
      std::string name = Resolve(sequence, kFunctionNames, frame->second.function_iid);
      uint64_t kind = frame->second.kind;
      frames.push_back(kind == 2 ? "[k] " + name : kind == 3 ? "[py] " + name : name);
      std::string where;
      if (auto mapping = sequence.mappings.find(frame->second.mapping_iid);
          mapping != sequence.mappings.end())
        where = Resolve(sequence, kMappingPaths, mapping->second) + "+" +
                Hex(frame->second.rel_pc.value_or(0));
      where_.push_back(where);
    }
    return frames;
  }

  void DecodeDescriptor(protozero::data_view bytes) {
    DecodedTrack track;
    protozero::pbf_reader descriptor(bytes);
    while (descriptor.next()) {
      switch (descriptor.tag()) {
        case 1:
          track.uuid = descriptor.get_uint64();
          break;
        case 5:
          track.parent_uuid = descriptor.get_uint64();
          break;
        case 2:
          track.name = descriptor.get_string();
          break;
        case 3:
          DecodeProcess(track, descriptor.get_view());
          break;
        case 4:
          DecodeThread(track, descriptor.get_view());
          break;
        case 8: {  // counter: only unit_name is written
          track.is_counter = true;
          protozero::pbf_reader counter(descriptor.get_view());
          while (counter.next()) {
            if (counter.tag() == 6) {
              track.counter_unit = counter.get_string();
            } else {
              Error("unexpected counter descriptor field");
              counter.skip();
            }
          }
          break;
        }
        default:
          Error("unexpected descriptor field");
          descriptor.skip();
      }
    }
    result_.tracks.push_back(track);
  }

  static void DecodeProcess(DecodedTrack& track, protozero::data_view bytes) {
    track.is_process = true;
    protozero::pbf_reader process(bytes);
    while (process.next()) {
      if (process.tag() == 1)
        track.pid = process.get_int32();
      else if (process.tag() == 2)
        track.cmdline.push_back(process.get_string());
      else if (process.tag() == 6)
        track.process_name = process.get_string();
      else
        process.skip();
    }
  }

  static void DecodeThread(DecodedTrack& track, protozero::data_view bytes) {
    track.is_thread = true;
    protozero::pbf_reader thread(bytes);
    while (thread.next()) {
      if (thread.tag() == 1)
        track.pid = thread.get_int32();
      else if (thread.tag() == 2)
        track.tid = thread.get_int64();
      else if (thread.tag() == 5)
        track.thread_name = thread.get_string();
      else
        thread.skip();
    }
  }

  // The trace-wide snapshot names builtin clocks; a sequence's snapshot declares its own clocks
  // against MONOTONIC.
  void DecodeSnapshot(SequenceState& sequence, protozero::data_view bytes) {
    protozero::pbf_reader snapshot(bytes);
    std::map<uint32_t, std::pair<uint64_t, bool>> clocks;  // id -> timestamp, incremental
    std::optional<uint32_t> primary;
    while (snapshot.next()) {
      if (snapshot.tag() == 2) {
        primary = snapshot.get_uint32();
        continue;
      }
      protozero::pbf_reader clock = snapshot.get_message();
      uint32_t id = 0;
      uint64_t timestamp = 0;
      bool incremental = false;
      while (clock.next()) {
        if (clock.tag() == 1)
          id = clock.get_uint32();
        else if (clock.tag() == 2)
          timestamp = clock.get_uint64();
        else if (clock.tag() == 3)
          incremental = clock.get_bool();
        else
          clock.skip();
      }
      if (incremental && (id < kFirstSequenceClock || id >= kEndSequenceClocks))
        Error("incremental clock " + std::to_string(id) + " is not sequence-scoped");
      clocks[id] = {timestamp, incremental};
    }
    bool scoped = false;
    for (const auto& [id, clock] : clocks) {
      if (id < kFirstSequenceClock || id >= kEndSequenceClocks) continue;
      scoped = true;
      auto monotonic = clocks.find(kClockMonotonic);
      if (monotonic == clocks.end()) {
        Error("sequence clock " + std::to_string(id) + " without MONOTONIC in its snapshot");
        continue;
      }
      sequence.clocks[id] =
          SequenceClock{clock.second, clock.first, clock.first, monotonic->second.first};
    }
    if (scoped) {
      if (primary) Error("a sequence's snapshot sets the trace clock");
      return;
    }
    if (primary) result_.primary_trace_clock = *primary;
    for (const auto& [id, clock] : clocks) result_.clock_snapshot[id] = clock.first;
  }

  std::string Resolve(const SequenceState& sequence, InternTable table, uint64_t iid) {
    auto found = sequence.interned[table].find(iid);
    if (found != sequence.interned[table].end()) return found->second;
    Error("unresolved iid " + std::to_string(iid) + " in table " + std::to_string(table));
    return "?";
  }

  void DecodeTrackEvent(const SequenceState& sequence, protozero::data_view bytes,
                        uint64_t timestamp) {
    DecodedEvent event;
    event.timestamp_ns = timestamp;
    event.track_uuid = sequence.default_track_uuid;
    protozero::pbf_reader track_event(bytes);
    while (track_event.next()) {
      switch (track_event.tag()) {
        case 9:
          event.type = track_event.get_enum();
          break;
        case 11:
          event.track_uuid = track_event.get_uint64();
          break;
        case 10:
          event.name = Resolve(sequence, kEventNames, track_event.get_uint64());
          break;
        case 3:
          event.categories.push_back(Resolve(sequence, kCategories, track_event.get_uint64()));
          break;
        case 36:  // flow_ids_old: varints, which trace_processor reads as flow_ids
          event.flow_ids.push_back(track_event.get_uint64());
          break;
        case 42:  // terminating_flow_ids_old
          event.terminating_flow_ids.push_back(track_event.get_uint64());
          break;
        case 4:
          DecodeAnnotation(sequence, event, track_event.get_view());
          break;
        case 56:  // callstack_iid
          where_.clear();
          event.callstack = ResolveCallstack(sequence, track_event.get_uint64());
          event.callstack_where = where_;
          break;
        case 30:
          event.counter_value = track_event.get_int64();
          break;
        default:
          Error("unexpected track event field " + std::to_string(track_event.tag()));
          track_event.skip();
      }
    }
    if (event.track_uuid == 0) Error("track event without a track");
    if ((event.type == kCounter) != event.counter_value.has_value())
      Error("a counter value without a counter event, or the reverse");
    result_.events.push_back(event);
  }

  void DecodeAnnotation(const SequenceState& sequence, DecodedEvent& event,
                        protozero::data_view bytes) {
    protozero::pbf_reader annotation(bytes);
    std::string name, value;
    while (annotation.next()) {
      switch (annotation.tag()) {
        case 1:
          name = Resolve(sequence, kAnnotationNames, annotation.get_uint64());
          break;
        case 2:
          value = annotation.get_bool() ? "true" : "false";
          break;
        case 3:
          value = std::to_string(annotation.get_uint64());
          break;
        case 4:
          value = std::to_string(annotation.get_int64());
          break;
        case 7:
          value = Hex(annotation.get_uint64());
          break;
        case 17:
          value = Resolve(sequence, kAnnotationStrings, annotation.get_uint64());
          break;
        default:
          Error("unexpected annotation field " + std::to_string(annotation.tag()));
          annotation.skip();
      }
    }
    event.annotations[name] = value;
  }

  static std::string Hex(uint64_t value) {
    std::ostringstream text;
    text << "0x" << std::hex << value;
    return text.str();
  }

  DecodedTrace result_;
  std::vector<std::string> where_;  // ResolveCallstack's frames' places
  std::map<uint32_t, SequenceState> sequences_;
  size_t packet_index_ = 0;
};

struct Slice {
  std::string name;
  uint64_t begin_ns = 0;
  uint64_t end_ns = 0;
  size_t depth = 0;
  const DecodedEvent* begin = nullptr;
};

// The slices of one track, matching each end to the innermost open begin. Broken order or nesting
// lands in `errors`.
inline std::vector<Slice> SlicesOf(const DecodedTrace& trace, uint64_t track_uuid,
                                   std::vector<std::string>* errors) {
  std::vector<Slice> slices;
  std::vector<size_t> open;
  uint64_t last_ns = 0;
  for (const DecodedEvent& event : trace.events) {
    if (event.track_uuid != track_uuid) continue;
    if (event.timestamp_ns < last_ns)
      errors->push_back("track " + std::to_string(track_uuid) + " goes back in time");
    last_ns = event.timestamp_ns;
    if (event.type == kSliceBegin) {
      open.push_back(slices.size());
      slices.push_back(Slice{event.name, event.timestamp_ns, 0, open.size() - 1, &event});
    } else if (event.type == kSliceEnd) {
      if (open.empty()) {
        errors->push_back("end without begin on track " + std::to_string(track_uuid));
        continue;
      }
      slices[open.back()].end_ns = event.timestamp_ns;
      open.pop_back();
    }
  }
  if (!open.empty()) errors->push_back("unclosed slice on track " + std::to_string(track_uuid));
  return slices;
}

// An event's callstack read as a stack's text, innermost frame first, joined by " <- ": its kernel
// frames, each with its offset into its function ("futex_wait+0xf2": the frame's rel_pc in the
// kernel's mapping, "[kernel.kallsyms]"), or its other frames, by name ("libfoo.so+0x1c40",
// "... (truncated)"); empty when it has none of them.
inline std::string CallstackText(const DecodedEvent& event, bool kernel) {
  constexpr std::string_view kKernelFrame = "[k] ", kKernelMapping = "[kernel.kallsyms]+";
  std::string text;
  for (size_t i = event.callstack.size(); i-- > 0;) {
    const std::string& frame = event.callstack[i];
    if (frame.starts_with(kKernelFrame) != kernel) continue;
    if (!text.empty()) text += " <- ";
    if (!kernel) {
      text += frame;
      continue;
    }
    text += frame.substr(kKernelFrame.size());
    const std::string where = i < event.callstack_where.size() ? event.callstack_where[i] : "";
    text += where.starts_with(kKernelMapping) ? where.substr(kKernelMapping.size() - 1)
                                              : " (not in the kernel's mapping: '" + where + "')";
  }
  return text;
}

// The trace in `path`, decoded; a file that cannot be read gives a trace with that error.
inline DecodedTrace DecodeTraceFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    DecodedTrace trace;
    trace.errors.push_back("cannot read " + path);
    return trace;
  }
  std::stringstream bytes;
  bytes << file.rdbuf();
  return TraceDecoder().Decode(bytes.str());
}

}  // namespace gprof::test
