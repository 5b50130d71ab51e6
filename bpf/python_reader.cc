#include "bpf/python_reader.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace gprof::bpf {
namespace {

constexpr uint64_t kTpflagsManagedDict = 1u << 4;   // Py_TPFLAGS_MANAGED_DICT (3.11 on)
constexpr uint64_t kTpflagsInlineValues = 1u << 2;  // Py_TPFLAGS_INLINE_VALUES (3.13)
constexpr size_t kMaxDictEntries = 1u << 16;     // more than sys.modules or threading._active hold
constexpr size_t kMaxLineTableBytes = 1u << 20;  // a line table that large is not one
constexpr size_t kMaxNameChars = 4096;

uint32_t Minor(uint32_t version_hex) { return version_hex >> 16; }

struct MapLine {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  uint64_t inode = 0;
  std::string perms;
  std::string path;
};

std::vector<MapLine> ParseMaps(const std::string& text) {
  std::vector<MapLine> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    MapLine map;
    char perms[8] = {};
    char dev[16] = {};
    unsigned long long start, end, offset, inode;
    int path_at = 0;
    if (sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu %n", &start, &end, perms, &offset, dev,
               &inode, &path_at) < 6) {
      continue;
    }
    map.start = start;
    map.end = end;
    map.offset = offset;
    map.inode = inode;
    map.perms = perms;
    if (path_at > 0 && static_cast<size_t>(path_at) < line.size()) map.path = line.substr(path_at);
    lines.push_back(std::move(map));
  }
  return lines;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "python3.11", "libpython3.10.so.1.0": PY_VERSION_HEX of major.minor, or 0.
uint32_t VersionFromName(const std::string& path) {
  std::string name = Basename(path);
  size_t at = name.find("python");
  if (at == std::string::npos) return 0;
  const char* cursor = name.c_str() + at + 6;
  char* end = nullptr;
  unsigned long major = strtoul(cursor, &end, 10);
  if (end == cursor || *end != '.') return 0;
  cursor = end + 1;
  unsigned long minor = strtoul(cursor, &end, 10);
  if (end == cursor || major == 0 || major > 9 || minor > 99) return 0;
  return static_cast<uint32_t>((major << 24) | (minor << 16));
}

// What an ELF file says about CPython: the addresses (unrelocated) of its dynamic symbols of
// interest and Py_Version's value.
struct ElfPython {
  bool readable = false;
  bool position_independent = false;
  std::map<std::string, uint64_t> symbols;
  uint32_t py_version = 0;
  uint64_t first_load_vaddr = 0;  // the PT_LOAD with the lowest file offset
  uint64_t first_load_offset = 0;
};

const char* const kWantedSymbols[] = {"_PyRuntime",    "PyCode_Type", "PyUnicode_Type",
                                      "PyBytes_Type",  "PyDict_Type", "PyLong_Type",
                                      "PyModule_Type", "Py_Version"};

