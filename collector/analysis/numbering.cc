#include "collector/analysis/numbering.h"

#include <algorithm>

#include "collector/analysis/analysis.h"

namespace gprof::collector {

void NumberCausesAndFreezes(Analysis& analysis) {
  for (size_t i = 0; i < analysis.causes.size(); ++i) analysis.causes[i].number = i + 1;
  std::vector<int>& order = analysis.freezes_by_number;
  order.clear();
  for (size_t f = 0; f < analysis.freezes.size(); ++f) order.push_back(static_cast<int>(f));
  auto length = [&](int f) { return analysis.freezes[f].end_ns - analysis.freezes[f].start_ns; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return length(a) > length(b); });
  for (size_t i = 0; i < order.size(); ++i) analysis.freezes[order[i]].number = i + 1;
}

}  // namespace gprof::collector
