// The last flush of this process's records, on every way out that runs user code: exit() (from
// any thread; the destructor runs in the caller) and _exit()/_Exit(), which multiprocessing's
// workers (PyTorch DataLoader) use to leave without running exit handlers.
#include <sys/syscall.h>
#include <unistd.h>

#include "recorder.h"

__attribute__((destructor)) static void FlushAtExit() { gprof::inject::ShutdownRecording(); }

#pragma GCC visibility push(default)
extern "C" {

[[noreturn]] void _exit(int status) {
  gprof::inject::ShutdownRecording();
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

[[noreturn]] void _Exit(int status) { _exit(status); }

}  // extern "C"
#pragma GCC visibility pop
