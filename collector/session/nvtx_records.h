// Decodes the NVTX events of an inject file (format::NvtxEventRecord) into the session's ranges
// and marks: push/pop paired per thread and domain, start/end by id, names resolved from the
// process's domains, registered strings and categories. Malformed records become Diagnostics.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"

namespace gprof::collector {

// The session's NVTX texts, each stored once in Session::nvtx_strings.
using NvtxStringIndex = std::unordered_map<std::string, uint32_t>;

// One per inject file (one process): NVTX ids are the process's own.
class NvtxRecordDecoder {
 public:
  NvtxRecordDecoder(Session* session, NvtxStringIndex* strings, std::string path)
      : session_(session), string_index_(strings), path_(std::move(path)) {}

  // Decodes `record` when it is an NVTX event; false when its type is not.
  bool Decode(const RecordView& record);

  // After the whole file: appends the file's ranges and marks to the session (unsorted). Ranges
  // still open end at `end_ns`, or at the file's last event where that is later.
  void Finish(uint64_t end_ns);

 private:
  struct Event {
    uint64_t time_ns;
    uint64_t range_id;
    uint32_t tid;
    uint32_t domain_id;
    uint32_t string_id;
    uint32_t category;
    uint16_t kind;
    uint32_t text;  // Session::nvtx_strings
  };
  uint32_t Intern(const std::string& printable);
  uint32_t NameOf(const Event& event);
  uint32_t CategoryOf(const Event& event);

  Session* session_;
  NvtxStringIndex* string_index_;
  std::string path_;
  uint32_t pid_ = 0;
  std::vector<Event> events_;
  std::unordered_map<uint32_t, uint32_t> domains_;                    // id -> nvtx_strings
  std::unordered_map<uint32_t, uint32_t> strings_;                    // id -> nvtx_strings
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> category_names_;  // (domain, category)
};

}  // namespace gprof::collector
