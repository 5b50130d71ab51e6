#include "collector/model/elf_symbols.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

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
  int fd() const { return fd_; }

 private:
  int fd_;
  Elf* elf_;
};

std::string ElfError() { return elf_errmsg(-1); }

}  // namespace

int OpenRegularFile(const std::string& path) {
  int path_fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (path_fd < 0) return -1;
  struct stat info {};
  if (fstat(path_fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(path_fd);
    errno = EINVAL;
    return -1;
  }
  int fd = open(("/proc/self/fd/" + std::to_string(path_fd)).c_str(), O_RDONLY | O_CLOEXEC);
  int open_errno = errno;
  close(path_fd);
  errno = open_errno;
  return fd;
}

namespace {

// `path` opened as an ELF file: a regular file only, so that a device file is never touched. The
// path comes from a session's maps, where a device (a mapping of /dev/nvidia0, or a hostile
// session's /dev/watchdog) acts when opened and a FIFO blocks, and may change between a check and
// the open: it is opened first with O_PATH, which opens nothing, to see what it names; then that
// same file, through /proc/self/fd, for reading.
Expected<std::unique_ptr<OpenElf>> OpenElfFile(const std::string& path) {
  int fd = OpenRegularFile(path);
  if (fd < 0 && errno == EINVAL)
    return Status::Error(StatusCode::kInvalid, path + ": not a regular file");
  if (fd < 0) return Status::FromErrno(errno, path + ": " + std::strerror(errno));
  auto elf = std::make_unique<OpenElf>(fd);
  if (elf->get() == nullptr || elf_kind(elf->get()) != ELF_K_ELF)
    return Status::Error(StatusCode::kInvalid, path + ": not an ELF file");
  return elf;
}

// The first section of `type`, or of `type` and `name` when a name is given.
Elf_Scn* FindSection(Elf* elf, uint32_t type, std::string_view name = {}) {
  size_t names = 0;
  if (!name.empty() && elf_getshdrstrndx(elf, &names) != 0) return nullptr;
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr;
       section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr || header.sh_type != type) continue;
    if (name.empty()) return section;
    const char* section_name = elf_strptr(elf, names, header.sh_name);
    if (section_name != nullptr && name == section_name) return section;
  }
  return nullptr;
}

// The symbol table to read: `.symtab` (every function, when the file is not stripped), else
// `.dynsym` (the exported ones, which a shared library always keeps).
Elf_Scn* SymbolSection(Elf* elf) {
  if (Elf_Scn* symtab = FindSection(elf, SHT_SYMTAB)) return symtab;
  return FindSection(elf, SHT_DYNSYM);
}

// The GNU build-id note's bytes: what ties a file to its separate debug file. Empty when none.
std::string BuildId(Elf* elf) {
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr;
       section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr || header.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(section, nullptr);
    if (data == nullptr || data->d_buf == nullptr) continue;
    const char* bytes = static_cast<const char*>(data->d_buf);
    GElf_Nhdr note;
    size_t name_at = 0, desc_at = 0;
    // gelf_getnote checks that the note, its name and its descriptor lie inside the data.
    for (size_t at = 0; (at = gelf_getnote(data, at, &note, &name_at, &desc_at)) != 0;) {
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == sizeof(ELF_NOTE_GNU) &&
          std::memcmp(bytes + name_at, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0)
        return std::string(bytes + desc_at, note.n_descsz);
    }
  }
  return {};
}

// `.gnu_debuglink`: the debug file's name, then, 4-byte aligned, the CRC-32 of its contents.
struct DebugLink {
  std::string name;
  uint32_t crc = 0;
};

std::optional<DebugLink> GnuDebugLink(Elf* elf) {
  Elf_Scn* section = FindSection(elf, SHT_PROGBITS, ".gnu_debuglink");
  Elf_Data* data = section != nullptr ? elf_getdata(section, nullptr) : nullptr;
  if (data == nullptr || data->d_buf == nullptr) return std::nullopt;
  const auto* bytes = static_cast<const unsigned char*>(data->d_buf);
  const void* end = std::memchr(bytes, '\0', data->d_size);
  if (end == nullptr) return std::nullopt;
  size_t name_size = static_cast<const unsigned char*>(end) - bytes;
  size_t crc_at = (name_size + 1 + 3) & ~size_t{3};
  if (name_size == 0 || crc_at + 4 > data->d_size) return std::nullopt;
  DebugLink link{std::string(reinterpret_cast<const char*>(bytes), name_size), 0};
  // A plain name: never a path that leads out of the directories searched.
  if (link.name.find('/') != std::string::npos || link.name == "." || link.name == "..")
    return std::nullopt;
  bool big_endian = elf_getident(elf, nullptr)[EI_DATA] == ELFDATA2MSB;
  for (int i = 0; i < 4; ++i) {
    uint32_t byte = bytes[crc_at + (big_endian ? i : 3 - i)];
    link.crc = (link.crc << 8) | byte;
  }
  return link;
}

