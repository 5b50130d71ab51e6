#include "bpf/cuda_probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "bpf/kernel_maps.h"

namespace gprof::bpf {
namespace {

// The driver calls that block, launch, copy, allocate or load, and their _v2/_ptsz/_ptds forms:
// not every cu* function. Removing a uprobe waits for RCU grace periods, one removal after
// another (about 100 ms each on these kernels, even from many threads): a real libcuda's some
// 700 cu* functions, two probes each, took minutes to detach.
constexpr const char* kProbedPrefixes[] = {
    "cuLaunch",          "cuGraphLaunch",        "cuGraphInstantiate", "cuMemcpy",
    "cuMemset",          "cuMemAlloc",           "cuMemFree",          "cuMemHost",
    "cuMemPrefetch",     "cuStreamSynchronize",  "cuStreamQuery",      "cuStreamWaitEvent",
    "cuStreamBeginCapture", "cuStreamEndCapture", "cuEventSynchronize", "cuEventQuery",
    "cuEventRecord",     "cuCtxSynchronize",     "cuModuleLoad",       "cuLibraryLoad",
    "cuInit",            "cuDevicePrimaryCtxRetain", "cuCtxCreate"};

bool IsDriverEntryPoint(const char* name) {
  if (strlen(name) >= GPROF_CUDA_PROBE_NAME_LEN) return false;
  for (const char* prefix : kProbedPrefixes) {
    if (strncmp(name, prefix, strlen(prefix)) == 0) return true;
  }
  return false;
}

bool IsLibcuda(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return name.starts_with("libcuda.so");
}

struct EntryPoint {
  std::string name;
  uint64_t file_offset;
};

// The defined cu* functions of an ELF shared object's dynamic symbol table, each with the file
// offset a uprobe takes (its address, less its section's address, plus the section's offset);
// aliases at one offset once. Every header and index read is checked by libelf.
std::vector<EntryPoint> DriverEntryPoints(int fd) {
  std::vector<EntryPoint> found;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) return found;
  std::set<uint64_t> offsets;
  Elf_Scn* section = nullptr;
  while ((section = elf_nextscn(elf, section)) != nullptr) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == nullptr || header.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(section, nullptr);
    if (data == nullptr || header.sh_entsize == 0) continue;
    size_t count = header.sh_size / header.sh_entsize;
    for (size_t i = 0; i < count && found.size() < GPROF_CUDA_PROBE_MAX_FUNCTIONS; ++i) {
      GElf_Sym symbol;
      if (gelf_getsym(data, static_cast<int>(i), &symbol) == nullptr) continue;
      if (GELF_ST_TYPE(symbol.st_info) != STT_FUNC || symbol.st_shndx == SHN_UNDEF ||
          symbol.st_shndx >= SHN_LORESERVE || symbol.st_value == 0)
        continue;
      const char* name = elf_strptr(elf, header.sh_link, symbol.st_name);
      if (name == nullptr || !IsDriverEntryPoint(name)) continue;
      GElf_Shdr code;
      Elf_Scn* code_section = elf_getscn(elf, symbol.st_shndx);
      if (code_section == nullptr || gelf_getshdr(code_section, &code) == nullptr ||
          symbol.st_value < code.sh_addr || symbol.st_value - code.sh_addr >= code.sh_size)
        continue;
      uint64_t offset = symbol.st_value - code.sh_addr + code.sh_offset;
      if (offsets.insert(offset).second) found.push_back({name, offset});
    }
  }
  elf_end(elf);
  return found;
}

}  // namespace

void CudaProbes::OnMaps(uint32_t pid, const std::string& maps_text) {
  std::istringstream lines(maps_text);
  for (std::string line; std::getline(lines, line);) {
    // start-end perms offset dev inode path
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    if (!(fields >> range >> perms >> offset >> device >> inode)) continue;
    std::getline(fields >> std::ws, path);
    if (perms.find('x') == std::string::npos || !IsLibcuda(path)) continue;
    Probe(pid, range, device, strtoull(inode.c_str(), nullptr, 10), path);
  }
}

