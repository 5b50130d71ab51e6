// Wording shared by the text and JSON reports, so both name things the same way.
#pragma once

#include <cstdint>
#include <string>

#include "analysis.h"
#include "model.h"

namespace gprof::collector {

// "850 ns", "12.5 us", "39.8 ms", "1.234 s".
std::string FormatDuration(uint64_t ns);
// Time since the session started: "+0.210 s".
std::string FormatOffset(const Session& session, uint64_t time_ns);
std::string FormatHex(uint64_t value);
// The first moment of the session, for offsets: gprof-run's start, or the earliest event.
uint64_t SessionOrigin(const Session& session);
// "futex 0x7f3a1c2d4040 (libcudart.so.13+0x24040) in futex_wait_queue", or the kernel function
// alone ("do_nanosleep") when the wait was not on a futex.
std::string DescribeWaitObject(const Session& session, const WaitObject& object);
// Where a futex word lives: "libcudart.so.13+0x24040", "[heap]", or empty when unknown.
std::string DescribeAddress(const Session& session, uint32_t pid, uint64_t address);

}  // namespace gprof::collector