// The CRC-32 (zlib's, as the debug link's) of the whole file behind `fd`.
std::optional<uint32_t> FileCrc(int fd) {
  uLong crc = crc32(0, nullptr, 0);
  char buffer[1 << 16];
  off_t offset = 0;
  for (;;) {
    ssize_t got = pread(fd, buffer, sizeof(buffer), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::nullopt;
    if (got == 0) return static_cast<uint32_t>(crc);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer), static_cast<uInt>(got));
    offset += got;
  }
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

// Where gdb and elfutils look for the separate debug file of `path`: by build-id under the debug
// root, then by debug link beside the file, in its .debug directory, and under the debug root.
std::vector<std::string> DebugFileCandidates(const std::string& path, const std::string& build_id,
                                             const std::optional<DebugLink>& link,
                                             const std::string& root) {
  std::vector<std::string> candidates;
  if (build_id.size() >= 2) {
    std::string hex = Hex(build_id);
    candidates.push_back(root + "/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug");
  }
  if (link) {
    std::string directory = path.substr(0, path.rfind('/'));
    if (directory + "/" + link->name != path) candidates.push_back(directory + "/" + link->name);
    candidates.push_back(directory + "/.debug/" + link->name);
    candidates.push_back(root + directory + "/" + link->name);
  }
  return candidates;
}

// The separate debug file of the ELF file `path`, open, when one of the candidates is that build's
// and has a `.symtab`; its path in `found`.
std::unique_ptr<OpenElf> OpenDebugFile(Elf* elf, const std::string& path, const std::string& root,
                                       std::string* found) {
  std::string build_id = BuildId(elf);
  std::optional<DebugLink> link = GnuDebugLink(elf);
  for (const std::string& candidate : DebugFileCandidates(path, build_id, link, root)) {
    auto debug = OpenElfFile(candidate);
    if (!debug.ok() || FindSection(debug.value()->get(), SHT_SYMTAB) == nullptr) continue;
    // The same build: its build-id, or, for a file without one, the CRC its link names.
    bool same = !build_id.empty() ? BuildId(debug.value()->get()) == build_id
                                  : link && FileCrc(debug.value()->fd()) == link->crc;
    if (!same) continue;
    *found = candidate;
    return std::move(debug.value());
  }
  return nullptr;
}

// `size` bytes of the file's contents at `address` of its layout; empty when they are not all in
// one load segment's file part.
std::string_view BytesAt(Elf* elf, const std::vector<ElfLoadSegment>& segments, uint64_t address,
                         size_t size) {
  size_t file_size = 0;
  const char* image = elf_rawfile(elf, &file_size);
  if (image == nullptr) return {};
  for (const ElfLoadSegment& segment : segments) {
    if (address < segment.address || address - segment.address > segment.file_size ||
        segment.file_size - (address - segment.address) < size)
      continue;
    uint64_t offset = segment.file_offset + (address - segment.address);
    if (offset > file_size || file_size - offset < size) return {};
    return std::string_view(image + offset, size);
  }
  return {};
}

int32_t Little32(std::string_view bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return static_cast<int32_t>(value);
}

// What the GOT slot at `slot` is filled with: an imported function's name (JUMP_SLOT, GLOB_DAT),
// or a function of the file itself (RELATIVE: its address).
ElfSymbolFile::CallTarget GotSlotTarget(Elf* elf, uint64_t slot) {
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr;
       section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr || header.sh_type != SHT_RELA ||
        header.sh_entsize == 0)
      continue;
    Elf_Data* data = elf_getdata(section, nullptr);
    if (data == nullptr) continue;
    for (size_t i = 0; i < data->d_size / header.sh_entsize; ++i) {
      GElf_Rela rela;
      if (gelf_getrela(data, static_cast<int>(i), &rela) == nullptr || rela.r_offset != slot)
        continue;
      uint64_t type = GELF_R_TYPE(rela.r_info);
      if (type == R_X86_64_RELATIVE) return {static_cast<uint64_t>(rela.r_addend), {}};
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) return {};
      Elf_Scn* symbols = elf_getscn(elf, header.sh_link);
      GElf_Shdr symbols_header;
      Elf_Data* symbols_data = symbols != nullptr ? elf_getdata(symbols, nullptr) : nullptr;
      GElf_Sym symbol;
      if (symbols_data == nullptr || gelf_getshdr(symbols, &symbols_header) == nullptr ||
          gelf_getsym(symbols_data, static_cast<int>(GELF_R_SYM(rela.r_info)), &symbol) == nullptr)
        return {};
      const char* name = elf_strptr(elf, symbols_header.sh_link, symbol.st_name);
      return {0, name != nullptr ? name : ""};
    }
  }
  return {};
}

