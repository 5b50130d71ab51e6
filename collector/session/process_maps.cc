#include "collector/session/process_maps.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

namespace gprof::collector {

std::vector<Mapping> ParseMaps(std::string_view text) {
  std::vector<Mapping> maps;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    // "7f3a1c000000-7f3a1c021000 r-xp 00002000 08:01 1234    /usr/lib/libcuda.so.1"
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {};
    int path_at = 0;
    if (sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %llu %n", &start, &end, perms, &offset, &inode,
               &path_at) < 5) {
      continue;
    }
    Mapping mapping;
    mapping.start = start;
    mapping.end = end;
    mapping.file_offset = offset;
    mapping.perms = perms;
    mapping.inode = inode;
    if (path_at > 0 && static_cast<size_t>(path_at) < line.size())
      mapping.path = line.substr(path_at);
    maps.push_back(std::move(mapping));
  }
  std::sort(maps.begin(), maps.end(),
            [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
  return maps;
}

}  // namespace gprof::collector
