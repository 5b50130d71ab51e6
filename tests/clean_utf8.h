// A check for the outputs' text: what the report, report.json and the trace may carry whatever
// names the recorded program used (collector::PrintableName makes them so). Written apart from
// PrintableName, so that one does not check itself.
#pragma once

#include <cstdint>
#include <string_view>

namespace gprof::test {

// Whether `text` is UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) without
// control characters (C0, DEL, C1) other than those `allowed` lists.
inline bool IsCleanUtf8(std::string_view text, std::string_view allowed = {}) {
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 || byte == 0x7f) && allowed.find(static_cast<char>(byte)) == allowed.npos)
        return false;
      ++i;
      continue;
    }
    size_t length = byte >= 0xc2 && byte <= 0xdf   ? 2
                    : byte >= 0xe0 && byte <= 0xef ? 3
                    : byte >= 0xf0 && byte <= 0xf4 ? 4
                                                   : 0;
    if (length == 0 || text.size() - i < length) return false;
    uint32_t code = byte & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = code << 6 | (next & 0x3f);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
      return false;
    if (code <= 0x9f) return false;  // a C1 control
    i += length;
  }
  return true;
}

}  // namespace gprof::test
