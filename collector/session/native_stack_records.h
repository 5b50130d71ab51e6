// Decodes the kernel recorder's native stack copies (GPROF_REC_NATIVE_STACK: a thread's user
// registers and the top of its user stack, at a sampling tick or at a wakeup it made) and unwinds
// each with the files' call-frame information (symbols/stack_unwind.h, the unwinder of the injected
// library's copies), through the maps snapshots of the process read so far. The bytes are not
// kept: each copy becomes its frames, and each distinct stack is kept once (Session::native).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"
#include "collector/symbols/stack_unwind.h"

namespace gprof::collector {

class NativeStackDecoder {
 public:
  NativeStackDecoder(Session* session, std::string path)
      : session_(session), path_(std::move(path)) {}

  void Decode(const RecordView& record);
  // After the whole file: unwinds the copies that waited for later maps, sorts the samples.
  void Finish();

 private:
  struct Copy {
    StackCopy copy;
    uint32_t kind = 0;  // gprof_native_stack_kind
    uint32_t key_tid = 0;
    uint64_t key_ns = 0;
    bool in_kernel = false;
  };
  void Keep(const Copy& copy, NativeStack stack);
  // Unwinds `copy`; false when it waits for later maps (final false).
  bool Unwind(const Copy& copy, bool final);

  Session* session_;
  std::string path_;
  std::unique_ptr<StackUnwinder> unwinder_;
  std::vector<Copy> pending_;
  std::map<std::pair<uint32_t, std::vector<uint64_t>>, uint32_t> stack_index_;  // into stack_set
};

}  // namespace gprof::collector