// The GOT slot a PLT stub at `stub` jumps through ("[endbr64] [bnd] jmp *slot(%rip)"); 0 when
// `stub` is not in a PLT section or is no such stub.
uint64_t PltStubSlot(Elf* elf, const std::vector<ElfLoadSegment>& segments, uint64_t stub) {
  size_t names = 0;
  if (elf_getshdrstrndx(elf, &names) != 0) return 0;
  bool in_plt = false;
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr && !in_plt;
       section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr || stub < header.sh_addr ||
        stub - header.sh_addr >= header.sh_size)
      continue;
    const char* name = elf_strptr(elf, names, header.sh_name);
    in_plt = name != nullptr && std::string_view(name).starts_with(".plt");
  }
  constexpr size_t kStubBytes = 11;  // endbr64 (4), bnd (1), jmp *disp32(%rip) (6)
  std::string_view code = in_plt ? BytesAt(elf, segments, stub, kStubBytes) : std::string_view();
  if (code.empty()) return 0;
  size_t at = 0;
  if (code.substr(0, 4) == std::string_view("\xf3\x0f\x1e\xfa", 4)) at += 4;
  if (code[at] == '\xf2') at += 1;
  if (code[at] != '\xff' || code[at + 1] != '\x25') return 0;
  return stub + at + 6 + Little32(code, at + 2);
}

}  // namespace

std::string FindDebugFile(const std::string& path, const std::string& debug_root) {
  if (elf_version(EV_CURRENT) == EV_NONE) return {};
  auto opened = OpenElfFile(path);
  if (!opened.ok()) return {};
  std::string found;
  OpenDebugFile(opened.value()->get(), path, debug_root, &found);
  return found;
}

