// The numbers every output gives causes and freezes, decided once: a cause's is its rank (1: the
// one that explains the most), a freeze's its place by length (1: the longest; of two as long, the
// one first in Analysis::freezes), as report.txt's SUMMARY says ("the longest, freeze 1").
#pragma once

namespace gprof::collector {

struct Analysis;

// The pipeline's numbering step, after the freezes are found: fills Cause::number,
// Freeze::number and Analysis::freezes_by_number.
void NumberCausesAndFreezes(Analysis& analysis);

}  // namespace gprof::collector
