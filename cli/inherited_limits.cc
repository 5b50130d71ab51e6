#include "cli/inherited_limits.h"

#include <signal.h>
#include <sys/resource.h>

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

}  // namespace gprof::cli
