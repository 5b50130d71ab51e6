#include "collector/model/model.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <tuple>

#include "collector/model/value_format.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

std::string LostEvents::Text() const {
  return (count_known ? WithThousands(count) + " " : std::string("an unknown number of ")) + what;
}

OffCpuState OffCpuInterval::state() const {
  // Only the low bits say why a task slept; TASK_IDLE and friends add flags above them.
  if (raw_state == 0) return OffCpuState::kRunnable;
  if (raw_state & 0x1) return OffCpuState::kSleeping;
  if (raw_state & 0x2) return OffCpuState::kDiskSleep;
  return OffCpuState::kOther;
}

const char* StateName(OffCpuState state) {
  switch (state) {
    case OffCpuState::kRunnable:
      return "runnable";
    case OffCpuState::kSleeping:
      return "sleeping";
    case OffCpuState::kDiskSleep:
      return "uninterruptible";
    case OffCpuState::kOther:
      return "other";
  }
  return "other";
}

bool FutexCall::is_wait() const {
  switch (command()) {
    case 0:   // FUTEX_WAIT
    case 9:   // FUTEX_WAIT_BITSET
    case 6:   // FUTEX_LOCK_PI
    case 13:  // FUTEX_LOCK_PI2
    case 11:  // FUTEX_WAIT_REQUEUE_PI
      return true;
    default:
      return false;
  }
}

bool FutexCall::is_wake() const {
  switch (command()) {
    case 1:   // FUTEX_WAKE
    case 10:  // FUTEX_WAKE_BITSET
    case 5:   // FUTEX_WAKE_OP
    case 7:   // FUTEX_UNLOCK_PI
    case 3:   // FUTEX_REQUEUE
    case 4:   // FUTEX_CMP_REQUEUE
    case 12:  // FUTEX_CMP_REQUEUE_PI
      return true;
    default:
      return false;
  }
}

std::optional<uint64_t> FutexWaitvCall::woken_address() const {
  if (ret < 0 || static_cast<uint64_t>(ret) >= addresses.size()) return std::nullopt;
  return addresses[static_cast<size_t>(ret)];
}

bool LockWait::is_mmap_lock() const { return (flags & GPROF_LOCK_MMAP_LOCK) != 0; }

const Mapping* MapsSnapshot::Find(uint64_t address) const {
  auto after = std::upper_bound(mappings.begin(), mappings.end(), address,
                                [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (after == mappings.begin() || address >= (after - 1)->end) return nullptr;
  return &*(after - 1);
}

std::pair<int64_t, size_t> Process::MapsEpoch(uint64_t time_ns) const {
  auto taken = std::upper_bound(maps.begin(), maps.end(), time_ns,
                                [](uint64_t t, const MapsSnapshot& s) { return t < s.time_ns; });
  auto execs = std::upper_bound(exec_ns.begin(), exec_ns.end(), time_ns);
  return {(taken - maps.begin()) - 1, static_cast<size_t>(execs - exec_ns.begin())};
}

const MapsSnapshot* Process::MapsHolding(uint64_t address, uint64_t time_ns) const {
  auto [in_effect, image] = MapsEpoch(time_ns);
  // The program image of `time_ns` runs from the exec before it to the exec after it.
  uint64_t image_start = image == 0 ? 0 : exec_ns[image - 1];
  uint64_t image_end = image == exec_ns.size() ? kLatest : exec_ns[image];
  auto holds = [&](int64_t i) {
    const MapsSnapshot& snapshot = maps[static_cast<size_t>(i)];
    return snapshot.time_ns >= image_start && snapshot.time_ns < image_end &&
           snapshot.Find(address) != nullptr;
  };
  // The one in effect, then the later ones, then the earlier ones, nearest first.
  for (int64_t i = std::max<int64_t>(in_effect, 0); i < static_cast<int64_t>(maps.size()); ++i) {
    if (holds(i)) return &maps[static_cast<size_t>(i)];
  }
  for (int64_t i = in_effect - 1; i >= 0; --i) {
    if (holds(i)) return &maps[static_cast<size_t>(i)];
  }
  return nullptr;
}

namespace {

// Unicode's format characters (general category Cf: bidirectional overrides and isolates,
// zero-width spaces and joiners, the byte-order mark, tags...) and the line and paragraph
// separators: invisible, yet they reorder or break what a reader sees around them.
bool IsInvisibleFormat(char32_t code) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x00ad, 0x00ad},   {0x0600, 0x0605},   {0x061c, 0x061c},   {0x06dd, 0x06dd},
      {0x070f, 0x070f},   {0x0890, 0x0891},   {0x08e2, 0x08e2},   {0x180e, 0x180e},
      {0x200b, 0x200f},   {0x2028, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},
      {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
      {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001},
      {0xe0020, 0xe007f},
  };
  for (const auto& [first, last] : kRanges) {
    if (code >= first && code <= last) return true;
  }
  return false;
}

}  // namespace

