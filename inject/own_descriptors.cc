#include "inject/own_descriptors.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

namespace gprof::inject {
namespace {

struct DlopenRequest {
  const char* path;
  int flags;
  void* handle;
};

void* DlopenThreadMain(void* argument) {
  auto* request = static_cast<DlopenRequest*>(argument);
  if (!UseOwnDescriptorTable()) return nullptr;  // the caller opens it itself
  request->handle = dlopen(request->path, request->flags);
  return request;
}

}  // namespace

bool UseOwnDescriptorTable() {
  return syscall(SYS_close_range, 0u, ~0u, CLOSE_RANGE_UNSHARE) == 0;
}

void* DlopenOutsideTheProgramsTable(const char* path, int flags) {
  DlopenRequest request{path, flags, nullptr};
  // The thread gets no signals: the program's handlers run on the program's threads.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  int error = pthread_create(&thread, nullptr, DlopenThreadMain, &request);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  void* opened = nullptr;
  if (error != 0 || pthread_join(thread, &opened) != 0 || opened == nullptr) {
    return request.handle != nullptr ? request.handle : dlopen(path, flags);
  }
  return request.handle;
}

}  // namespace gprof::inject
