// Reading /proc/PID/maps as the injected library and the kernel recorder's loader copy it.
#pragma once

#include <string_view>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// The mappings of one snapshot, sorted by start; lines that do not parse are skipped.
std::vector<Mapping> ParseMaps(std::string_view text);

}  // namespace gprof::collector