ElfPython ReadElf(const std::string& path) {
  ElfPython result;
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return result;
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  GElf_Ehdr ehdr;
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF || gelf_getehdr(elf, &ehdr) == nullptr) {
    if (elf != nullptr) elf_end(elf);
    close(fd);
    return result;
  }
  result.readable = true;
  result.position_independent = ehdr.e_type == ET_DYN;
  size_t phnum = 0;
  bool have_load = false;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD)
        continue;
      if (!have_load || phdr.p_offset < result.first_load_offset) {
        result.first_load_offset = phdr.p_offset;
        result.first_load_vaddr = phdr.p_vaddr;
        have_load = true;
      }
    }
  }
  Elf_Scn* section = nullptr;
  uint64_t version_address = 0;
  bool has_version = false;
  while ((section = elf_nextscn(elf, section)) != nullptr) {
    GElf_Shdr shdr;
    if (gelf_getshdr(section, &shdr) == nullptr || shdr.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(section, nullptr);
    if (data == nullptr || shdr.sh_entsize == 0) continue;
    size_t count = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr || sym.st_shndx == SHN_UNDEF)
        continue;
      const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name == nullptr) continue;
      for (const char* wanted : kWantedSymbols) {
        if (strcmp(name, wanted) != 0) continue;
        result.symbols[wanted] = sym.st_value;
        if (strcmp(wanted, "Py_Version") == 0) {
          version_address = sym.st_value;
          has_version = true;
        }
      }
    }
  }
  // Py_Version is a constant: its value is in the file, in the section that holds it.
  if (has_version) {
    section = nullptr;
    while ((section = elf_nextscn(elf, section)) != nullptr) {
      GElf_Shdr shdr;
      if (gelf_getshdr(section, &shdr) == nullptr || shdr.sh_type != SHT_PROGBITS) continue;
      if (version_address < shdr.sh_addr || version_address + 4 > shdr.sh_addr + shdr.sh_size)
        continue;
      uint32_t value = 0;
      if (pread(fd, &value, sizeof(value),
                static_cast<off_t>(shdr.sh_offset + (version_address - shdr.sh_addr))) ==
          sizeof(value)) {
        result.py_version = value;
      }
      break;
    }
  }
  elf_end(elf);
  close(fd);
  return result;
}

// The file behind mapping `map` of `pid`, as a path this process can open: the mapping itself
// (the same file even if the path now names another), else through the process's root.
std::vector<std::string> FileCandidates(uint32_t pid, const MapLine& map) {
  char range[64];
  snprintf(range, sizeof(range), "%llx-%llx", static_cast<unsigned long long>(map.start),
           static_cast<unsigned long long>(map.end));
  return {"/proc/" + std::to_string(pid) + "/map_files/" + range,
          "/proc/" + std::to_string(pid) + "/root" + map.path, map.path};
}

// Per file (path and inode): the ELF facts, read once per run.
std::mutex g_elf_cache_mutex;
std::map<std::pair<std::string, uint64_t>, ElfPython> g_elf_cache;

ElfPython ElfOf(uint32_t pid, const MapLine& map) {
  std::pair<std::string, uint64_t> key{map.path, map.inode};
  {
    std::lock_guard<std::mutex> lock(g_elf_cache_mutex);
    auto found = g_elf_cache.find(key);
    if (found != g_elf_cache.end()) return found->second;
  }
  ElfPython elf;
  for (const std::string& path : FileCandidates(pid, map)) {
    elf = ReadElf(path);
    if (elf.readable) break;
  }
  // Files that could not be read are not cached: the process may be gone, not the file.
  if (elf.readable) {
    std::lock_guard<std::mutex> lock(g_elf_cache_mutex);
    g_elf_cache.emplace(key, elf);
  }
  return elf;
}

}  // namespace

int ProcessMemory::Read(uint64_t address, void* out, size_t size) const {
  if (size == 0) return 0;
  if (address == 0) return EFAULT;
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  ssize_t got = process_vm_readv(static_cast<pid_t>(pid_), &local, 1, &remote, 1, 0);
  if (got < 0) return errno;
  return static_cast<size_t>(got) == size ? 0 : EFAULT;
}

