// A job of NCCL ranks on the fake NCCL (tests/fake_nccl), one rank late before each collective
// for a known reason (tests/nccl_test.cc):
//   nccl_ranks_app launch --world N --late R --mode sleep|lock|gpu --iters K --late-ms D
// starts N rank processes as a launcher does (RANK, LOCAL_RANK, WORLD_SIZE set, each exec'd
// anew), which meet through ncclGetUniqueId's id and run K collectives (all_reduce, every third a
// broadcast). Before each, rank R is late by D ms: `sleep` sleeps; `lock` waits for a lock its
// own logging thread holds while it writes (asleep) for D ms; `gpu` launches a kernel of D ms on
// its stream first, so that its thread is on time and its collective's kernel starts late. NCCL_TEST_WRAP, when set, is a
// command (words split at spaces, "%r" the rank) each rank runs under: its own gprof-run, say.
// Each rank prints, one fact a line:
//   wait rank=N iter=I start_ns=.. end_ns=..   (its collective's call and the stream's
//                                              synchronization after it, CLOCK_MONOTONIC)
//   logger rank=N tid=..                       (the lock mode's logging thread)
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_nccl/nccl.h"

namespace {

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepMs(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

struct Options {
  int world = 2, late = 1, iters = 5, late_ms = 150;
  std::string mode = "sleep";
};

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key == "--world") options.world = atoi(argv[i + 1]);
    if (key == "--late") options.late = atoi(argv[i + 1]);
    if (key == "--iters") options.iters = atoi(argv[i + 1]);
    if (key == "--late-ms") options.late_ms = atoi(argv[i + 1]);
    if (key == "--mode") options.mode = argv[i + 1];
  }
  return options;
}

// The lock mode's logging thread: on request it writes, holding the log's lock, for `late_ms`.
struct Logger {
  pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_t request_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t requested = PTHREAD_COND_INITIALIZER;
  pthread_cond_t holding = PTHREAD_COND_INITIALIZER;
  int requests = 0, held = 0, late_ms = 0;
  long tid = 0;  // the logging thread's, once it runs
};

void* LoggerMain(void* arg) {
  auto* logger = static_cast<Logger*>(arg);
  __atomic_store_n(&logger->tid, syscall(SYS_gettid), __ATOMIC_RELEASE);
  for (int served = 0;; ++served) {
    pthread_mutex_lock(&logger->request_lock);
    while (logger->requests == served) pthread_cond_wait(&logger->requested, &logger->request_lock);
    pthread_mutex_unlock(&logger->request_lock);
    pthread_mutex_lock(&logger->log_lock);
    pthread_mutex_lock(&logger->request_lock);
    ++logger->held;
    pthread_cond_signal(&logger->holding);
    pthread_mutex_unlock(&logger->request_lock);
    SleepMs(logger->late_ms);  // writing the log, its lock held
    pthread_mutex_unlock(&logger->log_lock);
  }
  return nullptr;
}

int Rank(const Options& options) {
  const int rank = atoi(getenv("RANK"));
  ncclUniqueId id{};
  snprintf(id.internal, sizeof(id.internal), "%s", getenv("NCCL_TEST_ID"));
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, options.world, id, rank) != ncclSuccess) return 2;
  Logger logger;
  logger.late_ms = options.late_ms;
  if (rank == options.late && options.mode == "lock") {
    pthread_t thread;
    pthread_create(&thread, nullptr, LoggerMain, &logger);
    pthread_setname_np(thread, "logger");
  }
  // The data, on the GPU as a training job's is (its first CUDA call, before any collective).
  void* data = nullptr;
  const size_t count = 1024;
  if (cudaMalloc(&data, count * sizeof(float)) != cudaSuccess) return 2;
  std::string facts;
  for (int i = 0; i < options.iters; ++i) {
    if (rank == options.late && options.mode == "sleep") SleepMs(options.late_ms);
    if (rank == options.late && options.mode == "lock") {
      pthread_mutex_lock(&logger.request_lock);
      ++logger.requests;
      pthread_cond_signal(&logger.requested);
      while (logger.held < logger.requests)
        pthread_cond_wait(&logger.holding, &logger.request_lock);
      pthread_mutex_unlock(&logger.request_lock);
      pthread_mutex_lock(&logger.log_lock);  // to log the step: the logger has it
      pthread_mutex_unlock(&logger.log_lock);
    }
    if (rank == options.late && options.mode == "gpu" &&
        fake_cuda::LaunchKernel(options.late_ms * 1000, nullptr) != cudaSuccess)
      return 3;
    const uint64_t start = Now();
    ncclResult_t result =
        i % 3 == 2 ? ncclBroadcast(data, data, count, ncclFloat32, 0, comm, nullptr)
                   : ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm, nullptr);
    // The collective's kernel, which waits on the GPU for the other ranks.
    const bool synced = cudaStreamSynchronize(nullptr) == cudaSuccess;
    const uint64_t end = Now();
    if (result != ncclSuccess || !synced) return 3;
    facts += "wait rank=" + std::to_string(rank) + " iter=" + std::to_string(i) +
             " start_ns=" + std::to_string(start) + " end_ns=" + std::to_string(end) + "\n";
  }
  ncclCommDestroy(comm);
  if (long tid = __atomic_load_n(&logger.tid, __ATOMIC_ACQUIRE))
    facts += "logger rank=" + std::to_string(rank) + " tid=" + std::to_string(tid) + "\n";
  fputs(facts.c_str(), stdout);
  fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  Options options = Parse(argc, argv);
  if (strcmp(argv[1], "rank") == 0) return Rank(options);
  if (strcmp(argv[1], "launch") != 0) return 64;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  // Ranks run this program anew, under its own name (not /proc/self/exe's "exe").
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 2;
  std::vector<pid_t> children;
  for (int rank = 0; rank < options.world; ++rank) {
    pid_t child = fork();
    if (child == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(options.world).c_str(), 1);
      setenv("NCCL_TEST_ID", id.internal, 1);
      std::vector<std::string> words;
      if (const char* wrap = getenv("NCCL_TEST_WRAP")) {
        std::string word;
        for (const char* c = wrap;; ++c) {
          if (*c == ' ' || *c == '\0') {
            if (!word.empty()) words.push_back(word);
            word.clear();
            if (*c == '\0') break;
          } else if (c[0] == '%' && c[1] == 'r') {
            word += std::to_string(rank);
            ++c;
          } else {
            word += *c;
          }
        }
      }
      words.push_back(self);
      words.push_back("rank");
      for (int i = 2; i < argc; ++i) words.push_back(argv[i]);
      std::vector<char*> args;
      for (std::string& word : words) args.push_back(word.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    children.push_back(child);
  }
  int failed = 0;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  unlink(id.internal);
  return failed == 0 ? 0 : 1;
}
