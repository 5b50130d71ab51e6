#include "cli/own_settings.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>

namespace gprof::cli {
namespace {

constexpr int kLifted[] = {RLIMIT_FSIZE, RLIMIT_AS, RLIMIT_DATA};
constexpr size_t kLiftedCount = sizeof(kLifted) / sizeof(kLifted[0]);

struct Inherited {
  bool taken = false;
  rlimit limits[kLiftedCount] = {};
  bool read[kLiftedCount] = {};
  struct sigaction file_size_signal {};
};
Inherited g_inherited;

std::string Size(rlim_t bytes) {
  char text[64];
  if (bytes >= (rlim_t{1} << 30)) {
    snprintf(text, sizeof(text), "%.1f GiB", bytes / 1073741824.0);
  } else {
    snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  }
  return text;
}

}  // namespace

void TakeOwnLimits() {
  for (size_t i = 0; i < kLiftedCount; ++i) {
    g_inherited.read[i] = getrlimit(kLifted[i], &g_inherited.limits[i]) == 0;
    if (!g_inherited.read[i]) continue;
    rlimit lifted{RLIM_INFINITY, RLIM_INFINITY};
    // Past the hard limit only with CAP_SYS_RESOURCE; else up to it.
    if (setrlimit(kLifted[i], &lifted) != 0) {
      lifted = {g_inherited.limits[i].rlim_max, g_inherited.limits[i].rlim_max};
      setrlimit(kLifted[i], &lifted);
    }
  }
  // Where the hard limit still bites, a write past it fails with EFBIG instead of killing us.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &g_inherited.file_size_signal);
  g_inherited.taken = true;
}

void RestoreInheritedLimits() {
  if (!g_inherited.taken) return;
  for (size_t i = 0; i < kLiftedCount; ++i) {
    if (g_inherited.read[i]) setrlimit(kLifted[i], &g_inherited.limits[i]);
  }
  sigaction(SIGXFSZ, &g_inherited.file_size_signal, nullptr);
}

std::string MemoryLimitOfCommand() {
  for (size_t i = 0; i < kLiftedCount; ++i) {
    if (kLifted[i] == RLIMIT_FSIZE || !g_inherited.read[i] ||
        g_inherited.limits[i].rlim_cur == RLIM_INFINITY) {
      continue;
    }
    return std::string("nothing recorded of CUDA calls: the command runs under ") +
           (kLifted[i] == RLIMIT_AS ? "an address-space limit (ulimit -v) of "
                                    : "a data size limit (RLIMIT_DATA) of ") +
           Size(g_inherited.limits[i].rlim_cur) +
           ", where the injected library's memory could make the program's own allocations "
           "fail; the library was not loaded (lift the limit to record CUDA calls)";
  }
  return "";
}

namespace {

// What the collector and the BPF loader need at most, with room to spare (glibc's usual default).
constexpr size_t kOwnStackBytes = size_t{8} << 20;

struct MainCall {
  int (*main)(int, char**);
  int argc;
  char** argv;
  int result;
};
MainCall g_main_call{};

void CallMain() { g_main_call.result = g_main_call.main(g_main_call.argc, g_main_call.argv); }

}  // namespace

int RunOnOwnStack(int (*main)(int, char**), int argc, char** argv) {
  // Threads' stacks are sized by the limit at start, and are not bound by it.
  pthread_attr_t attributes;
  if (pthread_getattr_default_np(&attributes) == 0) {
    size_t stack_bytes = 0;
    if (pthread_attr_getstacksize(&attributes, &stack_bytes) == 0 && stack_bytes < kOwnStackBytes &&
        pthread_attr_setstacksize(&attributes, kOwnStackBytes) == 0) {
      pthread_setattr_default_np(&attributes);
    }
    pthread_attr_destroy(&attributes);
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur >= kOwnStackBytes) {
    return main(argc, argv);
  }
  // The main thread's stack cannot grow past the limit: main goes on one of its own (the thread
  // and its id stay the same), with a guard page below it. Never unmapped: main's return ends it.
  const size_t guard = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapped = mmap(nullptr, kOwnStackBytes + guard, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  ucontext_t own{}, back{};
  if (mapped == MAP_FAILED || mprotect(mapped, guard, PROT_NONE) != 0 || getcontext(&own) != 0) {
    return main(argc, argv);
  }
  own.uc_stack.ss_sp = static_cast<char*>(mapped) + guard;
  own.uc_stack.ss_size = kOwnStackBytes;
  own.uc_link = &back;
  g_main_call = {main, argc, argv, 0};
  makecontext(&own, CallMain, 0);
  if (swapcontext(&back, &own) != 0) return main(argc, argv);
  return g_main_call.result;
}

void TakeOwnSettingsAfterFork() {
  // Raising one's own score needs no privilege. Nothing to do where it cannot be written.
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    if (write(fd, "1000", 4) < 0) {
    }
    close(fd);
  }
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace gprof::cli
