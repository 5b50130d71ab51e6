// The diagnosis's results in words, for every writer (the text, report.html, report.json's
// "text" fields, the trace's diagnosis tracks): a chain's links, a lock cycle, a cause, gprof-run's
// own cost. The diagnosis decides the facts; nothing here does.
#pragma once

#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnosis.h"
#include "collector/analysis/user_lock.h"
#include "collector/model/model.h"

namespace gprof::collector {

// A cause's class as every output labels it: "CPU" (too few CPUs for the threads ready to run),
// "handoff", "host late" (a thread late to launch the GPU's next work, in no wait of a class),
// else its waits' class ("user lock", "Python GIL"). report.json's "class" stays the waits' class.
std::string CauseClassLabel(const Cause& cause);
// Every label CauseClassLabel gives, with what it means, in the legends' order.
struct ClassMeaning {
  const char* label;
  const char* meaning;
};
const std::vector<ClassMeaning>& ClassLegend();

// What a cause explains, each part a phrase every output says alike: "GPU idle 3.1 ms in 2 gaps";
// "3 threads blocked 40.1 ms in 5 waits (longest 12.0 ms)" ("4 threads runnable 12.1 ms" for the
// CPUs); "of it, the program's critical path waited 9.0 ms". Empty when it explains none.
std::string CauseGpuIdleWords(const Cause& cause);
std::string CauseBlockedWords(const Cause& cause);
std::string CriticalPathWords(const Cause& cause);

// How a chain's link follows the wait before it: "ended by" (the waker), "held by" (the lock's
// owner), "created by" (the creator of the thread before it), and after the first "who waited
// for".
const char* ChainStepWords(const ChainLink& link, bool first);

// What a GPU gap waited for: "queued in time: the GPU side held it", "the GPU waited for ..." (the
// late thread's link), or "the call that launched the next work was not recorded"; and "the driver
// spent 45.0 ms of the wait loading a CUDA module" (empty when it loaded none).
std::string GapWaitWords(const Session& session, const GpuGap& gap, const LockUsers* users);
std::string ModuleLoadWords(const GpuGap& gap);

// "mutex-holder (812) on CPU in cudaFree", "the GPU running gemm_kernel", as the report says it.
std::string DescribeLink(const Session& session, const ChainLink& link,
                         const LockUsers* users = nullptr);

// What a thread ran on CPU, from its samples, after "on CPU 32.1 ms": " in malloc_trim <-
// janitor_loop (app.c:41)"; a Python thread's own frame first: " at train.py:42 in parse" (then
// "; natively in ..." where native code of the program's ran); empty without samples.
std::string OnCpuWords(const OnCpuActivity& ran);

// A stall's lock cycle (deadlock_tid set): "a (1) waited for b (2), b (2) for a (1): a cycle of
// waits", led by "c (3) waited behind a deadlock: " when the waiter is not in the cycle itself.
std::string DescribeDeadlock(const Session& session, const Stall& stall);

// "gprof-run's own threads delayed the program's threads 3 times, 12.1 ms in all, longest 5.4 ms
// (python3 (12) on futex 0x7f... (ld-linux-x86-64.so.2: _rtld_global+0xa08) in futex_do_wait,
// held up by gprof-writer (15))...": the report's one line on gprof-run's own cost; empty when
// none.
std::string DescribeProfilerCost(const Session& session, const Analysis& diagnosis);

// A cause in words: the object the threads waited on ("futex 0x... (python3.11: _PyRuntime)",
// "the GIL: _PyRuntime in python3.11 (futex 0x...)", "a lock inside libcuda.so.1 (futex 0x... on
// the heap), waited for in cuLaunchKernel"), or what it was ("too few CPUs for the threads ready
// to run", "loader (12) loading a CUDA module in cudaLaunchKernel (...)").
std::string CauseIdentity(const Session& session, const Cause& cause);
// A cause as every report titles it: the lock or object in the reports' one notation (named by
// its users where `analysis` knows them), the late thread, the CPUs, or for a handoff who waited
// for whom ("main" (12) waited for "producer" (13)).
std::string CauseTitle(const Session& session, const Analysis& analysis, const Cause& cause);
// What a late thread's cause (kModuleLoad, kLateHost) says after the thread's name: " late to
// launch the next GPU work (the GPU waited for the host)"; empty for other causes.
std::string LateThreadWords(const Session& session, const Cause& cause);


}  // namespace gprof::collector
