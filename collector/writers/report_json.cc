#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/report.h"
#include "collector/writers/report_json_parts.h"
#include "collector/writers/report_ranks.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector {
namespace {

using namespace report_json;

// The top level's freezes are those slow calls were blocked in, in the order of their calls
// (report_view.h): `order` (into Analysis::freezes), and each freeze's place there (-1: none).
struct CallFreezes {
  std::vector<int> order;
  std::vector<int> number;
  int Of(const BlockedCall& blocked) const {
    return blocked.freeze >= 0 ? number[blocked.freeze] : -1;
  }
};

CallFreezes OrderCallFreezes(const Analysis& analysis) {
  CallFreezes freezes;
  freezes.order = FreezesOfCalls(analysis);
  freezes.number.assign(analysis.freezes.size(), -1);
  for (size_t i = 0; i < freezes.order.size(); ++i)
    freezes.number[freezes.order[i]] = static_cast<int>(i);
  return freezes;
}

json ReportJson(const Session& session, const Analysis& analysis, Arrays arrays,
                const CallFreezes& call_freezes) {
  json slow_calls = json::array();
  if (arrays == Arrays::kFilled) {
    for (const BlockedCall& blocked : analysis.blocked_calls)
      slow_calls.push_back(BlockedCallJson(session, blocked, call_freezes.Of(blocked)));
  }
  json freezes = json::array();
  for (int f : call_freezes.order)
    freezes.push_back(FreezeJson(session, analysis, analysis.freezes[f]));
  json report = {{"format", "gprof-run-report"},
                 {"version", 1},
                 {"session", SessionJson(session, analysis)},
                 {"threshold_ns", analysis.options.threshold_ns},
                 {"slow_calls", std::move(slow_calls)},
                 {"freezes", std::move(freezes)},
                 {"gpu", GpuSummaryJson(session, analysis.gpu)},
                 {"tables", TablesJson(session)},
                 {"nvtx_ranges", RangeTableJson(session, analysis)},
                 {"diagnosis", DiagnosisJson(session, analysis, arrays)}};
  // A job's ranks that waited for each other (rank_waits.h), where there were.
  if (!analysis.rank_waits.waits.empty())
    report["ranks"] = RankWaitsJson({{&session, &analysis, 0}}, analysis.rank_waits);
  // NCCL's profiler plugin's records, with their kernels (docs/distributed.md, "NCCL").
  if (!session.nccl_events.empty()) report["nccl"] = NcclRecordsJson(session);
  return report;
}

// Writes json values as json::dump(1, ' ', false, replace) writes them, the same bytes, faster:
// strings of printable ASCII (nearly all of them) are copied as they are and numbers made with
// std::to_chars, into a block handed out whole. What needs more care (other strings, floating
// point) is a scalar, which dump() writes on one line whatever the indentation.
class JsonPrinter {
 public:
  explicit JsonPrinter(const JsonOutput& output) : output_(output) {}
  ~JsonPrinter() { Flush(); }

  void Dump(const json& value, unsigned indent) {
    switch (value.type()) {
      case json::value_t::object:
        return Object(value.get_ref<const json::object_t&>(), indent,
                      [&](const std::string&, const json& member) { Dump(member, indent + 1); });
      case json::value_t::array: {
        const json::array_t& array = value.get_ref<const json::array_t&>();
        return Array(array.size(), indent, [&](size_t i) { Dump(array[i], indent + 1); });
      }
      case json::value_t::string:
        return String(value.get_ref<const std::string&>(), &value);
      case json::value_t::boolean:
        return Append(value.get<bool>() ? "true" : "false");
      case json::value_t::number_integer:
        return Number(value.get<int64_t>());
      case json::value_t::number_unsigned:
        return Number(value.get<uint64_t>());
      case json::value_t::null:
        return Append("null");
      default:  // floating point, binary, discarded
        return Serialize(value);
    }
  }

  // An object's members, each key written here and its value by member(key, value), one level
  // deeper than `indent`.
  template <typename Member>
  void Object(const json::object_t& object, unsigned indent, Member member) {
    if (object.empty()) return Append("{}");
    Append("{\n");
    size_t left = object.size();
    for (const auto& [key, value] : object) {
      Indent(indent + 1);
      String(key, nullptr);
      Append(": ");
      member(key, value);
      if (--left != 0) Append(",\n");
    }
    Append("\n");
    Indent(indent);
    Append("}");
  }

