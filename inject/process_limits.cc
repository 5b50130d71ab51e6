#include "inject/process_limits.h"

#include <sys/auxv.h>
#include <sys/resource.h>

#include <initializer_list>

namespace gprof::inject {

bool SecureExecution() { return getauxval(AT_SECURE) != 0; }

int MemoryLimitInForce(uint64_t* limit_bytes) {
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit limit{};
    if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      *limit_bytes = limit.rlim_cur;
      return resource;
    }
  }
  return -1;
}

bool SmallThreadLimit() {
  constexpr rlim_t kSmall = 4096;
  rlimit limit{};
  return getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur < kSmall;
}

}  // namespace gprof::inject
