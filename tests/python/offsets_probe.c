/* Prints the offsets of CPython's internal structures that gprof-run's Python stack reader uses,
 * as this interpreter's own headers define them: one "name value" line each. Built by the tests
 * against each interpreter found (Py_BUILD_CORE, the internal headers), and compared with the
 * hand-written tables of bpf/python_layouts.cc. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>

#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_code.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_moduleobject.h"
#endif
#if PY_VERSION_HEX < 0x030B0000
#include "internal/pycore_code.h"
/* 3.9 and 3.10 keep the dict structs in Objects/dict-common.h, not installed: copied here (the
 * same in both). */
typedef struct {
  Py_hash_t me_hash;
  PyObject* me_key;
  PyObject* me_value;
} PyDictKeyEntry;
typedef Py_ssize_t (*dict_lookup_func)(PyDictObject* mp, PyObject* key, Py_hash_t hash,
                                       PyObject** value_addr);
struct _dictkeysobject {
  Py_ssize_t dk_refcnt;
  Py_ssize_t dk_size;
  dict_lookup_func dk_lookup;
  Py_ssize_t dk_usable;
  Py_ssize_t dk_nentries;
  char dk_indices[];
};
#endif

#define P(name, value) printf("%s %ld\n", name, (long)(value))

int main(void) {
  P("version_hex", PY_VERSION_HEX);
  P("runtime.interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
  P("interp.next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030B0000
  P("interp.threads_head", offsetof(PyInterpreterState, threads.head));
#else
  P("interp.threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
#if PY_VERSION_HEX >= 0x030C0000
  P("interp.modules", offsetof(PyInterpreterState, imports.modules));
#else
  P("interp.modules", offsetof(PyInterpreterState, modules));
#endif
  P("tstate.next", offsetof(PyThreadState, next));
  P("tstate.interp", offsetof(PyThreadState, interp));
  P("tstate.thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
  P("tstate.native_thread_id", offsetof(PyThreadState, native_thread_id));
#endif
#if PY_VERSION_HEX >= 0x030D0000
  P("tstate.current_frame", offsetof(PyThreadState, current_frame));
#elif PY_VERSION_HEX >= 0x030B0000
  P("tstate.cframe", offsetof(PyThreadState, cframe));
  P("cframe.current_frame", offsetof(_PyCFrame, current_frame));
#else
  P("tstate.frame", offsetof(PyThreadState, frame));
#endif
#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX >= 0x030D0000
  P("frame.code", offsetof(_PyInterpreterFrame, f_executable));
  P("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
  P("frame.code", offsetof(_PyInterpreterFrame, f_code));
  P("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
  P("frame.previous", offsetof(_PyInterpreterFrame, previous));
  P("frame.owner", offsetof(_PyInterpreterFrame, owner));
  P("frame.localsplus", offsetof(_PyInterpreterFrame, localsplus));
#if PY_VERSION_HEX < 0x030C0000
  P("frame.is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
  P("code.code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  P("code.qualname", offsetof(PyCodeObject, co_qualname));
  P("code.linetable", offsetof(PyCodeObject, co_linetable));
#else
  P("frame.code", offsetof(PyFrameObject, f_code));
  P("frame.previous", offsetof(PyFrameObject, f_back));
  P("frame.instr", offsetof(PyFrameObject, f_lasti));
  P("frame.localsplus", offsetof(PyFrameObject, f_localsplus));
  P("code.code", offsetof(PyCodeObject, co_code));
#if PY_VERSION_HEX >= 0x030A0000
  P("code.linetable", offsetof(PyCodeObject, co_linetable));
#else
  P("code.linetable", offsetof(PyCodeObject, co_lnotab));
#endif
#endif
  P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("code.filename", offsetof(PyCodeObject, co_filename));
  P("code.name", offsetof(PyCodeObject, co_name));
  P("code.size", sizeof(PyCodeObject));
  P("unicode.state", offsetof(PyASCIIObject, state));
  P("unicode.length", offsetof(PyASCIIObject, length));
  P("unicode.ascii_size", sizeof(PyASCIIObject));
  P("unicode.compact_size", sizeof(PyCompactUnicodeObject));
  P("bytes.size", offsetof(PyVarObject, ob_size));
  P("bytes.sval", offsetof(PyBytesObject, ob_sval));
#if PY_VERSION_HEX >= 0x030C0000
  P("long.digit", offsetof(struct _longobject, long_value.ob_digit));
  P("long.tag", offsetof(struct _longobject, long_value.lv_tag));
#else
  P("long.digit", offsetof(struct _longobject, ob_digit));
#endif
  P("dict.used", offsetof(PyDictObject, ma_used));
  P("dict.keys", offsetof(PyDictObject, ma_keys));
  P("dict.values", offsetof(PyDictObject, ma_values));
  P("keys.nentries", offsetof(PyDictKeysObject, dk_nentries));
  P("keys.indices", offsetof(PyDictKeysObject, dk_indices));
#if PY_VERSION_HEX >= 0x030B0000
  P("keys.log2_size", offsetof(PyDictKeysObject, dk_log2_size));
  P("keys.log2_index_bytes", offsetof(PyDictKeysObject, dk_log2_index_bytes));
  P("keys.kind", offsetof(PyDictKeysObject, dk_kind));
  P("keys.entry_size", sizeof(PyDictKeyEntry));
  P("keys.unicode_entry_size", sizeof(PyDictUnicodeEntry));
  P("values.values", offsetof(PyDictValues, values));
#else
  P("keys.size", offsetof(PyDictKeysObject, dk_size));
  P("keys.entry_size", sizeof(PyDictKeyEntry));
#endif
  P("type.flags", offsetof(PyTypeObject, tp_flags));
  P("type.dictoffset", offsetof(PyTypeObject, tp_dictoffset));
  P("type.basicsize", offsetof(PyTypeObject, tp_basicsize));
  P("heaptype.cached_keys", offsetof(PyHeapTypeObject, ht_cached_keys));
#if PY_VERSION_HEX >= 0x030B0000
  P("module.dict", offsetof(PyModuleObject, md_dict));
#else
  P("module.dict", sizeof(PyObject)); /* Objects/moduleobject.c: md_dict follows the header */
#endif
  return 0;
}
