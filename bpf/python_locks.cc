#include "bpf/python_locks.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace gprof::bpf {
namespace {

// Field offsets that are the same in 3.9 to 3.13 (x86-64, the default build): each object starts
// with ob_refcnt and ob_type.
constexpr uint64_t kTypeName = 24;             // PyTypeObject.tp_name, after PyObject_VAR_HEAD
constexpr uint64_t kMethodDef = 16;            // PyCFunctionObject.m_ml (its first field: ml_name)
constexpr uint64_t kMethodSelf = 24;           // PyCFunctionObject.m_self
constexpr uint64_t kLockSemaphore = 16;        // lockobject.lock_lock, rlockobject.rlock_lock
constexpr uint64_t kRlockOwner = 24;           // rlockobject.rlock_owner
constexpr uint64_t kRlockCount = 32;           // rlockobject.rlock_count
constexpr uint64_t kMaxRefcount = 1ull << 31;  // more is no live lock or method (or immortal)
constexpr size_t kMaxSlots = 1024;             // a frame's locals and stack read at most
// acquire() is a C function: the frame that called it is the innermost (a few more for C code in
// between that calls back into Python).
constexpr size_t kWaiterFramesSearched = 3;

uint64_t Word(const ProcessMemory& memory, uint64_t address) {
  uint64_t value = 0;
  return address != 0 && memory.Read(address, &value, sizeof value) == 0 ? value : 0;
}

// The NUL-terminated name at `address`, at most 39 bytes; "" when unreadable.
std::string ShortName(const ProcessMemory& memory, uint64_t address) {
  char text[40] = {};
  for (size_t size : {sizeof text - 1, size_t{16}}) {
    if (address != 0 && memory.Read(address, text, size) == 0) {
      text[size] = '\0';
      return text;
    }
  }
  return "";
}

// Objects' type names, each type's read once.
class TypeNames {
 public:
  explicit TypeNames(const ProcessMemory& memory) : memory_(memory) {}
  // The tp_name of the live object at `object`; "" when it is none such or cannot be read.
  const std::string& Of(uint64_t object) {
    static const std::string kNone;
    uint64_t head[2] = {};
    if (object == 0 || memory_.Read(object, head, sizeof head) != 0) return kNone;
    if (head[0] == 0 || head[0] >= kMaxRefcount || head[1] == 0) return kNone;
    auto known = names_.find(head[1]);
    if (known == names_.end())
      known = names_.emplace(head[1], ShortName(memory_, Word(memory_, head[1] + kTypeName))).first;
    return known->second;
  }

 private:
  const ProcessMemory& memory_;
  std::map<uint64_t, std::string> names_;
};

bool IsLock(const std::string& type) { return type == "_thread.lock" || type == "_thread.RLock"; }

// A frame's slots: its locals (cells, free variables) and then its value stack, to the end the
// code object's stack size allows (the live top is not stored for a running frame).
std::vector<uint64_t> FrameSlots(const ProcessMemory& memory, const PythonInterpreter& python,
                                 const PythonFrameRead& frame) {
  const PythonObjectLayout& l = python.objects;
  int32_t counts[2] = {};  // stack size, locals and more (3.11 on)
  if (frame.address == 0 || frame.code.error != 0 ||
      memory.Read(frame.key.code + l.code_stacksize, &counts[0], 4) != 0)
    return {};
  uint64_t start = frame.address + l.frame_localsplus, end = 0;
  if (l.code_nlocalsplus != kPyNone) {
    if (memory.Read(frame.key.code + l.code_nlocalsplus, &counts[1], 4) != 0 || counts[1] < 0)
      return {};
    end = start + 8 * static_cast<uint64_t>(counts[1]);
  } else {
    end = Word(memory, frame.address + l.frame_valuestack);
    if (end < start) return {};
  }
  if (counts[0] < 0) return {};
  end += 8 * static_cast<uint64_t>(counts[0]);
  size_t slots = std::min<uint64_t>((end - start) / 8, kMaxSlots);
  std::vector<uint64_t> values(slots);
  if (slots == 0 || memory.Read(start, values.data(), slots * 8) != 0) return {};
  return values;
}

}  // namespace

std::optional<PythonLock> PythonLockWaitedOn(const ProcessMemory& memory,
                                             const PythonInterpreter& python,
                                             const PythonThreadRead& thread, uint64_t address) {
  TypeNames types(memory);
  for (size_t i = 0; i < thread.frames.size() && i < kWaiterFramesSearched; ++i) {
    std::vector<uint64_t> slots = FrameSlots(memory, python, thread.frames[i]);
    for (uint64_t slot : slots) {
      uint64_t object = slot;
      if (types.Of(slot) == "builtin_function_or_method") object = Word(memory, slot + kMethodSelf);
      const std::string& type = types.Of(object);
      if (!IsLock(type) || Word(memory, object + kLockSemaphore) != address) continue;
      PythonLock lock;
      lock.object = object;
      lock.frame = i;
      lock.frame_first_local = slots.front();
      if (type == "_thread.RLock") {
        lock.type = PythonLockType::kRLock;
        lock.owner = Word(memory, object + kRlockOwner);
        lock.count = Word(memory, object + kRlockCount);
      }
      return lock;
    }
  }
  return std::nullopt;
}

std::vector<uint64_t> InsideWithBlocks(const ProcessMemory& memory, const PythonInterpreter& python,
                                       const PythonThreadRead& thread) {
  TypeNames types(memory);
  std::vector<uint64_t> objects;
  for (const PythonFrameRead& frame : thread.frames) {
    for (uint64_t slot : FrameSlots(memory, python, frame)) {
      if (types.Of(slot) != "builtin_function_or_method") continue;
      if (ShortName(memory, Word(memory, Word(memory, slot + kMethodDef))) == "__exit__")
        objects.push_back(Word(memory, slot + kMethodSelf));
    }
  }
  return objects;
}

}  // namespace gprof::bpf
