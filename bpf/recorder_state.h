// The kernel recorder's state (KernelRecorder::State) and limits, shared by the files of its
// loader and included by them only: program_loading.cc (opening, loading and attaching the
// programs), ring_records.cc (draining the ring buffer into kernel.gpr), process_tree.cc (the
// processes of the tree and their maps), map_records.cc (what is read out of the maps rather than
// the ring: short waits' totals, and at the end what is left unfinished, the counts, the kernel
// symbols and the losses) and kernel_recorder.cc (the public calls).
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bpf/cuda_probes.h"
#include "bpf/kernel_events.skel.h"
#include "bpf/kernel_maps.h"
#include "bpf/kernel_recorder.h"
#include "bpf/python_stacks.h"
#include "inject/format/session_format.h"
#include "inject/shared/chunk_file_writer.h"

namespace gprof::bpf {

constexpr size_t kFlushBytes = 1u << 20;  // write a chunk once this much is staged
constexpr uint64_t kFlushIntervalNs = 250'000'000;
constexpr size_t kStateFlushBytes = 256u << 10;
constexpr uint64_t kStateFlushIntervalNs = 10'000'000'000;
constexpr uint64_t kWaitCountIntervalNs = 1'000'000'000;  // short waits' totals read this often
constexpr int kPollSliceMs = 100;                         // the longest wait in Poll (see there)
constexpr uint64_t kMinRingBufferBytes = 16ull << 20;
constexpr uint64_t kRingBufferBytesPerCpu = 2ull << 20;
constexpr uint64_t kMaxRingBufferBytes = 1ull << 30;
constexpr uint64_t kMaxWakeupBytes = 1u << 20;
// A process's maps are read again this long after the snapshot at its start or exec.
constexpr uint64_t kMapsFollowupNs[] = {20'000'000, 100'000'000, 500'000'000};
constexpr size_t kMaxMapsBytes = 8u << 20;  // a /proc/PID/maps snapshot is cut at a line beyond
constexpr size_t kMaxUntakenSignals = 4096;
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";

// x86_64 numbers of the futex calls a gprof_syscall_pending entry can hold (older C library
// headers lack the futex2 ones).
constexpr uint32_t kSysFutex = 202;
constexpr uint32_t kSysFutexWake = 454;
constexpr uint32_t kSysFutexWait = 455;
constexpr uint32_t kSysFutexRequeue = 456;

// Up to `limit` bytes of a /proc file, cut after the last whole line; false when unreadable
// (process_tree.cc).
bool ReadProcFile(const std::string& path, size_t limit, std::string* text);

struct KernelRecorder::State {
  kernel_events_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  std::vector<int> link_fds;  // links libbpf 1.1 cannot make (cuda_probes' uprobe_multi)
  ring_buffer* ring = nullptr;
  ChunkFileWriter writer;
  int stacks_fd = -1;
  int user_stacks_fd = -1;
  uint32_t user_stack_depth_limit = GPROF_MAX_STACK_DEPTH;
  uint64_t slow_fault_ns = 0;
  uint64_t stack_min_ns = 0;
  uint64_t count_under_ns = 0;
  bool stacks_wanted = false;
  uint64_t lost_stacks = 0;  // off-CPU stacks never taken (GPROF_LOST_STACK, GPROF_ALL_CPUS)
  std::vector<std::string> notes;

  std::vector<char> staged;
  uint32_t staged_records = 0;
  // --flight-recorder: state (stacks, processes, maps: what data records refer to) is staged apart
  // and written in chunks of its own, which are never trimmed. Each such chunk keeps a block of
  // the file on disk whatever is punched around it, so the stacks that keep appearing are written
  // together, every kStateFlushIntervalNs or kStateFlushBytes; other state goes out with the next
  // data (a thread's start before its waits).
  std::vector<char> staged_state;
  uint32_t staged_state_records = 0;
  uint64_t state_staged_ns = 0;  // when its oldest record was staged
  bool state_due = false;        // it holds more than stacks and symbols
  uint64_t last_flush_ns = 0;

