#include "elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gprof::collector {
namespace {

// Of several symbols at one address (aliases: `__libc_malloc` and `malloc`), the one to show: a
// global before a weak before a local one, a sized before an unsized one, the shorter name.
int BindingRank(unsigned char binding) {
  switch (binding) {
    case STB_GLOBAL:
      return 0;
    case STB_WEAK:
      return 1;
    default:
      return 2;
  }
}

struct Candidate {
  ElfSymbol symbol;
  int rank = 0;
};

std::vector<ElfSymbol> OnePerAddress(std::vector<Candidate> candidates) {
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.symbol.address != b.symbol.address) return a.symbol.address < b.symbol.address;
    if (a.rank != b.rank) return a.rank < b.rank;
    if ((a.symbol.size == 0) != (b.symbol.size == 0)) return a.symbol.size != 0;
    return a.symbol.name.size() < b.symbol.name.size();
  });
  std::vector<ElfSymbol> symbols;
  for (Candidate& candidate : candidates) {
    if (!symbols.empty() && symbols.back().address == candidate.symbol.address) continue;
    symbols.push_back(std::move(candidate.symbol));
  }
  return symbols;
}

// The symbol at or below `address` in `symbols` (sorted), or nullptr.
const ElfSymbol* AtOrBelow(const std::vector<ElfSymbol>& symbols, uint64_t address) {
  auto after = std::upper_bound(symbols.begin(), symbols.end(), address,
                                [](uint64_t a, const ElfSymbol& s) { return a < s.address; });
  return after == symbols.begin() ? nullptr : &*(after - 1);
}

class OpenElf {
 public:
  explicit OpenElf(int fd) : fd_(fd), elf_(elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {}
  ~OpenElf() {
    if (elf_ != nullptr) elf_end(elf_);
    close(fd_);
  }
  OpenElf(const OpenElf&) = delete;
  OpenElf& operator=(const OpenElf&) = delete;
  Elf* get() const { return elf_; }

 private:
  int fd_;
  Elf* elf_;
};

std::string ElfError() { return elf_errmsg(-1); }

// The symbol table to read: `.symtab` (every function, when the file is not stripped), else
// `.dynsym` (the exported ones, which a shared library always keeps).
Elf_Scn* SymbolSection(Elf* elf) {
  Elf_Scn* dynsym = nullptr;
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr;
       section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr) continue;
    if (header.sh_type == SHT_SYMTAB) return section;
    if (header.sh_type == SHT_DYNSYM) dynsym = section;
  }
  return dynsym;
}

}  // namespace

Expected<ElfSymbolFile> ElfSymbolFile::Read(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) return Status::Error("libelf: " + ElfError());
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": " + std::strerror(errno));
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return Status::Error(path + ": not a regular file");
  }
  OpenElf elf(fd);
  if (elf.get() == nullptr || elf_kind(elf.get()) != ELF_K_ELF)
    return Status::Error(path + ": not an ELF file");

  ElfSymbolFile file;
  size_t program_headers = 0;
  if (elf_getphdrnum(elf.get(), &program_headers) != 0)
    return Status::Error(path + ": " + ElfError());
  for (size_t i = 0; i < program_headers; ++i) {
    GElf_Phdr header;
    if (gelf_getphdr(elf.get(), static_cast<int>(i), &header) == nullptr ||
        header.p_type != PT_LOAD) {
      continue;
    }
    file.segments_.push_back(ElfLoadSegment{header.p_offset, header.p_filesz, header.p_vaddr,
                                            header.p_memsz, header.p_flags});
  }
  if (file.segments_.empty()) return Status::Error(path + ": no loadable segment");

  Elf_Scn* section = SymbolSection(elf.get());
  if (section == nullptr) return file;  // stripped of both: named by mapping and offset only
  GElf_Shdr header;
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t entry_size = gelf_fsize(elf.get(), ELF_T_SYM, 1, EV_CURRENT);
  if (gelf_getshdr(section, &header) == nullptr || data == nullptr || entry_size == 0)
    return Status::Error(path + ": unreadable symbol table: " + ElfError());
  std::vector<Candidate> functions, objects;
  size_t count = data->d_size / entry_size;
  for (size_t i = 0; i < count; ++i) {
    GElf_Sym symbol;
    if (gelf_getsym(data, static_cast<int>(i), &symbol) == nullptr) continue;
    if (symbol.st_shndx == SHN_UNDEF || symbol.st_value == 0) continue;  // imported, or nothing
    unsigned char type = GELF_ST_TYPE(symbol.st_info);
    bool is_function = type == STT_FUNC || type == STT_GNU_IFUNC;
    if (!is_function && type != STT_OBJECT) continue;  // TLS values are offsets, not addresses
    const char* name = elf_strptr(elf.get(), header.sh_link, symbol.st_name);
    if (name == nullptr || *name == '\0') continue;
    Candidate candidate{ElfSymbol{symbol.st_value, symbol.st_size, name},
                        BindingRank(GELF_ST_BIND(symbol.st_info))};
    (is_function ? functions : objects).push_back(std::move(candidate));
  }
  file.functions_ = OnePerAddress(std::move(functions));
  file.objects_ = OnePerAddress(std::move(objects));
  return file;
}

const ElfSymbol* ElfSymbolFile::FunctionAt(uint64_t address) const {
  const ElfSymbol* symbol = AtOrBelow(functions_, address);
  if (symbol == nullptr || (symbol->size != 0 && address - symbol->address >= symbol->size))
    return nullptr;
  return symbol;
}

const ElfSymbol* ElfSymbolFile::ObjectAt(uint64_t address) const {
  const ElfSymbol* symbol = AtOrBelow(objects_, address);
  // A variable of unknown size holds only its first byte for sure.
  if (symbol == nullptr || address - symbol->address >= std::max<uint64_t>(symbol->size, 1))
    return nullptr;
  return symbol;
}

const ElfSymbolFile* ElfSymbolCache::Find(const std::string& path, uint64_t inode) {
  auto key = std::make_pair(path, inode);
  if (auto found = files_.find(key); found != files_.end()) return found->second.get();
  std::shared_ptr<const ElfSymbolFile> file;
  struct stat info {};
  // The path as the process saw it: absolute, a regular file, and the same file (a file replaced
  // since, by a reinstall or a rebuild, has a new inode: its symbols would name wrong places).
  bool same_file = path.starts_with('/') && stat(path.c_str(), &info) == 0 &&
                   S_ISREG(info.st_mode) && (inode == 0 || info.st_ino == inode);
  if (same_file) {
    auto read = ElfSymbolFile::Read(path);
    if (read.ok()) file = std::make_shared<const ElfSymbolFile>(std::move(read.value()));
  }
  files_.emplace(std::move(key), file);
  return file.get();
}

}  // namespace gprof::collector
