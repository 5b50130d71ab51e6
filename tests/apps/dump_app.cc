// Threads stuck in known ways for `gprof-run dump` (tests/dump_test.cc). Prints the thread ids
// that matter, then "ready" once every thread is about to block, then sleeps until killed.
//   deadlock:  two threads, each holding one pthread mutex and waiting for the other's
//   sleeper:   one thread holds a mutex inside nanosleep, another waits for that mutex
//   sleeper-many-maps: the same after mapping 3000 regions of their own (maps of about 250 KiB, as
//              a CUDA process has, with libc's lines after them)
//   threads N: N threads blocked on one condition variable
//   ring N [pi]: N threads, thread i holding mutex i and waiting for mutex i+1 (mod N); with "pi",
//              priority-inheriting mutexes (the kernel's PI futexes, whose word holds the owner)
//   flock FILE: a child process holds flock(FILE), a thread of this one waits for it
//   spin:      one thread always on a CPU, in SpinOnCpu (its stack needs a brief stop)
//   vla:       one thread asleep under a frame addressed through rbp (a variable-length array)
//   rwlock:    a writer holds a rwlock inside nanosleep; a reader and another writer wait for it
//   exit-when-traced: a thread on a CPU, and one that ends the process (exit status 3) the moment
//              the first is traced: a dump that stops the first sees the process exit meanwhile
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t second_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t condition_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t never_signalled = PTHREAD_COND_INITIALIZER;
pthread_barrier_t both_hold;
std::atomic<int> started{0};

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

void SleepForever() {
  for (;;) pause();
}

void* TakeFirstThenSecond(void*) {
  pthread_mutex_lock(&first_lock);
  printf("first %d\n", Tid());
  fflush(stdout);
  ++started;
  pthread_barrier_wait(&both_hold);
  pthread_mutex_lock(&second_lock);
  return nullptr;
}

void* TakeSecondThenFirst(void*) {
  pthread_mutex_lock(&second_lock);
  printf("second %d\n", Tid());
  fflush(stdout);
  ++started;
  pthread_barrier_wait(&both_hold);
  pthread_mutex_lock(&first_lock);
  return nullptr;
}

void* HoldWhileSleeping(void*) {
  pthread_mutex_lock(&first_lock);
  printf("holder %d\n", Tid());
  fflush(stdout);
  started = 1;
  for (;;) {
    timespec hour{3600, 0};
    nanosleep(&hour, nullptr);
  }
}

void* WaitForHolder(void*) {
  printf("waiter %d\n", Tid());
  fflush(stdout);
  started = 2;
  pthread_mutex_lock(&first_lock);
  return nullptr;
}

void* WaitForSignal(void*) {
  pthread_mutex_lock(&condition_lock);
  ++started;
  for (;;) pthread_cond_wait(&never_signalled, &condition_lock);
}

constexpr int kMaxRing = 16;
pthread_mutex_t ring_locks[kMaxRing];
int ring_size = 0;

void* HoldOneWaitForNext(void* argument) {
  int index = static_cast<int>(reinterpret_cast<intptr_t>(argument));
  pthread_mutex_lock(&ring_locks[index]);
  printf("member %d\n", Tid());
  fflush(stdout);
  ++started;
  while (started < ring_size) usleep(1000);
  pthread_mutex_lock(&ring_locks[(index + 1) % ring_size]);
  return nullptr;
}

volatile uint64_t spins = 0;

extern "C" __attribute__((noinline)) void SpinOnCpu() {
  for (;;) spins = spins + 1;
}

void* Spin(void*) {
  printf("spinner %d\n", Tid());
  fflush(stdout);
  started = 1;
  SpinOnCpu();
  return nullptr;
}

// Its frame is addressed through rbp (the array's size is known only at run time): unwinding it
// needs the frame pointer, which /proc's syscall line does not give.
extern "C" __attribute__((noinline)) void SleepUnderVariableFrame(int size) {
  volatile char scratch[size];
  scratch[0] = 1;
  started = 1;
  for (;;) {
    timespec hour{3600, 0};
    nanosleep(&hour, nullptr);
  }
  asm volatile("" ::"r"(scratch[0]) : "memory");
}

void* VariableFrame(void*) {
  printf("vla %d\n", Tid());
  fflush(stdout);
  SleepUnderVariableFrame(100 + static_cast<int>(Tid() % 7));
  return nullptr;
}

pid_t spinner_tid = 0;

// Reads the spinner's TracerPid until it is not 0 (a dump stopping it), then ends the process.
void* ExitWhenTraced(void*) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", static_cast<int>(spinner_tid));
  started = 2;
  for (;;) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char text[4096];
    ssize_t got = fd < 0 ? 0 : read(fd, text, sizeof text - 1);
    if (fd >= 0) close(fd);
    if (got <= 0) continue;
    text[got] = '\0';
    const char* tracer = strstr(text, "TracerPid:\t");
    if (tracer != nullptr && tracer[11] != '0') _exit(3);
  }
}

void* SpinForExit(void*) {
  spinner_tid = Tid();
  printf("spinner %d\n", Tid());
  fflush(stdout);
  started = 1;
  SpinOnCpu();
  return nullptr;
}

