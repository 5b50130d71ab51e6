#include "tests/apps/lock_libs/lock_libs.h"

extern "C" void heapwrap_hold(heaplock* lock, uint64_t hold_ns) {
  heaplock_hold(lock, hold_ns);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}
