#include "inject/python_marker.h"

// Not inlined, and not empty to the compiler: a call with the arguments in their registers must
// reach the first instruction, where the uprobe is.
extern "C" __attribute__((noinline, used, visibility("default"))) void gprof_python_stack_point(
    uint32_t tid, uint64_t enter_ns) {
  asm volatile("" : : "r"(tid), "r"(enter_ns) : "memory");
}
