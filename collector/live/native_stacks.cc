// Native stacks of running processes' threads: copied without a stop where /proc gives the stack
// pointer, else with the thread stopped only while its registers and stack are copied.
#include "collector/live/native_stacks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "inject/shared/clock.h"

namespace gprof::collector::live {
namespace {

// `bytes` of `pid`'s memory from `sp` up, in page-sized pieces so that the copy ends where the
// stack's mapping ends rather than failing.
void CopyStack(pid_t pid, uint64_t sp, StackCopy* copy) {
  copy->bytes.resize(kStackCopyBytes);
  copy->requested_bytes = kStackCopyBytes;
  iovec local{copy->bytes.data(), kStackCopyBytes};
  std::vector<iovec> remote;
  for (uint64_t at = sp, end = sp + kStackCopyBytes; at < end;) {
    uint64_t next = std::min<uint64_t>((at & ~uint64_t{4095}) + 4096, end);
    remote.push_back({reinterpret_cast<void*>(at), next - at});
    at = next;
  }
  ssize_t copied = process_vm_readv(pid, &local, 1, remote.data(), remote.size(), 0);
  copy->error = copied < 0 ? errno : 0;
  copy->bytes.resize(copied < 0 ? 0 : static_cast<size_t>(copied));
}

// /proc/PID/task/TID/syscall's last two fields, the user stack pointer and program counter; false
// when the thread is running or gone.
bool ReadUserRegisters(pid_t pid, pid_t tid, uint64_t* sp, uint64_t* pc) {
  std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/syscall";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char text[256];
  ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return false;
  text[got] = '\0';
  if (strncmp(text, "running", 7) == 0) return false;
  std::vector<uint64_t> fields;
  for (char* at = text; *at != '\0';) {
    char* end = nullptr;
    uint64_t value = strtoull(at, &end, 0);
    if (end == at) break;
    fields.push_back(value);
    at = end;
  }
  if (fields.size() < 3) return false;
  *sp = fields[fields.size() - 2];
  *pc = fields[fields.size() - 1];
  return true;
}

// Whether the thread has exited (its /proc entry is gone, or only a zombie is left).
bool ThreadGone(pid_t pid, pid_t tid) {
  std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return true;
  char text[512];
  ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return true;
  text[got] = '\0';
  const char* state = strrchr(text, ')');
  return state == nullptr || (state[1] == ' ' && (state[2] == 'Z' || state[2] == 'X'));
}

// Whether stopping the thread could give a better stack than the one unwound without its rbp:
// only where the unwinding needed rbp. Any other end (a library replaced since it was mapped, the
// copy's end) would end a stopped thread's unwinding the same way.
bool NeedsRegisters(const NativeStack& stack) {
  return stack.ips.empty() || stack.cut_short == kNeededFramePointer;
}

// The thread stopped with ptrace only while its registers and stack are copied: seize (no stop,
// no signal), interrupt (a stop the thread itself never sees), copy, detach. A signal that
// arrived meanwhile is handed back at the detach.
bool CopyStopped(pid_t pid, pid_t tid, StackCopy* copy, uint64_t* stopped_ns, std::string* why) {
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    *why = std::string("it could not be stopped to read its registers: ptrace: ") +
           strerror(errno) +
           (errno == EPERM ? " (needs CAP_SYS_PTRACE over it; another tracer, a debugger, may "
                             "hold it; or Yama's ptrace_scope forbids it)"
                           : "");
    return false;
  }
  uint64_t start = MonotonicNs();
  if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
    *why = std::string("it could not be stopped: ptrace: ") + strerror(errno);
    ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    return false;
  }
  int status = 0;
  pid_t waited;
  do {
    waited = waitpid(tid, &status, __WALL);
  } while (waited < 0 && errno == EINTR);
  if (waited != tid || !WIFSTOPPED(status)) {
    *stopped_ns = MonotonicNs() - start;
    *why = "it exited while it was stopped to read its stack";
    return false;
  }
  // A stop for a signal (not our interrupt's event stop) hands that signal back at the detach.
  int deliver = (status >> 16) == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(status);
  user_regs_struct registers{};
  bool have_registers = ptrace(PTRACE_GETREGS, tid, nullptr, &registers) == 0;
  if (have_registers) CopyStack(pid, registers.rsp, copy);
  ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(deliver)));
  *stopped_ns = MonotonicNs() - start;
  if (!have_registers) {
    *why = std::string("its registers could not be read: ptrace: ") + strerror(errno);
    return false;
  }
  copy->rip = registers.rip;
  copy->rsp = registers.rsp;
  copy->rbp = registers.rbp;
  copy->rbp_known = true;
  return true;
}

}  // namespace

void ReadNativeStack(StackUnwinder& unwinder, ThreadSnapshot* thread) {
  StackCopy copy;
  copy.pid = static_cast<uint32_t>(thread->pid);
  copy.tid = static_cast<uint32_t>(thread->tid);
  copy.own_frames_on_top = false;
  copy.capture_ns = 0;  // the maps read with the snapshot, its only ones
  // Blocked: the registers /proc gives, the stack copied; the copy holds only when the thread is
  // still where it was once copied.
  if (thread->user_registers && !thread->running) {
    copy.rip = thread->user_pc;
    copy.rsp = thread->user_sp;
    copy.rbp_known = false;
    CopyStack(thread->pid, copy.rsp, &copy);
    uint64_t sp = 0, pc = 0;
    bool still =
        ReadUserRegisters(thread->pid, thread->tid, &sp, &pc) && sp == copy.rsp && pc == copy.rip;
    if (still) {
      std::optional<NativeStack> stack = unwinder.Unwind(copy, /*final=*/true);
      if (stack && !NeedsRegisters(*stack)) {
        thread->native_stack = std::move(*stack);
        thread->stack_path = StackPath::kWithoutStopping;
        return;
      }
    }
  }
  if (thread->exited || ThreadGone(thread->pid, thread->tid)) {
    thread->exited = true;
    thread->native_stack.cut_short = "it exited before its stack was read";
    return;
  }
  if (thread->tid == gettid() || thread->pid == getpid()) {
    thread->native_stack.cut_short = "gprof-run's own thread";
    return;
  }
  copy = StackCopy{};
  copy.pid = static_cast<uint32_t>(thread->pid);
  copy.tid = static_cast<uint32_t>(thread->tid);
  copy.own_frames_on_top = false;
  std::string why;
  uint64_t stopped_ns = 0;
  bool copied = CopyStopped(thread->pid, thread->tid, &copy, &stopped_ns, &why);
  thread->stopped_ns = stopped_ns;
  if (!copied && ThreadGone(thread->pid, thread->tid)) {
    thread->exited = true;
    thread->native_stack.cut_short = "it exited while its stack was read";
    return;
  }
  if (!copied) {
    thread->native_stack.cut_short = why;
    return;
  }
  std::optional<NativeStack> stack = unwinder.Unwind(copy, /*final=*/true);
  if (stack) thread->native_stack = std::move(*stack);
  thread->stack_path = StackPath::kStopped;
}

}  // namespace gprof::collector::live
