#include "collector/live/cuda_driver_waits.h"

#include <linux/futex.h>

#include <string>
#include <vector>

#include "collector/symbols/user_symbols.h"

namespace gprof::collector::live {
namespace {

bool IsDriverFile(const std::string& name) { return name.starts_with("libcuda"); }

// libc's and the loader's frames (the futex call, the lock function) are not where a wait is from.
bool IsSystemLibrary(const std::string& name) {
  return name.starts_with("libc.so") || name.starts_with("libc-") ||
         name.starts_with("libpthread") || name.starts_with("ld-linux") || name == "[vdso]";
}

// The files of `thread`'s native frames, innermost first.
std::vector<std::string> FrameFiles(const Snapshot& snapshot, const ThreadSnapshot& thread) {
  std::vector<std::string> files;
  const std::vector<uint64_t>& ips = thread.native_stack.ips;
  for (size_t i = 0; i < ips.size(); ++i) {
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    // (a module is named by its file's base name already)
    files.push_back(
        LocateUserAddress(snapshot.maps, static_cast<uint32_t>(thread.pid), ips[i], kLatest, use)
            .module);
  }
  return files;
}

bool WaitsOnFutex(const ThreadSnapshot& thread) {
  if (!thread.in_syscall || thread.syscall != kFutexSystemCall) return false;
  unsigned command = static_cast<unsigned>(thread.args[1]) & FUTEX_CMD_MASK;
  return command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET || command == FUTEX_LOCK_PI;
}

// A thread that does the driver's work now, rather than wait for something: on a CPU, yielding
// it (a synchronize that spins), or in an ioctl to the GPU's device.
bool WorksNow(const ThreadSnapshot& thread) {
  if (thread.running || thread.state == 'R') return true;
  std::string call = thread.in_syscall ? SystemCallName(thread.syscall) : "";
  return call == "ioctl" || call == "sched_yield";
}

void InferInProcess(const Snapshot& snapshot, ProcessSnapshot* process) {
  std::vector<ThreadSnapshot*> waiters;
  std::vector<pid_t> working;
  for (ThreadSnapshot& thread : process->threads) {
    std::vector<std::string> files = FrameFiles(snapshot, thread);
    bool inside = false;
    for (const std::string& file : files) inside = inside || IsDriverFile(file);
    if (!inside) continue;
    if (WaitsOnFutex(thread)) {
      size_t first = 0;
      while (first < files.size() && IsSystemLibrary(files[first])) ++first;
      if (first < files.size() && IsDriverFile(files[first]) && thread.holder == 0 &&
          thread.lock_name.empty())
        waiters.push_back(&thread);
    } else if (WorksNow(thread)) {
      working.push_back(thread.tid);
    }
  }
  for (ThreadSnapshot* waiter : waiters) {
    waiter->lock_name = "the CUDA driver's lock";
    waiter->lock_address = waiter->args[0];
    if (working.size() == 1) {
      waiter->holder = working.front();
      waiter->holder_source = HolderSource::kInsideCudaDriver;
    } else if (working.empty()) {
      waiter->holder_unknown =
          "the driver's lock keeps no owner gprof-run can read, and no thread works inside the "
          "driver (on a CPU or in an ioctl)";
    } else {
      waiter->holder_unknown = "the driver's lock keeps no owner gprof-run can read, and " +
                               std::to_string(working.size()) +
                               " threads work inside the driver (on a CPU or in an ioctl)";
    }
  }
}

}  // namespace

void InferCudaDriverHolders(Snapshot* snapshot) {
  for (ProcessSnapshot& process : snapshot->processes) InferInProcess(*snapshot, &process);
}

}  // namespace gprof::collector::live
