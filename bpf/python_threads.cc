// The BPF walker's walk (python_stacks.bpf.h), done out of process with process_vm_readv.
#include "bpf/python_threads.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace gprof::bpf {
namespace {

constexpr int kMaxInterpreters = 4;
constexpr int kMaxThreads = 4096;
constexpr size_t kMaxFrames = 256;
// x86-64 glibc's struct pthread: the thread's kernel id, after its thread control block and list
// links (the same offset since glibc 2.3; py-spy and gdb's libthread_db read it there too).
constexpr uint64_t kPthreadTidOffset = 0x2d0;

template <typename T>
T At(const uint8_t* block, size_t offset) {
  T value;
  memcpy(&value, block + offset, sizeof(value));
  return value;
}

uint64_t Pointer(const ProcessMemory& memory, uint64_t address) {
  uint64_t value = 0;
  return memory.Read(address, &value, sizeof value) == 0 ? value : 0;
}

void WalkFrames(const ProcessMemory& memory, const PythonInterpreter& python,
                PythonThreadRead* thread, std::map<uint64_t, PythonCode>* codes) {
  const gprof_python_offsets& o = python.offsets;
  uint64_t frame = Pointer(memory, thread->tstate + o.tstate_frame);
  if (o.cframe_current_frame != kPyNone && frame != 0)
    frame = Pointer(memory, frame + o.cframe_current_frame);
  uint8_t buffer[GPROF_PY_READ_BYTES];
  uint8_t code_buffer[GPROF_PY_READ_BYTES];
  for (size_t steps = 0; frame != 0; ++steps) {
    if (thread->frames.size() >= kMaxFrames || steps >= 2 * kMaxFrames) {
      thread->truncated = true;
      return;
    }
    if (o.frame_read_size > sizeof buffer || memory.Read(frame, buffer, o.frame_read_size) != 0) {
      thread->incomplete = true;
      return;
    }
    uint64_t code = At<uint64_t>(buffer, o.frame_code);
    uint64_t instr_field = o.frame_kind == GPROF_PY_FRAMES_OBJECTS ? 0 : o.frame_instr;
    uint64_t address = frame;
    frame = At<uint64_t>(buffer, o.frame_previous);
    // The eval loop's entry shim (3.12 on) is no frame of the program's.
    if (o.frame_kind != GPROF_PY_FRAMES_OBJECTS && o.frame_owner != kPyNone &&
        buffer[o.frame_owner] == o.owner_cstack)
      continue;
    if (code == 0 || o.code_read_size > sizeof code_buffer ||
        memory.Read(code, code_buffer, o.code_read_size) != 0 ||
        At<uint64_t>(code_buffer, 8) != python.code_type) {
      thread->incomplete = true;
      return;
    }
    int64_t offset;
    if (o.frame_kind == GPROF_PY_FRAMES_OBJECTS) {
      int32_t lasti = At<int32_t>(buffer, o.frame_instr);
      offset = lasti < 0 ? -1 : static_cast<int64_t>(lasti) * o.lasti_scale;
    } else {
      offset = static_cast<int64_t>(At<uint64_t>(buffer, instr_field) - (code + o.code_adaptive));
      if (offset == -2) offset = -1;  // a frame not started points one code unit before its first
      int64_t units = At<int64_t>(code_buffer, o.code_size);
      if (offset < -1 || offset >= units * 2) {
        thread->incomplete = true;
        return;
      }
    }
    if (offset > 0x7fffffff) {
      thread->incomplete = true;
      return;
    }
    PythonFrameRead read;
    read.address = address;
    read.key.code = code;
    read.key.firstlineno = At<int32_t>(code_buffer, o.code_firstlineno);
    read.key.tag = static_cast<uint32_t>(At<uint64_t>(code_buffer, o.code_filename) ^
                                         At<uint64_t>(code_buffer, o.code_name));
    read.offset = static_cast<int32_t>(offset);
    auto known = codes->find(code);
    if (known == codes->end())
      known = codes->emplace(code, ReadPythonCode(memory, python, read.key)).first;
    read.code = known->second;
    thread->frames.push_back(std::move(read));
  }
}

}  // namespace

std::vector<PythonThreadRead> ReadPythonThreads(const ProcessMemory& memory,
                                                const PythonInterpreter& python) {
  std::vector<PythonThreadRead> threads;
  if (python.status != GPROF_PY_READABLE) return threads;
  const gprof_python_offsets& o = python.offsets;
  std::map<uint64_t, PythonCode> codes;
  uint64_t interpreter = Pointer(memory, python.runtime + o.runtime_interpreters_head);
  for (int i = 0; i < kMaxInterpreters && interpreter != 0; ++i) {
    uint64_t tstate = Pointer(memory, interpreter + o.interp_threads_head);
    for (int t = 0; t < kMaxThreads && tstate != 0; ++t) {
      PythonThreadRead thread;
      thread.tstate = tstate;
      thread.pthread = Pointer(memory, tstate + o.tstate_thread_id);
      uint32_t tid = 0;
      if (thread.pthread != 0 &&
          memory.Read(thread.pthread + kPthreadTidOffset, &tid, sizeof tid) == 0)
        thread.tid = tid;
      WalkFrames(memory, python, &thread, &codes);
      threads.push_back(std::move(thread));
      tstate = Pointer(memory, tstate + o.tstate_next);
    }
    interpreter = Pointer(memory, interpreter + o.interp_next);
  }
  return threads;
}

std::optional<PythonGil> GilWaitedOn(const ProcessMemory& memory, uint64_t address,
                                     const std::vector<uint64_t>& tstates) {
  constexpr uint64_t kCondOffset =
      32;  // after interval, last_holder, locked (padded), switch_number
  for (uint64_t signals : {40, 44}) {
    uint64_t gil = address - signals - kCondOffset;
    uint8_t head[24];
    if (memory.Read(gil, head, sizeof head) != 0) continue;
    uint64_t interval = At<uint64_t>(head, 0);
    uint64_t last_holder = At<uint64_t>(head, 8);
    int32_t locked = At<int32_t>(head, 16);
    if (interval == 0 || interval > 1'000'000'000 || (locked != 0 && locked != 1)) continue;
    if (std::find(tstates.begin(), tstates.end(), last_holder) == tstates.end()) continue;
    return PythonGil{gil, last_holder, locked == 1};
  }
  return std::nullopt;
}

}  // namespace gprof::bpf
