// Reads /proc for `gprof-run dump`: every file with a size cap and every field checked before use.
#include "collector/live/proc_snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "collector/live/native_stacks.h"
#include "collector/session/process_maps.h"
#include "inject/shared/clock.h"

namespace gprof::collector::live {
namespace {

constexpr size_t kMaxProcFile = 64 << 10;           // stat, syscall and stack are far smaller
constexpr size_t kMaxMapsFile = 16 << 20;           // a CUDA process's maps run to megabytes
constexpr unsigned kKernelThreadFlag = 0x00200000;  // PF_KTHREAD in /proc/PID/stat's flags

struct FileRead {
  std::string text;
  int error = 0;  // errno of the open or read; 0 when read
};

FileRead ReadProcFile(const std::string& path, size_t limit = kMaxProcFile) {
  FileRead result;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    result.error = errno;
    return result;
  }
  char buffer[4096];
  while (result.text.size() < limit) {
    ssize_t got = read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      result.error = errno;
      break;
    }
    if (got == 0) break;
    result.text.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return result;
}

bool Gone(int error) { return error == ENOENT || error == ESRCH; }

struct StatFields {
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
  unsigned flags = 0;
};

// "pid (comm) S ppid pgrp session tty tpgid flags ...": comm may hold spaces and ")", so it ends
// at the last ")".
std::optional<StatFields> ParseStat(const std::string& text) {
  size_t open_paren = text.find('(');
  size_t close_paren = text.rfind(')');
  if (open_paren == std::string::npos || close_paren == std::string::npos ||
      close_paren < open_paren)
    return std::nullopt;
  StatFields fields;
  fields.comm = text.substr(open_paren + 1, close_paren - open_paren - 1);
  std::istringstream rest(text.substr(close_paren + 1));
  std::string state;
  long ppid = 0, pgrp = 0, session = 0, tty = 0, tpgid = 0;
  unsigned long flags = 0;
  if (!(rest >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags) || state.size() != 1)
    return std::nullopt;
  fields.state = state[0];
  fields.ppid = static_cast<pid_t>(ppid);
  fields.flags = static_cast<unsigned>(flags);
  return fields;
}

std::string ProcPath(pid_t pid, pid_t tid, const char* leaf) {
  return "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/" + leaf;
}

std::vector<pid_t> NumericEntries(const std::string& dir) {
  std::vector<pid_t> ids;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return ids;
  while (dirent* entry = readdir(listing)) {
    char* end = nullptr;
    long id = strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && id > 0 && id <= 0x3fffffff)
      ids.push_back(static_cast<pid_t>(id));
  }
  closedir(listing);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string YamaScope() {
  FileRead scope = ReadProcFile("/proc/sys/kernel/yama/ptrace_scope");
  if (scope.error != 0 || scope.text.empty())
    return "; Yama is not in this kernel (no /proc/sys/kernel/yama/ptrace_scope)";
  switch (scope.text[0]) {
    case '0':
      return "; Yama ptrace_scope is 0 (classic: same user)";
    case '1':
      return "; Yama ptrace_scope is 1 (restricted: only a process's ancestors, or CAP_SYS_PTRACE)";
    case '2':
      return "; Yama ptrace_scope is 2 (admin-only: CAP_SYS_PTRACE)";
    case '3':
      return "; Yama ptrace_scope is 3 (no process may read another's: not even root)";
    default:
      return "";
  }
}

// Is `pid` a process that can be dumped? Its name and parent when it is.
Expected<StatFields> CheckDumpable(pid_t pid) {
  std::string id = std::to_string(pid);
  FileRead stat = ReadProcFile("/proc/" + id + "/stat");
  if (Gone(stat.error)) return Status::Error(StatusCode::kNotFound, "no process " + id);
  if (stat.error != 0)
    return Status::FromErrno(stat.error,
                             "cannot read /proc/" + id + "/stat: " + strerror(stat.error));
  std::optional<StatFields> fields = ParseStat(stat.text);
  if (!fields) return Status::Error(StatusCode::kInvalid, "/proc/" + id + "/stat is malformed");
  std::string named = "process " + id + " (" + fields->comm + ")";
  if (fields->state == 'Z' || fields->state == 'X')
    return Status::Error(StatusCode::kInvalid,
                         named +
                             " is a zombie: it has exited and its parent has not reaped it; "
                             "there is nothing left to dump");
  if (fields->flags & kKernelThreadFlag)
    return Status::Error(StatusCode::kInvalid,
                         named + " is a kernel thread: it has no user space to dump");
  // /proc/PID/syscall and the memory read need what ptrace's attach needs.
  FileRead syscall = ReadProcFile("/proc/" + id + "/syscall");
  if (syscall.error == EACCES || syscall.error == EPERM)
    return Status::Error(StatusCode::kPermissionDenied,
                         "cannot read /proc/" + id + "/syscall of " + named +
                             ": permission denied; reading it needs root or "
                             "CAP_SYS_PTRACE over it (another user's process, or one that made "
                             "itself non-dumpable)" +
                             YamaScope());
  return *fields;
}

// "nr arg0 .. arg5 sp pc", "-1 sp pc" (not in a system call) or "running".
void ParseSyscall(const FileRead& file, ThreadSnapshot* thread) {
  if (file.error != 0) {
    thread->exited = Gone(file.error);
    thread->syscall_unreadable = strerror(file.error);
    return;
  }
  if (file.text.starts_with("running")) {
    thread->running = true;
    return;
  }
  std::istringstream fields(file.text);
  long long number = 0;
  if (!(fields >> number)) {
    thread->syscall_unreadable = "malformed";
    return;
  }
  auto next_hex = [&fields](uint64_t* value) {
    std::string text;
    if (!(fields >> text)) return false;
    *value = strtoull(text.c_str(), nullptr, 16);
    return true;
  };
  if (number >= 0) {
    for (uint64_t& arg : thread->args) {
      if (!next_hex(&arg)) {
        thread->syscall_unreadable = "malformed";
        return;
      }
    }
    thread->in_syscall = true;
    thread->syscall = number;
  }
  thread->user_registers = next_hex(&thread->user_sp) && next_hex(&thread->user_pc);
}

void ReadKernelStack(pid_t pid, ThreadSnapshot* thread) {
  FileRead stack = ReadProcFile(ProcPath(pid, thread->tid, "stack"));
  if (stack.error == EACCES || stack.error == EPERM) {
    thread->kernel_stack_unreadable = "unreadable: needs root";
    return;
  }
  if (stack.error != 0) {
    thread->kernel_stack_unreadable = std::string("unreadable: ") + strerror(stack.error);
    return;
  }
  std::istringstream lines(stack.text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t start = line.find("] ");
    std::string frame = start == std::string::npos ? line : line.substr(start + 2);
    size_t offset = frame.find('+');
    if (offset != std::string::npos) frame.resize(offset);
    if (!frame.empty()) thread->kernel_stack.push_back(frame);
  }
}

bool TakesFdFirst(int64_t number) {
#if !defined(__x86_64__)
  return false;  // the numbers below are x86-64's
#endif
  switch (number) {
    case 0:
    case 1:
    case 16:
    case 17:
    case 18:
    case 19:
    case 20:
    case 42:
    case 43:
    case 44:
    case 45:
    case 46:
    case 47:
    case 72:
    case 73:
    case 232:
    case 281:
    case 288:
    case 441:
      return true;
    default:
      return false;
  }
}

// x86-64 glibc's pthread_rwlock_t (since 2.25), in 32-bit words: __readers, __writers,
// __wrphase_futex, __writers_futex, two pads, __cur_writer. A reader waits on __wrphase_futex, a
// writer on __writers_futex, each for 1 | PTHREAD_RWLOCK_FUTEX_USED (3).
constexpr int kRwlockWrphaseFutex = 2, kRwlockWritersFutex = 3, kRwlockCurWriter = 6;
constexpr uint32_t kRwlockWriteLocked = 3;  // __readers' PTHREAD_RWLOCK_WRPHASE | WRLOCKED
constexpr uint32_t kRwlockFutexWaited = 3;

// A wait on a rwlock held by a writer: `around` holds the 16 bytes before the futex word, the word
// and the 16 after it; the writer's tid when the words around it are a write-locked rwlock's.
pid_t RwlockWriter(const uint32_t* around, size_t word) {
  for (int at : {kRwlockWrphaseFutex, kRwlockWritersFutex}) {
    const uint32_t* lock = around + word - at;
    int other = at == kRwlockWrphaseFutex ? kRwlockWritersFutex : kRwlockWrphaseFutex;
    if ((lock[0] & kRwlockWriteLocked) == kRwlockWriteLocked && (lock[other] & 1) != 0 &&
        static_cast<int32_t>(lock[kRwlockCurWriter]) > 0)
      return static_cast<pid_t>(lock[kRwlockCurWriter]);
  }
  return 0;
}

// The futex word and the 12 bytes after it, read from the process's memory without stopping it;
// for a rwlock, the 16 bytes before it and 4 more after (each only where readable).
void ReadFutex(pid_t pid, ThreadSnapshot* thread) {
  constexpr size_t kBefore = 4, kAfter = 5;  // words
  uint32_t around[kBefore + kAfter] = {};
  uint32_t* words = around + kBefore;
  auto read = [pid](void* into, uint64_t from, size_t bytes) {
    iovec local{into, bytes};
    iovec remote{reinterpret_cast<void*>(from), bytes};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
  };
  if (!read(words, thread->args[0], 16)) return;
  bool rwlock_read = read(around, thread->args[0] - kBefore * 4, kBefore * 4) &&
                     read(words + 4, thread->args[0] + 16, 4);
  thread->futex_word = words[0];
  unsigned command = static_cast<unsigned>(thread->args[1]) & FUTEX_CMD_MASK;
  bool waits = command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET;
  if (rwlock_read && waits && thread->args[2] == kRwlockFutexWaited &&
      words[0] == kRwlockFutexWaited) {
    if (pid_t writer = RwlockWriter(around, kBefore); writer != 0) {
      thread->holder = writer;
      thread->holder_source = HolderSource::kRwlockWriter;
      return;
    }
  }
  if (command == FUTEX_LOCK_PI || command == FUTEX_LOCK_PI2) {
    thread->holder = static_cast<pid_t>(words[0] & FUTEX_TID_MASK);
    thread->holder_source = HolderSource::kPiFutexWord;
  } else if (command == FUTEX_WAIT && thread->args[2] == 2 && words[0] != 0) {
    // glibc's lll_lock_wait waits for 2 on pthread_mutex_t's __lock; __owner follows __count.
    thread->holder = static_cast<pid_t>(words[2]);
    thread->holder_source = HolderSource::kMutexOwnerField;
  }
}

// "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF": the holders of each file's locks, by
// "major:minor:inode" (the waiters' lines, "1: -> FLOCK ...", are not holders).
std::map<std::string, pid_t> FileLockHolders() {
  std::map<std::string, pid_t> holders;
  std::istringstream lines(ReadProcFile("/proc/locks").text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string number, kind, mode, access, file;
    long pid = 0;
    if (!(fields >> number >> kind) || kind == "->") continue;
    if (!(fields >> mode >> access >> pid >> file) || pid <= 0) continue;
    holders.emplace(file, static_cast<pid_t>(pid));
  }
  return holders;
}

// A thread in flock, or in fcntl's F_SETLKW or F_OFD_SETLKW: who holds a lock on the file.
void FindFileLockHolder(pid_t pid, ThreadSnapshot* thread) {
#if !defined(__x86_64__)
  return;  // flock's and fcntl's numbers below are x86-64's
#endif
  bool waits_for_lock = thread->syscall == 73 ||
                        (thread->syscall == 72 && (thread->args[1] == 7 || thread->args[1] == 38));
  if (!waits_for_lock) return;
  struct stat file {};
  std::string link =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(static_cast<int>(thread->args[0]));
  if (stat(link.c_str(), &file) != 0) return;
  char key[64];
  snprintf(key, sizeof key, "%02x:%02x:%lu", major(file.st_dev), minor(file.st_dev),
           static_cast<unsigned long>(file.st_ino));
  std::map<std::string, pid_t> holders = FileLockHolders();
  auto found = holders.find(key);
  if (found == holders.end() || found->second == pid) return;
  thread->holder = found->second;
  thread->holder_source = HolderSource::kFileLock;
}

// The id /proc/.../status's NSpid line ends with: the one in the innermost PID namespace the
// task is in; `ours` when the line is missing.
pid_t InnermostId(const std::string& status_path, pid_t ours) {
  std::string status = ReadProcFile(status_path).text;
  size_t line = status.find("\nNSpid:");
  if (line == std::string::npos) return ours;
  std::istringstream ids(status.substr(line + 7, status.find('\n', line + 1) - line - 7));
  long id = 0, last = ours;
  while (ids >> id) last = id;
  return static_cast<pid_t>(last);
}

ThreadSnapshot ReadThread(pid_t pid, pid_t tid, StackUnwinder& unwinder) {
  ThreadSnapshot thread;
  thread.tid = tid;
  thread.pid = pid;
  FileRead stat = ReadProcFile(ProcPath(pid, tid, "stat"));
  std::optional<StatFields> fields = stat.error == 0 ? ParseStat(stat.text) : std::nullopt;
  if (!fields) {
    thread.exited = Gone(stat.error);
    return thread;
  }
  thread.name = fields->comm;
  thread.state = fields->state;
  thread.ns_tid = InnermostId(ProcPath(pid, tid, "status"), tid);
  ParseSyscall(ReadProcFile(ProcPath(pid, tid, "syscall")), &thread);
  if (thread.in_syscall && TakesFdFirst(thread.syscall)) {
    char target[512];
    std::string link =
        "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(static_cast<int>(thread.args[0]));
    ssize_t length = readlink(link.c_str(), target, sizeof target - 1);
    if (length > 0) thread.object.assign(target, static_cast<size_t>(length));
  }
  if (thread.in_syscall && thread.syscall == kFutexSystemCall) ReadFutex(pid, &thread);
  if (thread.in_syscall) FindFileLockHolder(pid, &thread);
  ReadKernelStack(pid, &thread);
  ReadNativeStack(unwinder, &thread);
  return thread;
}

// The process's maps and executable, which name its native stacks' frames; the maps' text.
std::string ReadMaps(pid_t pid, Session* maps) {
  Process& process = maps->processes[static_cast<uint32_t>(pid)];
  process.pid = static_cast<uint32_t>(pid);
  char exe[4096];
  ssize_t length = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
  if (length > 0) process.exe.assign(exe, static_cast<size_t>(length));
  FileRead text = ReadProcFile("/proc/" + std::to_string(pid) + "/maps", kMaxMapsFile);
  if (text.error != 0) return "";
  process.maps = {MapsSnapshot{0, ParseMaps(text.text)}};
  return std::move(text.text);
}

ProcessSnapshot ReadProcess(pid_t pid, const StatFields& fields, Snapshot* snapshot,
                            StackUnwinder& unwinder) {
  ProcessSnapshot process;
  process.pid = pid;
  process.ppid = fields.ppid;
  process.name = fields.comm;
  process.maps_text = ReadMaps(pid, &snapshot->maps);
  for (pid_t tid : NumericEntries("/proc/" + std::to_string(pid) + "/task")) {
    process.threads.push_back(ReadThread(pid, tid, unwinder));
    const ThreadSnapshot& thread = process.threads.back();
    snapshot->stopped_ns += thread.stopped_ns;
    if (thread.stopped_ns > 0) ++snapshot->threads_stopped;
  }
  // A holder named by memory is a thread id of the process's own PID namespace: kept, as ours,
  // only when it is one of this process's threads.
  std::map<pid_t, pid_t> ours;
  for (const ThreadSnapshot& thread : process.threads) ours[thread.ns_tid] = thread.tid;
  for (ThreadSnapshot& thread : process.threads) {
    if (thread.holder == 0 || thread.holder_source == HolderSource::kFileLock) continue;
    auto holder = ours.find(thread.holder);
    thread.holder = holder == ours.end() ? 0 : holder->second;
    if (thread.holder == 0) thread.holder_source = HolderSource::kNone;
  }
  process.ns_pid = InnermostId("/proc/" + std::to_string(pid) + "/status", pid);
  // Gone, or a zombie now (its parent has not reaped it yet). A thread that ended while it was
  // read may be the process's exit under way (exit_group ends the threads one by one): it is
  // given up to 50 ms to finish, so that the process is not said to live on when it is ending.
  auto ended = [&] {
    FileRead stat = ReadProcFile("/proc/" + std::to_string(pid) + "/stat");
    std::optional<StatFields> now = stat.error == 0 ? ParseStat(stat.text) : std::nullopt;
    return !now || now->state == 'Z' || now->state == 'X';
  };
  const bool thread_ended = std::any_of(process.threads.begin(), process.threads.end(),
                                        [](const ThreadSnapshot& thread) { return thread.exited; });
  process.exited = ended() || process.threads.empty();
  for (int waited_ms = 0; thread_ended && !process.exited && waited_ms < 50; ++waited_ms) {
    usleep(1000);
    process.exited = ended();
  }
  return process;
}

}  // namespace

