// Turns CUPTI activity buffers into session-file records (inject/format/session_format.h): kernels,
// copies, memsets, synchronizations, the driver's module loading, the GPUs' UUIDs, and API calls
// when CUPTI records those itself. Runs on the writer thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "inject/cupti_library.h"
#include "inject/record_sink.h"
#include "inject/shared/capture_windows.h"
#include "inject/shared/recording_limits.h"

namespace gprof::inject {

class GpuRecordEncoder {
 public:
  explicit GpuRecordEncoder(RecordSink* sink) : sink_(sink) {}

  // Encodes every record of a completed buffer; kinds gprof-run does not record are skipped, and
  // so are records that did not start inside `window` (on CLOCK_MONOTONIC).
  // `clock_offset_ns` (CUPTI's clock minus CLOCK_MONOTONIC) is taken off the API call records
  // CUPTI timed itself: those share the session's clock, unlike GPU records, which carry theirs
  // with the ClockOffsetRecords.
  void Encode(const CuptiLibrary& cupti, uint8_t* buffer, size_t valid_size,
              int64_t clock_offset_ns, const RecordingWindow& window,
              const CaptureWindowsState* capture = nullptr);

  // Writes the ApiNameRecord of a CUPTI api id the first time it is used. True when named.
  bool NameApi(uint32_t api_id);

 private:
  uint32_t KernelNameId(const char* name);

  RecordSink* sink_;
  // CUPTI shares one name string among a kernel's records: the pointer is a fast first key.
  std::unordered_map<const char*, uint32_t> name_by_pointer_;
  std::unordered_map<std::string, uint32_t> name_by_text_;
  std::unordered_set<uint32_t> named_apis_;
};

}  // namespace gprof::inject