std::string PrintableName(std::string_view raw) {
  std::string text;
  text.reserve(raw.size());
  auto escape = [&](unsigned char byte) {
    static constexpr char kHex[] = "0123456789abcdef";
    text += "\\x";
    text += kHex[byte >> 4];
    text += kHex[byte & 0xf];
  };
  for (size_t i = 0; i < raw.size();) {
    const auto byte = static_cast<unsigned char>(raw[i]);
    if (byte < 0x20 || byte == 0x7f) {
      escape(byte);
      ++i;
      continue;
    }
    if (byte < 0x80) {
      text += static_cast<char>(byte);
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, then continuation bytes. The second byte's
    // range rules out overlong forms, surrogates and code points past U+10FFFF (Unicode's table
    // 3-7), which JSON parsers and the Perfetto UI reject, and the C1 controls U+0080-U+009F (a
    // terminal may read U+009B as the start of an escape sequence).
    size_t length = byte >= 0xf0 && byte < 0xf5 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc2 ? 2 : 0;
    if (byte >= 0xf5) length = 0;
    bool valid = length != 0 && i + length <= raw.size();
    for (size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(raw[i + k]) & 0xc0) == 0x80;
    if (valid) {
      const auto second = static_cast<unsigned char>(raw[i + 1]);
      valid = !(byte == 0xc2 && second < 0xa0) && !(byte == 0xe0 && second < 0xa0) &&
              !(byte == 0xed && second > 0x9f) && !(byte == 0xf0 && second < 0x90) &&
              !(byte == 0xf4 && second > 0x8f);
    }
    if (!valid) {
      escape(byte);
      ++i;
      continue;
    }
    char32_t code = byte & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) code = (code << 6) | (raw[i + k] & 0x3f);
    if (IsInvisibleFormat(code)) {
      // Visible as what it is, in every output: "\u202e".
      char escaped[16];
      snprintf(escaped, sizeof(escaped), code > 0xffff ? "\\U%08x" : "\\u%04x",
               static_cast<unsigned>(code));
      text += escaped;
    } else {
      text.append(raw.substr(i, length));
    }
    i += length;
  }
  return text;
}

uint32_t Session::CommIndex(std::string_view name) {
  if (name.empty()) return 0;
  auto found = std::find(comms.begin(), comms.end(), name);
  if (found != comms.end()) return static_cast<uint32_t>(found - comms.begin());
  comms.emplace_back(name);
  return static_cast<uint32_t>(comms.size() - 1);
}

namespace {

// Whether a kernel thread name is just the interpreter's: what exec gave the thread of a
// "python3.11" or "python" executable, which every thread the program starts inherits.
bool IsInterpreterName(const std::string& name, const Session& session, uint32_t pid) {
  if (name.rfind("python", 0) == 0 && name.find_first_not_of("0123456789.", 6) == std::string::npos)
    return true;
  auto process = session.python.processes.find(pid);
  if (process == session.python.processes.end()) return false;
  const std::string& path = process->second.path;
  std::string base = path.substr(path.rfind('/') + 1);  // npos + 1 == 0
  return !base.empty() && base.substr(0, 15) == name;
}

}  // namespace

std::string Session::ThreadName(uint32_t tid) const {
  auto it = threads.find(tid);
  std::string name = it == threads.end() ? std::string() : it->second.name;
  auto python_name = python.thread_names.find(tid);
  if (python_name != python.thread_names.end() &&
      (name.empty() || IsInterpreterName(name, *this, it == threads.end() ? 0 : it->second.pid)))
    return python_name->second;
  return name;
}

std::string Session::NativeNameBeside(uint32_t tid) const {
  auto it = threads.find(tid);
  if (it == threads.end() || it->second.name.empty()) return {};
  return ThreadName(tid) == it->second.name ? std::string() : it->second.name;
}

