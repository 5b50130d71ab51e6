// The writer thread's work: drain every thread's ring, add what only the writer can know (thread
// names, /proc/self/maps, drop counts) and write it all to this process's session file in chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inject/gpu_record_encoder.h"
#include "inject/record_sink.h"
#include "inject/shared/chunk_file_writer.h"
#include "inject/shared/session_control.h"
#include "inject/thread_ring.h"

namespace gprof::inject {

class SessionWriter : public RecordSink {
 public:
  SessionWriter();
  // Creates inject-<pid>.gpr (inject-<pid>.<n>.gpr after an exec kept the pid) in `session_dir`
  // and writes the process's description. Returns 0 or an errno (ECANCELED: gprof-run has closed
  // the session, and nothing is created).
  int Open(const char* session_dir);
  // One pass: every ring's new records, new thread names, drop counts; a chunk when enough is
  // buffered or `force_flush`.
  void Cycle(bool force_flush);
  // Last pass at exit: drains, snapshots the maps again (libraries loaded since), flushes, closes.
  void Finish();
  // Recording ends in this process from now on (StopRecording), for `cause`: what is staged or
  // still comes out of the rings is counted, not written, and the file ends with a
  // RecordingStoppedRecord that says when and why (retried each pass while the disk is full).
  void Stop(format::StopCause cause, int error, const char* reason);

  // True once gprof-run has closed the session (session_control.h): the command has ended.
  bool SessionClosed() const { return control_.closing(); }
  // The session's control; not attached where it could not be (another IPC namespace).
  const SessionControl& control() const { return control_; }

  // Appends one record to the staging buffer, flushing first when it would not fit.
  void Append(const void* head, size_t head_size, const void* tail = nullptr,
              size_t tail_size = 0) override;

 private:
  struct RingView {  // the writer's memory of one ring
    uint64_t owner_serial = 0;
    uint64_t dropped_seen = 0;
    char name[16] = {};
    uint32_t tid = 0;
  };

  // What every pass writes, in the order a reader needs it (names before their uses).
  void DrainAll();
  void DrainRings();
  // A record pushed across slots (ThreadRing::PushSpanning: an NVTX or NCCL event); returns the
  // slots it took.
  uint64_t AppendSpanning(const ThreadRing& ring, uint64_t at);
  void DrainActivityBuffers();
  void WriteCaptureStatus();
  void WriteClockOffset();
  void WriteSlowCallStacks();
  void WriteProfilerThreads();
  void WritePostedMessages();
  void RefreshThreadNames();
  void WriteThreadName(uint32_t tid, const char* name);
  void WriteNamespaces(uint32_t pid_namespace, uint32_t profiler_pid_namespace, uint32_t flags);
  void WriteProcessInfo();
  void WriteApiNames();
  void WriteMaps();
  void WriteDrops(uint32_t tid, uint64_t count);
  void Flush();
  // Stops for what made the last write of file_ fail: the disk margin, a lost descriptor, an error.
  void StopAfterFailedWrite(int error);
  void WriteStopRecord();

  HeldDirectory directory_;  // the session directory (before file_, which uses it)
  ChunkFileWriter file_;
  std::unique_ptr<uint8_t[]> staging_;
  size_t staged_bytes_ = 0;
  uint32_t staged_records_ = 0;
  bool staged_trimmable_ = false;  // --flight-recorder: data, not state (one kind per chunk)
  uint64_t last_trim_ns_ = 0;
  // CUDA calls among the staged records (calls, and calls counted as dropped): once they leave
  // staging (written, or counted as lost) the session's control counts them as accounted for.
  uint64_t staged_calls_ = 0;
  void AccountStagedCalls();
  uint64_t last_name_refresh_ns_ = 0;
  std::vector<RingView> ring_views_;
  GpuRecordEncoder gpu_{this};
  uint64_t last_cupti_flush_ns_ = 0;
  bool clock_offset_written_ = false;
  uint32_t profiler_threads_written_ = 0;
  int64_t clock_offset_ns_ = 0;

  std::string path_;  // the session file
  std::string name_;  // its name in the directory
  SessionControl control_;
  int control_slot_ = SessionControl::kClosed;  // none held
  uint64_t reopens_noted_ = 0;
  bool stopped_ = false;
  bool stop_written_ = false;
  uint64_t stopped_ns_ = 0;
  format::StopCause stop_cause_{};
  int stop_error_ = 0;
  std::string stop_reason_;
  uint64_t records_lost_after_stop_ = 0;
  uint64_t records_lost_reported_ = 0;  // in the stop records written so far
};

// Entry point of the writer thread. `session_dir` must outlive it.
void* WriterThreadMain(void* session_dir);

}  // namespace gprof::inject
