#include "collector/session/nvtx_records.h"

#include <algorithm>

#include "inject/format/session_format.h"

namespace gprof::collector {

using format::NvtxEventKind;

namespace {

// PyTorch's emit_nvtx names each operator's range "aten::addmm, seq = 12, op_id = 40, sizes =
// [[64, 10]], input_op_ids = [...]": the details of one call. Kept, every range would be a name
// of its own; the operator is the name (docs/nvtx.md).
std::string_view WithoutCallDetails(std::string_view text) {
  for (std::string_view detail : {", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = "}) {
    if (size_t at = text.find(detail); at != std::string_view::npos && at > 0)
      text = text.substr(0, at);
  }
  return text;
}

}  // namespace

uint32_t NvtxRecordDecoder::Intern(const std::string& printable) {
  if (printable.empty()) return 0;
  auto [it, inserted] =
      string_index_->try_emplace(printable, static_cast<uint32_t>(session_->nvtx_strings.size()));
  if (inserted) session_->nvtx_strings.push_back(printable);
  return it->second;
}

bool NvtxRecordDecoder::Decode(const RecordView& record) {
  if (record.type != format::kNvtxEvent) return false;
  format::NvtxEventRecord raw{};
  std::string_view text;
  if (ReadRecord(record.bytes, &raw))
    text = TrailingText<format::NvtxEventRecord>(record.bytes, raw.text_len);
  if (record.bytes.size() < sizeof(raw) || text.size() != raw.text_len ||
      raw.text_len > format::kNvtxMaxText) {
    session_->diagnostics.push_back(
        {path_, record.chunk_offset,
         "malformed NVTX event record skipped (" + RecordPlace(record) + ")"});
    return true;
  }
  pid_ = record.writer_pid;
  uint32_t printable = Intern(PrintableName(WithoutCallDetails(text)));
  switch (static_cast<NvtxEventKind>(raw.kind)) {
    case NvtxEventKind::kDomainCreate:
      domains_[raw.domain_id] = printable;
      return true;
    case NvtxEventKind::kRegisterString:
      strings_[raw.string_id] = printable;
      return true;
    case NvtxEventKind::kNameCategory:
      category_names_[{raw.domain_id, raw.category}] = printable;
      return true;
    case NvtxEventKind::kPush:
    case NvtxEventKind::kPop:
    case NvtxEventKind::kStart:
    case NvtxEventKind::kEnd:
    case NvtxEventKind::kMark:
      events_.push_back({raw.time_ns, raw.range_id, raw.tid, raw.domain_id, raw.string_id,
                         raw.category, raw.kind, printable});
      return true;
    case NvtxEventKind::kNameThread:
      return true;  // the kernel's thread names are what the outputs show
  }
  return true;  // a newer writer's kind: skipped by design
}

uint32_t NvtxRecordDecoder::NameOf(const Event& event) {
  if (event.string_id != 0) {
    auto found = strings_.find(event.string_id);
    return found != strings_.end() ? found->second
                                   : Intern("string#" + std::to_string(event.string_id));
  }
  return event.text;
}

uint32_t NvtxRecordDecoder::CategoryOf(const Event& event) {
  if (event.category == 0) return 0;
  auto found = category_names_.find({event.domain_id, event.category});
  return found != category_names_.end() ? found->second
                                        : Intern("category " + std::to_string(event.category));
}

void NvtxRecordDecoder::Finish(uint64_t end_ns) {
  if (events_.empty()) return;
  // Each thread's events are in order in the file; the threads' are interleaved by buffer.
  std::stable_sort(events_.begin(), events_.end(),
                   [](const Event& a, const Event& b) { return a.time_ns < b.time_ns; });
  end_ns = std::max(end_ns, events_.back().time_ns);
  auto domain_name = [&](uint32_t id) {
    if (id == 0) return uint32_t{0};
    auto found = domains_.find(id);
    return found != domains_.end() ? found->second : Intern("domain#" + std::to_string(id));
  };
  // Open push/pop ranges by (tid, domain), as indexes into `ranges`; open start/end ones by id.
  std::vector<NvtxRange> ranges;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> pushed;
  std::map<uint32_t, uint16_t> depth;  // by tid
  std::map<std::pair<uint32_t, uint64_t>, size_t> started;
  for (const Event& event : events_) {
    NvtxRange range;
    range.start_ns = event.time_ns;
    range.pid = pid_;
    range.tid = event.tid;
    range.name = NameOf(event);
    range.domain = domain_name(event.domain_id);
    range.category = CategoryOf(event);
    switch (static_cast<NvtxEventKind>(event.kind)) {
      case NvtxEventKind::kPush:
        range.depth = depth[event.tid]++;
        pushed[{event.tid, event.domain_id}].push_back(ranges.size());
        ranges.push_back(range);
        break;
      case NvtxEventKind::kPop: {
        auto& stack = pushed[{event.tid, event.domain_id}];
        if (stack.empty()) break;  // a pop without its push (pushed before recording began)
        ranges[stack.back()].end_ns = event.time_ns;
        stack.pop_back();
        --depth[event.tid];
        break;
      }
      case NvtxEventKind::kStart:
        range.start_end = 1;
        started[{event.domain_id, event.range_id}] = ranges.size();
        ranges.push_back(range);
        break;
      case NvtxEventKind::kEnd: {
        auto found = started.find({event.domain_id, event.range_id});
        if (found == started.end()) break;
        ranges[found->second].end_ns = event.time_ns;
        started.erase(found);
        break;
      }
      case NvtxEventKind::kMark:
        session_->nvtx_marks.push_back({event.time_ns, pid_, event.tid, range.name, range.domain});
        break;
      default:
        break;
    }
  }
  for (NvtxRange& range : ranges) {
    if (range.end_ns == 0) {
      range.end_ns = end_ns;
      range.open = 1;
    }
    session_->nvtx_ranges.push_back(range);
  }
}

}  // namespace gprof::collector
