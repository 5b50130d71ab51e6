#include "collector/session/session_meta.h"

#include <locale.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "collector/model/value_format.h"
#include "collector/session/session_reader.h"
#include "inject/format/session_json.h"

namespace gprof::collector {
namespace {

using nlohmann::json;
namespace key = format::session_json;

// A number of the text that no double holds (1e400, a 400-digit integer), made a string so that
// the parser takes it (nlohmann's throws out_of_range at such a number, losing the whole file):
// "\u0000" and the number, a string that gprof-run never writes (a C string holds no NUL), so
// that the reader of every field, strings included, can tell it from one the file holds.
constexpr std::string_view kQuoteMark = "\\u0000";
constexpr size_t kQuoteBytes = 2 + kQuoteMark.size();  // bytes a quoting adds to the text

struct QuotedNumber {
  uint64_t offset = 0;  // in the file as it was
  std::string text;
};

bool Overflows(std::string_view token) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);  // '.' whatever the locale
  std::string copy(token);
  return std::isinf(strtod_l(copy.c_str(), nullptr, c_locale));
}

// Scans `text` outside its strings (JSON's grammar is simple enough for that): the numbers that
// overflow, and whether the nesting stays within kMaxSessionMetaDepth (else the offset of the
// first bracket too deep). A text that is not JSON gets past this and fails in the parser.
std::optional<uint64_t> ScanMeta(std::string_view text, std::vector<QuotedNumber>* quoted) {
  int depth = 0;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      ++i;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxSessionMetaDepth) return i;
      ++i;
    } else if (c == '}' || c == ']') {
      depth = std::max(depth - 1, 0);
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = text.find_first_not_of("0123456789+-.eE", i);
      if (end == std::string_view::npos) end = text.size();
      std::string_view token = text.substr(i, end - i);
      if (Overflows(token)) quoted->push_back({i, std::string(token)});
      i = end;
    } else {
      ++i;
    }
  }
  return std::nullopt;
}

// `text` with each of `quoted` made a string.
std::string WithQuotes(std::string_view text, const std::vector<QuotedNumber>& quoted) {
  std::string out;
  out.reserve(text.size() + kQuoteBytes * quoted.size());
  uint64_t at = 0;
  for (const QuotedNumber& number : quoted) {
    out.append(text.substr(at, number.offset - at));
    out += '"';
    out += kQuoteMark;
    out += number.text;
    out += '"';
    at = number.offset + number.text.size();
  }
  out.append(text.substr(at));
  return out;
}

// The top-level members gprof-run writes or wrote: the rest of a file is skipped, unparsed into
// values.
constexpr std::string_view kKnownKeys[] = {key::kVersion,
                                           key::kToolVersion,
                                           key::kCommand,
                                           key::kRootPid,
                                           key::kStart,
                                           key::kEnd,
                                           key::kExit,
                                           key::kFinished,
                                           key::kKernelRecording,
                                           key::kInjectLibrary,
                                           key::kRecordingStopped,
                                           key::kCudaMode,
                                           key::kNvtxTool,
                                           key::kNcclPlugin,
                                           key::kWindow,
                                           key::kMaxSize,
                                           key::kCapture,
                                           key::kRunningAtEnd,
                                           key::kLost,
                                           key::kNestedSessions,
                                           key::kHost,
                                           key::kClockAnchors,
                                           key::kTimeNamespace,
                                           key::kTestRealtimeSkewNs,
                                           key::kRank,
                                           key::kAttach};

// Values kept of one top-level member, the values inside it included. The command's arguments:
// more than Linux lets a command have (about 700,000 empty ones fill its 6 MiB), so that a whole
// command line is kept; any other member holds a few. What a hostile file of tiny values costs
// stays some hundred MiB, not the 5 GB that a tree of 64 MiB of "{}," takes.
constexpr uint64_t kMaxCommandValues = uint64_t{1} << 20;
constexpr uint64_t kMaxMemberValues = 1024;
// --capture-range's windows: 1024 of 7 values each (inject/shared/capture_windows.h).
constexpr uint64_t kMaxCaptureValues = 8 * 1024 + 16;

// Builds the file's tree as nlohmann's own parser does, but only of what the reader looks at
// (above), and ends with the parse error as a value instead of an exception.
class BoundedTree final : public nlohmann::json_sax<json> {
 public:
  explicit BoundedTree(json* root) : root_(root) {}

