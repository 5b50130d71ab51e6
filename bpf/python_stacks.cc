#include "bpf/python_stacks.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "inject/shared/clock.h"

namespace gprof::bpf {
namespace {

constexpr uint64_t kThreadNamesEveryNs =
    200'000'000;  // per process, while stacks of new threads come
// A process in which no interpreter was found is looked at again: soon at first (a program just
// exec'd, whose dynamic loader has not mapped libpython yet), then every second, 20 s in all.
constexpr uint64_t kFirstLooksNs[] = {5'000'000,   20'000'000,  50'000'000,
                                      100'000'000, 250'000'000, 500'000'000};
constexpr uint64_t kLookAgainNs = 1'000'000'000;
constexpr int kLooks = 26;

bool ReadMapsFile(uint32_t pid, std::string* text) {
  int fd = open(("/proc/" + std::to_string(pid) + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char buffer[65536];
  ssize_t got;
  while ((got = read(fd, buffer, sizeof(buffer))) > 0 && text->size() < (8u << 20))
    text->append(buffer, static_cast<size_t>(got));
  close(fd);
  return got == 0;
}

bool SameInterpreter(const PythonInterpreter& a, const PythonInterpreter& b) {
  return a.status == b.status && a.runtime == b.runtime && a.path == b.path &&
         a.version_hex == b.version_hex;
}

}  // namespace

void PythonStacks::OnMaps(uint32_t pid, const std::string& maps_text) {
  if (processes_.count(pid) == 0 && pending_.count(pid) == 0)
    pending_[pid] = {MonotonicNs() + kFirstLooksNs[0], kLooks};
  Detect(pid, maps_text, false);
}

void PythonStacks::Detect(uint32_t pid, const std::string& maps_text, bool last_look) {
  PythonInterpreter found = FindPythonInterpreter(pid, maps_text);
  auto known = processes_.find(pid);
  // A program named like a Python whose mapped files define no _PyRuntime yet: one just exec'd
  // with a shared libpython that the dynamic loader has not mapped. Unsupported only once no look
  // is left (or the process ends first: DeclarePending).
  if (found.status != 0 && found.runtime == 0 && !last_look) {
    if (known != processes_.end()) {  // exec'd into another program
      processes_.erase(known);
      bpf_map_delete_elem(targets_fd_, &pid);
    }
    auto pending = pending_.try_emplace(pid, Pending{MonotonicNs() + kFirstLooksNs[0], kLooks});
    pending.first->second.named = found;
    return;
  }
  if (found.status == 0) {
    if (known != processes_.end()) {  // exec'd into something else
      processes_.erase(known);
      bpf_map_delete_elem(targets_fd_, &pid);
    }
    return;
  }
  pending_.erase(pid);
  if (found.status == GPROF_PY_READABLE) {
    gprof_python_target target{};
    target.runtime = found.runtime;
    target.code_type = found.code_type;
    target.offsets = found.offsets;
    bpf_map_update_elem(targets_fd_, &pid, &target, BPF_ANY);
    // The process may have exec'd between the maps read and the update (exec drops the entry in
    // the kernel): look once more, and take the entry back if the interpreter is not there now.
    std::string again;
    if (!ReadMapsFile(pid, &again) || !SameInterpreter(FindPythonInterpreter(pid, again), found)) {
      bpf_map_delete_elem(targets_fd_, &pid);
      return;
    }
  }
  if (known != processes_.end() && SameInterpreter(known->second.interpreter, found)) return;
  Process& process = processes_[pid];
  process = Process{};
  process.interpreter = found;
  EmitProcess(pid, found);
}

void PythonStacks::EmitProcess(uint32_t pid, const PythonInterpreter& interpreter) {
  std::string text = interpreter.path;
  if (!interpreter.why.empty()) text += "\n" + interpreter.why;
  gprof_python_process record{};
  record.hdr.size = static_cast<uint32_t>(sizeof(record) + text.size());
  record.hdr.type = GPROF_REC_PYTHON_PROCESS;
  record.pid = pid;
  record.version_hex = interpreter.version_hex;
  record.runtime = interpreter.runtime;
  record.time_ns = MonotonicNs();
  record.status = interpreter.status;
  record.path_len = static_cast<uint32_t>(text.size());
  buffer_.resize(sizeof(record) + text.size());
  memcpy(buffer_.data(), &record, sizeof(record));
  memcpy(buffer_.data() + sizeof(record), text.data(), text.size());
  append_(buffer_.data(), buffer_.size());
}

void PythonStacks::OnStack(const gprof_python_stack& stack, const gprof_python_frame* frames) {
  auto found = processes_.find(stack.pid);
  if (found == processes_.end() || found->second.interpreter.status != GPROF_PY_READABLE) return;
  Process& process = found->second;
  for (uint32_t i = 0; i < stack.depth; ++i) {
    const gprof_python_frame& frame = frames[i];
    if (!process.named.emplace(frame.code, frame.firstlineno, frame.tag).second) continue;
    PythonCode code =
        ReadCode(stack.pid, process.interpreter, {frame.code, frame.firstlineno, frame.tag});
    gprof_python_code record{};
    record.hdr.type = GPROF_REC_PYTHON_CODE;
    record.pid = stack.pid;
    record.firstlineno = frame.firstlineno;
    record.code = frame.code;
    record.tag = frame.tag;
    record.line_format = process.interpreter.objects.line_format;
    record.code_bytes = code.code_bytes;
    record.flags = process.interpreter.objects.code_has_qualname ? GPROF_PY_CODE_QUALNAME : 0;
    if (code.error != 0) {
      record.flags |= GPROF_PY_CODE_UNREADABLE;
      record.error = static_cast<uint32_t>(code.error);
      code = PythonCode{};
    }
    record.filename_len = static_cast<uint32_t>(code.filename.size());
    record.name_len = static_cast<uint32_t>(code.name.size());
    record.linetable_len = static_cast<uint32_t>(code.linetable.size());
    size_t size = sizeof(record) + code.filename.size() + code.name.size() + code.linetable.size();
    record.hdr.size = static_cast<uint32_t>(size);
    buffer_.resize(size);
    uint8_t* out = buffer_.data();
    memcpy(out, &record, sizeof(record));
    out += sizeof(record);
    memcpy(out, code.filename.data(), code.filename.size());
    out += code.filename.size();
    memcpy(out, code.name.data(), code.name.size());
    out += code.name.size();
    if (!code.linetable.empty()) memcpy(out, code.linetable.data(), code.linetable.size());
    append_(buffer_.data(), buffer_.size());
  }
  if (process.thread_names.count(stack.tid) == 0) process.names_due = true;
}

PythonCode PythonStacks::ReadCode(uint32_t pid, const PythonInterpreter& interpreter,
                                  const PythonCodeKey& key) {
  PythonCode code = ReadPythonCode(ProcessMemory(pid), interpreter, key);
  if (code.error != ESRCH && code.error != EFAULT) return code;
  uint32_t child = pid;
  for (int depth = 0; depth < 16; ++depth) {
    auto parent = fork_parents_.find(child);
    if (parent == fork_parents_.end() || parent->second == pid) break;
    child = parent->second;
    auto ancestor = processes_.find(child);
    if (ancestor == processes_.end() || !SameInterpreter(ancestor->second.interpreter, interpreter))
      continue;
    PythonCode inherited = ReadPythonCode(ProcessMemory(child), interpreter, key);
    if (inherited.error == 0) return inherited;
  }
  return code;
}

void PythonStacks::ReadThreadNames(uint32_t pid, Process& process, uint64_t now_ns) {
  process.names_due = false;
  process.names_read_ns = now_ns;
  ProcessMemory memory(pid);
  for (auto& [tid, name] : ReadPythonThreadNames(memory, process.interpreter)) {
    auto [entry, inserted] = process.thread_names.try_emplace(tid, name);
    if (!inserted && entry->second == name) continue;
    entry->second = name;
    gprof_python_thread record{};
    record.hdr.size = static_cast<uint32_t>(sizeof(record) + name.size());
    record.hdr.type = GPROF_REC_PYTHON_THREAD;
    record.pid = pid;
    record.tid = tid;
    record.time_ns = now_ns;
    record.name_len = static_cast<uint32_t>(name.size());
    buffer_.resize(sizeof(record) + name.size());
    memcpy(buffer_.data(), &record, sizeof(record));
    memcpy(buffer_.data() + sizeof(record), name.data(), name.size());
    append_(buffer_.data(), buffer_.size());
  }
}

void PythonStacks::DeclarePending(uint32_t pid) {
  auto pending = pending_.find(pid);
  if (pending == pending_.end()) return;
  if (pending->second.named.status != 0) EmitProcess(pid, pending->second.named);
  pending_.erase(pending);
}

void PythonStacks::OnExit(uint32_t pid) {
  processes_.erase(pid);
  DeclarePending(pid);
}

void PythonStacks::Tick(uint64_t now_ns,
                        const std::function<bool(uint32_t, std::string*)>& read_maps) {
  for (auto& [pid, process] : processes_) {
    if (process.names_due && now_ns - process.names_read_ns >= kThreadNamesEveryNs)
      ReadThreadNames(pid, process, now_ns);
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    uint32_t pid = it->first;
    Pending& pending = it->second;
    if (now_ns < pending.next_ns) {
      ++it;
      continue;
    }
    std::string text;
    if (!read_maps(pid, &text)) {
      it = pending_.erase(it);
      continue;
    }
    size_t looked = static_cast<size_t>(kLooks - pending.looks_left);
    pending.next_ns = now_ns + (looked + 1 < std::size(kFirstLooksNs)
                                    ? kFirstLooksNs[looked + 1] - kFirstLooksNs[looked]
                                    : kLookAgainNs);
    bool last = --pending.looks_left <= 0;
    ++it;  // Detect may erase the entry
    Detect(pid, text, last);
    if (last) pending_.erase(pid);
  }
}

uint64_t PythonStacks::NextLookNs() const {
  uint64_t next = UINT64_MAX;
  for (const auto& [pid, pending] : pending_) next = std::min(next, pending.next_ns);
  return next;
}

void PythonStacks::Finish() {
  while (!pending_.empty()) DeclarePending(pending_.begin()->first);
  uint64_t now = MonotonicNs();
  for (auto& [pid, process] : processes_) {
    if (process.interpreter.status == GPROF_PY_READABLE) ReadThreadNames(pid, process, now);
  }
}

}  // namespace gprof::bpf
