#include "bpf/python_layouts.h"

#include <cstring>

namespace gprof::bpf {
namespace {

constexpr uint32_t Minor(uint32_t version_hex) { return version_hex >> 16; }

// The walker reads a frame and a code object in one block each: enough to cover the last field.
constexpr uint16_t Cover(std::initializer_list<uint16_t> offsets, uint16_t field_bytes) {
  uint16_t end = 0;
  for (uint16_t offset : offsets) {
    if (offset != kPyNone && offset + field_bytes > end) end = offset + field_bytes;
  }
  return end;
}

gprof_python_offsets Base(uint32_t version_hex) {
  gprof_python_offsets o{};
  o.version_hex = version_hex;
  o.cframe_current_frame = kPyNone;
  o.frame_owner = kPyNone;
  o.frame_is_entry = kPyNone;
  o.code_size = kPyNone;
  o.owner_cstack = 0xff;
  o.lasti_scale = 1;
  return o;
}

void FinishReadSizes(gprof_python_offsets* o) {
  o->frame_read_size = Cover({o->frame_code, o->frame_previous, o->frame_instr}, 8);
  uint16_t bytes = Cover({o->frame_owner, o->frame_is_entry}, 1);
  if (bytes > o->frame_read_size) o->frame_read_size = bytes;
  o->code_read_size = Cover({o->code_size, 8, o->code_filename, o->code_name}, 8);
  bytes = Cover({o->code_firstlineno}, 4);
  if (bytes > o->code_read_size) o->code_read_size = bytes;
}

void FinishHeader(PythonObjectLayout* l) {
  l->code_header_bytes =
      Cover({l->code_filename, l->code_name, l->code_linetable, l->code_code, l->code_size, 8}, 8);
  uint16_t bytes = Cover({l->code_firstlineno}, 4);
  if (bytes > l->code_header_bytes) l->code_header_bytes = bytes;
}

}  // namespace

std::string PythonVersionText(uint32_t version_hex) {
  std::string text =
      std::to_string(version_hex >> 24) + "." + std::to_string((version_hex >> 16) & 0xff);
  if ((version_hex & 0xffff) != 0) text += "." + std::to_string((version_hex >> 8) & 0xff);
  return text;
}

// Offsets as each version's headers have them (Include/cpython/pystate.h, frameobject.h,
// code.h, Include/internal/pycore_interp.h, pycore_runtime.h, pycore_frame.h), for x86_64 and the
// default (GIL) build; tests/python/offsets_probe.c prints them from an installed interpreter.
std::optional<gprof_python_offsets> TableOffsets(uint32_t version_hex) {
  gprof_python_offsets o = Base(version_hex);
  switch (Minor(version_hex)) {
    case 0x0309:
    case 0x030a:
      o.frame_kind = GPROF_PY_FRAMES_OBJECTS;
      o.lasti_scale = Minor(version_hex) == 0x0309 ? 1 : 2;  // 3.10's f_lasti counts code units
      o.runtime_interpreters_head = 32;
      o.interp_next = 0;
      o.interp_threads_head = 8;  // tstate_head
      o.tstate_next = 8;
      o.tstate_thread_id = 176;
      o.tstate_frame = 24;
      o.frame_code = 32;
      o.frame_previous = 24;                                    // f_back
      o.frame_instr = Minor(version_hex) == 0x0309 ? 104 : 96;  // f_lasti
      o.code_firstlineno = 40;
      o.code_filename = 104;
      o.code_name = 112;
      break;
    case 0x030b:
      o.frame_kind = GPROF_PY_FRAMES_INTERPRETER;
      o.runtime_interpreters_head = 40;
      o.interp_next = 0;
      o.interp_threads_head = 16;
      o.tstate_next = 8;
      o.tstate_thread_id = 152;
      o.tstate_frame = 56;  // cframe
      o.cframe_current_frame = 8;
      o.frame_code = 32;
      o.frame_previous = 48;
      o.frame_instr = 56;  // prev_instr
      o.frame_is_entry = 68;
      o.frame_owner = 69;
      o.code_size = 16;
      o.code_firstlineno = 72;
      o.code_filename = 112;
      o.code_name = 128;  // co_qualname
      o.code_adaptive = 184;
      break;
    case 0x030c:
      o.frame_kind = GPROF_PY_FRAMES_INTERPRETER;
      o.runtime_interpreters_head = 40;
      o.interp_next = 0;
      o.interp_threads_head = 72;
      o.tstate_next = 8;
      o.tstate_thread_id = 136;
      o.tstate_frame = 56;  // cframe
      o.cframe_current_frame = 0;
      o.frame_code = 0;
      o.frame_previous = 8;
      o.frame_instr = 56;  // prev_instr
      o.frame_owner = 70;
      o.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK
      o.code_size = 16;
      o.code_firstlineno = 68;
      o.code_filename = 112;
      o.code_name = 128;  // co_qualname
      o.code_adaptive = 192;
      break;
    default:
      return std::nullopt;
  }
  FinishReadSizes(&o);
  return o;
}

std::optional<PythonObjectLayout> TableObjectLayout(uint32_t version_hex) {
  PythonObjectLayout l;
  l.version_hex = version_hex;
  const uint32_t minor = Minor(version_hex);
  if (minor < 0x0309 || minor > 0x030d) return std::nullopt;
  if (minor <= 0x030a) {
    l.code_firstlineno = 40;
    l.code_filename = 104;
    l.code_name = 112;
    l.code_linetable = 120;
    l.code_code = 48;
    l.line_format = minor == 0x0309 ? GPROF_PY_LINES_LNOTAB : GPROF_PY_LINES_310;
    l.unicode_ascii_size = 48;
    l.unicode_compact_size = 72;
    l.keys_size = 8;
    l.keys_nentries = 32;
    l.keys_indices = 40;
    l.values_values = 0;  // ma_values is the array itself
    l.heaptype_cached_keys = minor == 0x0309 ? 864 : 872;
    l.interp_modules = 856;
    l.frame_localsplus = minor == 0x0309 ? 360 : 352;  // after 3.10's smaller f_stackdepth fields
    l.frame_valuestack = 64;
    l.code_stacksize = 32;
  } else {
    l.code_has_qualname = true;
    l.code_size = 16;
    l.line_format = GPROF_PY_LINES_LOCATIONS;
    l.keys_log2_size = 8;
    l.keys_log2_index_bytes = 9;
    l.keys_kind = 10;
    l.keys_nentries = 24;
    l.keys_indices = 32;
    l.values_values = 0;
    l.frame_localsplus = 72;
    if (minor == 0x030b) {
      l.code_firstlineno = 72;
      l.code_filename = 112;
      l.code_name = 128;
      l.code_linetable = 136;
      l.unicode_ascii_size = 48;
      l.unicode_compact_size = 72;
      l.heaptype_cached_keys = 872;
      l.interp_modules = 888;
      l.code_stacksize = 68;
      l.code_nlocalsplus = 76;
    } else {
      l.code_firstlineno = 68;
      l.code_filename = 112;
      l.code_name = 128;
      l.code_linetable = 136;
      l.unicode_ascii_size = 40;
      l.unicode_compact_size = 56;
      l.long_tagged = true;
      l.code_stacksize = 64;
      l.code_nlocalsplus = 72;
      l.heaptype_cached_keys = 880;
      l.interp_modules = minor == 0x030c ? 944 : 7656;
      if (minor == 0x030d) l.values_values = 8;  // capacity, size, embedded, valid, then values
    }
  }
  FinishHeader(&l);
  return l;
}

namespace {

// CPython 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h): every field a uint64_t
// after the cookie.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk,
        status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  struct {
    uint64_t size, ob_item, ob_size;
  } tuple_object, list_object;
  struct {
    uint64_t size, ma_keys, ma_values;
  } dict_object;
  struct {
    uint64_t size, ob_fval;
  } float_object;
  struct {
    uint64_t size, lv_tag, ob_digit;
  } long_object;
  struct {
    uint64_t size, ob_size, ob_sval;
  } bytes_object;
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
  struct {
    uint64_t size, collecting;
  } gc;
};

// An offset inside a structure of `size` bytes that leaves room for a field of `field` bytes, and
// that the walker's 16-bit offsets can hold (below GPROF_PY_NONE).
bool Inside(uint64_t offset, uint64_t size, uint64_t field) {
  return offset < kPyNone && offset + field <= size;
}

}  // namespace

