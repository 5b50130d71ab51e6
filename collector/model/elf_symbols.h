// The symbol tables of ELF files (executables, shared libraries) that the recorded processes
// mapped, read with libelf, to name user-space code and data addresses: the file's `.symtab`, else
// the `.symtab` of its separate debug file (found as gdb finds it: by build-id, then by
// `.gnu_debuglink`, under /usr/lib/debug and beside the file), else its `.dynsym`. No DWARF.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inject/shared/status.h"

namespace gprof::collector {

struct ElfSymbol {
  uint64_t address = 0;  // st_value: an address of the file's own layout
  uint64_t size = 0;     // 0: not known
  std::string name;      // as the file has it (mangled)
};

// A PT_LOAD segment: where its bytes lie in the file and in the file's address layout.
struct ElfLoadSegment {
  uint64_t file_offset = 0;
  uint64_t file_size = 0;
  uint64_t address = 0;
  uint64_t memory_size = 0;  // past file_size: zero-filled (.bss)
  uint32_t flags = 0;        // PF_R, PF_W, PF_X
};

// Where distributions install separate debug files (Debian's libc6-dbg:
// /usr/lib/debug/.build-id/93/ac61....debug).
inline constexpr const char* kDebugFileRoot = "/usr/lib/debug";

// An allocated section without file contents (.bss): where it lies in the file's layout.
struct ElfZeroFilledSection {
  std::string name;
  uint64_t address = 0;
  uint64_t size = 0;
};

// `path` opened for reading only when it is a regular file, and that same file: it is opened
// first with O_PATH (which opens nothing: a device that acts when opened, a FIFO that blocks) to
// see what it names, then through /proc/self/fd. -1 with errno set otherwise (EINVAL: not a
// regular file). For paths that a process's maps name, which its user may change at any time.
int OpenRegularFile(const std::string& path);

// The separate debug file of the ELF file `path` (that build's: the same build-id, or the CRC its
// debug link names), looked for as ElfSymbolFile::Read looks; empty when there is none.
std::string FindDebugFile(const std::string& path, const std::string& debug_root = kDebugFileRoot);

class ElfSymbolFile {
 public:
  // Reads the load segments and symbols of `path`, a regular file; an error when it is not a
  // readable ELF file. A file without `.symtab` (stripped: libc keeps only its exported symbols)
  // takes every symbol from its separate debug file under `debug_root` or beside it, when one is
  // there and is that build's (the same build-id, or the CRC its debug link names).
  static Expected<ElfSymbolFile> Read(const std::string& path,
                                      const std::string& debug_root = kDebugFileRoot);

  const std::vector<ElfLoadSegment>& segments() const { return segments_; }
  // The separate debug file the symbols came from; empty when they came from the file itself.
  const std::string& debug_file() const { return debug_file_; }

  // The function that holds `address`: the nearest at or below it, unless its size says `address`
  // is past its end (code between exported functions of a stripped library is named by nothing).
  const ElfSymbol* FunctionAt(uint64_t address) const;

  // The data object (a global or static variable) that holds `address`; nullptr when none does.
  const ElfSymbol* ObjectAt(uint64_t address) const;

  // The zero-filled section (.bss) that holds `address`; nullptr when none does. Names a
  // variable that no symbol of a stripped file names.
  const ElfZeroFilledSection* ZeroFilledSectionAt(uint64_t address) const;

  // A defined function of the file's symbols by its name (as the file has it); nullptr if none.
  const ElfSymbol* FunctionNamed(std::string_view name) const;

  // What the call instruction that returns to `return_address` called, decoded from the file's
  // code (x86-64: a direct call, a call through the GOT), where the file tells: a function of
  // the file (`address`), or a function imported from another (`import`, through a PLT stub or a
  // GOT slot). A frame-pointer walk through code that keeps no frame pointer (glibc's, on most
  // distributions) skips the frame that called into it: this names that frame's function.
  struct CallTarget {
    uint64_t address = 0;  // 0: not a function of this file
    std::string import;    // empty: not an import
  };
  CallTarget CallBefore(uint64_t return_address) const;

  // "freeze_app.cc:42": the source line of the code at `address` (of the file's layout) as the
  // DWARF line table says, from the file or its separate debug file (build-id, .gnu_debuglink);
  // empty without debug information for it. The DWARF is opened on first use and kept.
  std::string SourceLine(uint64_t address) const;

  // Whether the file's code keeps frame pointers (most of its functions begin "push %rbp; mov
  // %rsp,%rbp"), so that a frame-pointer walk through it misses no caller. True where that cannot
  // be told (not x86-64, too few functions): a walk is then taken as it is.
  bool KeepsFramePointers() const;

 private:
  std::string path_;
  std::vector<ElfLoadSegment> segments_;
  std::string debug_file_;
  std::vector<ElfZeroFilledSection> zero_filled_;
  std::vector<ElfSymbol> functions_;                 // sorted by address, one per address
  std::vector<ElfSymbol> objects_;                   // sorted by address, one per address
  mutable std::vector<uint32_t> functions_by_name_;  // into functions_, made on first use
  mutable std::map<uint64_t, CallTarget> calls_;     // CallBefore's answers
  mutable int keeps_frame_pointers_ = -1;            // -1: not looked at yet
  std::string debug_root_;
  struct Lines;                                 // the opened DWARF (elf_symbols.cc)
  mutable std::shared_ptr<const Lines> lines_;  // null: not opened yet
};

// The files read so far, each read once: a stack names the same libraries over and over.
class ElfSymbolCache {
 public:
  // Separate debug files are looked for under `debug_root` (and beside each file).
  explicit ElfSymbolCache(std::string debug_root = kDebugFileRoot)
      : debug_root_(std::move(debug_root)) {}

  // The symbols of `path` when it is a readable ELF file here and still the file that was mapped
  // (the same inode; 0: not known, not checked); nullptr otherwise, and the caller names the
  // address by its mapping alone. Only regular files are opened: a device file is never touched.
  const ElfSymbolFile* Find(const std::string& path, uint64_t inode);

 private:
  std::string debug_root_;
  // Null where the file could not be used; shared, so that a copied Session shares them too.
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const ElfSymbolFile>> files_;
};

}  // namespace gprof::collector
