// The last flush of this process's records, on every way out that runs user code: exit() (from
// any thread; the destructor runs in the caller), _exit()/_Exit(), which multiprocessing's
// workers (PyTorch DataLoader) use to leave without running exit handlers, and the exec family,
// which replaces the program without running any (glibc's exec functions call the system call
// directly, so each is interposed, not only execve).
#include <stdarg.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "inject/real_symbol.h"
#include "inject/recorder.h"

namespace {

// The exec functions of the C library, found when this library loads: an exec may come from a
// vfork child, where looking a symbol up (locks, allocation) is not safe.
enum ExecFunction { kExecve, kExecv, kExecvp, kExecvpe, kFexecve, kExecFunctionCount };
constexpr const char* kExecNames[kExecFunctionCount] = {"execve", "execv", "execvp", "execvpe",
                                                        "fexecve"};
void* g_real_exec[kExecFunctionCount];

__attribute__((constructor)) void FindRealExecFunctions() {
  for (int i = 0; i < kExecFunctionCount; ++i) {
    g_real_exec[i] = gprof::inject::FindRealSymbol(kExecNames[i], "libc.so");
  }
}

// Flushes, runs the real exec function, and resumes recording if it returns (a failed exec).
template <typename Function, typename... Args>
int Exec(ExecFunction which, Args... args) {
  // Before the constructor (another library's constructor execs): look it up now.
  if (g_real_exec[which] == nullptr) {
    g_real_exec[which] = gprof::inject::FindRealSymbol(kExecNames[which], "libc.so");
  }
  auto* real = reinterpret_cast<Function*>(g_real_exec[which]);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  gprof::inject::ShutdownRecording();
  int result = real(args...);
  int saved_errno = errno;
  gprof::inject::ResumeRecordingAfterFailedExec();
  errno = saved_errno;
  return result;
}

// How many arguments an execl-style call has after `first`, up to its null pointer.
size_t CountArgs(va_list args) {
  va_list counting;
  va_copy(counting, args);
  size_t count = 0;
  while (va_arg(counting, char*) != nullptr) ++count;
  va_end(counting);
  return count;
}

// execl's arguments after `first` into argv (count + 1 slots: `first`, the rest, the null
// pointer), leaving `args` after the null pointer (execle's envp comes next).
void TakeArgs(const char* first, size_t count, va_list* args, char** argv) {
  argv[0] = const_cast<char*>(first);
  for (size_t i = 1; i <= count; ++i) argv[i] = va_arg(*args, char*);
}

}  // namespace

__attribute__((destructor)) static void FlushAtExit() { gprof::inject::ShutdownRecording(); }

#pragma GCC visibility push(default)
extern "C" {

[[noreturn]] void _exit(int status) {
  gprof::inject::ShutdownRecording();
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

[[noreturn]] void _Exit(int status) { _exit(status); }

int execve(const char* path, char* const argv[], char* const envp[]) {
  return Exec<int(const char*, char* const*, char* const*)>(kExecve, path, argv, envp);
}

int execv(const char* path, char* const argv[]) {
  return Exec<int(const char*, char* const*)>(kExecv, path, argv);
}

int execvp(const char* file, char* const argv[]) {
  return Exec<int(const char*, char* const*)>(kExecvp, file, argv);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  return Exec<int(const char*, char* const*, char* const*)>(kExecvpe, file, argv, envp);
}

int fexecve(int fd, char* const argv[], char* const envp[]) {
  return Exec<int(int, char* const*, char* const*)>(kFexecve, fd, argv, envp);
}

// argv[] holds `first`, the arguments after it and the null pointer: execl's own arguments.
int execl(const char* path, const char* arg, ...) {
  va_list args;
  va_start(args, arg);
  size_t count = 1 + CountArgs(args);
  char* argv[count + 1];
  TakeArgs(arg, count, &args, argv);
  va_end(args);
  return Exec<int(const char*, char* const*)>(kExecv, path, static_cast<char* const*>(argv));
}

int execlp(const char* file, const char* arg, ...) {
  va_list args;
  va_start(args, arg);
  size_t count = 1 + CountArgs(args);
  char* argv[count + 1];
  TakeArgs(arg, count, &args, argv);
  va_end(args);
  return Exec<int(const char*, char* const*)>(kExecvp, file, static_cast<char* const*>(argv));
}

int execle(const char* path, const char* arg, ...) {
  va_list args;
  va_start(args, arg);
  size_t count = 1 + CountArgs(args);
  char* argv[count + 1];
  TakeArgs(arg, count, &args, argv);
  char* const* envp = va_arg(args, char* const*);
  va_end(args);
  return Exec<int(const char*, char* const*, char* const*)>(kExecve, path,
                                                            static_cast<char* const*>(argv), envp);
}

}  // extern "C"
#pragma GCC visibility pop