pthread_rwlock_t shared_state = PTHREAD_RWLOCK_INITIALIZER;

void* HoldRwlockWhileSleeping(void*) {
  pthread_rwlock_wrlock(&shared_state);
  printf("writer %d\n", Tid());
  fflush(stdout);
  started = 1;
  for (;;) {
    timespec hour{3600, 0};
    nanosleep(&hour, nullptr);
  }
}

void* ReadRwlock(void*) {
  printf("reader %d\n", Tid());
  fflush(stdout);
  ++started;
  pthread_rwlock_rdlock(&shared_state);
  return nullptr;
}

void* WriteRwlock(void*) {
  printf("nextwriter %d\n", Tid());
  fflush(stdout);
  ++started;
  pthread_rwlock_wrlock(&shared_state);
  return nullptr;
}

const char* locked_file = nullptr;

void* WaitForFileLock(void*) {
  int fd = open(locked_file, O_RDWR | O_CLOEXEC);
  printf("lockwaiter %d\n", Tid());
  fflush(stdout);
  started = 1;
  flock(fd, LOCK_EX);
  return nullptr;
}

// A child that holds flock(`path`) until killed (it dies with its parent); returns once it holds.
void StartLockHolder(const char* path) {
  int ready[2];
  if (pipe(ready) != 0) exit(1);
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    SleepForever();
  }
  char byte;
  if (read(ready[0], &byte, 1) != 1) exit(1);
  printf("locker %d\n", child);
  fflush(stdout);
}

void Start(void* (*body)(void*), void* argument = nullptr) {
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 64 << 10);
  if (pthread_create(&thread, &attributes, body, argument) != 0) {
    perror("pthread_create");
    exit(1);
  }
  pthread_attr_destroy(&attributes);
}

void Ready() {
  puts("ready");
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "deadlock") == 0) {
    pthread_barrier_init(&both_hold, nullptr, 2);
    Start(TakeFirstThenSecond);
    Start(TakeSecondThenFirst);
    while (started < 2) usleep(1000);  // both have printed their ids
  } else if (strcmp(mode, "sleeper") == 0 || strcmp(mode, "sleeper-many-maps") == 0) {
    if (strcmp(mode, "sleeper-many-maps") == 0) {
      // Neighbours of different protections stay separate lines of /proc/PID/maps.
      const long page = sysconf(_SC_PAGESIZE);
      char* region = static_cast<char*>(
          mmap(nullptr, 3000 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (region == MAP_FAILED) return 2;
      for (int i = 1; i < 3000; i += 2) mprotect(region + i * page, page, PROT_NONE);
    }
    Start(HoldWhileSleeping);
    while (started == 0) usleep(1000);
    Start(WaitForHolder);
    while (started < 2) usleep(1000);  // the waiter has printed its id
  } else if (strcmp(mode, "ring") == 0 && argc > 2) {
    ring_size = atoi(argv[2]);
    if (ring_size < 2 || ring_size > kMaxRing) return 2;
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    if (argc > 3 && strcmp(argv[3], "pi") == 0)
      pthread_mutexattr_setprotocol(&attributes, PTHREAD_PRIO_INHERIT);
    for (int i = 0; i < ring_size; ++i) pthread_mutex_init(&ring_locks[i], &attributes);
    for (int i = 0; i < ring_size; ++i)
      Start(HoldOneWaitForNext, reinterpret_cast<void*>(static_cast<intptr_t>(i)));
    while (started < ring_size) usleep(1000);
  } else if (strcmp(mode, "flock") == 0 && argc > 2) {
    locked_file = argv[2];
    StartLockHolder(locked_file);
    Start(WaitForFileLock);
    while (started == 0) usleep(1000);
  } else if (strcmp(mode, "spin") == 0) {
    Start(Spin);
    while (started == 0) usleep(1000);
  } else if (strcmp(mode, "exit-when-traced") == 0) {
    Start(SpinForExit);
    while (started == 0) usleep(1000);
    Start(ExitWhenTraced);
    while (started < 2) usleep(1000);
  } else if (strcmp(mode, "vla") == 0) {
    Start(VariableFrame);
    while (started == 0) usleep(1000);
  } else if (strcmp(mode, "rwlock") == 0) {
    Start(HoldRwlockWhileSleeping);
    while (started == 0) usleep(1000);
    Start(ReadRwlock);
    Start(WriteRwlock);
    while (started < 3) usleep(1000);
  } else if (strcmp(mode, "threads") == 0 && argc > 2) {
    int count = atoi(argv[2]);
    for (int i = 0; i < count; ++i) Start(WaitForSignal);
    // Each has released the mutex inside pthread_cond_wait once it can be taken here.
    while (started < count) usleep(1000);
    pthread_mutex_lock(&condition_lock);
    pthread_mutex_unlock(&condition_lock);
  } else {
    fprintf(
        stderr,
        "usage: dump_app deadlock | sleeper | threads N | ring N [pi] | flock FILE | spin | vla | "
        "rwlock | exit-when-traced\n");
    return 2;
  }
  Ready();
  SleepForever();
}
