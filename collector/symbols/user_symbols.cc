#include "collector/symbols/user_symbols.h"

#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string_view>

#include "collector/symbols/demangle.h"

namespace gprof::collector {
namespace {

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

bool IsFile(const Mapping& mapping) { return mapping.path.starts_with('/'); }

// A mapped file's name as the outputs show it (the path itself still opens the file).
std::string BaseName(const std::string& path) {
  return PrintableName(std::string_view(path).substr(path.rfind('/') + 1));
}

bool PermissionsMatch(const ElfLoadSegment& segment, const std::string& perms) {
  auto has = [&](size_t at, char letter) { return perms.size() > at && perms[at] == letter; };
  return has(0, 'r') == ((segment.flags & PF_R) != 0) &&
         has(1, 'w') == ((segment.flags & PF_W) != 0) &&
         has(2, 'x') == ((segment.flags & PF_X) != 0);
}

// The address in the file's own layout (what its symbols say) of `address`, which lies in or
// right after `mapping`. A mapping maps part of one load segment, whose file range overlaps the
// mapping's: the one with the mapping's permissions, else (RELRO data made read-only after
// relocation) the first that overlaps. Past the mapping's end, the segment's zero-filled tail.
std::optional<uint64_t> FileAddress(const ElfSymbolFile& file, const Mapping& mapping,
                                    uint64_t address) {
  uint64_t mapped_file_end = mapping.file_offset + (mapping.end - mapping.start);
  const ElfLoadSegment* segment = nullptr;
  for (const ElfLoadSegment& candidate : file.segments()) {
    bool overlaps = candidate.file_offset < mapped_file_end &&
                    mapping.file_offset < candidate.file_offset + candidate.file_size;
    if (!overlaps) continue;
    if (PermissionsMatch(candidate, mapping.perms)) {
      segment = &candidate;
      break;
    }
    if (segment == nullptr) segment = &candidate;
  }
  if (segment == nullptr) return std::nullopt;
  uint64_t file_offset = address - mapping.start + mapping.file_offset;
  uint64_t file_address = file_offset - segment->file_offset + segment->address;
  // In the page-rounded slack around the segment: nothing of the file's is there.
  if (file_address < segment->address || file_address - segment->address >= segment->memory_size)
    return std::nullopt;
  return file_address;
}

// Names `location` by the symbol of `mapping`'s file that holds `address`, when there is one, or
// (a variable no symbol names) by the zero-filled section that holds it.
void AddSymbol(const Session& session, const Mapping& mapping, uint64_t address, AddressUse use,
               UserLocation* location) {
  const ElfSymbolFile* file = session.elf_symbols.Find(mapping.path, mapping.inode);
  if (file == nullptr) return;
  std::optional<uint64_t> file_address = FileAddress(*file, mapping, address);
  if (!file_address) return;
  if (use == AddressUse::kData) {
    if (const ElfZeroFilledSection* section = file->ZeroFilledSectionAt(*file_address)) {
      location->section = PrintableName(section->name);
      location->section_offset = *file_address - section->address;
    }
  }
  const ElfSymbol* symbol = nullptr;
  switch (use) {
    case AddressUse::kInstruction:
      symbol = file->FunctionAt(*file_address);
      break;
    case AddressUse::kReturnAddress:
      // A call that ends its function returns to the next one's first byte.
      symbol = file->FunctionAt(*file_address - 1);
      break;
    case AddressUse::kData:
      symbol = file->ObjectAt(*file_address);
      break;
  }
  if (use != AddressUse::kData) {
    // A return address's line is its call's: the instruction before it.
    location->source = PrintableName(
        file->SourceLine(use == AddressUse::kReturnAddress ? *file_address - 1 : *file_address));
  }
  if (symbol == nullptr) return;
  location->symbol = PrintableName(Demangle(symbol->name));
  location->symbol_offset = *file_address - symbol->address;
}

}  // namespace

UserLocation LocateUserAddress(const Session& session, uint32_t pid, uint64_t address,
                               uint64_t time_ns, AddressUse use) {
  UserLocation location;
  auto process = session.processes.find(pid);
  if (process == session.processes.end()) return location;
  const MapsSnapshot* maps = process->second.MapsHolding(address, time_ns);
  if (maps == nullptr) return location;
  const Mapping* mapping = maps->Find(address);
  if (mapping->path.empty()) {
    location.module = "anonymous memory";
    if (use != AddressUse::kData || mapping == maps->mappings.data()) return location;
    const Mapping& module = *(mapping - 1);
    if (!IsFile(module) || module.end != mapping->start) return location;
    UserLocation in_module;
    AddSymbol(session, module, address, use, &in_module);
    if (in_module.symbol.empty() && in_module.section.empty()) return location;
    in_module.module = BaseName(module.path);
    return in_module;
  }
  location.module = IsFile(*mapping) ? BaseName(mapping->path) : PrintableName(mapping->path);
  if (!IsFile(*mapping)) return location;
  location.file_backed = true;
  location.module_offset = address - mapping->start + mapping->file_offset;
  AddSymbol(session, *mapping, address, use, &location);
  return location;
}

std::string FrameText(const UserLocation& location, uint64_t address) {
  if (!location.symbol.empty()) return location.symbol + "+" + Hex(location.symbol_offset);
  if (location.file_backed) return location.module + "+" + Hex(location.module_offset);
  return Hex(address);
}

std::string DataText(const UserLocation& location) {
  if (!location.symbol.empty()) {
    std::string text = location.module + ": " + location.symbol;
    if (location.symbol_offset != 0) text += "+" + Hex(location.symbol_offset);
    return text;
  }
  if (location.file_backed) return location.module + "+" + Hex(location.module_offset);
  if (!location.section.empty())
    return location.module + ": " + location.section + "+" + Hex(location.section_offset);
  return location.module;
}

std::vector<std::string> UserStackFrames(const Session& session, uint32_t pid, int32_t stack_id,
                                         uint64_t time_ns) {
  std::vector<std::string> frames;
  if (stack_id < 0) return frames;
  auto stack = session.user_stacks.find(stack_id);
  if (stack == session.user_stacks.end()) return frames;
  const std::vector<uint64_t>& ips = stack->second.ips;
  for (size_t i = 0; i < ips.size(); ++i) {
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    frames.push_back(FrameText(LocateUserAddress(session, pid, ips[i], time_ns, use), ips[i]));
  }
  if (stack->second.truncated) frames.emplace_back("... (truncated)");
  return frames;
}

std::vector<std::string> NativeStackFrames(const Session& session, const NativeStack& stack) {
  std::vector<std::string> frames;
  frames.reserve(stack.ips.size());
  for (size_t i = 0; i < stack.ips.size(); ++i) {
    if (i < stack.symbols.size() && !stack.symbols[i].empty()) {
      frames.push_back(stack.symbols[i]);
      continue;
    }
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    frames.push_back(FrameText(
        LocateUserAddress(session, stack.pid, stack.ips[i], stack.time_ns, use), stack.ips[i]));
  }
  if (!stack.cut_short.empty()) frames.push_back("... (" + stack.cut_short + ")");
  return frames;
}

std::vector<std::string> WakerStackFrames(const Session& session, const NativeStack* unwound,
                                          uint32_t waker_pid, int32_t waker_stack_id,
                                          uint64_t wake_ns) {
  if (unwound != nullptr && !unwound->ips.empty()) return NativeStackFrames(session, *unwound);
  return UserStackFrames(session, waker_pid, waker_stack_id, wake_ns);
}

std::vector<FrameRepeat> FindFrameRepeats(const std::vector<std::string>& frames) {
  constexpr size_t kLongestBlock = 8;
  constexpr size_t kFewestTimes = 3;
  std::vector<FrameRepeat> repeats;
  for (size_t first = 0; first < frames.size();) {
    FrameRepeat best;
    for (size_t length = 1; length <= kLongestBlock && first + length <= frames.size(); ++length) {
      size_t times = 1;
      while (first + (times + 1) * length <= frames.size() &&
             std::equal(frames.begin() + first, frames.begin() + first + length,
                        frames.begin() + first + times * length))
        ++times;
      if (times >= kFewestTimes && times * length > best.times * best.length)
        best = FrameRepeat{first, length, times};
    }
    if (best.times == 0) {
      ++first;
      continue;
    }
    repeats.push_back(best);
    first += best.times * best.length;
  }
  return repeats;
}

std::string FrameRepeatText(const FrameRepeat& repeat, std::string_view frame) {
  std::string what = repeat.length == 1 ? std::string(frame)
                                        : "these " + std::to_string(repeat.length) + " frames";
  return "... " + what + " repeated " + std::to_string(repeat.times - 1) + " more times";
}

std::vector<std::string> CollapseFrameRepeats(const std::vector<std::string>& frames) {
  std::vector<std::string> shown;
  size_t next = 0;
  for (const FrameRepeat& repeat : FindFrameRepeats(frames)) {
    shown.insert(shown.end(), frames.begin() + next, frames.begin() + repeat.first + repeat.length);
    shown.push_back(FrameRepeatText(repeat, frames[repeat.first]));
    next = repeat.first + repeat.times * repeat.length;
  }
  shown.insert(shown.end(), frames.begin() + next, frames.end());
  return shown;
}

bool IsSystemLibrary(const std::string& module) {
  // Versioned names: "libc.so.6", "libc-2.31.so", "ld-linux-x86-64.so.2", "libstdc++.so.6.0.30".
  static constexpr std::string_view kPrefixes[] = {"libc.so",      "libc-",      "libpthread.so",
                                                   "libpthread-",  "ld-linux",   "ld-",
                                                   "libstdc++.so", "libgcc_s.so"};
  for (std::string_view prefix : kPrefixes) {
    if (module.starts_with(prefix)) return true;
  }
  return false;
}

namespace {

// The module that defines the imported function `name` in `maps`, as the dynamic linker finds it:
// the system's libraries first (where a program's imports of them are looked up fastest), then
// the first other file mapped that does.
std::optional<LockUser> DefinerOf(const Session& session, const MapsSnapshot& maps,
                                  const std::string& name) {
  for (bool system : {true, false}) {
    std::set<std::string> seen;
    for (const Mapping& mapping : maps.mappings) {
      if (!IsFile(mapping) || !seen.insert(mapping.path).second) continue;
      std::string module = BaseName(mapping.path);
      if (IsSystemLibrary(module) != system) continue;
      const ElfSymbolFile* file = session.elf_symbols.Find(mapping.path, mapping.inode);
      const ElfSymbol* definition = file != nullptr ? file->FunctionNamed(name) : nullptr;
      if (definition != nullptr) return LockUser{module, PrintableName(Demangle(definition->name))};
    }
  }
  return std::nullopt;
}

// DefinerOf for code that called `name` at `time_ns`: in the maps snapshot in effect then, else
// in the first one of the same program read after it, else in `maps` (the one that holds that
// code). A snapshot is read some time after what it shows was mapped (at the start or exec, then
// 20, 100 and 500 ms on, later on a loaded machine): a wait at the start can fall in the one read
// before the program's libraries were mapped, yet the library it called into was there. Later
// snapshots come last: they may show a plugin loaded since, that defines the same name.
std::optional<LockUser> DefinerAt(const Session& session, const Process& process,
                                  const MapsSnapshot& maps, const std::string& name,
                                  uint64_t time_ns) {
  auto [in_effect, image] = process.MapsEpoch(time_ns);
  const uint64_t image_start = image == 0 ? 0 : process.exec_ns[image - 1];
  const uint64_t image_end = image < process.exec_ns.size() ? process.exec_ns[image] : kLatest;
  for (int64_t i : {in_effect, in_effect + 1}) {
    if (i < 0 || i >= static_cast<int64_t>(process.maps.size())) continue;
    const MapsSnapshot& snapshot = process.maps[static_cast<size_t>(i)];
    if (snapshot.time_ns < image_start || snapshot.time_ns >= image_end) continue;
    if (std::optional<LockUser> definer = DefinerOf(session, snapshot, name)) return definer;
  }
  return DefinerOf(session, maps, name);
}

// The frame that a frame-pointer walk skipped right below return address `address`, the first
// frame past code that keeps no frame pointer (glibc's, on most distributions): the walk goes
// from that code straight to the caller of the function that called it, whose frame is missing.
// That function is the one the call before `address` (in `mapping`) called: directly, or as an
// import of another library. nullopt when the call cannot be told (through a pointer: a virtual
// call, a std::function) or went to the system library itself (then the stack is not what the
// walk's rules say, and is not trusted).
std::optional<LockUser> SkippedFrame(const Session& session, const Process& process,
                                     const MapsSnapshot& maps, const Mapping& mapping,
                                     uint64_t address, uint64_t time_ns) {
  const ElfSymbolFile* file = session.elf_symbols.Find(mapping.path, mapping.inode);
  std::optional<uint64_t> file_address =
      file != nullptr ? FileAddress(*file, mapping, address) : std::nullopt;
  if (!file_address) return std::nullopt;
  ElfSymbolFile::CallTarget target = file->CallBefore(*file_address);
  if (target.address != 0) {
    const ElfSymbol* function = file->FunctionAt(target.address);
    return LockUser{BaseName(mapping.path),
                    function != nullptr ? PrintableName(Demangle(function->name)) : ""};
  }
  if (target.import.empty()) return std::nullopt;
  std::optional<LockUser> definer = DefinerAt(session, process, maps, target.import, time_ns);
  if (!definer || IsSystemLibrary(definer->module)) return std::nullopt;
  return definer;
}

// Whether the code of `mapping`'s file keeps frame pointers (unknown: taken as yes).
bool KeepsFramePointers(const Session& session, const Mapping& mapping) {
  const ElfSymbolFile* file = session.elf_symbols.Find(mapping.path, mapping.inode);
  return file == nullptr || file->KeepsFramePointers();
}

}  // namespace

std::optional<LockUser> FindLockUser(const Session& session, uint32_t pid, int32_t stack_id,
                                     uint64_t time_ns) {
  auto stack = session.user_stacks.find(stack_id);
  if (stack_id < 0 || stack == session.user_stacks.end()) return std::nullopt;
  const std::vector<uint64_t>& ips = stack->second.ips;
  std::optional<LockUser> user;
  const Mapping* system_frame = nullptr;  // the last frame in a system library's code
  for (size_t i = 0; i < ips.size(); ++i) {
    auto process = session.processes.find(pid);
    const MapsSnapshot* maps =
        process != session.processes.end() ? process->second.MapsHolding(ips[i], time_ns) : nullptr;
    const Mapping* mapping = maps != nullptr ? maps->Find(ips[i]) : nullptr;
    if (mapping == nullptr || mapping->perms.size() < 3 || mapping->perms[2] != 'x') break;
    if (!IsFile(*mapping)) {
      if (user) break;  // out of the library's frames
      continue;         // generated code (a JIT's), named by nothing
    }
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    UserLocation location = LocateUserAddress(session, pid, ips[i], time_ns, use);
    if (!user) {
      if (IsSystemLibrary(location.module)) {
        system_frame = mapping;
        continue;
      }
      // The walk skipped the system code's caller: the call before this return address says
      // which it was where it can be read. Where it cannot (an indirect call, a stripped
      // library's), the lock is this library's: its code called into the system code.
      if (system_frame != nullptr && !KeepsFramePointers(session, *system_frame)) {
        if (std::optional<LockUser> skipped =
                SkippedFrame(session, process->second, *maps, *mapping, ips[i], time_ns))
          return skipped;
      }
      user = LockUser{location.module, {}};
    } else if (location.module != user->module) {
      break;
    }
    if (!location.symbol.empty()) {
      user->function = location.symbol;
      break;
    }
  }
  return user;
}

}  // namespace gprof::collector
