// libslow_init.so: a library whose constructor takes its time, as a plugin's does. The dynamic
// loader runs constructors holding its load lock (_rtld_global's dl_load_lock), so the thread
// that dlopens this library holds that lock until the constructor returns. loader_lock_app loads
// it; the constructor writes one byte on the file descriptor LOADER_LOCK_FD (the lock is held
// from then on) and sleeps LOADER_LOCK_HOLD_MS.
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace {

__attribute__((constructor)) void TakeMyTime() {
  const char* fd = getenv("LOADER_LOCK_FD");
  const char* hold_ms = getenv("LOADER_LOCK_HOLD_MS");
  if (fd == nullptr || hold_ms == nullptr) return;
  const char held = 'h';
  if (write(atoi(fd), &held, 1) != 1) return;
  long ms = atol(hold_ms);
  timespec duration = {ms / 1000, (ms % 1000) * 1'000'000};
  while (nanosleep(&duration, &duration) != 0) {
  }
}

}  // namespace