  // An array of `count` elements, the i-th written by element(i), one level deeper than `indent`.
  template <typename Element>
  void Array(size_t count, unsigned indent, Element element) {
    if (count == 0) return Append("[]");
    Append("[\n");
    for (size_t i = 0; i < count; ++i) {
      Indent(indent + 1);
      element(i);
      if (i + 1 != count) Append(",\n");
    }
    Append("\n");
    Indent(indent);
    Append("]");
  }

  // Text written as it is.
  [[gnu::always_inline]] void Append(std::string_view text) {
    if (size_ + text.size() > kBlockBytes) [[unlikely]]
      return AppendLarge(text);
    std::memcpy(block_ + size_, text.data(), text.size());
    size_ += text.size();
  }

  void Indent(unsigned count) {
    while (count > 0) {
      unsigned now = std::min<unsigned>(count, kSpaces.size());
      Append(kSpaces.substr(0, now));
      count -= now;
    }
  }

  void Flush() {
    if (size_ != 0) output_(std::string_view(block_, size_));
    size_ = 0;
  }

 private:
  [[gnu::noinline]] void AppendLarge(std::string_view text) {
    Flush();
    if (text.size() > kBlockBytes) return output_(text);
    std::memcpy(block_, text.data(), text.size());
    size_ = text.size();
  }

  static constexpr size_t kBlockBytes = size_t{64} << 10;
  static constexpr std::string_view kSpaces = "                                ";

  // `value`: the json that holds `text`, or null for an object's key.
  void String(const std::string& text, const json* value) {
    for (char c : text) {
      if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') [[unlikely]]
        return Serialize(value != nullptr ? *value : json(text));
    }
    Append("\"");
    Append(text);
    Append("\"");
  }

  template <typename Integer>
  void Number(Integer number) {
    char text[24];
    auto [end, unused] = std::to_chars(text, text + sizeof(text), number);
    Append(std::string_view(text, static_cast<size_t>(end - text)));
  }

  void Serialize(const json& value) {
    Append(value.dump(1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace));
  }

  const JsonOutput& output_;
  char block_[kBlockBytes];
  size_t size_ = 0;
};

// Writes a report tree as JsonPrinter writes it, but the arrays named in `lazy` (empty in the tree)
// as their elements are made, one at a time.
class ReportWriter {
 public:
  struct LazyArray {
    std::string_view path;  // "/slow_calls", "/diagnosis/stalls"
    size_t count;
    std::function<json(size_t)> element;
  };

  ReportWriter(const JsonOutput& output, std::vector<LazyArray> lazy)
      : printer_(std::make_unique<JsonPrinter>(output)), lazy_(std::move(lazy)) {}

  void Write(const json& value, unsigned indent, const std::string& path) {
    for (const LazyArray& array : lazy_) {
      if (array.count != 0 && array.path == path) {
        return printer_->Array(array.count, indent,
                               [&](size_t i) { printer_->Dump(array.element(i), indent + 1); });
      }
    }
    if (!value.is_object() || !HoldsLazy(path)) return printer_->Dump(value, indent);
    printer_->Object(value.get_ref<const json::object_t&>(), indent,
                     [&](const std::string& key, const json& member) {
                       Write(member, indent + 1, path + "/" + key);
                     });
  }

  // Writes what is gathered onto the output.
  void Flush() { printer_->Flush(); }

 private:
  bool HoldsLazy(const std::string& path) const {
    for (const LazyArray& array : lazy_) {
      if (array.count != 0 && array.path.starts_with(path + "/")) return true;
    }
    return false;
  }

  std::unique_ptr<JsonPrinter> printer_;  // its block is large for the stack
  std::vector<LazyArray> lazy_;
};

}  // namespace

json RenderJsonReport(const Session& session, const Analysis& analysis) {
  return ReportJson(session, analysis, Arrays::kFilled, OrderCallFreezes(analysis));
}

void WriteJsonReport(const Session& session, const Analysis& analysis, const JsonOutput& output) {
  const CallFreezes call_freezes = OrderCallFreezes(analysis);
  std::vector<ReportWriter::LazyArray> lazy = {
      {"/slow_calls", analysis.blocked_calls.size(),
       [&](size_t i) {
         const BlockedCall& blocked = analysis.blocked_calls[i];
         return BlockedCallJson(session, blocked, call_freezes.Of(blocked));
       }},
      {"/diagnosis/stalls", analysis.stalls.size(),
       [&](size_t i) { return StallJson(session, analysis.stalls[i]); }}};
  ReportWriter writer(output, std::move(lazy));
  writer.Write(ReportJson(session, analysis, Arrays::kLeftEmpty, call_freezes), 0, "");
  writer.Flush();
}

}  // namespace gprof::collector
