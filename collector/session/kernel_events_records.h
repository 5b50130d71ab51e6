// Decodes the records of kernel.gpr (inject/format/kernel_events.h): off-CPU intervals, futex and
// futex_waitv calls, kernel lock waits, device waits, slow page faults, memory map calls, thread
// starts, renames and exits, and what the loader adds (kernel and user stacks, kernel symbols,
// /proc/PID/maps snapshots, lost-event counts, events counted rather than recorded). Every byte is
// bounds-checked and a malformed record becomes a Diagnostic. A record that grew since this reader
// was built is read by the part it knows; one from before its struct grew, by the part it has.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "collector/model/model.h"
#include "collector/session/chunk_reader.h"
#include "collector/session/native_stack_records.h"
#include "collector/session/thread_sightings.h"

namespace gprof::collector {

class KernelRecordDecoder {
 public:
  KernelRecordDecoder(Session* session, ThreadSightings* threads, std::string path)
      : session_(session), threads_(threads), path_(path), native_(session, path) {}

  void Decode(const RecordView& record);
  // After the whole file.
  void Finish();

 private:
  void Malformed(const RecordView& record, const std::string& what);
  // Reads a record of an interval into *event: false, with a diagnostic, when it is shorter than
  // `first_size` (the struct's size when it was first written) or ends before it starts.
  template <typename Event>
  bool ReadInterval(const RecordView& record, Event* event, const char* what,
                    size_t first_size = sizeof(Event));
  void DecodeOffCpu(const RecordView& record);
  void DecodeFutex(const RecordView& record);
  void DecodeFutexWaitv(const RecordView& record);
  void DecodeLockWait(const RecordView& record);
  void DecodeDeviceWait(const RecordView& record);
  void DecodePageFault(const RecordView& record);
  void DecodeMemoryMap(const RecordView& record);
  void DecodeTaskNew(const RecordView& record);
  void DecodeTaskRename(const RecordView& record);
  void DecodeTaskExit(const RecordView& record);
  void DecodeKernelStack(const RecordView& record);
  void DecodeKernelSymbol(const RecordView& record);
  void DecodeUserStack(const RecordView& record);
  void DecodeProcessMaps(const RecordView& record);
  void DecodeLaunchVariables(const RecordView& record);
  void DecodeLost(const RecordView& record);
  void DecodeEventCount(const RecordView& record);
  void DecodeSignal(const RecordView& record);
  void DecodeStreamRead(const RecordView& record);
  void DecodeTcpTransfer(const RecordView& record);
  void DecodePythonStack(const RecordView& record);
  void DecodePythonProcess(const RecordView& record);
  void DecodePythonCode(const RecordView& record);
  void DecodePythonThread(const RecordView& record);
  void DecodeWaitCount(const RecordView& record);
  // cuda_probe_records.cc: a CUDA driver call the uprobes saw, as a CUDA call of the session.
  void DecodeCudaProbeCall(const RecordView& record);
  void FinishCudaProbeCalls();
  void ReserveForTheMix(uint64_t file_records);
  // Session::comms' index of a name as the kernel wrote it (a NUL-padded comm field).
  uint32_t CommIndex(const char (&comm)[16]);

  // The records seen so far, and of the two kinds that make most of a file: once a sample of the
  // file has shown the mix, their vectors are sized for the whole file (ReserveForTheMix).
  uint64_t seen_records_ = 0;
  uint64_t seen_off_cpu_ = 0;
  uint64_t seen_futex_ = 0;

  Session* session_;
  ThreadSightings* threads_;
  std::string path_;
  // The uprobes' calls' API names, by name; their user stacks, by (tid, enter_ns), named once
  // every user stack is read.
  std::unordered_map<std::string, uint32_t> probe_api_names_;
  std::map<std::pair<uint32_t, uint64_t>, std::pair<uint32_t, int32_t>> probe_call_stacks_;
  // One Session::lost entry per (kind, record type), its counts summed over CPUs and records.
  std::map<std::pair<uint32_t, uint32_t>, size_t> lost_entries_;
  // By the name's bytes up to its NUL, zero-padded: made printable once per name, not once per
  // record, and looked up without making a string (one lookup per off-CPU interval).
  using CommKey = std::array<uint64_t, 2>;
  struct CommKeyHash {
    size_t operator()(const CommKey& key) const {
      return (key[0] * 0x9e3779b97f4a7c15ULL) ^ (key[1] + (key[1] >> 29));
    }
  };
  std::unordered_map<CommKey, uint32_t, CommKeyHash> comm_indexes_;
  // In front of it, the last name seen in each slot of a small table: a session has few wakers.
  struct RecentComm {
    CommKey key{};
    uint32_t index = UINT32_MAX;  // none yet
  };
  std::array<RecentComm, 64> recent_comms_{};
  NativeStackDecoder native_;
  // Python thread names as the recorder read them, by the thread's id in its own PID namespace
  // (threading's native_id): made the kernel's at Finish, when every task start is known.
  struct PythonThreadName {
    uint32_t pid;
    uint32_t tid;
    std::string name;
  };
  std::vector<PythonThreadName> python_thread_names_;
};

}  // namespace gprof::collector