Expected<ElfSymbolFile> ElfSymbolFile::Read(const std::string& path,
                                            const std::string& debug_root) {
  if (elf_version(EV_CURRENT) == EV_NONE)
    return Status::Error(StatusCode::kUnsupported, "libelf: " + ElfError());
  auto opened = OpenElfFile(path);
  if (!opened.ok()) return opened.status();
  Elf* elf = opened.value()->get();

  ElfSymbolFile file;
  file.path_ = path;
  file.debug_root_ = debug_root;
  size_t program_headers = 0;
  if (elf_getphdrnum(elf, &program_headers) != 0)
    return Status::Error(StatusCode::kInvalid, path + ": " + ElfError());
  for (size_t i = 0; i < program_headers; ++i) {
    GElf_Phdr header;
    if (gelf_getphdr(elf, static_cast<int>(i), &header) == nullptr || header.p_type != PT_LOAD)
      continue;
    file.segments_.push_back(ElfLoadSegment{header.p_offset, header.p_filesz, header.p_vaddr,
                                            header.p_memsz, header.p_flags});
  }
  if (file.segments_.empty())
    return Status::Error(StatusCode::kInvalid, path + ": no loadable segment");
  size_t names = 0;
  if (elf_getshdrstrndx(elf, &names) == 0) {
    for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr;
         section = elf_nextscn(elf, section)) {
      GElf_Shdr header;
      // Thread-local ones (.tbss) are offsets into each thread's block, not addresses.
      if (gelf_getshdr(section, &header) == nullptr || header.sh_type != SHT_NOBITS ||
          (header.sh_flags & SHF_ALLOC) == 0 || (header.sh_flags & SHF_TLS) != 0 ||
          header.sh_size == 0)
        continue;
      const char* name = elf_strptr(elf, names, header.sh_name);
      if (name != nullptr && *name != '\0')
        file.zero_filled_.push_back({name, header.sh_addr, header.sh_size});
    }
  }

  // A stripped file's local symbols (libc's _IO_stdfile_1_lock, static functions) are only in its
  // debug file, whose addresses are the file's own.
  std::unique_ptr<OpenElf> debug;
  if (FindSection(elf, SHT_SYMTAB) == nullptr)
    debug = OpenDebugFile(elf, path, debug_root, &file.debug_file_);
  Elf* symbols_elf = debug != nullptr ? debug->get() : elf;
  Elf_Scn* section = SymbolSection(symbols_elf);
  if (section == nullptr) return file;  // stripped of both: named by mapping and offset only
  GElf_Shdr header;
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t entry_size = gelf_fsize(symbols_elf, ELF_T_SYM, 1, EV_CURRENT);
  if (gelf_getshdr(section, &header) == nullptr || data == nullptr || entry_size == 0)
    return Status::Error(StatusCode::kInvalid, path + ": unreadable symbol table: " + ElfError());
  std::vector<Candidate> functions, objects;
  size_t count = data->d_size / entry_size;
  for (size_t i = 0; i < count; ++i) {
    GElf_Sym symbol;
    if (gelf_getsym(data, static_cast<int>(i), &symbol) == nullptr) continue;
    if (symbol.st_shndx == SHN_UNDEF || symbol.st_value == 0) continue;  // imported, or nothing
    unsigned char type = GELF_ST_TYPE(symbol.st_info);
    bool is_function = type == STT_FUNC || type == STT_GNU_IFUNC;
    if (!is_function && type != STT_OBJECT) continue;  // TLS values are offsets, not addresses
    const char* name = elf_strptr(symbols_elf, header.sh_link, symbol.st_name);
    if (name == nullptr || *name == '\0') continue;
    // A .symtab spells a versioned definition "pthread_mutex_lock@@GLIBC_2.2.5": the name is
    // what comes before the version.
    std::string_view plain(name);
    plain = plain.substr(0, plain.find('@'));
    if (plain.empty()) continue;
    Candidate candidate{ElfSymbol{symbol.st_value, symbol.st_size, std::string(plain)},
                        BindingRank(GELF_ST_BIND(symbol.st_info))};
    (is_function ? functions : objects).push_back(std::move(candidate));
  }
  file.functions_ = OnePerAddress(std::move(functions));
  file.objects_ = OnePerAddress(std::move(objects));
  return file;
}

// A DWARF handle on an open ELF file, closed with it; `dwarf` null where the file has no DWARF.
struct ElfSymbolFile::Lines {
  std::unique_ptr<OpenElf> elf;
  Dwarf* dwarf = nullptr;
  ~Lines() {
    if (dwarf != nullptr) dwarf_end(dwarf);
  }
};

namespace {

// Whether `elf` has a line table to read (a stripped file keeps none, its debug file does).
bool HasLineTable(Elf* elf) {
  return FindSection(elf, SHT_PROGBITS, ".debug_line") != nullptr &&
         FindSection(elf, SHT_PROGBITS, ".debug_info") != nullptr;
}

}  // namespace

