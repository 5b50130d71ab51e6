#include "collector/session/nccl_records.h"

#include "inject/format/session_format.h"

namespace gprof::collector {

uint32_t NcclRecordDecoder::Intern(std::string_view text) {
  if (text.empty()) return 0;
  std::string printable = PrintableName(text);
  auto [it, inserted] =
      names_.try_emplace(printable, static_cast<uint32_t>(session_->nccl_names.size()));
  if (inserted) session_->nccl_names.push_back(printable);
  return it->second;
}

bool NcclRecordDecoder::Decode(const RecordView& record) {
  if (record.type != format::kNcclEvent) return false;
  format::NcclEventRecord raw{};
  std::string_view texts;
  if (ReadRecord(record.bytes, &raw))
    texts = TrailingText<format::NcclEventRecord>(record.bytes,
                                                  uint64_t{raw.func_len} + raw.datatype_len);
  if (record.bytes.size() < sizeof(raw) ||
      texts.size() != uint64_t{raw.func_len} + raw.datatype_len || raw.stop_ns < raw.start_ns) {
    session_->diagnostics.push_back(
        {path_, record.chunk_offset,
         "malformed NCCL event record skipped (" + RecordPlace(record) + ")"});
    return true;
  }
  if (raw.kind < 1 || raw.kind > 3) return true;  // a newer writer's kind: skipped by design
  NcclEvent event;
  event.pid = record.writer_pid;
  event.tid = raw.tid;
  event.start_ns = raw.start_ns;
  event.stop_ns = raw.stop_ns;
  event.comm_hash = raw.comm_hash;
  event.seq_number = raw.seq_number;
  event.count = raw.count;
  event.rank = raw.rank;
  event.n_ranks = raw.n_ranks;
  event.peer = raw.peer;
  event.kind = raw.kind;
  event.flags = raw.flags;
  event.version = raw.version;
  event.func = Intern(texts.substr(0, raw.func_len));
  event.datatype = Intern(texts.substr(raw.func_len));
  session_->nccl_events.push_back(event);
  return true;
}

}  // namespace gprof::collector
