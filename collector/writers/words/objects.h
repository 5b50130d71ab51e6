// The objects threads waited on, named (above names.h): a futex by the variable that holds it or
// the code that waited on it, a kernel lock, a device call, a page fault, an address; and who held
// a kernel lock. The plain values (durations, sizes, offsets) are model/value_format.h's, included
// here for them.
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

// A lock named by the code that waited on it: "a lock inside libcuda.so.580.159.04 (futex
// 0x55dcd2112db8 on the heap), waited for in cuLaunchKernel".
std::string UserNamedLockWords(const UserNamedLock& lock);

// A wait object in the one notation the text uses for it: a futex by the variable that holds it,
// "fake_cuda::{anon}::driver_lock in libcudart.so.13", "_rtld_global+0xa08 in
// ld-linux-x86-64.so.2", else by its address and memory, "futex 0x5640925e7f30 on the heap"; "the
// mmap_lock of pid 12", "ioctl on nvidiactl", ...; never the kernel function (report.json keeps
// it).
// A futex in unnamed memory that `users` knows is "a lock inside libcuda.so.580.159.04 (futex
// 0x5640925e7f30 on the heap)".
std::string ObjectWords(const Session& session, const WaitObject& object,
                        const LockUsers* users = nullptr);

}  // namespace gprof::collector
