// report.json's parts, made by the files that write them (report_json_*.cc) and put together by
// report_json.cc: the waits, calls and stacks; the session; the diagnosis. Internal to report.json.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/symbols/python_frames.h"

namespace gprof::collector::report_json {

using nlohmann::json;

// An object from a braced list of fields, Object({{"key", value}, ...}). nlohmann's own braced
// lists make a two-element array and a heap string of each field before moving them into the
// object, about four allocations a field where this takes one or two; report.json's thousands of
// waits made that a good part of the collector's time. The same object either way (a repeated
// key keeps its first value). `value` is mutable so that it moves out of the list's const element.
struct Field {
  const char* key;
  mutable json value;
};
inline json Object(std::initializer_list<Field> fields) {
  json object = json::object();
  for (const Field& field : fields) object.emplace(field.key, std::move(field.value));
  return object;
}

inline json Optional(const std::optional<int>& value) {
  return value ? json(*value) : json(nullptr);
}

inline json IndexOrNull(int index) { return index >= 0 ? json(index) : json(nullptr); }

// The arrays that grow with the session (slow calls, stalls): filled, or left empty for
// WriteJsonReport to write an element at a time.
enum class Arrays : uint8_t { kFilled, kLeftEmpty };

// report_json_waits.cc: a thread named, a CUDA call, a GPU activity, a wait object, a wait, a slow
// call, what a thread ran on CPU, a memory map call, a freeze slow calls were blocked in.
json ThreadRef(const Session& session, uint32_t tid);
json PythonStackJson(const Session& session, const PythonStack* stack,
                     ResolvedPythonStack* resolved = nullptr);
json CallJson(const Session& session, const ApiCall* call);
json ActivityJson(const Session& session, const GpuActivity* activity);
json ObjectJson(const Session& session, const std::optional<WaitObject>& object);
json WaitJson(const Session& session, const Wait& wait);
json MemoryMapCallJson(const MemoryMapCall* call);
json OnCpuJson(const OnCpuActivity& ran);
// Where the program said it was (NVTX ranges, outermost first): {"text": "in train_step >
// forward", "ranges": [{"name", "domain", "thread", "start_ns", "end_ns"}...]}; null when none.
json InRangesJson(const Session& session, const std::vector<uint32_t>& ranges);
// The RANGES table (Analysis::ranges).
json RangeTableJson(const Session& session, const Analysis& analysis);
// `freeze_number`: the index of the freeze it was blocked in among the top level's freezes, or -1.
json BlockedCallJson(const Session& session, const BlockedCall& blocked, int freeze_number);
json FreezeJson(const Session& session, const Analysis& analysis, const Freeze& numbered);

// report_json_session.cc: the session as recorded, the GPU summary, the tables.
json SessionJson(const Session& session, const Analysis& analysis);
json GpuSummaryJson(const Session& session, const GpuSummary& gpu);
json TablesJson(const Session& session);

// report_json_diagnosis.cc: a stall with its chain; the diagnosis.
json StallJson(const Session& session, const Stall& stall);
json DiagnosisJson(const Session& session, const Analysis& diagnosis, Arrays arrays);

}  // namespace gprof::collector::report_json
