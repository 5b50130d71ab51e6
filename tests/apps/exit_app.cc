// exit_app: a small program on the fake CUDA runtime for gprof-run's process-handling tests. It
// first makes a few CUDA calls (so an injected library is active), then runs its actions in order:
//   exit N         exit(N)
//   signal N       raise signal N with its default disposition (carries on if that does not end it)
//   echo           copy stdin to stdout byte for byte until end of file
//   print          write kPrintedStdout to stdout and kPrintedStderr to stderr
//   thread-exit N  exit(N) from another thread while the main thread is in cudaDeviceSynchronize
//   sleep MS       sleep MS milliseconds, with SIGINT and SIGTERM at their default disposition
//   env NAME       print NAME's value and a newline; nothing if NAME is unset
//   busy MS        make CUDA calls for MS milliseconds, sleeping 1 ms after every few, so that
//                  both CUDA calls and kernel events keep coming until the end
//   segfault       write through a null pointer (a real SIGSEGV, not a raised one)
//   abort          abort()
//   exec PROG ARG...  replace the program with PROG ARG... (the rest of the arguments)
// e.g. `exit_app print exit 3`. After the last action it exits 0. Bad arguments: usage on stderr,
// exit 2; a failed CUDA call: exit 1. Output is unbuffered: exit or a signal loses none of it.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage =
    "exit_app [exit N | signal N | echo | print | thread-exit N | sleep MS | env NAME |\n"
    "          busy MS | segfault | abort]... [exec PROG ARG...]";
constexpr std::string_view kPrintedStdout = "exit_app: text on stdout\n";
constexpr std::string_view kPrintedStderr = "exit_app: text on stderr\n";

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) std::exit(1);
    text.remove_prefix(size_t(written));
  }
}

