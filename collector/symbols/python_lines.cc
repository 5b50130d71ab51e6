#include "collector/symbols/python_lines.h"

#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

// 3.9: (bytecode offset increment, signed line increment) pairs (Objects/lnotab_notes.txt).
std::optional<int> LnotabLine(std::span<const uint8_t> table, int32_t firstlineno, int32_t offset) {
  int64_t line = firstlineno;
  int64_t address = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    address += table[i];
    if (address > offset) break;
    line += static_cast<int8_t>(table[i + 1]);
  }
  return static_cast<int>(line);
}

// 3.10: (range length in bytes, signed line delta; -128: no line) pairs, each one range.
std::optional<int> Table310Line(std::span<const uint8_t> table, int32_t firstlineno,
                                int32_t offset) {
  int64_t computed = firstlineno;
  int64_t end = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    int64_t start = end;
    end += table[i];
    int8_t delta = static_cast<int8_t>(table[i + 1]);
    if (delta != -128) computed += delta;
    if (offset >= start && offset < end) {
      if (delta == -128) return std::nullopt;
      return static_cast<int>(computed);
    }
  }
  return std::nullopt;
}

// 3.11 on: entries that start with a byte with bit 7 set: code (bits 3-6) and length in code units
// minus one (bits 0-2), then varints as the code says (Objects/locations.md).
class LocationReader {
 public:
  explicit LocationReader(std::span<const uint8_t> table) : table_(table) {}
  bool at_end() const { return at_ >= table_.size(); }
  uint8_t Byte() { return at_ < table_.size() ? table_[at_++] : (ok_ = false, 0); }
  uint64_t Varint() {
    uint8_t byte = Byte();
    uint64_t value = byte & 63;
    int shift = 6;
    while ((byte & 64) && ok_ && shift < 60) {
      byte = Byte();
      value |= static_cast<uint64_t>(byte & 63) << shift;
      shift += 6;
    }
    return value;
  }
  int64_t SignedVarint() {
    uint64_t value = Varint();
    return (value & 1) ? -static_cast<int64_t>(value >> 1) : static_cast<int64_t>(value >> 1);
  }
  bool ok() const { return ok_; }

 private:
  std::span<const uint8_t> table_;
  size_t at_ = 0;
  bool ok_ = true;
};

std::optional<int> LocationLine(std::span<const uint8_t> table, int32_t firstlineno,
                                int32_t offset) {
  LocationReader reader(table);
  int64_t computed = firstlineno;
  int64_t end = 0;
  while (!reader.at_end()) {
    uint8_t first = reader.Byte();
    if (!(first & 0x80)) return std::nullopt;  // not the start of an entry
    int code = (first >> 3) & 15;
    int64_t start = end;
    end += 2 * ((first & 7) + 1);
    bool no_line = false;
    switch (code) {
      case 15:  // PY_CODE_LOCATION_INFO_NONE
        no_line = true;
        break;
      case 14:  // LONG: line delta, end line delta, column, end column
        computed += reader.SignedVarint();
        reader.Varint();
        reader.Varint();
        reader.Varint();
        break;
      case 13:  // NO_COLUMNS: line delta
        computed += reader.SignedVarint();
        break;
      case 10:
      case 11:
      case 12:  // ONE_LINE0..2: the delta is in the code; two bytes of columns
        computed += code - 10;
        reader.Byte();
        reader.Byte();
        break;
      default:  // SHORT0..9: the same line; one byte of columns
        reader.Byte();
        break;
    }
    if (!reader.ok()) return std::nullopt;
    if (offset >= start && offset < end) {
      if (no_line) return std::nullopt;
      return static_cast<int>(computed);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> PythonLine(uint32_t format, std::span<const uint8_t> linetable,
                              int32_t firstlineno, int32_t offset) {
  if (offset < 0) return firstlineno;
  switch (format) {
    case GPROF_PY_LINES_LNOTAB:
      return LnotabLine(linetable, firstlineno, offset);
    case GPROF_PY_LINES_310:
      return Table310Line(linetable, firstlineno, offset);
    case GPROF_PY_LINES_LOCATIONS:
      return LocationLine(linetable, firstlineno, offset);
    default:
      return std::nullopt;
  }
}

}  // namespace gprof::collector