std::string ElfSymbolFile::SourceLine(uint64_t address) const {
  if (lines_ == nullptr) {
    auto lines = std::make_shared<Lines>();
    auto opened = OpenElfFile(path_);
    if (opened.ok()) {
      std::unique_ptr<OpenElf> elf = std::move(opened.value());
      if (!HasLineTable(elf->get())) {
        std::string ignored;
        std::unique_ptr<OpenElf> debug = OpenDebugFile(elf->get(), path_, debug_root_, &ignored);
        elf = debug != nullptr && HasLineTable(debug->get()) ? std::move(debug) : nullptr;
      }
      if (elf != nullptr) {
        lines->dwarf = dwarf_begin_elf(elf->get(), DWARF_C_READ, nullptr);
        lines->elf = std::move(elf);
      }
    }
    lines_ = std::move(lines);
  }
  if (lines_->dwarf == nullptr) return {};
  Dwarf_Die unit;
  if (dwarf_addrdie(lines_->dwarf, address, &unit) == nullptr) return {};
  Dwarf_Line* line = dwarf_getsrc_die(&unit, address);
  int number = 0;
  const char* file = line != nullptr ? dwarf_linesrc(line, nullptr, nullptr) : nullptr;
  if (file == nullptr || dwarf_lineno(line, &number) != 0 || number <= 0) return {};
  std::string_view name(file);
  return std::string(name.substr(name.rfind('/') + 1)) + ":" + std::to_string(number);
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

const ElfZeroFilledSection* ElfSymbolFile::ZeroFilledSectionAt(uint64_t address) const {
  for (const ElfZeroFilledSection& section : zero_filled_) {
    if (address >= section.address && address - section.address < section.size) return &section;
  }
  return nullptr;
}

const ElfSymbol* ElfSymbolFile::FunctionNamed(std::string_view name) const {
  if (functions_by_name_.size() != functions_.size()) {
    functions_by_name_.resize(functions_.size());
    for (uint32_t i = 0; i < functions_by_name_.size(); ++i) functions_by_name_[i] = i;
    std::sort(functions_by_name_.begin(), functions_by_name_.end(),
              [&](uint32_t a, uint32_t b) { return functions_[a].name < functions_[b].name; });
  }
  auto found = std::lower_bound(
      functions_by_name_.begin(), functions_by_name_.end(), name,
      [&](uint32_t index, std::string_view wanted) { return functions_[index].name < wanted; });
  if (found == functions_by_name_.end() || functions_[*found].name != name) return nullptr;
  return &functions_[*found];
}

ElfSymbolFile::CallTarget ElfSymbolFile::CallBefore(uint64_t return_address) const {
  if (auto known = calls_.find(return_address); known != calls_.end()) return known->second;
  CallTarget target;
  auto opened = OpenElfFile(path_);
  GElf_Ehdr header;
  Elf* elf = opened.ok() ? opened.value()->get() : nullptr;
  // The call ends at the return address: "call rel32" (e8, 5 bytes) or "call *disp32(%rip)"
  // (ff 15, 6 bytes), both PC-relative, so the file's own layout gives the target.
  std::string_view code;
  if (elf != nullptr && gelf_getehdr(elf, &header) != nullptr && header.e_machine == EM_X86_64 &&
      return_address >= 7)
    code = BytesAt(elf, segments_, return_address - 7, 7);
  if (code.size() == 7 && code[2] == '\xe8') {
    uint64_t callee = return_address + Little32(code, 3);
    if (uint64_t slot = PltStubSlot(elf, segments_, callee); slot != 0) {
      target.import = GotSlotTarget(elf, slot).import;
    } else if (const ElfSymbol* function = FunctionAt(callee);
               function != nullptr && function->address == callee) {
      target.address = callee;  // a function's first byte, not a coincidental e8
    }
  } else if (code.size() == 7 && code[1] == '\xff' && code[2] == '\x15') {
    target = GotSlotTarget(elf, return_address + Little32(code, 3));
    const ElfSymbol* function = target.address != 0 ? FunctionAt(target.address) : nullptr;
    if (function == nullptr || function->address != target.address) target.address = 0;
  }
  calls_.emplace(return_address, target);
  return target;
}

bool ElfSymbolFile::KeepsFramePointers() const {
  if (keeps_frame_pointers_ >= 0) return keeps_frame_pointers_ != 0;
  constexpr size_t kLooked = 256;     // functions sampled across the file
  constexpr uint64_t kSmallest = 32;  // tiny leaf functions keep none even when built to
  keeps_frame_pointers_ = 1;
  auto opened = OpenElfFile(path_);
  GElf_Ehdr header;
  if (!opened.ok() || gelf_getehdr(opened.value()->get(), &header) == nullptr ||
      header.e_machine != EM_X86_64)
    return true;
  std::vector<const ElfSymbol*> sized;
  for (const ElfSymbol& function : functions_) {
    if (function.size >= kSmallest) sized.push_back(&function);
  }
  if (sized.size() < 8) return true;
  size_t looked = 0, keeping = 0;
  for (size_t i = 0; i < sized.size() && looked < kLooked;
       i += std::max<size_t>(1, sized.size() / kLooked)) {
    std::string_view code = BytesAt(opened.value()->get(), segments_, sized[i]->address, 8);
    if (code.empty()) continue;
    ++looked;
    if (code.starts_with(std::string_view("\xf3\x0f\x1e\xfa", 4))) code.remove_prefix(4);
    keeping += code.starts_with("\x55\x48\x89\xe5");  // push %rbp; mov %rsp,%rbp
  }
  keeps_frame_pointers_ = looked == 0 || keeping * 2 >= looked;
  return keeps_frame_pointers_ != 0;
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
    auto read = ElfSymbolFile::Read(path, debug_root_);
    if (read.ok()) file = std::make_shared<const ElfSymbolFile>(std::move(read.value()));
  }
  files_.emplace(std::move(key), file);
  return file.get();
}

}  // namespace gprof::collector
