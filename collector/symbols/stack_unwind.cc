#include "collector/symbols/stack_unwind.h"

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "collector/model/elf_symbols.h"

namespace gprof::collector {
namespace {

constexpr size_t kMaxFrames = 256;
// DWARF register numbers of x86-64 (the psABI's): what the injected library takes.
constexpr int kDwarfRbp = 6;  // then 7, rsp
constexpr int kDwarfRip = 16;
// rbp where it is not known: an address no stack can have (not canonical), so that a frame whose
// caller is found through rbp reads near it, and the unwinding says it needed the frame pointer
// instead of ending there as if at the thread's first frame.
constexpr uint64_t kUnknownRbp = 0xdead'0000'0000'0000;
constexpr uint64_t kNearUnknownRbp = 1 << 20;

bool IsFile(const Mapping& mapping) { return mapping.path.starts_with('/'); }

std::string_view BaseName(std::string_view path) { return path.substr(path.rfind('/') + 1); }

// The recording's own code, on top of every copied stack: the injected library's, and CUPTI's
// when the call was seen through a CUPTI callback. The CUDA library frames below them stay: they
// name the call (cudaFree, cuLaunchKernel).
bool IsRecordingModule(std::string_view path) {
  std::string_view name = BaseName(path);
  return name.starts_with("libgprof_inject") || name.starts_with("libcupti");
}

// A file the maps name, reported to libdwfl at the address of its first mapping.
struct ModuleFile {
  std::string path;
  uint64_t inode = 0;
};

// One process's address space at one maps snapshot, as libdwfl sees it: the mapped files that
// hold code, each opened only when a frame needs its unwind tables.
struct AddressSpace {
  const MapsSnapshot* maps = nullptr;
  Dwfl* dwfl = nullptr;
  std::map<uint64_t, ModuleFile> files;  // by the address reported; each its module's user data
  std::vector<std::string> unusable;     // code files not here, or no longer the file mapped
  const StackCopy* copy = nullptr;       // the copy being unwound
  bool read_past_copy = false;           // a caller's frame lay past the copy's end
  bool needed_rbp = false;               // a caller's frame was found through the unknown rbp
};

// The file behind a module (its user data), opened only when it is still the one that was mapped.
int OpenModuleFile(Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, char** file_name,
                   Elf**) {
  const auto* file = static_cast<const ModuleFile*>(*userdata);
  if (file == nullptr) return -1;
  int fd = OpenRegularFile(file->path);  // never a device or FIFO the path was swapped for
  if (fd < 0) return -1;
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) ||
      (file->inode != 0 && info.st_ino != file->inode)) {
    close(fd);
    return -1;
  }
  *file_name = strdup(file->path.c_str());  // libdwfl frees it
  return fd;
}

// The unwind tables .eh_frame lacks come from the file's separate debug file (.debug_frame),
// found on this machine as gdb finds it (build-id, .gnu_debuglink), never over the network.
int OpenDebugFile(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char* file_name, const char*,
                  GElf_Word, char** debuginfo_file_name) {
  if (file_name == nullptr) return -1;
  std::string debug = FindDebugFile(file_name);
  if (debug.empty()) return -1;
  int fd = OpenRegularFile(debug);
  if (fd >= 0) *debuginfo_file_name = strdup(debug.c_str());
  return fd;
}

const Dwfl_Callbacks kCallbacks = {
    OpenModuleFile,
    OpenDebugFile,
    dwfl_offline_section_address,
    nullptr,
};

// The copied thread is the space's one thread.
pid_t NextThread(Dwfl*, void* arg, void** thread_arg) {
  auto* space = static_cast<AddressSpace*>(arg);
  if (*thread_arg != nullptr || space->copy == nullptr) return 0;
  *thread_arg = space;
  return static_cast<pid_t>(space->copy->tid);
}

bool GetThread(Dwfl*, pid_t tid, void* arg, void** thread_arg) {
  auto* space = static_cast<AddressSpace*>(arg);
  if (space->copy == nullptr || tid != static_cast<pid_t>(space->copy->tid)) return false;
  *thread_arg = space;
  return true;
}

// Only the copy is memory: a read outside it ends the unwinding there.
bool ReadMemory(Dwfl*, Dwarf_Addr address, Dwarf_Word* result, void* arg) {
  auto* space = static_cast<AddressSpace*>(arg);
  const StackCopy* copy = space->copy;
  if (copy == nullptr) return false;
  if (!copy->rbp_known && address + kNearUnknownRbp - kUnknownRbp < 2 * kNearUnknownRbp) {
    space->needed_rbp = true;
    return false;
  }
  if (address < copy->rsp) return false;
  if (address - copy->rsp > copy->bytes.size() ||
      copy->bytes.size() - (address - copy->rsp) < sizeof(*result)) {
    space->read_past_copy = true;
    return false;
  }
  std::memcpy(result, copy->bytes.data() + (address - copy->rsp), sizeof(*result));
  return true;
}