  bool null() override { return Add(json()); }
  bool boolean(bool value) override { return Add(json(value)); }
  bool number_integer(number_integer_t value) override { return Add(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return Add(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return Add(json(value)); }
  bool string(string_t& value) override { return Add(json(std::move(value))); }
  bool binary(binary_t&) override { return Add(json()); }  // not in JSON text
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& name) override {
    if (skipping_ > 0) return true;
    if (open_.size() == 1) {  // a member of the file's object
      skip_value_ =
          std::find(std::begin(kKnownKeys), std::end(kKnownKeys), name) == std::end(kKnownKeys);
      member_limit_ = name == key::kCommand   ? kMaxCommandValues
                      : name == key::kCapture ? kMaxCaptureValues
                                              : kMaxMemberValues;
      member_kept_ = 0;
    }
    key_ = std::move(name);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception&) override {
    error_at_ = position;
    return false;
  }

  // Where the text stopped being JSON: nlohmann's count, from 1, of the byte that does not fit.
  std::optional<uint64_t> error_at() const { return error_at_; }
  uint64_t dropped() const { return dropped_; }

 private:
  // Places `value` where the text puts it; the place, or nullptr when it is skipped.
  json* Place(json&& value) {
    if (skipping_ > 0) return nullptr;
    if (skip_value_) {
      skip_value_ = false;
      return nullptr;
    }
    if (open_.empty()) return &(*root_ = std::move(value));
    if (member_kept_ == member_limit_) {
      ++dropped_;
      return nullptr;
    }
    ++member_kept_;
    json& parent = *open_.back();
    if (parent.is_array()) return &parent.emplace_back(std::move(value));
    return &(parent[key_] = std::move(value));
  }
  bool Add(json&& value) {
    Place(std::move(value));
    return true;
  }
  bool Open(json&& empty) {
    if (json* placed = Place(std::move(empty)))
      open_.push_back(placed);
    else
      ++skipping_;
    return true;
  }
  bool Close() {
    if (skipping_ > 0)
      --skipping_;
    else if (!open_.empty())
      open_.pop_back();
    return true;
  }

  json* root_;
  // The containers being filled, innermost last: a pointer stays valid, as a container's members
  // are only added to while it is the innermost, and it is the last of its parent's.
  std::vector<json*> open_;
  std::string key_;
  bool skip_value_ = false;  // the member whose key was just read is skipped
  uint64_t skipping_ = 0;    // depth inside a container being skipped
  uint64_t member_kept_ = 0;
  uint64_t member_limit_ = kMaxMemberValues;
  uint64_t dropped_ = 0;
  std::optional<uint64_t> error_at_;
};

// Reads the fields of the parsed file, each checked for its type and range. A field that is
// absent or null is unknown, silently (older sessions lack newer fields; gprof-run writes null
// for an option not given); one of another type or out of range gets a diagnostic line that names
// it, then is unknown too.
class MetaReader {
 public:
  MetaReader(const std::string& path, Session* session, const std::vector<QuotedNumber>& quoted)
      : path_(path), session_(session), quoted_(quoted) {
    for (const QuotedNumber& number : quoted) quoted_texts_.insert(number.text);
  }

  // Whether `value` is one of the numbers made a string (QuotedNumber); the number in *number.
  bool IsQuotedNumber(const json& value, std::string_view* number = nullptr) const {
    if (quoted_texts_.empty() || !value.is_string()) return false;
    std::string_view text = value.get_ref<const std::string&>();
    if (!text.starts_with('\0') || !quoted_texts_.contains(text.substr(1))) return false;
    if (number != nullptr) *number = text.substr(1);
    return true;
  }
  ~MetaReader() {
    if (unreported_ > 0) {
      session_->diagnostics.push_back(
          {path_, 0,
           std::to_string(unreported_) + " more fields of the wrong type or range ignored"});
    }
  }

