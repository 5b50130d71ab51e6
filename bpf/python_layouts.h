// Where CPython 3.9 to 3.13 keep what gprof-run reads: the thread states and frames the BPF walker
// follows (gprof_python_offsets, kernel_maps.h), and the objects the loader reads out of process
// to name code objects and threads (PythonObjectLayout).
//
// 3.9 to 3.12: tables written from each version's own headers (tests/python/offsets_probe.c prints
// the same offsets from an interpreter's headers, and the tests compare). 3.13: the interpreter's
// own _Py_DebugOffsets, published at the start of _PyRuntime for tools like this one, for
// everything it covers; the table only for what it does not (dict internals).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "bpf/kernel_maps.h"
#include "inject/shared/status.h"

namespace gprof::bpf {

inline constexpr uint16_t kPyNone = GPROF_PY_NONE;

// "3.11", "3.11.7" from PY_VERSION_HEX (micro only when it is known: non-zero release level).
std::string PythonVersionText(uint32_t version_hex);

// Offsets into the objects the loader reads (a process's code objects, strings, bytes, ints,
// dicts, instances of Python classes, modules).
struct PythonObjectLayout {
  uint32_t version_hex = 0;
  // PyCodeObject
  uint16_t code_firstlineno = 0;
  uint16_t code_filename = 0;
  uint16_t code_name = 0;  // co_qualname from 3.11, else co_name
  bool code_has_qualname = false;
  uint16_t code_linetable = 0;     // co_lnotab (3.9) or co_linetable
  uint16_t code_code = kPyNone;    // 3.9, 3.10: co_code, a bytes object
  uint16_t code_size = kPyNone;    // 3.11 on: ob_size, the bytecode's code units
  uint16_t code_header_bytes = 0;  // a read of this much covers the fields above
  uint32_t line_format = 0;        // enum gprof_python_line_format
  // PyUnicodeObject: compact strings (ASCII: data after PyASCIIObject; else after
  // PyCompactUnicodeObject)
  uint16_t unicode_length = 16;
  uint16_t unicode_state = 32;
  uint16_t unicode_ascii_size = 0;
  uint16_t unicode_compact_size = 0;
  // PyBytesObject
  uint16_t var_size = 16;  // PyVarObject.ob_size
  uint16_t bytes_sval = 32;
  // PyLongObject: 3.12 on, lv_tag at 16 (digits << 3 | sign); before, ob_size (signed digits)
  uint16_t long_digit = 24;
  bool long_tagged = false;
  // PyDictObject and its keys
  uint16_t dict_keys = 32;
  uint16_t dict_values = 40;
  uint16_t keys_size = kPyNone;       // 3.9, 3.10: dk_size (a Py_ssize_t)
  uint16_t keys_log2_size = kPyNone;  // 3.11 on: uint8_t
  uint16_t keys_log2_index_bytes = kPyNone;
  uint16_t keys_kind = kPyNone;  // 3.11 on: DICT_KEYS_GENERAL (0), UNICODE (1), SPLIT (2)
  uint16_t keys_nentries = 0;
  uint16_t keys_indices = 0;
  uint16_t values_values = 0;  // PyDictValues.values (3.13: after its four bytes of sizes)
  // PyTypeObject, PyHeapTypeObject
  uint16_t type_basicsize = 32;
  uint16_t type_flags = 168;
  uint16_t type_dictoffset = 288;
  uint16_t heaptype_cached_keys = 0;
  uint16_t module_dict = 16;
  // PyInterpreterState: sys.modules
  uint16_t interp_modules = 0;
  // A frame's slots, its locals then its value stack (`gprof-run dump` looks there for the lock a
  // thread waits for), and the code object's counts that bound them.
  uint16_t frame_localsplus = 0;  // 3.9, 3.10: PyFrameObject's; 3.11 on: the interpreter frame's
  uint16_t frame_valuestack = kPyNone;  // 3.9, 3.10: f_valuestack (after locals, cells, frees)
  uint16_t code_stacksize = 0;
  uint16_t code_nlocalsplus = kPyNone;  // 3.11 on: locals, cells and free variables
};

// The walker's offsets and the object layout of CPython `version_hex` (only major and minor count)
// for 3.9 to 3.12; nullopt for any other version (3.13 on: ReadDebugOffsets).
std::optional<gprof_python_offsets> TableOffsets(uint32_t version_hex);
std::optional<PythonObjectLayout> TableObjectLayout(uint32_t version_hex);

// 3.13: the walker's offsets and the object layout from the _Py_DebugOffsets at the start of
// _PyRuntime (`bytes`, as read from the process). The error says why not: kUnsupported for a
// free-threaded build, which the walker does not read; kInvalid when they are not 3.13's (cookie,
// version), fail a sanity check (an offset beyond its structure's size, or one the walker could
// not read in one block), or describe frames larger than it reads.
struct DebugLayout {
  gprof_python_offsets offsets;
  PythonObjectLayout objects;
};
Expected<DebugLayout> ReadDebugOffsets(std::span<const uint8_t> bytes, uint32_t version_hex);
// Bytes of _PyRuntime that ReadDebugOffsets needs.
size_t DebugOffsetsBytes();

}  // namespace gprof::bpf
