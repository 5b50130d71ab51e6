#include "cli/attach_target.h"

#include <dirent.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace gprof::cli {
namespace {

constexpr unsigned long kKernelThreadFlag = 0x00200000;  // PF_KTHREAD, /proc/PID/stat's flags
constexpr int kCapPerfmon = 38;                          // not in older headers
constexpr int kCapBpf = 39;

// The fields of /proc/PID/stat from the state on (the name before it may hold spaces and
// parentheses): [0] state, [1] ppid, [6] flags, [19] start time. Empty when it cannot be read.
std::vector<std::string> StatFields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return {};
  std::istringstream rest(stat.substr(name_end + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field && fields.size() < 20;) fields.push_back(field);
  return fields.size() == 20 ? fields : std::vector<std::string>{};
}

// A /proc/PID/status line's value ("Tgid:", "Uid:"), empty when absent.
std::string StatusValue(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) return line.substr(key.size());
  }
  return "";
}

bool HasCapability(int capability) {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[capability / 32].effective >> (capability % 32)) & 1u;
}

// Yama's ptrace_scope (0-3); 0 where Yama is not built in.
int PtraceScope() {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  return in >> scope ? scope : 0;
}

Status Refuse(pid_t pid, const std::string& why) {
  return Status::Error(StatusCode::kInvalid,
                       "cannot attach to pid " + std::to_string(pid) + ": " + why);
}

// What the process itself rules out, whoever asks.
Status CheckProcess(pid_t pid) {
  if (pid == getpid()) return Refuse(pid, "that is gprof-run itself");
  std::vector<std::string> fields = StatFields(pid);
  if (fields.empty()) return Refuse(pid, "no such process");
  if (strtoul(fields[6].c_str(), nullptr, 10) & kKernelThreadFlag)
    return Refuse(pid, "it is a kernel thread, which runs no user code to record");
  if (fields[0] == "Z" || fields[0] == "X")
    return Refuse(pid, "it is a zombie: it has exited, and its parent has not reaped it yet");
  std::string tgid = StatusValue(pid, "Tgid:");
  if (long process = strtol(tgid.c_str(), nullptr, 10); process != 0 && process != pid) {
    return Refuse(pid, "it is a thread of process " + std::to_string(process) +
                           ": give the process's id (-p " + std::to_string(process) + ")");
  }
  return {};
}

// What reading the process's maps and memory (Python stacks) takes from this one.
Status CheckTracePrivileges(pid_t pid) {
  const bool ptrace_capable = HasCapability(CAP_SYS_PTRACE);
  std::istringstream uids(StatusValue(pid, "Uid:"));
  uid_t real = 0, effective = 0;
  uids >> real >> effective;
  if (!ptrace_capable && (real != geteuid() || effective != geteuid())) {
    return Refuse(pid, "it is another user's (uid " + std::to_string(effective) +
                           "), and gprof-run lacks CAP_SYS_PTRACE to read it");
  }
  int scope = PtraceScope();
  if (scope >= 3) {
    return Refuse(pid,
                  "Yama's ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no "
                  "process may read another's memory until reboot");
  }
  if (scope >= 1 && !ptrace_capable) {
    return Refuse(pid, "Yama's ptrace_scope is " + std::to_string(scope) +
                           " (/proc/sys/kernel/yama/ptrace_scope) and gprof-run lacks "
                           "CAP_SYS_PTRACE: only a parent may read its child's memory");
  }
  return {};
}

}  // namespace

Expected<std::vector<pid_t>> ParsePidList(const std::vector<std::string>& given) {
  std::vector<pid_t> pids;
  for (const std::string& list : given) {
    std::stringstream items(list);
    std::string item;
    while (std::getline(items, item, ',')) {
      char* end = nullptr;
      errno = 0;
      long pid = strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno != 0 || pid <= 0 || pid > 0x3fffffff)
        return Status::Error(StatusCode::kInvalid, "'" + item + "' is not a process id");
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  if (pids.empty()) return Status::Error(StatusCode::kInvalid, "no process given: -p PID[,PID...]");
  return pids;
}

Status CheckAttachTargets(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (Status status = CheckProcess(pid); !status.ok()) return status;
  }
  if (!HasCapability(CAP_SYS_ADMIN) && !(HasCapability(kCapBpf) && HasCapability(kCapPerfmon))) {
    std::string missing = HasCapability(kCapBpf)       ? "CAP_PERFMON"
                          : HasCapability(kCapPerfmon) ? "CAP_BPF"
                                                       : "CAP_BPF and CAP_PERFMON";
    return Status::Error(StatusCode::kPermissionDenied,
                         "cannot attach: gprof-run lacks " + missing +
                             " (or CAP_SYS_ADMIN) to load its kernel recorder; run it as root");
  }
  for (pid_t pid : pids) {
    if (Status status = CheckTracePrivileges(pid); !status.ok()) return status;
  }
  return {};
}

std::vector<pid_t> WithDescendants(const std::vector<pid_t>& pids) {
  std::multimap<pid_t, pid_t> children;  // by parent
  if (DIR* proc = opendir("/proc")) {
    while (const dirent* entry = readdir(proc)) {
      char* end = nullptr;
      long pid = strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
      std::vector<std::string> fields = StatFields(static_cast<pid_t>(pid));
      if (fields.empty() || fields[0] == "Z" || fields[0] == "X") continue;
      children.emplace(static_cast<pid_t>(strtol(fields[1].c_str(), nullptr, 10)),
                       static_cast<pid_t>(pid));
    }
    closedir(proc);
  }
  std::vector<pid_t> tree;
  std::set<pid_t> seen;
  std::vector<pid_t> pending(pids.rbegin(), pids.rend());
  while (!pending.empty()) {
    pid_t pid = pending.back();
    pending.pop_back();
    if (!seen.insert(pid).second) continue;
    tree.push_back(pid);
    auto [first, last] = children.equal_range(pid);
    for (auto child = first; child != last; ++child) pending.push_back(child->second);
  }
  return tree;
}

uint64_t LiveProcessStart(pid_t pid) {
  std::vector<std::string> fields = StatFields(pid);
  if (fields.empty() || fields[0] == "Z" || fields[0] == "X") return 0;
  return strtoull(fields[19].c_str(), nullptr, 10);
}

std::vector<std::string> ProcessCommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> arguments;
  for (std::string argument; std::getline(in, argument, '\0') && arguments.size() < 4096;)
    arguments.push_back(argument);
  if (arguments.empty()) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (std::getline(comm, name)) arguments.push_back("[" + name + "]");
  }
  return arguments;
}

}  // namespace gprof::cli
