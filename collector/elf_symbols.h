// The symbol tables of ELF files (executables, shared libraries) that the recorded processes
// mapped, read with libelf, to name user-space code and data addresses. Only the file itself is
// read: `.symtab`, else `.dynsym`; no separate debug files, no DWARF.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "status.h"

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

class ElfSymbolFile {
 public:
  // Reads the load segments and symbols of `path`, a regular file; an error when it is not a
  // readable ELF file.
  static Expected<ElfSymbolFile> Read(const std::string& path);

  const std::vector<ElfLoadSegment>& segments() const { return segments_; }

  // The function that holds `address`: the nearest at or below it, unless its size says `address`
  // is past its end (code between exported functions of a stripped library is named by nothing).
  const ElfSymbol* FunctionAt(uint64_t address) const;

  // The data object (a global or static variable) that holds `address`; nullptr when none does.
  const ElfSymbol* ObjectAt(uint64_t address) const;

 private:
  std::vector<ElfLoadSegment> segments_;
  std::vector<ElfSymbol> functions_;  // sorted by address, one per address
  std::vector<ElfSymbol> objects_;    // sorted by address, one per address
};

// The files read so far, each read once: a stack names the same libraries over and over.
class ElfSymbolCache {
 public:
  // The symbols of `path` when it is a readable ELF file here and still the file that was mapped
  // (the same inode; 0: not known, not checked); nullptr otherwise, and the caller names the
  // address by its mapping alone. Only regular files are opened: a device file is never touched.
  const ElfSymbolFile* Find(const std::string& path, uint64_t inode);

 private:
  // Null where the file could not be used; shared, so that a copied Session shares them too.
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const ElfSymbolFile>> files_;
};

}  // namespace gprof::collector