  // `object`'s member `key`, or nullptr when it is absent or null. In what follows, `where` names
  // `object` in messages: "" for the file's top level, "start", "recording_stopped[2]".
  static const json* Member(const json& object, const char* key) {
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  template <typename T>
  std::optional<T> Integer(const json& object, const std::string& where, const char* key,
                           T min = std::numeric_limits<T>::min(),
                           T max = std::numeric_limits<T>::max()) {
    const json* value = Member(object, key);
    if (value == nullptr) return std::nullopt;
    // Compared as the type nlohmann holds it in, before any conversion that could wrap.
    if (value->is_number_unsigned()) {
      uint64_t number = value->get<uint64_t>();
      if (std::cmp_greater_equal(number, min) && std::cmp_less_equal(number, max))
        return static_cast<T>(number);
    } else if (value->is_number_integer()) {
      int64_t number = value->get<int64_t>();
      if (std::cmp_greater_equal(number, min) && std::cmp_less_equal(number, max))
        return static_cast<T>(number);
    }
    Bad(where, key, *value,
        "a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    return std::nullopt;
  }

  // A number of seconds: finite (JSON has no NaN nor infinity) and not negative.
  std::optional<double> Seconds(const json& object, const std::string& where, const char* key) {
    const json* value = Member(object, key);
    if (value == nullptr) return std::nullopt;
    if (value->is_number() && value->get<double>() >= 0) return value->get<double>();
    Bad(where, key, *value, "a number of seconds, 0 or more");
    return std::nullopt;
  }

  std::optional<bool> Boolean(const json& object, const std::string& where, const char* key) {
    const json* value = Member(object, key);
    if (value == nullptr) return std::nullopt;
    if (value->is_boolean()) return value->get<bool>();
    Bad(where, key, *value, "true or false");
    return std::nullopt;
  }

  // Printable (model.h): the file's strings may hold any character.
  std::optional<std::string> String(const json& object, const std::string& where, const char* key) {
    const json* value = Member(object, key);
    if (value == nullptr) return std::nullopt;
    if (value->is_string() && !IsQuotedNumber(*value))
      return PrintableName(value->get_ref<const std::string&>());
    Bad(where, key, *value, "a string");
    return std::nullopt;
  }

  // An object member, or nullptr when it is absent, null or not an object (said).
  const json* Object(const json& object, const std::string& where, const char* key) {
    const json* value = Member(object, key);
    if (value == nullptr || value->is_object()) return value;
    Bad(where, key, *value, "an object");
    return nullptr;
  }

  // An array member, or nullptr as for Object.
  const json* Array(const json& object, const std::string& where, const char* key) {
    const json* value = Member(object, key);
    if (value == nullptr) return nullptr;
    if (value->is_array()) return value;
    Bad(where, key, *value, "an array");
    return nullptr;
  }

  // An element of an array member that is not what it must be.
  void BadElement(const std::string& array, size_t index, const json& value,
                  const std::string& expected) {
    Bad(array + "[" + std::to_string(index) + "]", nullptr, value, expected);
  }

 private:
  // Lines past this many are counted in one: a hostile file could hold millions of bad fields.
  static constexpr size_t kMaxLines = 16;

  void Bad(const std::string& where, const char* key, const json& value,
           const std::string& expected) {
    if (lines_ == kMaxLines) {
      ++unreported_;
      return;
    }
    ++lines_;
    std::string field = key == nullptr ? where : where.empty() ? key : where + "." + key;
    uint64_t offset = 0;
    std::string shown;
    if (std::string_view number; IsQuotedNumber(value, &number)) {
      for (const QuotedNumber& quoted : quoted_) {
        if (quoted.text == number) {
          offset = quoted.offset;
          break;
        }
      }
      shown = PrintableName(Shortened(number, 40)) + (number.size() > 40 ? "..." : "");
    } else if (value.is_string()) {
      shown = "a string";
    } else if (value.is_number() || value.is_boolean()) {
      shown = value.dump();
    } else {
      shown = value.is_object() ? "an object" : "an array";
    }
    session_->diagnostics.push_back({path_, offset,
                                     "field " + PrintableName(Shortened(field, 80)) + ": " + shown +
                                         " is not " + expected + "; ignored"});
  }

  const std::string& path_;
  Session* session_;
  const std::vector<QuotedNumber>& quoted_;
  std::unordered_set<std::string_view> quoted_texts_;
  size_t lines_ = 0;
  size_t unreported_ = 0;
};

// What the recording window and the size cap were, when they were set.
void ReadOptions(MetaReader& read, const json& meta, SessionMeta* out) {
  if (const json* window = read.Object(meta, "", key::kWindow)) {
    SessionMeta::Window& bounds = out->window.emplace();
    bounds.delay_s = read.Seconds(*window, key::kWindow, key::kWindowDelayS).value_or(0);
    bounds.duration_s = read.Seconds(*window, key::kWindow, key::kWindowDurationS).value_or(0);
    bounds.start_monotonic_ns =
        read.Integer<uint64_t>(*window, key::kWindow, key::kWindowStartNs).value_or(0);
    bounds.end_monotonic_ns =
        read.Integer<uint64_t>(*window, key::kWindow, key::kWindowEndNs).value_or(0);
  }
  if (const json* capture = read.Object(meta, "", key::kCapture)) {
    SessionMeta::Capture& range = out->capture.emplace();
    range.range = read.String(*capture, key::kCapture, key::kCaptureRange).value_or("");
    range.refused_opens =
        read.Integer<uint64_t>(*capture, key::kCapture, key::kCaptureRefusedOpens).value_or(0);
    if (const json* windows = read.Array(*capture, key::kCapture, key::kCaptureWindows)) {
      for (size_t i = 0; i < windows->size(); ++i) {
        const json& entry = (*windows)[i];
        std::string where =
            std::string(key::kCapture) + "." + key::kCaptureWindows + "[" + std::to_string(i) + "]";
        if (!entry.is_object()) continue;
        CaptureWindow window;
        window.start_monotonic_ns =
            read.Integer<uint64_t>(entry, where, key::kCaptureStartNs).value_or(0);
        window.end_monotonic_ns =
            read.Integer<uint64_t>(entry, where, key::kCaptureEndNs).value_or(0);
        window.opened_by = read.String(entry, where, key::kCaptureOpenedBy).value_or("");
        window.closed_by = read.String(entry, where, key::kCaptureClosedBy).value_or("");
        window.open_pid = read.Integer<uint32_t>(entry, where, key::kCaptureOpenPid).value_or(0);
        window.close_pid = read.Integer<uint32_t>(entry, where, key::kCaptureClosePid).value_or(0);
        if (window.start_monotonic_ns != 0) range.windows.push_back(std::move(window));
      }
    }
    if (const json* flight = read.Object(*capture, key::kCapture, key::kFlight)) {
      const std::string where = std::string(key::kCapture) + "." + key::kFlight;
      FlightRecording& kept = range.flight.emplace();
      kept.keep_ns = read.Integer<uint64_t>(*flight, where, key::kFlightKeepNs).value_or(0);
      kept.freeze_ns = read.Integer<uint64_t>(*flight, where, key::kFlightFreezeNs).value_or(0);
      kept.hang_ns = read.Integer<uint64_t>(*flight, where, key::kFlightHangNs).value_or(0);
      kept.ended_by = read.String(*flight, where, key::kFlightEndedBy).value_or("");
      kept.fired_monotonic_ns =
          read.Integer<uint64_t>(*flight, where, key::kFlightFiredNs).value_or(0);
      kept.duration_ns = read.Integer<uint64_t>(*flight, where, key::kFlightDurationNs).value_or(0);
      kept.pid = read.Integer<uint32_t>(*flight, where, key::kFlightPid).value_or(0);
      kept.tid = read.Integer<uint32_t>(*flight, where, key::kFlightTid).value_or(0);
      kept.api_id = read.Integer<uint32_t>(*flight, where, key::kFlightApiId).value_or(0);
      kept.freeze_kind = read.String(*flight, where, key::kFlightFreezeKind).value_or("call");
      kept.threads = read.Integer<uint32_t>(*flight, where, key::kFlightThreads).value_or(0);
    }
  }
  if (const json* attach = read.Object(meta, "", key::kAttach)) {
    AttachedRecording& attached = out->attach.emplace();
    const std::string where = key::kAttach + std::string(".") + key::kAttachPids;
    if (const json* pids = read.Array(*attach, key::kAttach, key::kAttachPids)) {
      for (size_t i = 0; i < pids->size(); ++i) {
        const json& pid = (*pids)[i];
        if (pid.is_number_unsigned() && pid.get<uint64_t>() > 0 && pid.get<uint64_t>() < (1u << 30))
          attached.pids.push_back(pid.get<uint32_t>());
        else
          read.BadElement(where, i, pid, "a process id");
      }
    }
    attached.processes =
        read.Integer<uint32_t>(*attach, key::kAttach, key::kAttachProcesses).value_or(0);
    attached.ended = read.String(*attach, key::kAttach, key::kAttachEnded).value_or("");
  }
  if (const json* size = read.Object(meta, "", key::kMaxSize)) {
    SessionMeta::MaxSize& cap = out->max_size.emplace();
    cap.limit_bytes =
        read.Integer<uint64_t>(*size, key::kMaxSize, key::kMaxSizeLimitBytes).value_or(0);
    cap.used_bytes =
        read.Integer<uint64_t>(*size, key::kMaxSize, key::kMaxSizeUsedBytes).value_or(0);
    cap.stopped_at_monotonic_ns =
        read.Integer<uint64_t>(*size, key::kMaxSize, key::kMaxSizeStoppedAtNs).value_or(0);
    cap.refused_records =
        read.Integer<uint64_t>(*size, key::kMaxSize, key::kMaxSizeRefusedRecords).value_or(0);
    cap.refused_bytes =
        read.Integer<uint64_t>(*size, key::kMaxSize, key::kMaxSizeRefusedBytes).value_or(0);
  }
}

// session.json's text as a bounded tree, its numbers too large for JSON's readers quoted
// (`quoted`); nothing, with why in the session's diagnostics, when it is nested too deep, is not
// JSON or is not an object.
std::optional<json> ParseMetaTree(std::string_view text, const std::string& path, Session* session,
                                  std::vector<QuotedNumber>* quoted) {
  if (auto deep = ScanMeta(text, quoted)) {
    session->diagnostics.push_back(
        {path, *deep,
         "nested deeper than " + std::to_string(kMaxSessionMetaDepth) +
             " levels (gprof-run writes 3): not read; the run's command and exit status are "
             "unknown"});
    return std::nullopt;
  }
  json meta;
  BoundedTree tree(&meta);
  std::string quoted_text = quoted->empty() ? std::string() : WithQuotes(text, *quoted);
  json::sax_parse(quoted->empty() ? text : std::string_view(quoted_text), &tree);
  if (tree.error_at()) {
    // At the first byte that does not fit, in the text with quotes added.
    uint64_t offset = *tree.error_at() > 0 ? *tree.error_at() - 1 : 0;
    size_t before = 0;
    while (before < quoted->size() && (*quoted)[before].offset + kQuoteBytes * before < offset)
      ++before;
    offset -= std::min<uint64_t>(offset, kQuoteBytes * before);
    session->diagnostics.push_back(
        {path, offset, "not valid JSON: the run's command and exit status are unknown"});
    return std::nullopt;
  }
  if (tree.dropped() > 0) {
    session->diagnostics.push_back(
        {path, 0,
         "holds more values than gprof-run writes: " + std::to_string(tree.dropped()) +
             " ignored (past " + std::to_string(kMaxCommandValues) + " in the command, " +
             std::to_string(kMaxMemberValues) + " in any other field)"});
  }
  if (!meta.is_object()) {
    session->diagnostics.push_back(
        {path, 0, "not a JSON object: the run's command and exit status are unknown"});
    return std::nullopt;
  }
  return meta;
}

// The top-level object `key`, or an empty one where it is absent (or is no object: said).
const json& TopObject(MetaReader& read, const json& meta, const char* name) {
  static const json kNone = json::object();
  const json* value = read.Object(meta, "", name);
  return value != nullptr ? *value : kNone;
}

// The run itself: its command, its start and end, how it ended, and whether it was cut short.
void ReadRun(MetaReader& read, const json& meta, SessionMeta* out) {
  out->tool_version = read.String(meta, "", key::kToolVersion).value_or("");
  if (const json* command = read.Array(meta, "", key::kCommand)) {
    for (size_t i = 0; i < command->size(); ++i) {
      const json& arg = (*command)[i];
      if (arg.is_string() && !read.IsQuotedNumber(arg))
        out->command.push_back(PrintableName(arg.get_ref<const std::string&>()));
      else
        read.BadElement(key::kCommand, i, arg, "a string");
    }
  }
  out->root_pid = read.Integer<uint32_t>(meta, "", key::kRootPid).value_or(0);
  const json& start = TopObject(read, meta, key::kStart);
  out->start_monotonic_ns = read.Integer<uint64_t>(start, key::kStart, key::kStartMonotonicNs).value_or(0);
  out->start_realtime_ns = read.Integer<uint64_t>(start, key::kStart, key::kStartRealtimeNs).value_or(0);
  out->start_boottime_ns = read.Integer<uint64_t>(start, key::kStart, key::kStartBoottimeNs).value_or(0);
  out->end_monotonic_ns =
      read.Integer<uint64_t>(TopObject(read, meta, key::kEnd), key::kEnd, key::kEndMonotonicNs).value_or(0);
  const json& exit = TopObject(read, meta, key::kExit);
  out->exit_code = read.Integer<int>(exit, key::kExit, key::kExitCode, 0, 255);
  out->exit_signal = read.Integer<int>(exit, key::kExit, key::kExitSignal, 1, SIGRTMAX);
  out->inject_library = read.String(meta, "", key::kInjectLibrary).value_or("");
  out->cuda_mode = read.String(meta, "", key::kCudaMode).value_or("");
  out->nvtx_tool = read.String(meta, "", key::kNvtxTool).value_or("");
  out->nccl_plugin = read.String(meta, "", key::kNcclPlugin).value_or("");
  // Sessions of gprof-run before "finished" was written: an end time meant the same.
  bool finished = read.Boolean(meta, "", key::kFinished).value_or(out->end_monotonic_ns != 0);
  if (!finished) {
    out->cut_short = "gprof_run_ended";
    out->cut_short_text =
        "gprof-run ended before the command did (killed?): the record stops there; the "
        "command's end and exit status are unknown";
  } else if (out->exit_signal) {
    const char* name = sigabbrev_np(*out->exit_signal);
    out->cut_short = "killed_by_signal";
    out->cut_short_text = "the command was killed by signal " + std::to_string(*out->exit_signal) +
                          (name != nullptr ? std::string(" (SIG") + name + ")" : "") +
                          ": the record holds what it did until then";
  }
}

// Each object of the top-level array `name`, with the name messages give it ("lost[2]"); an element
// that is no object is said and skipped.
template <typename ReadEntry>
void ForEachObject(MetaReader& read, const json& meta, const char* name, ReadEntry read_entry) {
  const json* array = read.Array(meta, "", name);
  if (array == nullptr) return;
  for (size_t i = 0; i < array->size(); ++i) {
    const json& entry = (*array)[i];
    if (!entry.is_object()) {
      read.BadElement(name, i, entry, "an object");
      continue;
    }
    read_entry(entry, std::string(name) + "[" + std::to_string(i) + "]");
  }
}

// What the run's end left: recordings that stopped, processes still running, what was lost, and
// the sessions of gprof-runs started inside this one.
void ReadEndings(MetaReader& read, const json& meta, Session* session) {
  ForEachObject(read, meta, key::kRecordingStopped, [&](const json& entry, const std::string& where) {
    RecordingStop stop;
    stop.file = read.String(entry, where, key::kStopFile).value_or("");
    stop.time_ns = read.Integer<uint64_t>(entry, where, key::kStopTimeNs).value_or(0);
    stop.cause = read.String(entry, where, key::kStopCause).value_or("write_failed");
    stop.description = read.String(entry, where, key::kStopReason).value_or("");
    if (!stop.file.empty()) session->recording_stops.push_back(std::move(stop));
  });
  ForEachObject(read, meta, key::kRunningAtEnd, [&](const json& entry, const std::string& where) {
    SessionMeta::Running process;
    process.pid = read.Integer<uint32_t>(entry, where, key::kRunningPid).value_or(0);
    process.still_writing = read.Boolean(entry, where, key::kRunningStillWriting).value_or(false);
    if (process.pid != 0) session->meta.running_at_end.push_back(process);
  });
  // What gprof-run counted as lost that no recording file could say (the calls of a process
  // killed before its writer wrote them).
  ForEachObject(read, meta, key::kLost, [&](const json& entry, const std::string& where) {
    LostEvents events;
    events.what = read.String(entry, where, key::kLostWhat).value_or("");
    std::optional<uint64_t> count = read.Integer<uint64_t>(entry, where, key::kLostCount);
    events.count = count.value_or(0);
    events.count_known = count.has_value();
    if (!events.what.empty()) session->lost.push_back(std::move(events));
  });
  ForEachObject(read, meta, key::kNestedSessions, [&](const json& entry, const std::string& where) {
    NestedSession session_there;
    session_there.pid = read.Integer<uint32_t>(entry, where, key::kNestedPid).value_or(0);
    session_there.directory = read.String(entry, where, key::kNestedDirectory).value_or("");
    session_there.calls = read.Integer<uint64_t>(entry, where, key::kNestedCalls);
    if (!session_there.directory.empty()) session->meta.nested_sessions.push_back(session_there);
  });
}

// Where the session was recorded and how its clock lines up with others': the host, its boot,
// the clock anchors, gprof-run's time namespace, and the launcher's rank. Absent in sessions from
// before them: all unknown then.
void ReadPlace(MetaReader& read, const json& meta, SessionMeta* out) {
  const json& host = TopObject(read, meta, key::kHost);
  out->host_name = read.String(host, key::kHost, key::kHostName).value_or("");
  out->boot_id = read.String(host, key::kHost, key::kHostBootId).value_or("");
  const json& anchors = TopObject(read, meta, key::kClockAnchors);
  auto anchor = [&](const char* name) -> std::optional<ClockAnchor> {
    const json* object = read.Object(anchors, key::kClockAnchors, name);
    if (object == nullptr) return std::nullopt;
    const std::string where = std::string(key::kClockAnchors) + "." + name;
    auto monotonic = read.Integer<uint64_t>(*object, where, key::kAnchorMonotonicNs);
    auto realtime = read.Integer<uint64_t>(*object, where, key::kAnchorRealtimeNs);
    if (!monotonic || !realtime) return std::nullopt;
    return ClockAnchor{
        *monotonic, *realtime,
        read.Integer<uint64_t>(*object, where, key::kAnchorBoottimeNs).value_or(0),
        read.Integer<uint64_t>(*object, where, key::kAnchorUncertaintyNs).value_or(0),
        read.Integer<uint64_t>(*object, where, key::kAnchorRealtimeMaxErrorNs).value_or(0)};
  };
  out->start_anchor = anchor(key::kAnchorsStart);
  out->end_anchor = anchor(key::kAnchorsEnd);
  const json& offsets = TopObject(read, meta, key::kTimeNamespace);
  out->time_namespace_monotonic_ns =
      read.Integer<int64_t>(offsets, key::kTimeNamespace, key::kTimeNamespaceMonotonicNs)
          .value_or(0);
  out->time_namespace_boottime_ns =
      read.Integer<int64_t>(offsets, key::kTimeNamespace, key::kTimeNamespaceBoottimeNs)
          .value_or(0);
  out->test_realtime_skew_ns =
      read.Integer<int64_t>(meta, "", key::kTestRealtimeSkewNs).value_or(0);
  if (const json* rank = read.Object(meta, "", key::kRank)) {
    RankIdentity identity;
    identity.rank = read.Integer<uint32_t>(*rank, key::kRank, key::kRankRank);
    identity.local_rank = read.Integer<uint32_t>(*rank, key::kRank, key::kRankLocalRank);
    identity.world_size = read.Integer<uint32_t>(*rank, key::kRank, key::kRankWorldSize);
    identity.variable = read.String(*rank, key::kRank, key::kRankVariable).value_or("");
    if (identity.rank) out->rank = std::move(identity);
  }
}

}  // namespace

Status ParseSessionMeta(std::string_view text, const std::string& path, Session* session) {
  std::vector<QuotedNumber> quoted;
  std::optional<json> meta = ParseMetaTree(text, path, session, &quoted);
  if (!meta) return {};
  MetaReader read(path, session, quoted);
  // Read whole: a version past int's range must still count as newer, not wrap to an old one.
  uint64_t version = read.Integer<uint64_t>(*meta, "", key::kVersion).value_or(0);
  if (version > static_cast<uint64_t>(kSessionMetaVersion)) {
    return Status::Error(StatusCode::kUnsupported,
                         PrintableName(path) +
                             ": session written by a newer gprof-run (session version " +
                             std::to_string(version) + ", this build reads up to " +
                             std::to_string(kSessionMetaVersion) + ")");
  }
  SessionMeta& out = session->meta;
  out.known = true;
  ReadRun(read, *meta, &out);
  ReadEndings(read, *meta, session);
  ReadPlace(read, *meta, &out);
  const json& kernel = TopObject(read, *meta, key::kKernelRecording);
  out.kernel_recording = read.Boolean(kernel, key::kKernelRecording, key::kKernelEnabled).value_or(false);
  out.kernel_recording_note = read.String(kernel, key::kKernelRecording, key::kKernelNote).value_or("");
  out.kernel_stack_min_ns =
      read.Integer<uint64_t>(kernel, key::kKernelRecording, key::kKernelStackMinNs).value_or(0);
  ReadOptions(read, *meta, &out);
  return {};
}

}  // namespace gprof::collector
