// The library's own threads (the writer, the short-lived dlopen thread): made the same way
// whatever the program's settings.
#pragma once

#include <pthread.h>

namespace gprof::inject {

// The stack every thread of ours gets. Not the program's default: glibc sizes a thread's stack by
// RLIMIT_STACK, and a program started under `ulimit -s 16` (which runs fine on its own) would have
// the writer overflow its stack and die of SIGSEGV; under a large limit each thread of ours would
// reserve that much address space. Only the pages touched are ever used.
inline constexpr size_t kOwnThreadStackBytes = 512u << 10;

// pthread_create with that stack and every signal blocked: the program's handlers run on the
// program's threads. Returns pthread_create's error.
int StartOwnThread(pthread_t* thread, void* (*routine)(void*), void* argument);

}  // namespace gprof::inject