  std::unordered_set<int32_t> stacks_written;
  std::unordered_set<int32_t> user_stacks_written;
  std::unordered_set<uint64_t> stack_addresses;  // symbolized at Finish
  std::vector<uint64_t> stack_buffer = std::vector<uint64_t>(GPROF_MAX_STACK_DEPTH);
  std::vector<char> record_buffer;

  // Processes of the tree, for their maps snapshots: start time (tells a reused pid) and whether
  // their last thread exited.
  struct TreeProcess {
    uint64_t start_time = 0;
    bool alive = true;
    uint64_t maps_hash = 0;  // of the last snapshot written (WriteMaps)
    // A secure-execution process of a session whose owner is not root (GPROF_EXEC_HIDDEN): its
    // memory is a privileged program's, so neither its maps nor its Python frames are read.
    bool hidden = false;
  };
  std::map<uint32_t, TreeProcess> processes;
  std::set<uint32_t> maps_due;  // appeared or exec'd since the last snapshot round
  std::set<uint32_t> launch_variables_due;  // exec'd since the last snapshot round
  // Processes snapshotted after they appeared or exec'd, looked at again a few times while their
  // dynamic loader maps libraries (a snapshot drained right after an exec has none of them):
  // when next, and how many looks are left. A snapshot is written only when the maps changed.
  std::map<uint32_t, std::pair<uint64_t, int>> maps_followups;
  std::unique_ptr<PythonStacks> python;  // Python stacks on
  std::unique_ptr<CudaProbes> cuda;      // CUDA calls by uprobes on (cuda_probes)

  // The short_waits map's totals as last written, by key (its bytes), and when.
  std::map<std::string, gprof_short_wait_counts> wait_totals_written;
  uint64_t wait_counts_ns = 0;

  std::map<uint32_t, uint64_t> malformed;  // by claimed record type
  // The signal_generate program's link: it outlives the recording (Finish), as gprof-run's
  // forwarding of signals reads them until the command ends.
  bpf_link* signal_link = nullptr;
  std::vector<SignalRecord> signals;  // drained, not yet taken (TakeSignals)
  uint64_t signals_drained_ns = 0;
  bool recording_done = false;  // Finish closed kernel.gpr: only signals are drained now
  uint64_t lost_to_writes = 0;
  // Writing stopped at this time (a write failed, or another writer found the disk full); what
  // comes after is counted in lost_to_writes, not written. 0: writing.
  uint64_t writes_stopped_ns = 0;
  bool final_write = false;     // Finish's one attempt to write the loss counts after a stop
  const char* stop_cause = "";  // session.json's word for why writing stopped
  uint64_t records_written = 0;
  uint64_t kernel_lost_at_finish = 0;
  std::string last_error;
  bool finished = false;

  ~State() { Release(); }

  void DetachAll() {
    for (bpf_link* link : links) bpf_link__destroy(link);
    links.clear();
    for (int fd : link_fds) close(fd);
    link_fds.clear();
  }

  void Release() {
    DetachAll();
    bpf_link__destroy(signal_link);
    signal_link = nullptr;
    python.reset();
    cuda.reset();
    ring_buffer__free(ring);
    ring = nullptr;
    kernel_events_bpf__destroy(skel);
    skel = nullptr;
  }

  // Appends a loader record: `header` (a record struct whose hdr.size covers the trailing bytes
  // too) followed by `tail`.
  template <typename Record>
  void AppendWithTail(const Record& header, const void* tail, size_t tail_size) {
    record_buffer.resize(sizeof(header) + tail_size);
    memcpy(record_buffer.data(), &header, sizeof(header));
    if (tail_size > 0) memcpy(record_buffer.data() + sizeof(header), tail, tail_size);
    Append(record_buffer.data(), record_buffer.size());
  }

