#include "inject/cupti_threads.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "inject/real_symbol.h"
#include "inject/recorder.h"

namespace gprof::inject {
namespace {

using PthreadCreate = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

std::atomic<PthreadCreate> g_real_create{nullptr};
std::atomic<uintptr_t> g_cupti_start{0}, g_cupti_end{0};  // libcupti's executable segments

// A thread on its way to CUPTI's start routine: its routine and argument, in a slot of a small
// fixed pool (CUPTI starts a few threads per process), never allocated.
struct PendingStart {
  std::atomic<uint32_t> taken{0};
  void* (*routine)(void*) = nullptr;
  void* argument = nullptr;
};
PendingStart g_pending[16];

bool InCupti(const void* address) {
  auto at = reinterpret_cast<uintptr_t>(address);
  return at >= g_cupti_start.load(std::memory_order_acquire) &&
         at < g_cupti_end.load(std::memory_order_acquire);
}

void* StartCuptiThread(void* pending_start) {
  auto* pending = static_cast<PendingStart*>(pending_start);
  void* (*routine)(void*) = pending->routine;
  void* argument = pending->argument;
  pending->taken.store(0, std::memory_order_release);
  NoteProfilerThread(format::ProfilerThreadRole::kCupti);
  return routine(argument);
}

PthreadCreate RealCreate() {
  PthreadCreate real = g_real_create.load(std::memory_order_acquire);
  if (real == nullptr) {
    real = reinterpret_cast<PthreadCreate>(FindRealSymbol("pthread_create", "libc.so"));
    g_real_create.store(real, std::memory_order_release);
  }
  return real;
}

// Found when this library loads: a thread may be created before any CUDA call.
__attribute__((constructor)) void FindRealCreate() { RealCreate(); }

struct CodeSearch {
  uintptr_t address;
  uintptr_t start = 0, end = 0;
};

int FindCode(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<CodeSearch*>(data);
  uintptr_t start = UINTPTR_MAX, end = 0;
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    uintptr_t from = info->dlpi_addr + segment.p_vaddr, to = from + segment.p_memsz;
    holds |= search->address >= from && search->address < to;
    if (from < start) start = from;
    if (to > end) end = to;
  }
  if (!holds) return 0;
  search->start = start;
  search->end = end;
  return 1;
}

}  // namespace

void NoteCuptiCode(const void* cupti_function) {
  CodeSearch search{reinterpret_cast<uintptr_t>(cupti_function)};
  if (dl_iterate_phdr(FindCode, &search) == 0) return;
  g_cupti_end.store(search.end, std::memory_order_release);
  g_cupti_start.store(search.start, std::memory_order_release);
}

}  // namespace gprof::inject

#pragma GCC visibility push(default)
extern "C" {

// Every thread the process starts passes here: the program's go on as they came, CUPTI's start
// through StartCuptiThread.
int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*routine)(void*),
                   void* argument) {
  using namespace gprof::inject;
  PthreadCreate real = RealCreate();
  if (real == nullptr) return EAGAIN;
  if (InCupti(reinterpret_cast<const void*>(routine)) || InCupti(__builtin_return_address(0))) {
    for (PendingStart& pending : g_pending) {
      uint32_t free = 0;
      if (!pending.taken.compare_exchange_strong(free, 1, std::memory_order_acquire)) continue;
      pending.routine = routine;
      pending.argument = argument;
      int result = real(thread, attr, StartCuptiThread, &pending);
      if (result != 0) pending.taken.store(0, std::memory_order_release);
      return result;
    }
  }
  return real(thread, attr, routine, argument);
}

}  // extern "C"
#pragma GCC visibility pop
