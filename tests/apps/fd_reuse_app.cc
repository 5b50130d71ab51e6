// fd_reuse_app: a program on the fake CUDA runtime that takes back descriptors it did not open, as
// daemons and careful servers do (issue 17), between two runs of CUDA calls:
//   fd_reuse_app MODE DIR CALLS
// 1. opens and closes DIR/stale (its number is now free: the next open() gets it);
// 2. makes CALLS CUDA calls, each below a frame without unwind information, then sleeps 300 ms
//    (an injected library's writer has opened its file and written to it by then);
// 3. MODE:
//      close-range   close_range(3, ~0U, 0)
//      closefrom     closes every descriptor above 2 that /proc/self/fd lists, one by one
//      dup2          opens DIR/own-0 and dup2s it over every descriptor above 2 that
//                    /proc/self/fd lists (each such number now names its own file)
//      double-close  closes DIR/stale's old number again (a stale descriptor closed twice)
// 4. opens DIR/own-1 .. DIR/own-4 (created, truncated), writes kFirstPart to each and to own-0 (in
//    dup2 mode), keeps them open through
// 5. CALLS more CUDA calls and a sleep of 300 ms (the writer writes again meanwhile), then
// 6. writes kSecondPart to each, closes them, prints "calls=<2*CALLS>" and exits 0.
// So each own-N file must hold exactly kFirstPart then kSecondPart. Exit 2 on bad arguments, 1 when
// a system call of its own failed or a CUDA call failed.
#include <alloca.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

constexpr const char* kUsage = "fd_reuse_app close-range|closefrom|dup2|double-close DIR CALLS";
constexpr const char kFirstPart[] = "the program's own bytes, part one\n";
constexpr const char kSecondPart[] = "and part two, after more CUDA calls\n";

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fd_reuse_app: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

long g_calls = 0;

void MakeCallsNow() {
  for (long i = 0; i < g_calls; i += 2) {
    apps::Check(fake_cuda::LaunchKernel(1, nullptr), "cudaLaunchKernel");
    apps::Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
}

}  // namespace

// Call `function` from a frame that has no unwind information (no CFI), as JIT-compiled code and
// hand-written assembly do: an unwinder walking a native stack through one must guess (libunwind
// then checks each address it reads, through a pipe of its own). Two of them, one for each run of
// calls: a frame the unwinder has not met before comes after the descriptors were taken back.
extern "C" void FirstCallWithoutUnwindInfo(void (*function)());
extern "C" void SecondCallWithoutUnwindInfo(void (*function)());
#define GPROF_NO_CFI_CALLER(name) \
  asm(".text\n.globl " #name "\n.type " #name ", @function\n" #name ":\n" \
      "push %rbp\nmov %rsp, %rbp\ncall *%rdi\npop %rbp\nret\n.size " #name ", .-" #name "\n")
GPROF_NO_CFI_CALLER(FirstCallWithoutUnwindInfo);
GPROF_NO_CFI_CALLER(SecondCallWithoutUnwindInfo);

namespace {

void MakeCalls(long calls, bool second) {
  g_calls = calls;
  if (!second) {
    FirstCallWithoutUnwindInfo(&MakeCallsNow);
    return;
  }
  // On stack pages the first run never reached: an unwinder that checks what it reads (and
  // remembers the pages it found good) checks these anew.
  char* deeper = static_cast<char*>(alloca(256 * 1024));
  asm volatile("" : : "r"(deeper) : "memory");
  SecondCallWithoutUnwindInfo(&MakeCallsNow);
}

// The descriptors above 2 that /proc/self/fd lists, its own directory's left out.
std::vector<int> ListedDescriptors() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) Fail("opendir /proc/self/fd");
  while (dirent* entry = readdir(dir)) {
    int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] != '.' && fd > 2 && fd != dirfd(dir)) fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

int Create(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Fail(path.c_str());
  return fd;
}

void WriteText(int fd, const char* text) {
  if (write(fd, text, std::strlen(text)) != static_cast<ssize_t>(std::strlen(text))) Fail("write");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const long calls = apps::ParseInt(argv[3], 2, 10'000'000, kUsage);
  if (mode != "close-range" && mode != "closefrom" && mode != "dup2" && mode != "double-close") {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }

  int stale = Create(dir + "/stale");
  close(stale);
  MakeCalls(calls, /*second=*/false);
  apps::SleepNs(300'000'000);

  std::vector<int> own;
  if (mode == "close-range") {
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) Fail("close_range");
  } else if (mode == "closefrom") {
    for (int fd : ListedDescriptors()) close(fd);
  } else if (mode == "dup2") {
    int file = Create(dir + "/own-0");
    for (int fd : ListedDescriptors()) {
      if (fd != file && dup2(file, fd) < 0) Fail("dup2");
    }
    own.push_back(file);
  } else {
    close(stale);  // EBADF, or someone else's descriptor
  }
  for (int i = 1; i <= 4; ++i) own.push_back(Create(dir + "/own-" + std::to_string(i)));
  for (int fd : own) WriteText(fd, kFirstPart);

  MakeCalls(calls, /*second=*/true);
  apps::SleepNs(300'000'000);
  for (int fd : own) {
    WriteText(fd, kSecondPart);
    close(fd);
  }
  std::printf("calls=%ld\n", (calls + 1) / 2 * 4);
  return 0;
}
