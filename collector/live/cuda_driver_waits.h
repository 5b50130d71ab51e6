// The CUDA driver's locks in `gprof-run dump` (issue 38): a lock of the real libcuda names no
// owner that gprof-run can read, so its holder is inferred from where threads are. A thread blocked
// on a futex straight out of the driver (its innermost frames past libc's in a libcuda* or
// libcudart* file) waits for the driver; the one thread inside the driver (a frame in such a
// file) that works there, on a CPU, yielding it, or in an ioctl, is its inferred holder.
#pragma once

#include "collector/live/proc_snapshot.h"

namespace gprof::collector::live {

// Names the driver's lock for each such waiter whose holder its lock's memory did not give, and
// its holder, inferred, where exactly one thread is working inside the driver (else why not).
void InferCudaDriverHolders(Snapshot* snapshot);

}  // namespace gprof::collector::live
