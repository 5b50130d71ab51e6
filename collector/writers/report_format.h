// Wording shared by the text and JSON reports, so both name things the same way. The plain
// values (durations, sizes, offsets) are model/value_format.h's, included here for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/model/value_format.h"
#include "collector/symbols/user_symbols.h"

namespace gprof::collector {

// "futex 0x7f3a1c2d4040 (libcuda.so.1: some_lock+0x8) in futex_wait_queue", "the mmap_lock of
// pid 12", "kernel mutex 0xffff888104a0c1e8", "ioctl on nvidiactl", "a page fault at 0x7f3a00001000
// (libtorch_cuda.so+0x1000)", or the kernel function alone ("do_nanosleep").
std::string DescribeWaitObject(const Session& session, const WaitObject& object);
// A lock whose word lies in memory that no module names (the heap, a stack, anonymous memory),
// named by the code that waited on it (FindLockUser): "a lock inside libcuda.so.580.159.04 (futex
// 0x55dcd2112db8 on the heap), waited for in cuLaunchKernel"; "waited for in" the library's
// function on the stack, else the CUDA call `call` (may be null). Empty when the word is a
// module's, or the waiter's user stack names no code outside the system's libraries.
std::string DescribeLockByItsUser(const Session& session, const Wait& wait, const ApiCall* call);
// The object with the word a sleep on it reads with: "on futex ...", "in ioctl on nvidiactl".
std::string WhereAsleep(const Session& session, const WaitObject& object);
// Who held the kernel lock `wait` slept on and what it was doing: "held by trainer (13) in munmap
// of 512.0 MiB", "held by trainer (13) in cudaFree", "held by kswapd0 (57)"; empty when the kernel
// recorded no owner.
std::string LockOwnerText(const Session& session, const Wait& wait);
// Where a variable of process `pid` lived at `time_ns`: "libcuda.so.1: some_lock+0x8",
// "libcudart.so.13+0x24040", "[heap]", or empty when unknown.
std::string DescribeAddress(const Session& session, uint32_t pid, uint64_t address,
                            uint64_t time_ns);
// What --delay / --duration kept: "recorded +5.000 s to +15.000 s, 10.000 s of 25.300 s (--delay 5
// --duration 10): what started outside was not recorded"; empty when the run had no window.
std::string WindowText(const Session& session);
// What --max-size cut: "stopped at --max-size 256.0 KiB at +1.234 s: 5,120 records (1.2 MiB) not
// written, nothing recorded from then on", or "within --max-size 256.0 KiB (used 80.0 KiB)"; empty
// when the run had no cap.
std::string MaxSizeText(const Session& session);
// A nested gprof-run's session: "pid 12 (gprof-run) recorded its command into /tmp/inner (1,234 CUDA
// calls): those are in that session, not this one".
std::string NestedSessionText(const NestedSession& nested);
// "Spin(long long) on stream 13", "Memcpy HtoD of 73.4 MiB (pageable to device) on stream 7".
// `short_names`: the kernel's name shortened for the text (report_words.h).
std::string DescribeGpuActivity(const Session& session, const GpuActivity& activity,
                                bool short_names = false);
// What the GPU did during `window` ("the call", "its cudaFree"): "the GPU was running
// Spin(long long) on stream 13 for 30.1 ms, launched by holder (429) in cudaLaunchKernel; busy
// 100% of the call", or "the GPU was idle during the call", and the call's own work if it was not
// what ran.
std::string DescribeGpuDuring(const Session& session, const GpuDuringCall& gpu,
                              const std::string& window, bool short_names = false);
// What a holder's GPU use was measured over: "its cudaFree", or "the hold" outside any call.
std::string HolderGpuWindow(const Session& session, const HolderActivity& holder);

}  // namespace gprof::collector