void CudaProbes::Probe(uint32_t pid, const std::string& range, const std::string& device,
                       uint64_t inode, const std::string& path) {
  // The mapped file itself, through the process's map_files link: not its path, which may name
  // another file in this mount namespace, or one a user swapped since. That link needs
  // CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE); without it, the path as the process sees it
  // (through its root), taken only if it is the file mapped (the maps line's device and inode).
  const std::string proc = "/proc/" + std::to_string(pid);
  int fd = open((proc + "/map_files/" + range).c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (fd < 0) {
    fd = open((proc + "/root" + path).c_str(), O_RDONLY | O_CLOEXEC);
    unsigned major_number = 0, minor_number = 0;
    if (fd >= 0 && (fstat(fd, &info) != 0 || info.st_ino != inode ||
                    sscanf(device.c_str(), "%x:%x", &major_number, &minor_number) != 2 ||
                    major(info.st_dev) != major_number || minor(info.st_dev) != minor_number)) {
      close(fd);
      fd = -1;
      errno = ESTALE;
    }
  }
  if (fd < 0) {
    if (unreadable_.insert(pid).second) {
      note_("kernel recorder: CUDA driver calls of pid " + std::to_string(pid) +
            " not recorded (cannot open the libcuda it maps, " + path + ": " + strerror(errno) +
            ")");
    }
    return;
  }
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) ||
      !probed_.insert({pid, info.st_dev, info.st_ino}).second) {
    close(fd);
    return;
  }
  std::vector<EntryPoint> entry_points = DriverEntryPoints(fd);
  const std::string binary = "/proc/self/fd/" + std::to_string(fd);
  std::vector<uint64_t> offsets, cookies;
  for (const EntryPoint& entry : entry_points) {
    int64_t index = IndexOf(entry.name);
    if (index < 0) break;
    offsets.push_back(entry.file_offset);
    cookies.push_back(static_cast<uint64_t>(index));
  }
  int first_error = 0;
  size_t attached = 0;
  if (!offsets.empty()) {
    auto attach = multi_ ? &CudaProbes::AttachMulti : &CudaProbes::AttachEach;
    (this->*attach)(enter_, false, pid, binary, offsets, cookies, &first_error);
    attached = (this->*attach)(exit_, true, pid, binary, offsets, cookies, &first_error);
  }
  close(fd);  // the probes hold the inode
  std::string line = "kernel recorder: CUDA driver calls of pid " + std::to_string(pid) +
                     " recorded by uprobes on " + std::to_string(attached) + " of " +
                     std::to_string(entry_points.size()) + " cu* entry points of " + path;
  if (first_error != 0) line += std::string(" (") + strerror(first_error) + ")";
  note_(line);
}

size_t CudaProbes::AttachEach(bpf_program* program, bool retprobe, uint32_t pid,
                              const std::string& binary, const std::vector<uint64_t>& offsets,
                              const std::vector<uint64_t>& cookies, int* first_error) {
  size_t attached = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    LIBBPF_OPTS(bpf_uprobe_opts, options, .bpf_cookie = cookies[i], .retprobe = retprobe);
    links_->reserve(links_->size() + 1);  // a push_back that throws would leak the link
    bpf_link* link = bpf_program__attach_uprobe_opts(program, static_cast<pid_t>(pid),
                                                     binary.c_str(), offsets[i], &options);
    if (link == nullptr) {
      if (*first_error == 0) *first_error = errno;
      continue;
    }
    links_->push_back(link);
    ++attached;
  }
  return attached;
}

size_t CudaProbes::AttachMulti(bpf_program* program, bool retprobe, uint32_t pid,
                               const std::string& binary, const std::vector<uint64_t>& offsets,
                               const std::vector<uint64_t>& cookies, int* first_error) {
  // union bpf_attr's link_create for BPF_TRACE_UPROBE_MULTI (linux/bpf.h since 6.6), written out:
  // libbpf 1.1 has no call for it and the build's kernel headers may predate it.
  struct UprobeMultiLinkCreate {
    uint32_t prog_fd;
    uint32_t target_fd;
    uint32_t attach_type;
    uint32_t flags;
    uint64_t path;
    uint64_t offsets;
    uint64_t ref_ctr_offsets;
    uint64_t cookies;
    uint32_t count;
    uint32_t multi_flags;  // BPF_F_UPROBE_MULTI_RETURN: 1
    uint32_t pid;
    uint32_t padding;
  };
  static_assert(sizeof(UprobeMultiLinkCreate) == 64);
  static_assert(offsetof(UprobeMultiLinkCreate, path) == 16);
  static_assert(offsetof(UprobeMultiLinkCreate, pid) == 56);
  UprobeMultiLinkCreate attr{};
  attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(program));
  attr.attach_type = kAttachUprobeMulti;
  attr.path = reinterpret_cast<uintptr_t>(binary.c_str());
  attr.offsets = reinterpret_cast<uintptr_t>(offsets.data());
  attr.cookies = reinterpret_cast<uintptr_t>(cookies.data());
  attr.count = static_cast<uint32_t>(offsets.size());
  attr.multi_flags = retprobe ? 1 : 0;
  attr.pid = pid;
  link_fds_->reserve(link_fds_->size() + 1);  // a push_back that throws would leak the link
  long fd = syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
  if (fd < 0) {
    if (*first_error == 0) *first_error = errno;
    return 0;
  }
  link_fds_->push_back(static_cast<int>(fd));
  return offsets.size();
}

bool KernelHasUprobeMulti() {
  struct utsname name {};
  unsigned major_version = 0, minor_version = 0;
  if (uname(&name) != 0 || sscanf(name.release, "%u.%u", &major_version, &minor_version) != 2) {
    return false;
  }
  return major_version > 6 || (major_version == 6 && minor_version >= 6);
}

int64_t CudaProbes::IndexOf(const std::string& name) {
  auto found = function_index_.find(name);
  if (found != function_index_.end()) return found->second;
  if (function_index_.size() >= GPROF_CUDA_PROBE_MAX_FUNCTIONS) return -1;
  uint32_t index = static_cast<uint32_t>(function_index_.size());
  gprof_cuda_probe_name value{};
  memcpy(value.name, name.data(), std::min(name.size(), sizeof(value.name) - 1));
  if (bpf_map_update_elem(names_fd_, &index, &value, BPF_ANY) != 0) return -1;
  function_index_.emplace(name, index);
  return index;
}

}  // namespace gprof::bpf