Expected<Snapshot> ReadProcessTrees(const std::vector<pid_t>& pids) {
  uint64_t start = MonotonicNs();
  Snapshot snapshot;
  snapshot.requested = pids;
  std::vector<std::pair<pid_t, StatFields>> roots;
  for (pid_t pid : pids) {
    Expected<StatFields> checked = CheckDumpable(pid);
    if (!checked.ok()) return checked.status();
    roots.emplace_back(pid, *checked);
  }
  // Every process's parent, to find the descendants.
  std::map<pid_t, std::vector<std::pair<pid_t, StatFields>>> children;
  for (pid_t pid : NumericEntries("/proc")) {
    FileRead stat = ReadProcFile("/proc/" + std::to_string(pid) + "/stat");
    std::optional<StatFields> fields = stat.error == 0 ? ParseStat(stat.text) : std::nullopt;
    if (fields) children[fields->ppid].emplace_back(pid, *fields);
  }
  StackUnwinder unwinder(snapshot.maps);
  std::set<pid_t> seen;
  std::vector<std::pair<pid_t, StatFields>> pending(roots.rbegin(), roots.rend());
  while (!pending.empty()) {
    auto [pid, fields] = pending.back();
    pending.pop_back();
    if (!seen.insert(pid).second) continue;
    if (fields.state == 'Z' || (fields.flags & kKernelThreadFlag)) continue;
    snapshot.processes.push_back(ReadProcess(pid, fields, &snapshot, unwinder));
    auto found = children.find(pid);
    if (found == children.end()) continue;
    for (auto child = found->second.rbegin(); child != found->second.rend(); ++child)
      pending.push_back(*child);
  }
  snapshot.read_ns = MonotonicNs() - start;
  return snapshot;
}