  void StopWriting(const char* cause, const char* why);

  void Flush();
  // One staged buffer out as a chunk (Flush's work); `trimmable`: data.
  void WriteStaged(std::vector<char>* buffer, uint32_t* records, bool trimmable);

  void Append(const void* data, size_t size);

  // The return addresses of stack `id` in `map_fd`, innermost first; 0 frames when unreadable.
  uint32_t ReadStack(int map_fd, int32_t id);

  // Writes kernel stack `id` the first time a record refers to it. Ids are stable (no
  // REUSE_STACKID), and writing them as they come keeps them in the file if gprof-run is killed.
  void NoteStack(int32_t id);

  // The same for user stack `id`. The map keeps no length: a stack that fills every slot the
  // kernel's walk may fill is taken as cut there.
  void NoteUserStack(int32_t id);

  void NoteProcess(uint32_t pid);

  // An entry in the threads map for each thread process `pid` has now (the programs record only
  // threads that have one), keeping any a starting thread got first. After the process is in the
  // tracked map: a thread started meanwhile gets its entry from sched_process_fork. False when
  // the process cannot be read or the map is full (errno says).
  bool StartThreads(uint32_t pid);

  // Writes /proc/PID/maps of a process of the tree, unless it is gone or its pid now names
  // another process.
  void SnapshotMaps(uint32_t pid);

  void FollowUpMaps(uint64_t now);

  uint64_t NextFollowUpNs() const;

  // Reads /proc/PID/maps into *text and writes it as a snapshot: always, or with `if_changed`
  // only when it differs from the last one written (Python's looks at a process just exec'd,
  // which also name the libraries its dynamic loader mapped after the exec's snapshot). False
  // when the process is gone or its pid names another.
  bool WriteMaps(uint32_t pid, std::string* text, bool if_changed);

  void SnapshotDueMaps();

  // Writes the rank variables of a process of the tree that has just exec'd (and only those: the
  // rest of its environment is never kept), unless it is hidden, gone, or its pid names another.
  void WriteLaunchVariables(uint32_t pid);

  void OnSample(const void* data, size_t size);

  // A Python stack: a header and `depth` frames, checked to be exactly that; its code objects are
  // named before it is written.
  void OnPythonStack(const void* data, size_t size, const gprof_rec_hdr& hdr);

  // A native stack copy: a header and exactly `copied_bytes` of stack.
  void OnNativeStack(const void* data, size_t size, const gprof_rec_hdr& hdr);

  // Called by libbpf's C code, which an exception must not unwind through.
  static int SampleCallback(void* context, void* data, size_t size);

  // The kernel's loss counters: their sum, and (records != nullptr) one gprof_lost per (kind,
  // record type, CPU) with a count.
  uint64_t KernelLost(std::vector<gprof_lost>* records) const;

  uint64_t LoaderLost() const;

  // Intervals that ended just as the programs were detached, before their thread took its stacks
  // (one per CPU at most): written without them.
  void EmitSwitchedIn();

  // Threads still off-CPU or inside a futex call when recording stops: their intervals end now.
  void EmitUnfinished(uint64_t now);

  void EmitUnfinishedOffCpu(uint32_t tid, const gprof_offcpu_pending& entry, uint64_t now);

  void EmitUnfinishedFutex(uint32_t tid, const gprof_syscall_pending& entry, uint64_t now);

  // A GPROF_REC_WAIT_COUNT record for each reason whose totals in the short_waits map grew since
  // the last call: what it added since then.
  void EmitWaitCounts(uint64_t now);

  // Quick page faults of threads still alive, and spinning-lock contention per CPU.
  void EmitCounts();

  void EmitSymbols();

  void EmitNotes();
  // One line of how the recording went, as a message record of kernel.gpr (and in notes).
  void EmitNote(const std::string& note);
};

}  // namespace gprof::bpf