PythonInterpreter FindPythonInterpreter(uint32_t pid, const std::string& maps_text) {
  PythonInterpreter found;
  std::vector<MapLine> maps = ParseMaps(maps_text);
  std::string exe;
  {
    char buffer[4096];
    ssize_t length =
        readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buffer, sizeof(buffer) - 1);
    if (length > 0) exe.assign(buffer, static_cast<size_t>(length));
  }
  std::vector<std::string> seen;
  std::string named_python;  // a file named like a Python that defines no _PyRuntime
  const long page = sysconf(_SC_PAGESIZE);
  for (const MapLine& map : maps) {
    if (map.path.empty() || map.path[0] != '/' || map.perms.find('x') == std::string::npos)
      continue;
    bool candidate = Basename(map.path).find("python") != std::string::npos || map.path == exe;
    if (!candidate || std::find(seen.begin(), seen.end(), map.path) != seen.end()) continue;
    seen.push_back(map.path);
    ElfPython elf = ElfOf(pid, map);
    auto runtime = elf.symbols.find("_PyRuntime");
    if (runtime == elf.symbols.end()) {
      if (VersionFromName(map.path) != 0 && named_python.empty()) named_python = map.path;
      continue;
    }
    // Where the file is loaded: the mapping of its first loadable segment's page.
    uint64_t bias = 0;
    if (elf.position_independent) {
      uint64_t mask = ~static_cast<uint64_t>(page - 1);
      bool placed = false;
      for (const MapLine& other : maps) {
        if (other.path == map.path && other.inode == map.inode &&
            other.offset == (elf.first_load_offset & mask)) {
          bias = other.start - (elf.first_load_vaddr & mask);
          placed = true;
          break;
        }
      }
      if (!placed) continue;
    }
    auto address = [&](const char* name) -> uint64_t {
      auto symbol = elf.symbols.find(name);
      return symbol == elf.symbols.end() ? 0 : symbol->second + bias;
    };
    found.path = map.path;
    found.runtime = runtime->second + bias;
    found.code_type = address("PyCode_Type");
    found.unicode_type = address("PyUnicode_Type");
    found.bytes_type = address("PyBytes_Type");
    found.dict_type = address("PyDict_Type");
    found.long_type = address("PyLong_Type");
    found.module_type = address("PyModule_Type");
    found.version_hex = elf.py_version != 0 ? elf.py_version : VersionFromName(map.path);
    break;
  }
  if (found.runtime == 0) {
    if (named_python.empty()) return found;
    found.path = named_python;
    found.version_hex = VersionFromName(named_python);
    found.status = GPROF_PY_UNSUPPORTED;
    found.why = "gprof-run reads CPython 3.9 to 3.13";
    return found;
  }
  const uint32_t minor = Minor(found.version_hex);
  if (found.version_hex == 0) {
    found.status = GPROF_PY_UNSUPPORTED;
    found.why = "its version is not known (no Py_Version, and a file name without one)";
    return found;
  }
  if (minor < 0x0309 || minor > 0x030d || found.code_type == 0) {
    found.status = GPROF_PY_UNSUPPORTED;
    found.why = "gprof-run reads CPython 3.9 to 3.13";
    return found;
  }
  if (minor == 0x030d) {
    std::vector<uint8_t> bytes(DebugOffsetsBytes());
    ProcessMemory memory(pid);
    if (int error = memory.Read(found.runtime, bytes.data(), bytes.size()); error != 0) {
      found.status = GPROF_PY_NO_LAYOUT;
      found.why = std::string("its _Py_DebugOffsets could not be read: ") + strerror(error);
      return found;
    }
    Expected<DebugLayout> layout = ReadDebugOffsets(bytes, found.version_hex);
    if (!layout.ok()) {
      found.status = layout.status().code() == StatusCode::kUnsupported ? GPROF_PY_UNSUPPORTED
                                                                        : GPROF_PY_NO_LAYOUT;
      found.why = layout.status().message();
      return found;
    }
    found.offsets = layout->offsets;
    found.objects = layout->objects;
    found.offsets.version_hex = found.version_hex;
    found.objects.version_hex = found.version_hex;
  } else {
    found.offsets = *TableOffsets(found.version_hex);
    found.objects = *TableObjectLayout(found.version_hex);
  }
  found.status = GPROF_PY_READABLE;
  return found;
}