bool SetInitialRegisters(Dwfl_Thread* thread, void* arg) {
  const StackCopy* copy = static_cast<AddressSpace*>(arg)->copy;
  const Dwarf_Word frame[2] = {copy->rbp_known ? copy->rbp : kUnknownRbp, copy->rsp};
  const Dwarf_Word pc = copy->rip;
  if (!dwfl_thread_state_registers(thread, kDwarfRbp, 2, frame) ||
      !dwfl_thread_state_registers(thread, kDwarfRip, 1, &pc))
    return false;
  dwfl_thread_state_register_pc(thread, pc);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    NextThread, GetThread, ReadMemory, SetInitialRegisters, nullptr, nullptr,
};

struct Frames {
  std::vector<uint64_t> pcs;
};

int CollectFrame(Dwfl_Frame* frame, void* arg) {
  auto* frames = static_cast<Frames*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  frames->pcs.push_back(pc);
  return frames->pcs.size() < kMaxFrames ? DWARF_CB_OK : DWARF_CB_ABORT;
}

}  // namespace

struct StackUnwinder::Impl {
  const Session& session;
  AddressSpace space;  // the last one used: a process's stacks come together, mostly one snapshot
  uint32_t space_pid = 0;

  explicit Impl(const Session& s) : session(s) {}
  ~Impl() { Close(); }

  void Close() {
    if (space.dwfl != nullptr) dwfl_end(space.dwfl);
    space = AddressSpace{};
    space_pid = 0;
  }

  // The snapshot whose maps name the copy's frames: the first taken at or after the copy (every
  // library mapped by then is in it), else the latest before; of the program image the copy was
  // taken in (none across an exec).
  const MapsSnapshot* SnapshotFor(const Process& process, uint64_t time_ns) const {
    uint64_t image_start = 0, image_end = UINT64_MAX;
    for (uint64_t exec : process.exec_ns) {
      if (exec <= time_ns) image_start = std::max(image_start, exec);
      if (exec > time_ns) image_end = std::min(image_end, exec);
    }
    const MapsSnapshot* after = nullptr;
    const MapsSnapshot* before = nullptr;
    for (const MapsSnapshot& snapshot : process.maps) {
      if (snapshot.time_ns < image_start || snapshot.time_ns >= image_end) continue;
      if (snapshot.time_ns >= time_ns) {
        if (after == nullptr || snapshot.time_ns < after->time_ns) after = &snapshot;
      } else if (before == nullptr || snapshot.time_ns >= before->time_ns) {
        before = &snapshot;
      }
    }
    return after != nullptr ? after : before;
  }

  // Reports every mapped file that holds code, at the start of its first mapping (its load
  // address: an ELF file's first segment lies at offset 0 and address 0, or at its fixed address
  // for a non-PIE executable), through its last.
  bool Open(uint32_t pid, const MapsSnapshot* maps) {
    if (space.dwfl != nullptr && space.maps == maps && space_pid == pid) return true;
    Close();
    space.maps = maps;
    space_pid = pid;
    space.dwfl = dwfl_begin(&kCallbacks);
    if (space.dwfl == nullptr) return false;
    dwfl_report_begin(space.dwfl);
    const std::vector<Mapping>& mappings = maps->mappings;
    for (size_t i = 0; i < mappings.size(); ++i) {
      const Mapping& first = mappings[i];
      if (!IsFile(first) || first.file_offset != 0) continue;
      uint64_t end = first.end;
      bool code = first.perms.size() > 2 && first.perms[2] == 'x';
      for (size_t j = i + 1; j < mappings.size(); ++j) {
        const Mapping& next = mappings[j];
        if (next.path.empty()) continue;  // its zero-filled data (.bss), or another's
        if (next.path != first.path || next.inode != first.inode || next.file_offset == 0) break;
        end = next.end;
        code |= next.perms.size() > 2 && next.perms[2] == 'x';
      }
      if (!code) continue;  // data (a mapped file of weights, a font): no frame is in it
      struct stat info {};
      if (stat(first.path.c_str(), &info) != 0 || !S_ISREG(info.st_mode) ||
          (first.inode != 0 && info.st_ino != first.inode)) {
        space.unusable.push_back(first.path);
        continue;
      }
      Dwfl_Module* module = dwfl_report_module(space.dwfl, first.path.c_str(), first.start, end);
      void** userdata = nullptr;
      if (module == nullptr || dwfl_module_info(module, &userdata, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr) == nullptr)
        continue;
      ModuleFile& file = space.files[first.start];
      file = ModuleFile{first.path, first.inode};
      *userdata = &file;
    }
    if (dwfl_report_end(space.dwfl, nullptr, nullptr) != 0 ||
        !dwfl_attach_state(space.dwfl, nullptr, static_cast<pid_t>(pid), &kThreadCallbacks,
                           &space)) {
      Close();
      return false;
    }
    return true;
  }

