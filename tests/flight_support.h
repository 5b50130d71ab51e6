// What the flight recorder's tests share (flight_test, flight_trigger_test): flight_app's own
// account of when it froze, blocked and ended.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace gprof::test {

// flight_app's --times-out file: "freeze START END", "block START END", "silent START END",
// "end NS", each name with its times in order.
inline std::map<std::string, std::vector<uint64_t>> AppTimes(const std::string& path) {
  std::map<std::string, std::vector<uint64_t>> times;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    for (uint64_t ns; words >> ns;) times[name].push_back(ns);
  }
  return times;
}

}  // namespace gprof::test