namespace {

template <typename T>
T At(const uint8_t* block, size_t offset) {
  T value;
  memcpy(&value, block + offset, sizeof(value));
  return value;
}

// An object's header (ob_type) and first `bytes` bytes, checked to be of `type` (0: any).
bool ReadObject(const ProcessMemory& memory, uint64_t address, uint64_t type, size_t bytes,
                uint8_t* out) {
  if (address == 0 || bytes < 16 || memory.Read(address, out, bytes) != 0) return false;
  return type == 0 || At<uint64_t>(out, 8) == type;
}

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x110000) {
    out->push_back(static_cast<char>(0xf0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    out->append("\xef\xbf\xbd");  // not a code point: U+FFFD
  }
}

bool ReadBytesObject(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t address,
                     size_t max_bytes, std::vector<uint8_t>* out) {
  const PythonObjectLayout& l = python.objects;
  uint8_t header[64];
  if (!ReadObject(memory, address, python.bytes_type, l.bytes_sval, header)) return false;
  int64_t size = At<int64_t>(header, l.var_size);
  if (size < 0 || static_cast<uint64_t>(size) > max_bytes) return false;
  out->resize(static_cast<size_t>(size));
  return memory.Read(address + l.bytes_sval, out->data(), out->size()) == 0;
}

// A small non-negative int object's value.
bool ReadLong(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t address,
              uint64_t* value) {
  const PythonObjectLayout& l = python.objects;
  uint8_t block[64];
  if (!ReadObject(memory, address, python.long_type, l.long_digit + 12, block)) return false;
  uint64_t digits;
  if (l.long_tagged) {
    uint64_t tag = At<uint64_t>(block, 16);
    if ((tag & 3) == 2) return false;  // negative
    digits = tag >> 3;
  } else {
    int64_t size = At<int64_t>(block, l.var_size);
    if (size < 0) return false;
    digits = static_cast<uint64_t>(size);
  }
  if (digits > 3) return false;  // larger than a thread id
  *value = 0;
  for (uint64_t i = 0; i < digits; ++i)
    *value |= static_cast<uint64_t>(At<uint32_t>(block, l.long_digit + 4 * i)) << (30 * i);
  return true;
}

struct DictItem {
  uint64_t key = 0;
  uint64_t value = 0;
};

// The keys of a dict keys object, with each entry's value (0 for split keys, whose values are
// elsewhere) in entry order.
bool ReadKeys(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t keys,
              std::vector<DictItem>* items) {
  const PythonObjectLayout& l = python.objects;
  uint8_t header[64];
  if (keys == 0 || memory.Read(keys, header, l.keys_indices) != 0) return false;
  int64_t nentries = At<int64_t>(header, l.keys_nentries);
  if (nentries < 0 || static_cast<uint64_t>(nentries) > kMaxDictEntries) return false;
  uint64_t index_bytes;
  size_t entry_size, key_at, value_at;
  if (l.keys_size != kPyNone) {  // 3.9, 3.10
    int64_t size = At<int64_t>(header, l.keys_size);
    if (size <= 0 || size > (1 << 24)) return false;
    uint64_t width = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffLL ? 4 : 8;
    index_bytes = static_cast<uint64_t>(size) * width;
    entry_size = 24;  // hash, key, value
    key_at = 8;
    value_at = 16;
  } else {
    uint8_t log2_index_bytes = At<uint8_t>(header, l.keys_log2_index_bytes);
    uint8_t kind = At<uint8_t>(header, l.keys_kind);
    if (log2_index_bytes > 30) return false;
    index_bytes = uint64_t{1} << log2_index_bytes;
    bool general = kind == 0;  // DICT_KEYS_GENERAL: hash, key, value; else key, value
    entry_size = general ? 24 : 16;
    key_at = general ? 8 : 0;
    value_at = general ? 16 : 8;
  }
  std::vector<uint8_t> entries(static_cast<size_t>(nentries) * entry_size);
  if (memory.Read(keys + l.keys_indices + index_bytes, entries.data(), entries.size()) != 0)
    return false;
  items->clear();
  for (int64_t i = 0; i < nentries; ++i) {
    const uint8_t* entry = entries.data() + static_cast<size_t>(i) * entry_size;
    items->push_back({At<uint64_t>(entry, key_at), At<uint64_t>(entry, value_at)});
  }
  return true;
}

// A dict's items, deleted entries left out.
bool ReadDict(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t dict,
              std::vector<DictItem>* items) {
  const PythonObjectLayout& l = python.objects;
  uint8_t header[64];
  if (!ReadObject(memory, dict, python.dict_type, l.dict_values + 8, header)) return false;
  if (!ReadKeys(memory, python, At<uint64_t>(header, l.dict_keys), items)) return false;
  uint64_t values = At<uint64_t>(header, l.dict_values);
  if (values != 0) {  // a split table: the values in their own array, by entry
    std::vector<uint64_t> array(items->size());
    if (memory.Read(values + l.values_values, array.data(), array.size() * 8) != 0) return false;
    for (size_t i = 0; i < items->size(); ++i) (*items)[i].value = array[i];
  }
  std::erase_if(*items, [](const DictItem& item) { return item.key == 0 || item.value == 0; });
  return true;
}

bool KeyIs(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t key,
           const std::string& name) {
  std::string text;
  return ReadPythonString(memory, python, key, name.size() + 1, &text) && text == name;
}

uint64_t DictGet(const ProcessMemory& memory, const PythonInterpreter& python, uint64_t dict,
                 const std::string& name) {
  std::vector<DictItem> items;
  if (!ReadDict(memory, python, dict, &items)) return 0;
  for (const DictItem& item : items) {
    if (KeyIs(memory, python, item.key, name)) return item.value;
  }
  return 0;
}

// The objects the weak references in a set refer to (a WeakSet's `data`), appended to `objects`;
// dead references (to None) and the set's dummy entries are read as objects that have no
// attributes. PySetObject is the same from 3.9 to 3.13: fill, used, mask, table after the header,
// each entry a key and its hash; a weakref's object is the word after its header.
void ReadWeakSetTargets(const ProcessMemory& memory, uint64_t set, std::vector<uint64_t>* objects) {
  uint64_t header[6];  // refcnt, type, fill, used, mask, table
  if (set == 0 || memory.Read(set, header, sizeof(header)) != 0) return;
  const uint64_t mask = header[4], table = header[5];
  if (mask + 1 > kMaxDictEntries || ((mask + 1) & mask) != 0 || table == 0) return;
  std::vector<uint64_t> entries(2 * (mask + 1));
  if (memory.Read(table, entries.data(), entries.size() * 8) != 0) return;
  for (size_t i = 0; i < entries.size(); i += 2) {
    uint64_t reference[3];  // refcnt, type, wr_object
    if (entries[i] == 0 || memory.Read(entries[i], reference, sizeof(reference)) != 0) continue;
    if (reference[2] != 0) objects->push_back(reference[2]);
  }
}

// An attribute in the instance dict of an object of a Python class (threading.Thread): a real
// dict, or (3.11 on) values kept with the object, keyed by its type's shared keys.
uint64_t InstanceAttribute(const ProcessMemory& memory, const PythonInterpreter& python,
                           uint64_t object, const std::string& name) {
  const PythonObjectLayout& l = python.objects;
  uint8_t head[16];
  if (memory.Read(object, head, sizeof(head)) != 0) return 0;
  uint64_t type = At<uint64_t>(head, 8);
  uint8_t type_block[1024];
  size_t type_bytes = std::max<size_t>(l.heaptype_cached_keys, l.type_dictoffset) + 8;
  if (type == 0 || type_bytes > sizeof(type_block) ||
      memory.Read(type, type_block, type_bytes) != 0) {
    return 0;
  }
  uint64_t flags = At<uint64_t>(type_block, l.type_flags);
  const uint32_t minor = Minor(l.version_hex);
  auto from_values = [&](uint64_t values) -> uint64_t {
    std::vector<DictItem> keys;
    if (!ReadKeys(memory, python, At<uint64_t>(type_block, l.heaptype_cached_keys), &keys))
      return 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].key == 0 || !KeyIs(memory, python, keys[i].key, name)) continue;
      uint64_t value = 0;
      memory.Read(values + l.values_values + 8 * i, &value, sizeof(value));
      return value;
    }
    return 0;
  };
  if (minor <= 0x030a || !(flags & kTpflagsManagedDict)) {
    int64_t offset = At<int64_t>(type_block, l.type_dictoffset);
    uint64_t dict = 0;
    if (offset <= 0 || memory.Read(object + static_cast<uint64_t>(offset), &dict, 8) != 0) return 0;
    return DictGet(memory, python, dict, name);
  }
  uint64_t slots[2] = {};  // object - 32, object - 24
  if (memory.Read(object - 32, slots, sizeof(slots)) != 0) return 0;
  if (minor == 0x030b) {  // values pointer at -32, dict at -24
    if (slots[1] != 0) return DictGet(memory, python, slots[1], name);
    return slots[0] != 0 ? from_values(slots[0]) : 0;
  }
  if (minor == 0x030c) {  // one word at -24: the values' address - 1 (odd), or the dict
    if (slots[1] & 1) return from_values(slots[1] + 1);
    return slots[1] != 0 ? DictGet(memory, python, slots[1], name) : 0;
  }
  // 3.13: the dict at -24 once made, else values inline after the object
  if (slots[1] != 0) return DictGet(memory, python, slots[1], name);
  if (!(flags & kTpflagsInlineValues)) return 0;
  uint64_t values = object + static_cast<uint64_t>(At<int64_t>(type_block, l.type_basicsize));
  uint8_t sizes[4];
  if (memory.Read(values, sizes, sizeof(sizes)) != 0 || sizes[3] == 0) return 0;  // not valid
  return from_values(values);
}

}  // namespace

