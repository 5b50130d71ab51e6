// The trace's interned data: the numbering of its strings (event names, categories, annotation
// names and strings, function names, mapping paths) and of its frames and callstacks, one for the
// whole trace. The writers of events intern what they name; the packet writer (packet_writer.h)
// carries each entry once per sequence (packet_sequence.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/writers/perfetto/perfetto_fields.h"

namespace gprof::collector::perfetto {

// The tables of InternedData this writer fills: strings, then the frames and callstacks
// (CallstackInterner), which are no strings but are carried once per sequence the same way.
enum class InternTable : uint8_t {
  kEventNames,
  kCategories,
  kAnnotationNames,
  kAnnotationStrings,
  kFunctionNames,
  kMappingPaths,
  kMappings,
  kFrames,
  kCallstacks,
};
constexpr size_t kInternTableCount = 9;

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
    case InternTable::kFunctionNames:
      return InternedDataField::kFunctionNames;
    case InternTable::kMappingPaths:
      return InternedDataField::kMappingPaths;
    case InternTable::kMappings:
      return InternedDataField::kMappings;
    case InternTable::kFrames:
      return InternedDataField::kFrames;
    case InternTable::kCallstacks:
      return InternedDataField::kCallstacks;
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

// Stacks as Perfetto callstacks, so that its UI shows them as stacks and aggregates them: a frame
// is a function's name (InternTable::kFunctionNames), its kind, and where its code is (the mapped
// file, a mapping named by its path, and the offset into it); a callstack its frames outermost
// first. Numbered once for the whole trace, carried once per sequence, like strings.
class CallstackInterner {
 public:
  enum class Kind : uint8_t { kNative = 1, kKernel = 2, kInterpreted = 3 };  // Frame.Kind's
  struct Frame {
    uint64_t function_iid;
    Kind kind;
    uint64_t mapping_iid;  // 0: none (the kernel's code, an address no file holds)
    uint64_t rel_pc;       // into the mapped file
  };
  explicit CallstackInterner(StringInterner& strings) : strings_(strings) {}

  // `module`: the mapped file's name, empty for none.
  uint64_t InternFrame(std::string_view function, Kind kind, std::string_view module = {},
                       uint64_t rel_pc = 0) {
    uint64_t function_iid = strings_.Intern(InternTable::kFunctionNames, function);
    uint64_t mapping_iid = 0;
    if (!module.empty()) {
      uint64_t path_iid = strings_.Intern(InternTable::kMappingPaths, module);
      auto [mapping, added] = mapping_iids_.try_emplace(path_iid, mapping_paths_.size() + 1);
      if (added) mapping_paths_.push_back(path_iid);
      mapping_iid = mapping->second;
    } else {
      rel_pc = 0;
    }
    auto [entry, inserted] = frame_iids_.try_emplace(
        std::make_tuple(function_iid, kind, mapping_iid, rel_pc), frames_.size() + 1);
    if (inserted) frames_.push_back({function_iid, kind, mapping_iid, rel_pc});
    return entry->second;
  }
  // The path string of a mapping.
  uint64_t MappingPath(uint64_t mapping_iid) const { return mapping_paths_[mapping_iid - 1]; }
  // `frames` outermost first; 0 for none.
  uint64_t Intern(const std::vector<uint64_t>& frames) {
    if (frames.empty()) return 0;
    auto [entry, inserted] = callstack_iids_.try_emplace(frames, callstacks_.size() + 1);
    if (inserted) callstacks_.push_back(&entry->first);
    return entry->second;
  }
  const Frame& FrameOf(uint64_t iid) const { return frames_[iid - 1]; }
  const std::vector<uint64_t>& FramesOf(uint64_t iid) const { return *callstacks_[iid - 1]; }

 private:
  StringInterner& strings_;
  std::map<uint64_t, uint64_t> mapping_iids_;  // by path iid
  std::vector<uint64_t> mapping_paths_;        // by mapping iid - 1
  std::map<std::tuple<uint64_t, Kind, uint64_t, uint64_t>, uint64_t> frame_iids_;
  std::vector<Frame> frames_;  // by iid - 1
  std::map<std::vector<uint64_t>, uint64_t> callstack_iids_;
  std::vector<const std::vector<uint64_t>*> callstacks_;  // by iid - 1; the map's keys
};

}  // namespace gprof::collector::perfetto
