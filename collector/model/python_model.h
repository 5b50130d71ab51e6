// Python stacks in the model: what the kernel recorder read of the tree's CPython threads (raw
// frames: a code object and an instruction offset each), what names their code objects (the
// loader's reading of each, with its line table), the interpreter each process runs, and the
// names Python's threading module gives threads.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace gprof::collector {

struct PythonFrameRef {
  uint64_t code = 0;
  int32_t offset = -1;  // byte offset into the bytecode; -1: not started
  int32_t firstlineno = 0;
  uint32_t tag = 0;
  uint32_t flags = 0;  // gprof_python_frame_flags
  bool operator==(const PythonFrameRef&) const = default;
};

enum class PythonStackKind : uint8_t {
  kWaiter = 1,    // the thread's own as it slept (key: its off-CPU interval)
  kWaker = 2,     // a waker's at the wakeup (key: the wakee's off-CPU interval)
  kSample = 3,    // sampled on CPU
  kCudaCall = 4,  // at the exit of a slow CUDA call (key: the call)
};

struct PythonStack {
  uint64_t time_ns = 0;  // when it was read
  uint64_t key_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;  // whose frames
  uint32_t key_tid = 0;
  uint32_t frames = 0;  // into PythonRecord::frame_sets
  uint32_t flags = 0;   // gprof_python_stack_flags
  PythonStackKind kind = PythonStackKind::kWaiter;
  bool truncated() const;   // deeper than the walk goes: outer frames missing
  bool incomplete() const;  // the walk stopped at a frame it could not read or check
};

// A code object of a process, as the loader read it.
struct PythonCode {
  int error = 0;  // non-zero: not read (ESRCH: the process had exited; EFAULT: its memory was gone;
                  // EINVAL: no longer this code object); the fields below are then empty
  std::string filename;
  std::string name;  // co_qualname (3.11 on), else co_name; printable
  bool qualname = false;
  uint32_t line_format = 0;  // gprof_python_line_format
  uint32_t code_bytes = 0;
  std::vector<uint8_t> linetable;
};

struct PythonProcess {
  uint32_t status = 0;  // gprof_python_status
  uint32_t version_hex = 0;
  std::string path;  // the interpreter's file
  std::string why;   // why its frames are not read, when they are not
};

// What the frames of process `pid` name: (pid, code, firstlineno, tag).
using PythonCodeKey = std::tuple<uint32_t, uint64_t, int32_t, uint32_t>;

class PythonRecord {
 public:
  std::vector<PythonStack> stacks;                      // in the order read
  std::vector<std::vector<PythonFrameRef>> frame_sets;  // each distinct frame list once
  std::map<PythonCodeKey, PythonCode> codes;
  std::map<uint32_t, PythonProcess> processes;   // by pid: the latest the loader found
  std::map<uint32_t, std::string> thread_names;  // by tid, printable

  // The index of `frames` in frame_sets, added when new.
  uint32_t InternFrames(std::vector<PythonFrameRef> frames);
  // Builds the lookups below; after every record is read.
  void Finish();

  const std::vector<PythonFrameRef>& FramesOf(const PythonStack& stack) const {
    return frame_sets[stack.frames];
  }
  // The waiter's stack of tid's off-CPU interval that started at start_ns, or nullptr.
  const PythonStack* Waiter(uint32_t tid, uint64_t start_ns) const;
  // The waker's stack at the wakeup at wake_ns that ended tid's interval from start_ns: the one
  // read at that wakeup (within a millisecond after it), or nullptr.
  const PythonStack* Waker(uint32_t tid, uint64_t start_ns, uint64_t wake_ns) const;
  // The stack of tid's slow CUDA call that entered at enter_ns, or nullptr.
  const PythonStack* CudaCall(uint32_t tid, uint64_t enter_ns) const;
  // tid's on-CPU samples in [start_ns, end_ns), in time order.
  std::vector<const PythonStack*> Samples(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const;
  bool empty() const { return stacks.empty(); }

 private:
  struct KeyHash {
    size_t operator()(const std::tuple<uint8_t, uint32_t, uint64_t>& key) const {
      return std::hash<uint64_t>{}(std::get<2>(key) * 31 + std::get<1>(key) * 7 + std::get<0>(key));
    }
  };
  // By (kind, key_tid, key_ns): every stack with that key, in the order read.
  std::unordered_map<std::tuple<uint8_t, uint32_t, uint64_t>, std::vector<uint32_t>, KeyHash>
      by_key_;
  std::vector<uint32_t> samples_;                                  // sample indexes by (tid, time)
  std::unordered_map<uint64_t, std::vector<uint32_t>> set_index_;  // frame-list hash -> indexes
};

}  // namespace gprof::collector
