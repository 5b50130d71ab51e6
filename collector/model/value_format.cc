#include "collector/model/value_format.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace gprof::collector {

std::string FormatDuration(uint64_t ns) {
  char text[32];
  if (ns < 1000) {
    snprintf(text, sizeof(text), "%llu ns", static_cast<unsigned long long>(ns));
  } else if (ns < 1000000) {
    snprintf(text, sizeof(text), "%.1f us", ns / 1e3);
  } else if (ns < 1000000000) {
    snprintf(text, sizeof(text), "%.1f ms", ns / 1e6);
  } else {
    snprintf(text, sizeof(text), "%.3f s", ns / 1e9);
  }
  return text;
}

uint64_t SessionOrigin(const Session& session) {
  if (session.meta.start_monotonic_ns != 0) return session.meta.start_monotonic_ns;
  uint64_t origin = UINT64_MAX;
  if (!session.api_calls.empty()) origin = std::min(origin, session.api_calls.front().enter_ns);
  if (!session.off_cpu.empty()) origin = std::min(origin, session.off_cpu.front().start_ns);
  if (!session.futex_calls.empty()) origin = std::min(origin, session.futex_calls.front().start_ns);
  return origin == UINT64_MAX ? 0 : origin;
}

std::string FormatOffset(const Session& session, uint64_t time_ns) {
  uint64_t origin = SessionOrigin(session);
  char text[32];
  if (time_ns >= origin) {
    snprintf(text, sizeof(text), "+%.3f s", (time_ns - origin) / 1e9);
  } else {
    snprintf(text, sizeof(text), "-%.3f s", (origin - time_ns) / 1e9);
  }
  return text;
}

std::string FormatHex(uint64_t value) {
  char text[24];
  snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string Shortened(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return std::string(text.substr(0, cut));
}

std::string ShortenedWithLength(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return Shortened(text, max_bytes) + "... (" + WithThousands(text.size()) + " bytes)";
}

std::string CommandLineText(const std::vector<std::string>& command, size_t max_bytes) {
  std::string text;
  size_t bytes = 0;
  for (const std::string& arg : command) {
    bytes += arg.size() + (bytes > 0 ? 1 : 0);
    if (text.size() > max_bytes) continue;  // counted, not joined: a command line can be MBs
    if (!text.empty()) text += ' ';
    text += arg.find(' ') == std::string::npos ? arg : "'" + arg + "'";
  }
  if (text.size() <= max_bytes) return text;
  return Shortened(text, max_bytes) + "... (" + WithThousands(bytes) + " bytes, " +
         WithThousands(command.size()) + " arguments)";
}

std::string WithThousands(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string FormatShare(uint64_t part, uint64_t whole) {
  if (whole == 0 || part >= whole) return "100%";
  // Rounded down, so that 100% means all of it.
  auto percent = static_cast<unsigned>(part * 100.0 / whole);
  if (percent == 0) return part == 0 ? "0%" : "<1%";
  return std::to_string(percent) + "%";
}

}  // namespace gprof::collector
