// Names user-space addresses of the recorded processes: through the process's maps at the time,
// the module and the offset into its file ("libcuda.so.1+0x24040"), and, when the mapped ELF file
// can be read here and is still the one that was mapped, the symbol that holds the address,
// demangled. A file that changed or vanished since the recording leaves the module and offset,
// never a wrong symbol.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

enum class AddressUse : uint8_t {
  kInstruction,    // where a thread is: the innermost frame of a stack
  kReturnAddress,  // an outer frame: the call is the instruction before it
  kData,           // a variable: a futex word, a faulting address
};

struct UserLocation {
  // The mapped file's name, "[heap]", "[stack]", "[vdso]", "anonymous memory"; empty when the
  // address is in no recorded mapping.
  std::string module;
  bool file_backed = false;
  uint64_t module_offset = 0;  // into the file, when file_backed
  std::string symbol;          // demangled; empty when no symbol holds the address
  uint64_t symbol_offset = 0;
  // A variable in the module's zero-filled data (".bss") past its file pages, which no symbol
  // names (a stripped library without its debug file); empty otherwise.
  std::string section;
  uint64_t section_offset = 0;
  // Code: "freeze_app.cc:42", the source line its debug information gives; empty without one.
  std::string source;
  // Whether the address is a module's: in its file mapping, or named by its symbols or sections.
  bool in_module() const { return file_backed || !symbol.empty() || !section.empty(); }
};

// Where `address` of process `pid` was at `time_ns` (kLatest: in its latest maps). A data address
// in the anonymous memory right after a module's data (its .bss, such as a zero-initialized global
// mutex) is named by that module's symbol when one holds it, else by the section ("libc.so.6:
// .bss+0x1190"), a stripped library's local variable whose debug file is not here.
UserLocation LocateUserAddress(const Session& session, uint32_t pid, uint64_t address,
                               uint64_t time_ns, AddressUse use);

// A stack frame: "symbol+0x1c", else "libfoo.so+0x1c40", else "0x7f3a1c2d4040".
std::string FrameText(const UserLocation& location, uint64_t address);

// Where a variable lives: "libcuda.so.1: some_lock+0x8", "libcuda.so.1+0x24040", "libc.so.6:
// .bss+0x1190", "[heap]", "anonymous memory"; empty when unknown.
std::string DataText(const UserLocation& location);

// User stack `stack_id` of process `pid` at `time_ns`, innermost frame first, ending with
// "... (truncated)" when the walk hit its depth limit; empty when the stack is unknown.
std::vector<std::string> UserStackFrames(const Session& session, uint32_t pid, int32_t stack_id,
                                         uint64_t time_ns);

// A native stack's frames, innermost first: the symbol the injected library found (older
// libraries), else the mapped file's symbol, else the mapping and offset, else the address; ending
// with "... (why)" when it was cut short.
std::vector<std::string> NativeStackFrames(const Session& session, const NativeStack& stack);

// A waker's user stack at a wakeup: `unwound` (the copy the recorder took there, unwound through
// code built without frame pointers) when there is one, else its frame-pointer walk
// `waker_stack_id` of process waker_pid at wake_ns.
std::vector<std::string> WakerStackFrames(const Session& session, const NativeStack* unwound,
                                          uint32_t waker_pid, int32_t waker_stack_id,
                                          uint64_t wake_ns);

// A block of frames repeated back to back: recursion, or a frame-pointer walk caught in a loop
// (a frame whose saved frame pointer leads back to itself), to the walk's depth limit.
struct FrameRepeat {
  size_t first = 0;   // the block's first frame, innermost first
  size_t length = 0;  // frames in the block
  size_t times = 0;   // how many times it occurs in a row, the first included (3 or more)
};

// The repeated blocks of `frames`, in order, none overlapping: of at most 8 frames, repeated at
// least 3 times, the one covering the most frames where several could start at a frame.
std::vector<FrameRepeat> FindFrameRepeats(const std::vector<std::string>& frames);

// What stands for a repeated block's copies after the first: "... f(int)+0x1c repeated 125 more
// times" (`frame`: the block's one frame) or "... these 3 frames repeated 41 more times".
std::string FrameRepeatText(const FrameRepeat& repeat, std::string_view frame);

// `frames` for a reader: each repeated block shown once, then "... f(int)+0x1c repeated 125 more
// times" (a block of one frame) or "... these 3 frames repeated 41 more times".
std::vector<std::string> CollapseFrameRepeats(const std::vector<std::string>& frames);

// Whether `module` (a mapped file's name) is one of the system's own libraries, through which
// every program takes its locks: libc, libpthread, the dynamic loader, libstdc++, libgcc_s.
bool IsSystemLibrary(const std::string& module);

// The code that waited, in user stack `stack_id` of `pid` at `time_ns`: its first frame outside
// the system's libraries is the library whose code took the lock (pthread_mutex_lock, std::mutex
// and their kin are those libraries' thin wrappers). `function` is the first of that library's
// frames there that a symbol names: where the library waited. The walk goes on only through
// executable mappings: a frame anywhere else means a frame-pointer walk has left the real frames
// (code built without frame pointers), and what follows it is not trusted.
struct LockUser {
  std::string module;    // "libcuda.so.580.159.04"
  std::string function;  // "cuLaunchKernel", demangled; empty when none of its frames is named
};
std::optional<LockUser> FindLockUser(const Session& session, uint32_t pid, int32_t stack_id,
                                     uint64_t time_ns);

}  // namespace gprof::collector
