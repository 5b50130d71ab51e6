// Decodes what CUPTI capture adds to an inject file: how the process was captured, kernel names,
// GPU activities, the driver's module loading, the GPUs' UUIDs, CUPTI's losses and clock offsets,
// the native stacks of slow calls (unwound here from the copies the library took) and which
// threads are gprof-run's own. Like the
// rest of the reader, every byte is bounds-checked and a malformed record becomes a Diagnostic.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"
#include "collector/symbols/stack_unwind.h"

namespace gprof::collector {

// Kernel names of the whole session, each stored once in Session::kernel_names.
using KernelNameIndex = std::unordered_map<std::string, uint32_t>;

// One per inject file: name ids and clock offsets are per process.
class CaptureRecordDecoder {
 public:
  CaptureRecordDecoder(Session* session, KernelNameIndex* kernel_names, std::string path)
      : session_(session), kernel_names_(kernel_names), path_(std::move(path)) {}

  // Decodes `record` when it is one of the capture records; false when its type is not.
  bool Decode(const RecordView& record);

  // After the whole file: names the kernels, puts the activities on CLOCK_MONOTONIC with the
  // file's clock offsets and appends them to Session::gpu_activities (unsorted); unwinds the stack
  // copies that needed the file's later maps.
  void Finish();

 private:
  void Malformed(const RecordView& record, const char* what);
  void DecodeCaptureInfo(const RecordView& record);
  void DecodeGpuName(const RecordView& record);
  void DecodeKernel(const RecordView& record);
  void DecodeMemcpy(const RecordView& record);
  void DecodeMemset(const RecordView& record);
  void DecodeSync(const RecordView& record);
  void DecodeGpuDropped(const RecordView& record);
  void DecodeClockOffset(const RecordView& record);
  void DecodeCallStack(const RecordView& record);
  void DecodeStackCopy(const RecordView& record);
  void DecodeProfilerThread(const RecordView& record);
  void KeepStack(const StackCopy& copy, NativeStack stack);
  void DecodeOverhead(const RecordView& record);
  void DecodeDevice(const RecordView& record);
  // Keeps an activity of this file (timestamps still on CUPTI's clock); false when it ends before
  // it starts.
  bool Keep(GpuActivity activity);
  uint32_t InternKernelName(const std::string& name);

  Session* session_;
  KernelNameIndex* kernel_names_;
  std::string path_;
  uint32_t pid_ = 0;
  std::unordered_map<uint32_t, uint32_t> kernel_name_of_id_;  // name_id -> Session::kernel_names
  std::vector<GpuActivity> activities_;   // on CUPTI's clock; GpuKernel::name_index holds the
                                          // record's name_id until Finish
  std::vector<ModuleLoad> module_loads_;  // on CUPTI's clock
  std::vector<ClockOffset> clock_offsets_;
  // Records CUPTI handed over unfinished (a forced flush while they ran: no start or end time).
  uint64_t unfinished_ = 0;
  uint64_t capture_time_ns_ = 0;  // of the capture record kept so far
  bool has_capture_ = false;
  // Stack copies are unwound as they are read, with the maps read so far; one with a frame in a
  // library mapped after those waits for the file's last maps.
  std::unique_ptr<StackUnwinder> unwinder_;
  std::vector<StackCopy> pending_stacks_;
  // Stack copies the library could not make (a seccomp filter on process_vm_readv), by errno: a
  // LOST line each, as the stacks are missing from every slow call that wanted one.
  std::map<int32_t, uint64_t> uncopied_stacks_;
};

}  // namespace gprof::collector
