// sandbox_app: a program that sandboxes itself with seccomp, as browsers, job launchers and
// container runtimes do, then makes CUDA calls.
//
//   sandbox_app [--kill | --errno N] [--before-cuda] [--chroot DIR] [--thread-stack KIB]
//               SYSCALLS CALLS
//
// SYSCALLS is a comma-separated list of system call names (see kSyscalls; "none" for an empty
// list). After its first CUDA call (or before any, with --before-cuda) the program installs a
// seccomp filter on every one of its threads (SECCOMP_FILTER_FLAG_TSYNC: an injected library's
// threads included) that makes those calls fail with EPERM (--errno N: with errno N; --kill: kills
// the process instead). With --chroot it first changes its root to DIR (an empty directory: no
// /proc), as a sandbox does. --thread-stack makes KIB KiB the default stack of every thread
// created from then on (pthread_setattr_default_np, first thing), as programs that make many
// threads do. Then it makes CALLS rounds of CUDA calls (a 200 us kernel launch and
// a stream synchronize each, 2 ms apart) and prints `calls=<successful CUDA calls>` and
// `threads=<pthread_create that succeeded>/<tried>` (one thread per ten rounds, made and joined).
// Exit status 0 when every call it tried succeeded, 1 when a CUDA call failed, 2 on bad
// arguments, 3 when the filter could not be installed or the root could not be changed.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/apps/app_common.h"

namespace {

struct NamedSyscall {
  const char* name;
  int number;
};

constexpr NamedSyscall kSyscalls[] = {
    {"process_vm_readv", SYS_process_vm_readv},
    {"pidfd_open", SYS_pidfd_open},
    {"pidfd_getfd", SYS_pidfd_getfd},
    {"shmget", SYS_shmget},
    {"shmat", SYS_shmat},
    {"shmctl", SYS_shmctl},
    {"prctl", SYS_prctl},
    {"clone3", SYS_clone3},
    {"clone", SYS_clone},
    {"openat", SYS_openat},
    {"close_range", SYS_close_range},
    {"unshare", SYS_unshare},
    {"mremap", SYS_mremap},
    {"readlink", SYS_readlink},
    {"readlinkat", SYS_readlinkat},
    {"getrlimit", SYS_getrlimit},
    {"prlimit64", SYS_prlimit64},
    {"fstatfs", SYS_fstatfs},
    {"newfstatat", SYS_newfstatat},
    {"fstat", SYS_fstat},
    {"fcntl", SYS_fcntl},
    {"pwrite64", SYS_pwrite64},
    {"write", SYS_write},
    {"futex", SYS_futex},
    {"clock_nanosleep", SYS_clock_nanosleep},
};

int Usage() {
  std::fprintf(stderr,
               "usage: sandbox_app [--kill | --errno N] [--before-cuda] [--chroot DIR] "
               "[--thread-stack KIB] SYSCALLS CALLS\n");
  return 2;
}

bool InstallFilter(const std::vector<int>& numbers, uint32_t action) {
  std::vector<sock_filter> filter;
  filter.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  filter.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  for (int number : numbers) {
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(number), 0, 1));
    filter.push_back(BPF_STMT(BPF_RET | BPF_K, action));
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) == 0;
}

void* Idle(void*) { return nullptr; }

}  // namespace

int main(int argc, char** argv) {
  uint32_t action = SECCOMP_RET_ERRNO | EPERM;
  bool before_cuda = false;
  const char* new_root = nullptr;
  int arg = 1;
  for (; arg < argc && std::strncmp(argv[arg], "--", 2) == 0; ++arg) {
    if (std::strcmp(argv[arg], "--kill") == 0) {
      action = SECCOMP_RET_KILL_PROCESS;
    } else if (std::strcmp(argv[arg], "--errno") == 0 && arg + 1 < argc) {
      action = SECCOMP_RET_ERRNO | (std::atoi(argv[++arg]) & SECCOMP_RET_DATA);
    } else if (std::strcmp(argv[arg], "--before-cuda") == 0) {
      before_cuda = true;
    } else if (std::strcmp(argv[arg], "--chroot") == 0 && arg + 1 < argc) {
      new_root = argv[++arg];
    } else if (std::strcmp(argv[arg], "--thread-stack") == 0 && arg + 1 < argc) {
      pthread_attr_t attributes;
      pthread_attr_init(&attributes);
      if (pthread_attr_setstacksize(&attributes, std::strtoul(argv[++arg], nullptr, 10) << 10) !=
              0 ||
          pthread_setattr_default_np(&attributes) != 0) {
        return Usage();
      }
      pthread_attr_destroy(&attributes);
    } else {
      return Usage();
    }
  }
  if (argc - arg != 2) return Usage();
  std::vector<int> numbers;
  std::string list = argv[arg];
  for (size_t start = 0; list != "none" && start <= list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(start, end - start);
    int number = -1;
    for (const auto& known : kSyscalls) {
      if (name == known.name) number = known.number;
    }
    if (number < 0) return Usage();
    numbers.push_back(number);
    start = end + 1;
  }
  int rounds = std::atoi(argv[arg + 1]);

  cudaStream_t stream = nullptr;
  if (!before_cuda) apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  if (new_root != nullptr && (chroot(new_root) != 0 || chdir("/") != 0)) {
    std::fprintf(stderr, "sandbox_app: cannot chroot to %s: %s\n", new_root, strerror(errno));
    return 3;
  }
  if (!InstallFilter(numbers, action)) {
    std::fprintf(stderr, "sandbox_app: cannot install the filter: %s\n", strerror(errno));
    return 3;
  }
  int calls = 0, threads_made = 0, threads_tried = 0;
  if (before_cuda) {
    apps::Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  }
  ++calls;
  for (int round = 0; round < rounds; ++round) {
    apps::Check(fake_cuda::LaunchKernel(200, stream), "cudaLaunchKernel");
    apps::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    calls += 2;
    apps::SleepNs(2'000'000);
    if (round % 10 == 0) {
      pthread_t thread;
      ++threads_tried;
      if (pthread_create(&thread, nullptr, Idle, nullptr) == 0) {
        pthread_join(thread, nullptr);
        ++threads_made;
      }
    }
  }
  std::printf("calls=%d\nthreads=%d/%d\n", calls, threads_made, threads_tried);
  return 0;
}
