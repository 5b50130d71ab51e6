// Reading kernel stacks: which frame says why a thread blocked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gprof::collector {

// "futex_wait_queue+0x5c/0x90 [module]" -> "futex_wait_queue"
std::string_view FunctionOf(std::string_view frame);

// The kernel function a thread blocked in: the innermost frame of its switch-out stack that is
// neither the scheduler nor the tracing that recorded the switch ("futex_wait_queue",
// "do_nanosleep", ...); empty when there is none.
std::string BlockingFunction(const std::vector<std::string>& frames);

// The function that took a kernel lock: the innermost frame of a lock wait's stack that is not
// the scheduler, the lock's own code or the tracer ("fdget_pos", "vm_mmap_pgoff"); empty when none.
std::string LockTaker(const std::vector<std::string>& frames);

// Whether a thread blocked in `function` waits for a file lock (flock, fcntl, lockf, a lease)
// that another task holds: a lock of the kernel's, on one file for every process.
bool IsFileLockFunction(std::string_view function);

}  // namespace gprof::collector