std::string Session::ThreadLabel(uint32_t tid) const {
  std::string name = ThreadName(tid);
  if (name.empty()) return std::to_string(tid) + OfProcess(tid);
  std::string native = NativeNameBeside(tid);
  return name + " (" + (native.empty() ? "" : native + ", ") + std::to_string(tid) + ")" +
         OfProcess(tid);
}

namespace {

// The Python roles a process's stacks show, by the standard library's (and torch's) function
// that runs it, most telling first.
struct RoleMarker {
  std::string_view file;  // the end of co_filename
  std::string_view function;
  std::string_view role;
};
constexpr RoleMarker kRoleMarkers[] = {
    {"torch/utils/data/_utils/worker.py", "_worker_loop", "DataLoader worker"},
    {"multiprocessing/pool.py", "worker", "Pool worker"},
    {"multiprocessing/spawn.py", "spawn_main", "multiprocessing child"},
    {"multiprocessing/process.py", "BaseProcess._bootstrap", "multiprocessing child"},
};

std::map<uint32_t, std::string> FindProcessRoles(const Session& session) {
  std::map<uint32_t, std::string> roles;
  const PythonRecord& python = session.python;
  if (python.empty()) return roles;
  // The marker code objects, by (process that read them, address, first line): a forked child
  // runs its parent's code objects at the same addresses.
  std::map<std::tuple<uint32_t, uint64_t, int32_t>, size_t> markers;
  for (const auto& [key, code] : python.codes) {
    for (size_t m = 0; m < std::size(kRoleMarkers); ++m) {
      if (code.filename.ends_with(kRoleMarkers[m].file) && code.name == kRoleMarkers[m].function)
        markers[{std::get<0>(key), std::get<1>(key), std::get<2>(key)}] = m;
    }
  }
  if (markers.empty()) return roles;
  auto parent_of = [&](uint32_t pid) {
    auto process = session.processes.find(pid);
    return process == session.processes.end() ? 0u : process->second.ppid;
  };
  std::map<uint32_t, size_t> best;  // pid -> marker
  std::set<std::pair<uint32_t, uint32_t>> looked;  // (pid, frame set)
  // A stack read before the process's last exec is of the program it replaced: a child that
  // subprocess forked, read between its fork and its exec, shows its parent's frames.
  auto before_exec = [&](const PythonStack& stack) {
    auto process = session.processes.find(stack.pid);
    return process != session.processes.end() && !process->second.exec_ns.empty() &&
           stack.time_ns < process->second.exec_ns.back();
  };
  for (const PythonStack& stack : python.stacks) {
    if (before_exec(stack) || !looked.insert({stack.pid, stack.frames}).second) continue;
    for (const PythonFrameRef& frame : python.FramesOf(stack)) {
      // In the process, or one it was forked from (a few generations).
      uint32_t reader = stack.pid;
      for (int generation = 0; generation < 4 && reader != 0; ++generation) {
        auto marker = markers.find({reader, frame.code, frame.firstlineno});
        if (marker != markers.end()) {
          auto [entry, inserted] = best.try_emplace(stack.pid, marker->second);
          if (!inserted) entry->second = std::min(entry->second, marker->second);
          break;
        }
        reader = parent_of(reader);
      }
    }
  }
  // Numbered among the parent's children of the same role, in order of pid (of creation).
  std::map<std::pair<uint32_t, size_t>, size_t> counts;  // (parent, marker) -> children so far
  for (const auto& [pid, marker] : best) {
    const size_t number = counts[{parent_of(pid), marker}]++;
    roles[pid] = std::string(kRoleMarkers[marker].role) + " " + std::to_string(number);
  }
  return roles;
}

}  // namespace

std::string Session::RankWords(uint32_t pid, bool of) const {
  auto process = processes.find(pid);
  if (process == processes.end() || !process->second.rank || !process->second.rank->rank) return {};
  const RankIdentity& rank = *process->second.rank;
  auto parent = processes.find(process->second.ppid);
  bool inherited = parent != processes.end() && parent->second.rank == rank;
  if (inherited != of) return {};
  return (of ? " of rank " : "rank ") + std::to_string(*rank.rank);
}