std::string SystemCallName(int64_t number) {
#if defined(__x86_64__)
  static const std::map<int64_t, const char*> kNames = {{0, "read"},
                                                        {1, "write"},
                                                        {7, "poll"},
                                                        {16, "ioctl"},
                                                        {17, "pread64"},
                                                        {18, "pwrite64"},
                                                        {19, "readv"},
                                                        {20, "writev"},
                                                        {23, "select"},
                                                        {34, "pause"},
                                                        {35, "nanosleep"},
                                                        {42, "connect"},
                                                        {43, "accept"},
                                                        {44, "sendto"},
                                                        {45, "recvfrom"},
                                                        {46, "sendmsg"},
                                                        {47, "recvmsg"},
                                                        {61, "wait4"},
                                                        {72, "fcntl"},
                                                        {73, "flock"},
                                                        {128, "rt_sigtimedwait"},
                                                        {130, "rt_sigsuspend"},
                                                        {202, "futex"},
                                                        {230, "clock_nanosleep"},
                                                        {232, "epoll_wait"},
                                                        {247, "waitid"},
                                                        {270, "pselect6"},
                                                        {271, "ppoll"},
                                                        {281, "epoll_pwait"},
                                                        {288, "accept4"},
                                                        {441, "epoll_pwait2"},
                                                        {449, "futex_waitv"}};
  auto found = kNames.find(number);
  if (found != kNames.end()) return found->second;
#endif
  (void)number;
  return "";
}

}  // namespace gprof::collector::live
