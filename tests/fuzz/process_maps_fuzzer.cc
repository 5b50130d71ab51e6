// ParseMaps on a /proc/PID/maps copy (the injected library's and the loader's snapshots): every
// mapping it keeps must be well formed and the list sorted.
#include <string_view>

#include "collector/session/process_maps.h"
#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gprof;
  auto maps = collector::ParseMaps(std::string_view(reinterpret_cast<const char*>(data), size));
  for (size_t i = 0; i < maps.size(); ++i) {
    if (i > 0 && maps[i].start < maps[i - 1].start) fuzz::Finding("mappings not sorted");
    if (maps[i].path.find('\n') != std::string::npos) fuzz::Finding("a path with a newline");
  }
  return 0;
}
