// The threads CUPTI starts in the process (its activity worker, which hands over completed
// buffers, holds CUPTI's own locks while the program's launches wait for them) are gprof-run's,
// not the program's: the diagnosis must never blame the program for them. A thread is told by
// where it starts: pthread_create is interposed, and a thread whose start routine (or whose
// creating call) is in libcupti's code notes itself as CUPTI's (NoteProfilerThread) when it
// starts. Internal to the injected library.
#pragma once

namespace gprof::inject {

// The loaded libcupti's code, found from one of its functions: threads started there from now on
// are CUPTI's. Called once CUPTI is loaded (InitializeInjection), not on any CUDA call's path.
void NoteCuptiCode(const void* cupti_function);

}  // namespace gprof::inject
