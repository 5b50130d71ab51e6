// Processes of the tree that loaded a CUDA library but not gprof-run's injected one: a descendant
// started with a cleared environment (`env -i prog`), or one where LD_PRELOAD is ignored. Their
// CUDA calls are not in the session, and nothing else would say so: the kernel's record is what
// shows them (the mmap of each library, and /proc/PID/maps snapshots). So does it show the
// secure executions (set-user-ID, set-group-ID, file capabilities), in which the injected library
// records nothing whatever they load.
#pragma once

#include <string_view>

#include "collector/model/model.h"

namespace gprof::collector {

// Whether `name` (a file's name, no directory) is a CUDA library whose presence means the process
// runs CUDA: the driver, libcuda.so* (which every CUDA program loads, one that links the runtime
// statically included), or the runtime, libcudart* (as distributions, conda and wheels name it:
// "libcudart.so.13", "libcudart-d0da41ae.so.11.0"). Not libcupti (a profiler's) or the libraries
// built on the runtime (libcublas, libcudnn: they load the runtime too).
bool IsCudaLibrary(std::string_view name);

// Fills session->unrecorded_processes from what the session holds (after the readers' Finish):
// every process image (from an exec, or a fork, to the next) that the record shows with a CUDA
// library loaded, without the injected library, and without a recorded CUDA call. Only images
// whose start the record shows (or whose maps snapshot shows both libraries' absence or presence),
// so that a recording window or a process followed late never makes one up. Nothing under
// --cuda=off, where no process is injected by choice (the secure executions are listed always).
void FindUnrecordedProcesses(Session* session);

}  // namespace gprof::collector
