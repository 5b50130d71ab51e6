// Decodes NCCL's profiler plugin events of an inject file (format::NcclEventRecord) into
// Session::nccl_events. Malformed records become Diagnostics.
#pragma once

#include <string>
#include <unordered_map>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"

namespace gprof::collector {

class NcclRecordDecoder {
 public:
  NcclRecordDecoder(Session* session, std::string path)
      : session_(session), path_(std::move(path)) {}

  // Decodes `record` when it is an NCCL event; false when its type is not.
  bool Decode(const RecordView& record);

 private:
  uint32_t Intern(std::string_view text);

  Session* session_;
  std::string path_;
  std::unordered_map<std::string, uint32_t> names_;  // this file's, into Session::nccl_names
};

}  // namespace gprof::collector
