#include "inject/own_thread.h"

#include <signal.h>

namespace gprof::inject {

int StartOwnThread(pthread_t* thread, void* (*routine)(void*), void* argument) {
  pthread_attr_t attributes;
  if (int error = pthread_attr_init(&attributes); error != 0) return error;
  int error = pthread_attr_setstacksize(&attributes, kOwnThreadStackBytes);
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  if (error == 0) error = pthread_create(thread, &attributes, routine, argument);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  pthread_attr_destroy(&attributes);
  return error;
}

}  // namespace gprof::inject
