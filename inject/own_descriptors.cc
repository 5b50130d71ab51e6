#include "inject/own_descriptors.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject/own_thread.h"

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
  pthread_t thread;
  int error = StartOwnThread(&thread, DlopenThreadMain, &request);
  void* opened = nullptr;
  if (error != 0 || pthread_join(thread, &opened) != 0 || opened == nullptr) {
    return request.handle != nullptr ? request.handle : dlopen(path, flags);
  }
  return request.handle;
}

}  // namespace gprof::inject
