// Wording shared by the text and JSON reports, so both name things the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
// "73.4 MiB", "512 B".
std::string FormatBytes(uint64_t bytes);
// "100%" only when `part` is all of `whole`, "<1%" when it is a sliver of it.
std::string FormatShare(uint64_t part, uint64_t whole);
// "Spin(long long) on stream 13", "Memcpy HtoD of 73.4 MiB (pageable to device) on stream 7".
std::string DescribeGpuActivity(const Session& session, const GpuActivity& activity);
// What the GPU did during `window` ("the call", "its cudaFree"): "the GPU was running
// Spin(long long) on stream 13 for 30.1 ms, launched by holder (429) in cudaLaunchKernel; busy
// 100% of the call", or "the GPU was idle during the call", and the call's own work if it was not
// what ran.
std::string DescribeGpuDuring(const Session& session, const GpuDuringCall& gpu,
                              const std::string& window);
// What a holder's GPU use was measured over: "its cudaFree", or "the hold" outside any call.
std::string HolderGpuWindow(const Session& session, const HolderActivity& holder);
// A native stack's frames, innermost first: the symbol, else the mapping and offset, else the
// address.
std::vector<std::string> NativeStackFrames(const Session& session, const NativeStack& stack);

}  // namespace gprof::collector