bool ReadPythonString(const ProcessMemory& memory, const PythonInterpreter& python,
                      uint64_t address, size_t max_chars, std::string* out) {
  const PythonObjectLayout& l = python.objects;
  uint8_t header[128];
  if (l.unicode_compact_size > sizeof(header) ||
      !ReadObject(memory, address, python.unicode_type, l.unicode_compact_size, header)) {
    return false;
  }
  uint32_t state = At<uint32_t>(header, l.unicode_state);
  uint32_t kind = (state >> 2) & 7;
  bool compact = (state >> 5) & 1;
  bool ascii = (state >> 6) & 1;
  int64_t length = At<int64_t>(header, l.unicode_length);
  if (!compact || (kind != 1 && kind != 2 && kind != 4) || length < 0 ||
      static_cast<uint64_t>(length) > max_chars) {
    return false;
  }
  std::vector<uint8_t> data(static_cast<size_t>(length) * kind);
  uint64_t at = address + (ascii ? l.unicode_ascii_size : l.unicode_compact_size);
  if (memory.Read(at, data.data(), data.size()) != 0) return false;
  out->clear();
  for (size_t i = 0; i < static_cast<size_t>(length); ++i) {
    uint32_t code_point = kind == 1   ? data[i]
                          : kind == 2 ? At<uint16_t>(data.data(), 2 * i)
                                      : At<uint32_t>(data.data(), 4 * i);
    AppendUtf8(code_point, out);
  }
  return true;
}

