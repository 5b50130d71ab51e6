// The loader's side of Python stacks, out of process (gprof-run reads; the target is never
// stopped, changed or signalled): which CPython a process runs and where its runtime is (from
// /proc/PID/maps and the ELF file that defines _PyRuntime, a dynamic symbol, so no debug symbols
// are needed), the names and line tables of the code objects its frames name, and the names its
// threads have in Python's threading module.
//
// Every read of the process goes through process_vm_readv and is bounded; a read that fails, or an
// object whose type is not the one expected, ends that answer with an error, never with a guess.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bpf/python_layouts.h"
#include "bpf/kernel_maps.h"

namespace gprof::bpf {

// Reads another process's memory. Errors are errnos: ESRCH (it is gone), EFAULT (not mapped),
// EPERM (not allowed).
class ProcessMemory {
 public:
  explicit ProcessMemory(uint32_t pid) : pid_(pid) {}
  // 0, or the errno of a read that did not return all `size` bytes.
  int Read(uint64_t address, void* out, size_t size) const;
  uint32_t pid() const { return pid_; }

 private:
  uint32_t pid_;
};

struct PythonInterpreter {
  uint32_t status = 0;  // enum gprof_python_status; 0: the process runs no CPython gprof-run saw
  uint32_t version_hex = 0;
  std::string path;  // the file that defines _PyRuntime (or names a Python it cannot read)
  std::string why;   // GPROF_PY_UNSUPPORTED, GPROF_PY_NO_LAYOUT: in words
  uint64_t runtime = 0;
  // Types whose objects the loader reads, to check each object it reads is of that type.
  uint64_t code_type = 0;
  uint64_t unicode_type = 0;
  uint64_t bytes_type = 0;
  uint64_t dict_type = 0;
  uint64_t long_type = 0;
  uint64_t module_type = 0;
  gprof_python_offsets offsets{};
  PythonObjectLayout objects;
};

// The CPython of process `pid` as its maps (`maps_text`, /proc/PID/maps) show it: the file whose
// dynamic symbols define _PyRuntime, its version (Py_Version from 3.11, else the file's name) and
// layout. status 0 when no mapped file defines _PyRuntime and none is named like a Python.
PythonInterpreter FindPythonInterpreter(uint32_t pid, const std::string& maps_text);

// What a frame names: a code object of the process, as the frames saw it (firstlineno, tag).
struct PythonCodeKey {
  uint64_t code = 0;
  int32_t firstlineno = 0;
  uint32_t tag = 0;
  bool operator==(const PythonCodeKey&) const = default;
};

struct PythonCode {
  int error = 0;  // non-zero: not read (ESRCH, EFAULT, EINVAL: not that code object any more)
  std::string filename;
  std::string name;  // co_qualname where the version has it, else co_name
  std::vector<uint8_t> linetable;
  uint32_t code_bytes = 0;
};

// Reads code object `key` of the process: checked to be a code object (its type) and to be the one
// the frames saw (its firstlineno and the tag of its name pointers).
PythonCode ReadPythonCode(const ProcessMemory& memory, const PythonInterpreter& interpreter,
                          const PythonCodeKey& key);

// The threads of the process that Python's threading module knows (threading._active, and the
// Thread objects still alive in threading._dangling: ended threads the program kept), as
// (native thread id, name); empty when there is no threading module or it cannot be read.
std::vector<std::pair<uint32_t, std::string>> ReadPythonThreadNames(
    const ProcessMemory& memory, const PythonInterpreter& interpreter);

// The string object at `address` in UTF-8 (compact strings: ASCII, latin-1, UCS-2, UCS-4), at most
// `max_chars` characters; false when it is not a string object or cannot be read.
bool ReadPythonString(const ProcessMemory& memory, const PythonInterpreter& interpreter,
                      uint64_t address, size_t max_chars, std::string* out);

}  // namespace gprof::bpf
