#include "native_stack.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "bounded_queue.h"

namespace gprof::inject {
namespace {

constexpr size_t kQueueCapacity = 256;  // slow calls are rare; the writer drains every 200 ms

// libunwind is loaded at run time for the same reason as zstd: an LD_PRELOAD library must not
// fail to load where it is missing, and Debian's libunwind.a is not built for shared objects.
// Without it, glibc's backtrace() (libgcc's unwinder) does the same job.
using BacktraceFn = int (*)(void**, int);

BacktraceFn LoadBacktrace() {
  if (void* libunwind = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL)) {
    if (auto fn = reinterpret_cast<BacktraceFn>(dlsym(libunwind, "unw_backtrace"))) return fn;
  }
  return &backtrace;
}

constinit BoundedQueue<SlowCallStack, kQueueCapacity> g_stacks;
std::atomic<uint64_t> g_dropped{0};
std::atomic<BacktraceFn> g_backtrace{nullptr};

const void* OwnBase() {
  static const void* base = [] {
    Dl_info self;
    return dladdr(reinterpret_cast<void*>(&CaptureSlowCallStack), &self) != 0 ? self.dli_fbase
                                                                              : nullptr;
  }();
  return base;
}

// Frames of the recording itself, on top of every captured stack: this library's, and CUPTI's
// when the call was seen through a CUPTI callback. The CUDA library frames below them stay: they
// name the call ("cudaFree+0x10").
bool IsRecordingFrame(void* address) {
  Dl_info where;
  if (dladdr(address, &where) == 0) return false;
  return where.dli_fbase == OwnBase() ||
         (where.dli_fname != nullptr && strstr(where.dli_fname, "libcupti") != nullptr);
}

}  // namespace

void CaptureSlowCallStack(uint32_t tid, uint64_t enter_ns) {
  BacktraceFn backtrace_fn = g_backtrace.load(std::memory_order_acquire);
  if (backtrace_fn == nullptr) {
    backtrace_fn = LoadBacktrace();
    g_backtrace.store(backtrace_fn, std::memory_order_release);
  }
  void* frames[kMaxStackFrames + 8];
  int depth = backtrace_fn(frames, static_cast<int>(kMaxStackFrames + 8));
  int first = 0;
  while (first < depth && IsRecordingFrame(frames[first])) ++first;

  SlowCallStack stack;
  stack.enter_ns = enter_ns;
  stack.tid = tid;
  stack.frame_count = 0;
  for (int i = first; i < depth && stack.frame_count < kMaxStackFrames; ++i) {
    stack.frames[stack.frame_count++] = reinterpret_cast<uint64_t>(frames[i]);
  }
  if (!g_stacks.Push(stack)) g_dropped.fetch_add(1, std::memory_order_relaxed);
}

size_t TakeSlowCallStacks(SlowCallStack* out, size_t capacity) {
  return g_stacks.Take(out, capacity);
}

uint64_t TakeDroppedStacks() { return g_dropped.exchange(0, std::memory_order_relaxed); }

size_t SymbolizeReturnAddress(uint64_t address, char* out, size_t size) {
  // A return address can point just past its call's function: look up the call instruction.
  Dl_info where;
  if (size == 0) return 0;
  out[0] = '\0';
  if (address == 0 || dladdr(reinterpret_cast<void*>(address - 1), &where) == 0 ||
      where.dli_sname == nullptr) {
    return 0;
  }
  int n = snprintf(
      out, size, "%s+0x%llx", where.dli_sname,
      static_cast<unsigned long long>(address - reinterpret_cast<uint64_t>(where.dli_saddr)));
  return n < 0 ? 0 : (static_cast<size_t>(n) < size ? static_cast<size_t>(n) : size - 1);
}

void ResetStacksAfterFork() {
  g_stacks.ResetAfterFork();
  g_dropped.store(0, std::memory_order_relaxed);
}

}  // namespace gprof::inject