  bool Usable(const Mapping& mapping) const {
    return std::find(space.unusable.begin(), space.unusable.end(), mapping.path) ==
           space.unusable.end();
  }
};

StackUnwinder::StackUnwinder(const Session& session) : impl_(std::make_unique<Impl>(session)) {
  elf_version(EV_CURRENT);
}

StackUnwinder::~StackUnwinder() = default;

std::optional<NativeStack> StackUnwinder::Unwind(const StackCopy& copy, bool final) {
  NativeStack stack;
  stack.pid = copy.pid;
  stack.time_ns = copy.capture_ns;
  if (copy.error != 0 || copy.bytes.empty()) {
    stack.cut_short = std::string("the stack could not be copied") +
                      (copy.error != 0 ? std::string(": ") + std::strerror(copy.error) : "");
    return stack;
  }
  auto process = impl_->session.processes.find(copy.pid);
  const MapsSnapshot* maps = process != impl_->session.processes.end()
                                 ? impl_->SnapshotFor(process->second, copy.capture_ns)
                                 : nullptr;
  if (maps == nullptr) {
    if (!final) return std::nullopt;
    stack.cut_short = "no maps of the process were recorded: the stack cannot be unwound";
    return stack;
  }
  if (!impl_->Open(copy.pid, maps)) {
    stack.cut_short = std::string("the stack cannot be unwound: ") + dwfl_errmsg(-1);
    return stack;
  }
  impl_->space.copy = &copy;
  impl_->space.read_past_copy = false;
  impl_->space.needed_rbp = false;
  Frames frames;
  int result =
      dwfl_getthread_frames(impl_->space.dwfl, static_cast<pid_t>(copy.tid), CollectFrame, &frames);
  impl_->space.copy = nullptr;

  // Each frame must lie in code the snapshot maps. One that does not is in a library mapped
  // after the snapshot (try again with a later one), or the unwinding went astray: it ends there.
  // In a file that is no longer the one mapped, its unwind tables are unknown: the frames past it
  // would be guesses.
  bool leading = true;
  for (size_t i = 0; i < frames.pcs.size(); ++i) {
    uint64_t pc = frames.pcs[i];
    const Mapping* mapping = maps->Find(i == 0 || pc == 0 ? pc : pc - 1);
    if (mapping == nullptr || mapping->perms.size() < 3 || mapping->perms[2] != 'x') {
      if (!final && mapping == nullptr && pc != 0) return std::nullopt;
      if (pc != 0) stack.cut_short = "the unwinding left the mapped code";
      break;
    }
    if (leading && copy.own_frames_on_top && IsFile(*mapping) && IsRecordingModule(mapping->path))
      continue;
    leading = false;
    stack.ips.push_back(pc);
    if (IsFile(*mapping) && !impl_->Usable(*mapping)) {
      stack.cut_short = std::string(BaseName(mapping->path)) +
                        " is not here or has changed since the run: its callers are unknown";
      break;
    }
  }
  // The unwinding ends cleanly at the thread's first frame (its CFI says so); one that needed a
  // caller's frame past the copy was cut by the copy's size.
  if (stack.cut_short.empty() && impl_->space.needed_rbp) {
    stack.cut_short = kNeededFramePointer;
  } else if (stack.cut_short.empty() && impl_->space.read_past_copy) {
    stack.cut_short = copy.bytes.size() >= copy.requested_bytes
                          ? "truncated: deeper than the " +
                                std::to_string(copy.requested_bytes / 1024) +
                                " KiB of stack copied" +
                                (copy.own_frames_on_top ? " (GPROF_STACK_COPY_BYTES)"
                                                        : " (GPROF_NATIVE_STACK_BYTES)")
                          : "the unwinding left the copied stack";
  } else if (stack.cut_short.empty() && result != 0) {
    stack.cut_short = std::string("the unwinding stopped: ") + dwfl_errmsg(-1);
  }
  if (frames.pcs.size() >= kMaxFrames) stack.cut_short = "truncated";
  return stack;
}

}  // namespace gprof::collector
