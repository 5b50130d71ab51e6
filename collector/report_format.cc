#include "report_format.h"

#include <algorithm>
#include <cstdio>

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

std::string DescribeAddress(const Session& session, uint32_t pid, uint64_t address) {
  const Mapping* mapping = session.FindMapping(pid, address);
  if (mapping == nullptr) return {};
  if (mapping->path.empty()) return "anonymous memory";
  std::string name = mapping->path;
  if (name.front() == '/') name = name.substr(name.rfind('/') + 1);
  if (name.front() == '[') return name;  // [heap], [stack]
  return name + "+" + FormatHex(address - mapping->start + mapping->file_offset);
}

std::string DescribeWaitObject(const Session& session, const WaitObject& object) {
  if (!object.is_futex())
    return object.kernel_function.empty() ? "an unknown wait" : object.kernel_function;
  std::string text = "futex " + FormatHex(object.futex_address);
  std::string where = DescribeAddress(session, object.pid, object.futex_address);
  if (!where.empty()) text += " (" + where + ")";
  if (!object.kernel_function.empty()) text += " in " + object.kernel_function;
  return text;
}

}  // namespace gprof::collector