size_t DebugOffsetsBytes() { return sizeof(DebugOffsets313); }

Expected<DebugLayout> ReadDebugOffsets(std::span<const uint8_t> bytes, uint32_t version_hex) {
  DebugOffsets313 d;
  if (bytes.size() < sizeof(d)) {
    return Status::Error(StatusCode::kInvalid, "its _Py_DebugOffsets could not be read");
  }
  memcpy(&d, bytes.data(), sizeof(d));
  if (memcmp(d.cookie, "xdebugpy", 8) != 0) {
    return Status::Error(StatusCode::kInvalid,
                         "its _PyRuntime does not start with _Py_DebugOffsets");
  }
  if (Minor(static_cast<uint32_t>(d.version)) != 0x030d ||
      (version_hex != 0 && Minor(version_hex) != 0x030d)) {
    return Status::Error(StatusCode::kInvalid,
                         "its _Py_DebugOffsets are of version " +
                             PythonVersionText(static_cast<uint32_t>(d.version)) + ", not 3.13");
  }
  if (d.free_threaded != 0) {
    return Status::Error(StatusCode::kUnsupported, "it is a free-threaded build");
  }
  bool sane = Inside(d.runtime_state.interpreters_head, d.runtime_state.size, 8) &&
              Inside(d.interpreter_state.next, d.interpreter_state.size, 8) &&
              Inside(d.interpreter_state.threads_head, d.interpreter_state.size, 8) &&
              Inside(d.interpreter_state.imports_modules, d.interpreter_state.size, 8) &&
              Inside(d.thread_state.next, d.thread_state.size, 8) &&
              Inside(d.thread_state.thread_id, d.thread_state.size, 8) &&
              Inside(d.thread_state.current_frame, d.thread_state.size, 8) &&
              Inside(d.interpreter_frame.previous, d.interpreter_frame.size, 8) &&
              Inside(d.interpreter_frame.executable, d.interpreter_frame.size, 8) &&
              Inside(d.interpreter_frame.instr_ptr, d.interpreter_frame.size, 8) &&
              Inside(d.interpreter_frame.owner, d.interpreter_frame.size, 1) &&
              d.interpreter_frame.localsplus <= d.interpreter_frame.size &&
              Inside(d.code_object.filename, d.code_object.size, 8) &&
              Inside(d.code_object.qualname, d.code_object.size, 8) &&
              Inside(d.code_object.linetable, d.code_object.size, 8) &&
              Inside(d.code_object.firstlineno, d.code_object.size, 4) &&
              d.code_object.co_code_adaptive <= d.code_object.size && d.pyobject.ob_type == 8 &&
              Inside(d.unicode_object.state, d.unicode_object.size, 4) &&
              Inside(d.unicode_object.length, d.unicode_object.size, 8) &&
              d.unicode_object.asciiobject_size < 256 && Inside(d.bytes_object.ob_sval, 4096, 1) &&
              Inside(d.long_object.ob_digit, 4096, 4) && Inside(d.dict_object.ma_keys, 4096, 8) &&
              Inside(d.dict_object.ma_values, 4096, 8) && Inside(d.type_object.tp_flags, 4096, 8);
  if (!sane) return Status::Error(StatusCode::kInvalid, "its _Py_DebugOffsets make no sense");

  DebugLayout layout;
  gprof_python_offsets& o = layout.offsets;
  o = Base(static_cast<uint32_t>(d.version));
  o.frame_kind = GPROF_PY_FRAMES_INTERPRETER;
  o.runtime_interpreters_head = static_cast<uint16_t>(d.runtime_state.interpreters_head);
  o.interp_next = static_cast<uint16_t>(d.interpreter_state.next);
  o.interp_threads_head = static_cast<uint16_t>(d.interpreter_state.threads_head);
  o.tstate_next = static_cast<uint16_t>(d.thread_state.next);
  o.tstate_thread_id = static_cast<uint16_t>(d.thread_state.thread_id);
  o.tstate_frame = static_cast<uint16_t>(d.thread_state.current_frame);
  o.frame_code = static_cast<uint16_t>(d.interpreter_frame.executable);
  o.frame_previous = static_cast<uint16_t>(d.interpreter_frame.previous);
  o.frame_instr = static_cast<uint16_t>(d.interpreter_frame.instr_ptr);
  o.frame_owner = static_cast<uint16_t>(d.interpreter_frame.owner);
  o.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK, an enum the offsets do not carry
  o.code_size = 16;    // PyObject_VAR_HEAD's ob_size, after ob_type (checked above)
  o.code_firstlineno = static_cast<uint16_t>(d.code_object.firstlineno);
  o.code_filename = static_cast<uint16_t>(d.code_object.filename);
  o.code_name = static_cast<uint16_t>(d.code_object.qualname);
  o.code_adaptive = static_cast<uint16_t>(d.code_object.co_code_adaptive);
  FinishReadSizes(&o);
  if (o.frame_read_size > GPROF_PY_READ_BYTES || o.code_read_size > GPROF_PY_READ_BYTES) {
    return Status::Error(StatusCode::kInvalid,
                         "its frames or code objects are larger than gprof-run reads");
  }

  // What the debug offsets do not cover (dict keys, types) comes from the table.
  std::optional<PythonObjectLayout> table = TableObjectLayout(o.version_hex);
  if (!table) {
    return Status::Error(StatusCode::kInvalid, "gprof-run has no object layout of its version");
  }
  PythonObjectLayout& l = layout.objects;
  l = *table;
  l.code_firstlineno = o.code_firstlineno;
  l.code_filename = o.code_filename;
  l.code_name = o.code_name;
  l.code_linetable = static_cast<uint16_t>(d.code_object.linetable);
  l.unicode_state = static_cast<uint16_t>(d.unicode_object.state);
  l.unicode_length = static_cast<uint16_t>(d.unicode_object.length);
  l.unicode_ascii_size = static_cast<uint16_t>(d.unicode_object.asciiobject_size);
  l.unicode_compact_size = l.unicode_ascii_size + 16;  // utf8_length, utf8
  l.bytes_sval = static_cast<uint16_t>(d.bytes_object.ob_sval);
  l.long_digit = static_cast<uint16_t>(d.long_object.ob_digit);
  l.dict_keys = static_cast<uint16_t>(d.dict_object.ma_keys);
  l.dict_values = static_cast<uint16_t>(d.dict_object.ma_values);
  l.type_flags = static_cast<uint16_t>(d.type_object.tp_flags);
  l.interp_modules = static_cast<uint16_t>(d.interpreter_state.imports_modules);
  l.frame_localsplus = static_cast<uint16_t>(d.interpreter_frame.localsplus);
  FinishHeader(&l);
  return layout;
}

}  // namespace gprof::bpf