PythonCode ReadPythonCode(const ProcessMemory& memory, const PythonInterpreter& python,
                          const PythonCodeKey& key) {
  PythonCode code;
  const PythonObjectLayout& l = python.objects;
  uint8_t header[512];
  if (l.code_header_bytes > sizeof(header)) {
    code.error = EINVAL;
    return code;
  }
  if (int error = memory.Read(key.code, header, l.code_header_bytes); error != 0) {
    code.error = error;
    return code;
  }
  uint64_t filename = At<uint64_t>(header, l.code_filename);
  uint64_t name = At<uint64_t>(header, l.code_name);
  if (At<uint64_t>(header, 8) != python.code_type ||
      At<int32_t>(header, l.code_firstlineno) != key.firstlineno ||
      static_cast<uint32_t>(filename ^ name) != key.tag) {
    code.error = EINVAL;  // freed, and something else (or another code object) lives there now
    return code;
  }
  if (!ReadPythonString(memory, python, filename, kMaxNameChars, &code.filename) ||
      !ReadPythonString(memory, python, name, kMaxNameChars, &code.name) ||
      !ReadBytesObject(memory, python, At<uint64_t>(header, l.code_linetable), kMaxLineTableBytes,
                       &code.linetable)) {
    code.error = EFAULT;
    return code;
  }
  if (l.code_size != kPyNone) {
    int64_t units = At<int64_t>(header, l.code_size);
    if (units < 0 || units > (1 << 28)) {
      code.error = EINVAL;
      return code;
    }
    code.code_bytes = static_cast<uint32_t>(units * 2);
  } else {
    uint8_t bytes[32];
    if (!ReadObject(memory, At<uint64_t>(header, l.code_code), python.bytes_type, 24, bytes)) {
      code.error = EFAULT;
      return code;
    }
    int64_t size = At<int64_t>(bytes, l.var_size);
    if (size < 0 || size > (1 << 28)) {
      code.error = EINVAL;
      return code;
    }
    code.code_bytes = static_cast<uint32_t>(size);
  }
  return code;
}