void MakeAFewCudaCalls() {
  int devices = 0;
  apps::Check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  apps::Check(fake_cuda::LaunchKernel(100, stream), "cudaLaunchKernel");
  apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

void RestoreDefaultDisposition(int signal_number) {
  signal(signal_number, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void Echo() {
  char buffer[65536];
  for (;;) {
    const ssize_t got = read(STDIN_FILENO, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) std::exit(1);
    if (got == 0) return;
    WriteAll(STDOUT_FILENO, std::string_view(buffer, size_t(got)));
  }
}

[[noreturn]] void ExitFromThreadDuringCudaCall(int status) {
  apps::Check(fake_cuda::LaunchKernel(5'000'000, nullptr), "cudaLaunchKernel");
  std::atomic<bool> entering_call{false};
  std::thread([&entering_call, status] {
    while (!entering_call.load()) apps::SleepNs(1'000'000);
    apps::SleepNs(50'000'000);  // the main thread is inside cudaDeviceSynchronize by now
    std::exit(status);
  }).detach();
  entering_call.store(true);
  cudaDeviceSynchronize();
  // Only reached if exit() hung for seconds; wait here rather than exit a second time concurrently.
  for (;;) pause();
}

void MakeCallsFor(uint64_t duration_ns) {
  cudaStream_t stream;
  apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const uint64_t end_ns = apps::MonotonicNs() + duration_ns;
  while (apps::MonotonicNs() < end_ns) {
    for (int i = 0; i < 4; ++i)
      apps::Check(fake_cuda::LaunchKernel(20, stream), "cudaLaunchKernel");
    apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    apps::SleepNs(1'000'000);
  }
  apps::Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

[[noreturn]] void Segfault() {
  RestoreDefaultDisposition(SIGSEGV);
  volatile int* nowhere = nullptr;
  *nowhere = 1;
  std::abort();  // not reached
}

enum class ActionKind {
  kExit,
  kSignal,
  kEcho,
  kPrint,
  kThreadExit,
  kSleep,
  kEnv,
  kBusy,
  kSegfault,
  kAbort,
  kExec
};

struct Action {
  ActionKind kind;
  long number = 0;             // exit, signal, thread-exit, sleep, busy
  const char* name = nullptr;  // env
  char** argv = nullptr;       // exec: the rest of the arguments, null-terminated
};

// Parses every action before any runs, so bad arguments never leave half the actions done.
std::vector<Action> ParseActions(int argc, char** argv) {
  std::vector<Action> actions;
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "echo") {
      actions.push_back({ActionKind::kEcho});
      continue;
    }
    if (word == "print") {
      actions.push_back({ActionKind::kPrint});
      continue;
    }
    if (word == "segfault") {
      actions.push_back({ActionKind::kSegfault});
      continue;
    }
    if (word == "abort") {
      actions.push_back({ActionKind::kAbort});
      continue;
    }
    if (word == "exec") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "exit_app: exec needs a program\nusage: %s\n", kUsage);
        std::exit(2);
      }
      actions.push_back({ActionKind::kExec, 0, nullptr, argv + i + 1});
      break;
    }
    if (word != "exit" && word != "signal" && word != "thread-exit" && word != "sleep" &&
        word != "env" && word != "busy") {
      std::fprintf(stderr, "exit_app: unknown action '%s'\nusage: %s\n", argv[i], kUsage);
      std::exit(2);
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "exit_app: %s needs an argument\nusage: %s\n", argv[i], kUsage);
      std::exit(2);
    }
    const char* argument = argv[++i];
    if (word == "exit") {
      actions.push_back({ActionKind::kExit, apps::ParseInt(argument, 0, 255, kUsage)});
    } else if (word == "signal") {
      actions.push_back({ActionKind::kSignal, apps::ParseInt(argument, 1, SIGRTMAX, kUsage)});
    } else if (word == "thread-exit") {
      actions.push_back({ActionKind::kThreadExit, apps::ParseInt(argument, 0, 255, kUsage)});
    } else if (word == "sleep" || word == "busy") {
      actions.push_back({word == "sleep" ? ActionKind::kSleep : ActionKind::kBusy,
                         apps::ParseInt(argument, 0, 24L * 3600 * 1000, kUsage)});
    } else {
      actions.push_back({ActionKind::kEnv, 0, argument});
    }
  }
  return actions;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Action> actions = ParseActions(argc, argv);
  MakeAFewCudaCalls();
  for (const Action& action : actions) {
    switch (action.kind) {
      case ActionKind::kExit:
        std::exit(int(action.number));
      case ActionKind::kSignal:
        RestoreDefaultDisposition(int(action.number));
        raise(int(action.number));
        break;
      case ActionKind::kEcho:
        Echo();
        break;
      case ActionKind::kPrint:
        WriteAll(STDOUT_FILENO, kPrintedStdout);
        WriteAll(STDERR_FILENO, kPrintedStderr);
        break;
      case ActionKind::kThreadExit:
        ExitFromThreadDuringCudaCall(int(action.number));
      case ActionKind::kSleep:
        // Inherited settings (a shell ignores SIGINT in its background jobs) must not keep a
        // forwarded signal from ending the program.
        RestoreDefaultDisposition(SIGINT);
        RestoreDefaultDisposition(SIGTERM);
        apps::SleepNs(uint64_t(action.number) * 1'000'000);
        break;
      case ActionKind::kBusy:
        MakeCallsFor(uint64_t(action.number) * 1'000'000);
        break;
      case ActionKind::kSegfault:
        Segfault();
      case ActionKind::kAbort:
        std::abort();
      case ActionKind::kExec:
        execvp(action.argv[0], action.argv);
        std::fprintf(stderr, "exit_app: exec %s: %s\n", action.argv[0], std::strerror(errno));
        return 1;
      case ActionKind::kEnv:
        if (const char* value = std::getenv(action.name)) {
          WriteAll(STDOUT_FILENO, value);
          WriteAll(STDOUT_FILENO, "\n");
        }
        break;
    }
  }
  return 0;
}
