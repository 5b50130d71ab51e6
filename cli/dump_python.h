// `gprof-run dump`'s Python part: for each dumped process that runs a readable CPython (3.9 to
// 3.13), each thread's Python stack and the GIL its waiters wait for, read out of process by the
// kernel recorder's Python reader (bpf/python_threads.h) and put into the snapshot, which the
// collector then analyses like any other (the GIL's holder is one more lock's holder).
#pragma once

#include "collector/live/proc_snapshot.h"

namespace gprof::cli {

void AddPythonStacks(collector::live::Snapshot* snapshot);

}  // namespace gprof::cli
