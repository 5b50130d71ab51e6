#include "cli/inject_library.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gprof::cli {
namespace {

constexpr char kEntryPoint[] = "InitializeInjection";

// An ELF file opened for reading; null `elf()` when it is none.
class ElfFile {
 public:
  // O_NONBLOCK: opening a FIFO would wait for a writer; it is refused below as not a file.
  explicit ElfFile(const char* path) : fd_(open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    struct stat info {};
    if (fd_ < 0) {
      error_ = errno;
      return;
    }
    if (fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      error_ = EINVAL;
      return;
    }
    if (elf_version(EV_CURRENT) == EV_NONE) return;
    elf_ = elf_begin(fd_, ELF_C_READ, nullptr);
    if (elf_ != nullptr &&
        (elf_kind(elf_) != ELF_K_ELF || gelf_getehdr(elf_, &header_) == nullptr)) {
      elf_end(elf_);
      elf_ = nullptr;
    }
  }
  ~ElfFile() {
    if (elf_ != nullptr) elf_end(elf_);
    if (fd_ >= 0) close(fd_);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  Elf* elf() const { return elf_; }
  const GElf_Ehdr& header() const { return header_; }
  int error() const { return error_; }  // errno of open; EINVAL: not a regular file

  // Whether the dynamic symbol table defines the function `name` for others to call.
  bool Exports(const char* name) const {
    for (Elf_Scn* section = elf_nextscn(elf_, nullptr); section != nullptr;
         section = elf_nextscn(elf_, section)) {
      GElf_Shdr section_header;
      if (gelf_getshdr(section, &section_header) == nullptr ||
          section_header.sh_type != SHT_DYNSYM || section_header.sh_entsize == 0) {
        continue;
      }
      Elf_Data* data = elf_getdata(section, nullptr);
      if (data == nullptr) continue;
      size_t count = section_header.sh_size / section_header.sh_entsize;
      for (size_t i = 0; i < count; ++i) {
        GElf_Sym symbol;
        if (gelf_getsym(data, static_cast<int>(i), &symbol) == nullptr) break;
        int binding = GELF_ST_BIND(symbol.st_info);
        if (symbol.st_shndx == SHN_UNDEF || GELF_ST_TYPE(symbol.st_info) != STT_FUNC ||
            (binding != STB_GLOBAL && binding != STB_WEAK)) {
          continue;
        }
        const char* symbol_name = elf_strptr(elf_, section_header.sh_link, symbol.st_name);
        if (symbol_name != nullptr && strcmp(symbol_name, name) == 0) return true;
      }
    }
    return false;
  }

 private:
  int fd_;
  int error_ = 0;
  Elf* elf_ = nullptr;
  GElf_Ehdr header_{};
};

// OK when `path` is an ELF shared object of this machine's class that exports `entry_point`;
// read, never loaded (gprof-run may be root). `what` names it in the errors.
Status CheckSharedLibrary(const std::string& path, const char* entry_point, const std::string& what) {
  ElfFile file(path.c_str());
  if (file.error() == EINVAL) return Status::Error(StatusCode::kInvalid, "is not a file");
  if (file.error() != 0) {
    return Status::FromErrno(file.error(),
                             std::string("cannot be read: ") + strerror(file.error()));
  }
  if (file.elf() == nullptr || file.header().e_type != ET_DYN) {
    return Status::Error(StatusCode::kInvalid, "is not an ELF shared object (not " + what + ")");
  }
  // The loader would refuse one of another class or machine with a warning in the command's
  // stderr; gprof-run's own executable says which this machine runs.
  ElfFile self("/proc/self/exe");
  if (self.elf() != nullptr &&
      (file.header().e_machine != self.header().e_machine ||
       file.header().e_ident[EI_CLASS] != self.header().e_ident[EI_CLASS])) {
    return Status::Error(StatusCode::kUnsupported, "is a shared object for another machine");
  }
  if (!file.Exports(entry_point)) {
    return Status::Error(StatusCode::kInvalid, "is a shared object but not " + what +
                                                   " (it has no " + entry_point + ")");
  }
  return {};
}

}  // namespace

Status CheckInjectLibrary(const std::string& path) {
  return CheckSharedLibrary(path, kEntryPoint, "gprof-run's injected library");
}

Status CheckCuptiLibrary(const std::string& path) {
  Status checked = CheckSharedLibrary(path, "cuptiSubscribe", "a CUPTI library");
  // The injected library exports cuptiSubscribe too (it interposes it).
  if (checked.ok() && CheckInjectLibrary(path).ok()) {
    return Status::Error(StatusCode::kInvalid,
                         "is gprof-run's injected library, not a CUPTI library");
  }
  return checked;
}

std::string PreloadPath(const std::string& library) {
  const char* platform = reinterpret_cast<const char*>(getauxval(AT_PLATFORM));
  size_t slash = library.rfind('/');
  if (platform == nullptr || slash == std::string::npos) return library;
  std::string directory = library.substr(0, slash) + "/platform/";
  std::string name = library.substr(slash);
  // Ours (the same file, through the link the build makes), and the 32-bit stub beside it.
  struct stat real {}, ours{}, stub{};
  if (stat(library.c_str(), &real) != 0 || stat((directory + platform + name).c_str(), &ours) != 0 ||
      ours.st_dev != real.st_dev || ours.st_ino != real.st_ino ||
      stat((directory + "i686" + name).c_str(), &stub) != 0 || !S_ISREG(stub.st_mode) ||
      strcmp(platform, "i686") == 0) {
    return library;
  }
  return directory + "$PLATFORM" + name;
}

}  // namespace gprof::cli