std::vector<std::pair<uint32_t, std::string>> ReadPythonThreadNames(
    const ProcessMemory& memory, const PythonInterpreter& python) {
  std::vector<std::pair<uint32_t, std::string>> names;
  if (python.status != GPROF_PY_READABLE) return names;
  const PythonObjectLayout& l = python.objects;
  uint64_t interp = 0;
  if (memory.Read(python.runtime + python.offsets.runtime_interpreters_head, &interp, 8) != 0)
    return names;
  uint64_t modules = 0;
  if (interp == 0 || memory.Read(interp + l.interp_modules, &modules, 8) != 0) return names;
  uint64_t threading = DictGet(memory, python, modules, "threading");
  uint8_t module[32];
  if (!ReadObject(memory, threading, python.module_type, l.module_dict + 8, module)) return names;
  const uint64_t module_dict = At<uint64_t>(module, l.module_dict);
  // The threads running now (_active), and every Thread object still alive (_dangling, a WeakSet
  // the module adds each Thread to): a thread that already ended keeps its name and native id
  // there while the program holds its Thread object, as one it joined does.
  std::vector<uint64_t> objects;
  std::vector<DictItem> active;
  if (ReadDict(memory, python, DictGet(memory, python, module_dict, "_active"), &active)) {
    for (const DictItem& thread : active) objects.push_back(thread.value);
  }
  uint64_t dangling = DictGet(memory, python, module_dict, "_dangling");
  if (dangling != 0) ReadWeakSetTargets(memory, InstanceAttribute(memory, python, dangling, "data"),
                                        &objects);
  std::set<uint32_t> named;
  for (uint64_t thread : objects) {
    std::string name;
    uint64_t tid = 0;
    if (!ReadPythonString(memory, python, InstanceAttribute(memory, python, thread, "_name"), 256,
                          &name) ||
        !ReadLong(memory, python, InstanceAttribute(memory, python, thread, "_native_id"), &tid) ||
        tid == 0 || tid > UINT32_MAX || !named.insert(static_cast<uint32_t>(tid)).second) {
      continue;
    }
    names.emplace_back(static_cast<uint32_t>(tid), std::move(name));
  }
  return names;
}

}  // namespace gprof::bpf
