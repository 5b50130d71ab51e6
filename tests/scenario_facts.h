// What a scenario program says of itself: one fact a line of its stdout,
// "span tid=1 what=lock start_ns=..." -> kind "span" and its key=value fields.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace gprof::test {

struct Fact {
  std::string kind;
  std::map<std::string, std::string> fields;
  const std::string& operator[](const std::string& key) const {
    static const std::string kNone;
    auto found = fields.find(key);
    return found == fields.end() ? kNone : found->second;
  }
  uint64_t Number(const std::string& key) const {
    return std::strtoull((*this)[key].c_str(), nullptr, 0);
  }
};

// Every line of `out` as a fact; words without '=' after the kind are ignored.
inline std::vector<Fact> ParseFacts(const std::string& out) {
  std::vector<Fact> facts;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    Fact fact;
    words >> fact.kind;
    std::string word;
    while (words >> word) {
      size_t equals = word.find('=');
      if (equals != std::string::npos)
        fact.fields[word.substr(0, equals)] = word.substr(equals + 1);
    }
    facts.push_back(std::move(fact));
  }
  return facts;
}

}  // namespace gprof::test