std::string Session::PythonRole(uint32_t pid) const {
  if (!process_roles) {
    process_roles = FindProcessRoles(*this);
    std::set<uint32_t> pids;
    for (const auto& [tid, thread] : threads) {
      if (!IsProfilerThread(tid)) pids.insert(thread.pid);
    }
    several_processes = pids.size() > 1;
  }
  auto role = process_roles->find(pid);
  return role == process_roles->end() ? std::string() : role->second;
}

std::string Session::ProcessRole(uint32_t pid) const {
  std::string role = PythonRole(pid);
  std::string launched = RankWords(pid, /*of=*/false);
  if (!launched.empty()) return launched;
  return role.empty() ? role : role + RankWords(pid, true);
}

size_t Session::RecordedProcessCount() const {
  return static_cast<size_t>(std::count_if(processes.begin(), processes.end(),
                                           [](const auto& process) { return process.first != 0; }));
}

std::string Session::ProcessLabel(uint32_t pid) const {
  std::string what = ProcessRole(pid);
  if (what.empty()) {
    auto process = processes.find(pid);
    if (process != processes.end() && !process->second.exe.empty()) {
      what = process->second.exe.substr(process->second.exe.rfind('/') + 1);
    } else if (auto thread = threads.find(pid); thread != threads.end()) {
      what = thread->second.name;  // the kernel's name of its main thread
    }
    if (!what.empty()) what += RankWords(pid, /*of=*/true);
  }
  return what.empty() ? "pid " + std::to_string(pid) : what + " (pid " + std::to_string(pid) + ")";
}

std::string Session::OfProcess(uint32_t tid) const {
  auto thread = threads.find(tid);
  if (thread == threads.end()) return {};
  ProcessRole(thread->second.pid);  // finds whether there are several
  if (!several_processes) return {};
  // A process's main thread already shows the pid: its process's name alone.
  const uint32_t pid = thread->second.pid;
  if (tid == pid) {
    std::string label = ProcessLabel(pid);
    return " of " + label.substr(0, label.rfind(" (pid "));
  }
  return " of " + ProcessLabel(pid);
}

std::vector<std::string> Session::KernelStack(int32_t stack_id) const {
  std::vector<std::string> frames;
  auto it = kernel_stacks.find(stack_id);
  if (it == kernel_stacks.end()) return frames;
  for (uint64_t ip : it->second) {
    auto symbol = kernel_symbols.find(ip);
    if (symbol != kernel_symbols.end()) {
      frames.push_back(symbol->second);
    } else {
      char text[32];
      snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(ip));
      frames.emplace_back(text);
    }
  }
  return frames;
}

bool Session::IsProfilerThread(uint32_t tid) const { return profiler_threads.contains(tid); }

std::span<const NativeSample> NativeStackRecord::Samples(uint32_t tid, uint64_t start_ns,
                                                        uint64_t end_ns) const {
  auto before = [](const NativeSample& sample, std::pair<uint32_t, uint64_t> key) {
    return std::pair(sample.tid, sample.time_ns) < key;
  };
  auto first = std::lower_bound(samples.begin(), samples.end(), std::pair(tid, start_ns), before);
  auto last = std::lower_bound(first, samples.end(), std::pair(tid, end_ns), before);
  return {first, last};
}

const NativeStack* NativeStackRecord::Waker(uint32_t tid, uint64_t start_ns,
                                            uint64_t wake_ns) const {
  auto it = wakers.find({tid, start_ns, wake_ns});
  return it == wakers.end() ? nullptr : &stack_set[it->second];
}

const NativeStack* Session::CallStackOf(const ApiCall& call) const {
  auto it = call_stacks.find({call.tid, call.enter_ns});
  return it == call_stacks.end() ? nullptr : &it->second;
}

const Mapping* Session::FindMapping(uint32_t pid, uint64_t address, uint64_t time_ns) const {
  auto process = processes.find(pid);
  if (process == processes.end()) return nullptr;
  const MapsSnapshot* snapshot = process->second.MapsHolding(address, time_ns);
  return snapshot == nullptr ? nullptr : snapshot->Find(address);
}

std::string Session::SharedWordKey(uint32_t pid, uint64_t address, uint64_t time_ns) const {
  const Mapping* mapping = FindMapping(pid, address, time_ns);
  if (mapping == nullptr || mapping->perms.size() < 4 || mapping->perms[3] != 's') return {};
  return mapping->path + "|" + std::to_string(mapping->inode) + "|" +
         std::to_string(address - mapping->start + mapping->file_offset);
}

}  // namespace gprof::collector
