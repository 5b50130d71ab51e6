// On-disk format of every recording file in a session directory.
//
// A file is a FileHeader followed by chunks. Each chunk is a ChunkHeader and a payload of
// `stored_size` bytes, zstd-compressed or raw as `compression` says; the decompressed payload is a
// run of records, each starting with a RecordHeader whose `size` covers the whole record, so a
// reader skips record types it does not know. Chunks are written whole and in order (`sequence`
// counts up from 0), so a file cut short by a crash holds every chunk but the last, and a reader
// can resync on kChunkMagic after a damaged one.
//
// Every struct here crosses a process boundary: fixed-width fields, explicit padding, no bool, a
// size assertion, and enums that only grow at the end. The injected library (inject/), gprof-run's
// kernel recorder (bpf/) and the collector (collector/) all include this header.
#pragma once

#include <cstdint>

namespace gprof::format {

inline constexpr char kFileMagic[8] = {'G', 'P', 'R', 'O', 'F', 'R', 'U', 'N'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kClockMonotonic = 1;  // CLOCK_MONOTONIC, the one clock of a session
// The injected library's writer thread names itself so (a ProfilerThreadRecord names it too; the
// name is how sessions of older libraries tell it).
inline constexpr char kWriterThreadName[] = "gprof-writer";

enum class Source : uint32_t {
  kInject = 1,  // libgprof_inject.so inside a process of the tree: CUDA calls, thread names
  kKernel = 2,  // gprof-run's BPF recorder: scheduler, wakeups, futexes, kernel stacks
};

struct FileHeader {
  char magic[8];         // kFileMagic
  uint32_t version;      // kFormatVersion of the writer
  uint32_t header_size;  // sizeof(FileHeader) at the writer; readers skip what they do not know
  uint32_t source;       // Source
  uint32_t clock_id;     // kClockMonotonic
  uint64_t features;     // FileFeatures
  uint32_t pid;          // writing process (the target process for kInject)
  uint32_t reserved0;
  uint64_t start_monotonic_ns;
  uint64_t start_realtime_ns;  // wall clock at the same moment, to print dates
  uint64_t reserved1;
};
static_assert(sizeof(FileHeader) == 64);

enum FileFeatures : uint64_t {
  // --flight-recorder: chunks of data older than the seconds kept were punched out of the file
  // (zeros where they were, the file's length unchanged); the chunks of state (names, maps,
  // stacks: what later records refer to) were all kept. A reader skips the zeros to the next chunk.
  kFeatureTrimmed = 1u << 0,
};

inline constexpr uint32_t kChunkMagic = 0x4b4e4843;      // "CHNK" in a little-endian dump
inline constexpr uint32_t kMaxChunkRawSize = 64u << 20;  // a reader refuses anything larger

enum class Compression : uint32_t { kNone = 0, kZstd = 1 };

struct ChunkHeader {
  uint32_t magic;        // kChunkMagic
  uint32_t compression;  // Compression
  uint32_t stored_size;  // payload bytes that follow this header in the file
  uint32_t raw_size;     // payload bytes after decompression
  uint32_t record_count;
  uint32_t payload_checksum;  // Fnv1a32 of the stored payload bytes
  uint64_t sequence;          // 0, 1, 2, ...: a gap means a chunk was lost
};
static_assert(sizeof(ChunkHeader) == 32);

struct RecordHeader {
  uint32_t size;  // whole record, header included
  uint16_t type;  // RecordType
  uint16_t reserved;
};
static_assert(sizeof(RecordHeader) == 8);

// Record types. Values 1..999 come from the injected library, 1000.. from the kernel recorder
// (inject/format/kernel_events.h defines those). Never reuse or renumber a value.
enum RecordType : uint16_t {
  kProcessInfo = 1,
  kApiName = 2,
  kApiCall = 3,
  kThreadName = 4,
  kMapsSnapshot = 5,
  kDropped = 6,
  kMessage = 7,
  kCaptureInfo = 8,
  kGpuName = 9,
  kGpuKernel = 10,
  kGpuMemcpy = 11,
  kGpuMemset = 12,
  kGpuSync = 13,
  kGpuDropped = 14,
  kClockOffset = 15,
  kCallStack = 16,
  kRecordingStopped = 17,
  kGpuOverhead = 18,
  kGpuDevice = 19,
  kStackCopy = 20,
  kProfilerThread = 21,
  kNamespaces = 22,
  kNvtxEvent = 23,
  kNcclEvent = 24,
};

// Once per file, first: who is writing. Followed by `exe_len` bytes of the executable path and
// `cmdline_len` bytes of /proc/self/cmdline (arguments separated by NUL).
struct ProcessInfoRecord {
  RecordHeader header;
  uint32_t pid;
  uint32_t ppid;
  uint64_t time_ns;
  uint32_t exe_len;
  uint32_t cmdline_len;
};
static_assert(sizeof(ProcessInfoRecord) == 32);

enum NamespaceFlags : uint32_t {
  // The session's shared memory could not be attached (another IPC namespace, `unshare -i`): this
  // process recorded without the --max-size budget, and without the session's control, so it did
  // not see the command end and may have written after the report.
  kSizeBudgetUnreachable = 1u << 0,
  kSessionControlUnreachable = 1u << 1,
};

// Where the writing process runs, where that changes what its records mean; the file's first
// record (before ProcessInfoRecord) from the version that writes it. Every pid and tid in the file
// (the FileHeader's too) is the process's own, in `pid_namespace`: where that is not gprof-run's,
// a reader translates them with the kernel recorder's view of that namespace (gprof_task_new in
// kernel_events.h). Every time in the file is on the host's CLOCK_MONOTONIC already: the writer
// took its time namespace's offset off.
struct NamespacesRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t pid_namespace;           // inode of /proc/self/ns/pid; 0: unknown
  uint32_t profiler_pid_namespace;  // gprof-run's (from its environment); 0: unknown
  uint32_t pid;                     // getpid(), in pid_namespace
  uint32_t flags;                   // NamespaceFlags
  int64_t time_offset_ns;           // CLOCK_MONOTONIC here minus the host's, already taken off
};
static_assert(sizeof(NamespacesRecord) == 40);

enum class ApiDomain : uint32_t { kRuntime = 1, kDriver = 2 };

// api_id of a call seen through CUPTI: the domain above the callback id. Ids of the interposition
// path stay below 1 << 16.
inline constexpr uint32_t CuptiApiId(ApiDomain domain, uint32_t cbid) {
  return (static_cast<uint32_t>(domain) << 16) | (cbid & 0xffff);
}

// Names an api_id before the first ApiCallRecord that uses it. Followed by `name_len` bytes.
struct ApiNameRecord {
  RecordHeader header;
  uint32_t api_id;
  uint32_t domain;  // ApiDomain
  uint32_t name_len;
  uint32_t reserved;
};
static_assert(sizeof(ApiNameRecord) == 24);

enum ApiCallFlags : uint32_t {
  kApiCallHasStream = 1u << 0,  // `stream` is meaningful (0 is then the legacy default stream)
};

// One CUDA API call on one thread: the hot-path record.
struct ApiCallRecord {
  RecordHeader header;
  uint64_t enter_ns;
  uint64_t exit_ns;
  uint64_t stream;          // cudaStream_t value when kApiCallHasStream
  uint64_t correlation_id;  // CUPTI's correlation id, 0 when the call was seen by interposition
  uint32_t tid;             // kernel thread id
  uint32_t api_id;          // named by an ApiNameRecord
  int32_t return_code;      // cudaError_t / CUresult
  uint32_t flags;           // ApiCallFlags
};
static_assert(sizeof(ApiCallRecord) == 56);

// The name of a thread as the kernel knows it (/proc/self/task/TID/comm), each time it changes.
struct ThreadNameRecord {
  RecordHeader header;
  uint32_t tid;
  uint32_t reserved;
  uint64_t time_ns;
  char name[16];  // NUL-padded
};
static_assert(sizeof(ThreadNameRecord) == 40);

// A copy of /proc/self/maps, to resolve addresses (futex words, code) to mappings. Followed by
// `text_len` bytes.
struct MapsSnapshotRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t text_len;
  uint32_t reserved;
};
static_assert(sizeof(MapsSnapshotRecord) == 24);

// Records the writer could not keep (a thread's buffer was full), counted, never silent.
struct DroppedRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint64_t count;
  uint32_t tid;
  uint32_t reserved;
};
static_assert(sizeof(DroppedRecord) == 32);

enum class MessageLevel : uint32_t { kInfo = 0, kWarning = 1, kError = 2 };

// Something the writer wants the report to say. Followed by `text_len` bytes.
struct MessageRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t level;  // MessageLevel
  uint32_t text_len;
};
static_assert(sizeof(MessageRecord) == 24);

enum class CaptureMode : uint32_t {
  kInterposition = 1,  // CUDA runtime functions interposed; no GPU activity
  kCupti = 2,          // CUPTI callbacks and activity records
  // Nothing records this process's CUDA calls: CUPTI is not recording them, and interposition
  // cannot see them (no libcudart.so in the process: a runtime linked statically, or the driver
  // API called directly). The text says why.
  kNone = 3,
};

// How this process's CUDA calls are recorded, and why. Followed by `text_len` bytes: the libcupti
// path in use and how API calls are taken from it, or why CUPTI is not used (not found, taken by
// another tool, ...).
struct CaptureInfoRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t mode;           // CaptureMode
  uint32_t cupti_version;  // cuptiGetVersion(), 0 without CUPTI
  uint32_t text_len;
  uint32_t reserved;
};
static_assert(sizeof(CaptureInfoRecord) == 32);

// Names a GPU function (a kernel's mangled name, as CUPTI gives it) before the first record that
// uses `name_id`. Followed by `name_len` bytes.
struct GpuNameRecord {
  RecordHeader header;
  uint32_t name_id;
  uint32_t name_len;
};
static_assert(sizeof(GpuNameRecord) == 16);

// What the records below share: where and when on the GPU, and the API call that caused it
// (correlation_id = ApiCallRecord::correlation_id of the same process).
struct GpuPlacement {
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t correlation_id;
  uint64_t graph_node_id;  // 0: not launched from a CUDA graph
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  uint32_t graph_id;  // 0: not launched from a CUDA graph
};
static_assert(sizeof(GpuPlacement) == 48);

struct GpuKernelRecord {
  RecordHeader header;
  GpuPlacement placement;
  int32_t grid[3];
  int32_t block[3];
  uint32_t name_id;              // GpuNameRecord
  uint32_t shared_memory_bytes;  // static + dynamic
  uint32_t registers_per_thread;
  uint32_t reserved;
};
static_assert(sizeof(GpuKernelRecord) == 96);

// CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind values, kept as CUPTI numbers them.
struct GpuMemcpyRecord {
  RecordHeader header;
  GpuPlacement placement;
  uint64_t bytes;
  uint8_t copy_kind;  // CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, ...
  uint8_t src_kind;   // CUpti_ActivityMemoryKind: 1 pageable, 2 pinned, 3 device, ...
  uint8_t dst_kind;
  uint8_t async;  // 1: asynchronous with the host
  uint32_t reserved;
};
static_assert(sizeof(GpuMemcpyRecord) == 72);

struct GpuMemsetRecord {
  RecordHeader header;
  GpuPlacement placement;
  uint64_t bytes;
  uint32_t value;
  uint8_t memory_kind;  // CUpti_ActivityMemoryKind
  uint8_t async;
  uint16_t reserved;
};
static_assert(sizeof(GpuMemsetRecord) == 72);

// The host waited for the GPU: CUpti_ActivitySynchronization2.
struct GpuSyncRecord {
  RecordHeader header;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t correlation_id;
  uint32_t context_id;
  uint32_t stream_id;  // 0xffffffff: not a stream sync
  uint32_t
      type;  // CUpti_ActivitySynchronizationType: 1 event, 2 stream-wait-event, 3 stream, 4 context
  uint32_t event_id;
};
static_assert(sizeof(GpuSyncRecord) == 48);

// GPU activity records CUPTI could not keep (its buffers were full), for one context or in all.
struct GpuDroppedRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint64_t count;
  uint32_t context_id;
  uint32_t reserved;
};
static_assert(sizeof(GpuDroppedRecord) == 32);

// Host time the CUDA driver spent in a call on something other than the call's own work, as CUPTI
// reports it (CUpti_ActivityOverhead3): loading a module on the first launch of one of its kernels
// (CUDA's lazy loading, the default), in the call whose correlation id it carries. Timestamps on
// CUPTI's clock, like the GPU records.
struct GpuOverheadRecord {
  RecordHeader header;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t correlation_id;  // the API call it happened in; 0: none named
  uint32_t overhead_kind;   // CUpti_ActivityOverheadKind
  uint32_t tid;             // the kernel thread id, when CUPTI named the thread; else 0
};
static_assert(sizeof(GpuOverheadRecord) == 40);

// A GPU as CUPTI names it in one process (CUpti_ActivityDevice5): the process's CUDA ordinal for
// it, and its UUID, which is the same in every process that uses that GPU.
struct GpuDeviceRecord {
  RecordHeader header;
  uint32_t device_id;  // CUDA's ordinal in this process
  uint32_t reserved;
  uint8_t uuid[16];
};
static_assert(sizeof(GpuDeviceRecord) == 32);

// CUPTI's activity clock against CLOCK_MONOTONIC: GPU timestamps of this process, from `time_ns`
// on, are CLOCK_MONOTONIC + offset_ns until the next such record. Another library in the process
// (Kineto) can register its own timestamp callback and change CUPTI's clock, so this is measured,
// not assumed.
struct ClockOffsetRecord {
  RecordHeader header;
  uint64_t time_ns;
  int64_t offset_ns;  // cuptiGetTimestamp() - CLOCK_MONOTONIC
  uint64_t uncertainty_ns;
};
static_assert(sizeof(ClockOffsetRecord) == 32);

// The native stack of a thread at the exit of a slow CUDA call (the call is the thread's ApiCall
// with this enter_ns), innermost frame first. Followed by `frame_count` uint64 return addresses,
// then `text_len` bytes: one line per frame, "symbol+0xoffset" or empty where unknown. Written by
// injected libraries before StackCopyRecord replaced it; still read.
struct CallStackRecord {
  RecordHeader header;
  uint64_t enter_ns;
  uint32_t tid;
  uint32_t frame_count;
  uint32_t text_len;
  uint32_t reserved;
};
static_assert(sizeof(CallStackRecord) == 32);

// A thread at the exit of a slow CUDA call (the thread's ApiCall with this enter_ns), as the
// thread copied itself: the registers an unwinder starts from, taken in the copying function, and
// the top of its stack from `rsp` up. The collector unwinds and names it with the process's maps
// of `capture_ns`; the process itself never walks or names a stack, which takes the dynamic
// loader's lock. Followed by `copied_bytes` bytes of the stack; fewer than `requested_bytes` where
// the stack's mapping ended first. x86-64.
struct StackCopyRecord {
  RecordHeader header;
  uint64_t enter_ns;
  uint64_t capture_ns;  // CLOCK_MONOTONIC, the call's exit
  uint64_t rip;
  uint64_t rsp;
  uint64_t rbp;
  uint32_t tid;
  uint32_t copied_bytes;
  uint32_t requested_bytes;
  int32_t error;  // the errno of a failed copy (nothing copied), else 0
};
static_assert(sizeof(StackCopyRecord) == 64);

enum class ProfilerThreadRole : uint32_t {
  kWriter = 1,  // the injected library's writer thread
  kCupti = 2,   // a thread of CUPTI's own that ran the injected library's buffer callbacks
};

// A thread of this process that is gprof-run's, not the program's (from the time it was seen
// being one): the diagnosis never makes it a cause, a holder or a link of a chain, and what it
// delayed is gprof-run's own cost.
struct ProfilerThreadRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t tid;
  uint32_t role;  // ProfilerThreadRole
};
static_assert(sizeof(ProfilerThreadRecord) == 24);

enum class StopCause : uint32_t {
  kWriteFailed = 1,    // the session file could not be written (disk full, I/O error)
  kProfilerEnded = 2,  // gprof-run, which started the process tree, is gone
  kSessionFull = 3,    // (sessions of earlier versions) another writer found the disk full
  kDiskRoom = 4,       // the next chunk would have left less than the disk margin (disk_room.h)
  kFileLost = 5,       // the program took the file's descriptor and the file could not be reopened
  kSessionClosed = 6,  // the command ended: gprof-run closed the session while this process ran on
  kDirectoryLost = 7,  // the session directory was not at its path as gprof-run made it: no file
  kSharedStateUnreachable = 8,  // (sessions of earlier versions) no shared memory: no records
  kFileSizeLimit = 9,  // the next chunk would have passed the process's RLIMIT_FSIZE (ulimit -f)
  kMemoryLimit = 10,   // a finite RLIMIT_AS or RLIMIT_DATA (error: which): nothing recorded
  kThreadLimit = 11,   // the writer thread could not be started (RLIMIT_NPROC): nothing recorded
  kFileNotCreated = 12,  // the session file could not be created (error: errno): nothing recorded
};

// The cause as session.json and report.json word it.
inline const char* StopCauseWord(StopCause cause) {
  switch (cause) {
    case StopCause::kWriteFailed:
      return "write_failed";
    case StopCause::kProfilerEnded:
      return "profiler_ended";
    case StopCause::kSessionFull:
      return "session_full";
    case StopCause::kDiskRoom:
      return "disk_room";
    case StopCause::kFileLost:
      return "file_lost";
    case StopCause::kSessionClosed:
      return "session_closed";
    case StopCause::kDirectoryLost:
      return "directory_lost";
    case StopCause::kSharedStateUnreachable:
      return "shared_memory_unreachable";
    case StopCause::kFileSizeLimit:
      return "file_size_limit";
    case StopCause::kMemoryLimit:
      return "memory_limit";
    case StopCause::kThreadLimit:
      return "thread_limit";
    case StopCause::kFileNotCreated:
      return "file_not_created";
  }
  return "unknown";
}

// This file's recording stopped at time_ns; what the process did after is not recorded. Followed
// by `text_len` bytes: the reason in words. Written when it stops; at the end of the process once
// more (the same time and cause) when records were lost since: a reader adds the counts up.
struct RecordingStoppedRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint32_t cause;         // StopCause
  int32_t error;          // the errno of a failed write, else 0
  uint64_t records_lost;  // records that were ready to be written when it stopped
  uint32_t text_len;
  uint32_t reserved;
};
static_assert(sizeof(RecordingStoppedRecord) == 40);

enum class NvtxEventKind : uint16_t {
  kPush = 1,            // a push/pop range opens on `tid` (nvtxRangePush*, nvtxDomainRangePushEx)
  kPop = 2,             // the innermost open push/pop range of `domain_id` on `tid` closes
  kStart = 3,           // a start/end range `range_id` opens (it may end on another thread)
  kEnd = 4,             // start/end range `range_id` closes
  kMark = 5,            // an instant
  kDomainCreate = 6,    // `domain_id` is named by the text
  kRegisterString = 7,  // `string_id` (of `domain_id`) is the text
  kNameCategory = 8,    // `category` of `domain_id` is named by the text
  kNameThread = 9,      // the thread `category` (an OS thread id) is named by the text
};

// One NVTX call of the program (inject/nvtx_tool.cc), on thread `tid`. Followed by `text_len`
// bytes: the ad-hoc message (at most kNvtxMaxText bytes, cut there; UTF-16/32 messages kept as
// ASCII with '?' for the rest), or the name a kDomainCreate/kRegisterString/kNameCategory/
// kNameThread gives. A message given as a registered string carries its `string_id` instead and
// no text. Domain 0 is NVTX's default domain; ids are the process's own.
struct NvtxEventRecord {
  RecordHeader header;
  uint64_t time_ns;
  uint64_t range_id;   // kStart, kEnd: the id nvtxRangeStart* returned; else 0
  uint32_t tid;        // kernel thread id of the calling thread
  uint32_t domain_id;  // 0: the default domain
  uint32_t string_id;  // the message as a registered string; 0: none (the text is the message)
  uint32_t category;   // the event's category (0: none); kNameThread: the thread named
  uint16_t kind;       // NvtxEventKind
  uint16_t text_len;
  uint32_t reserved;
};
static_assert(sizeof(NvtxEventRecord) == 48);
inline constexpr uint32_t kNvtxMaxText = 216;

enum class NcclEventKind : uint16_t {
  kCollective = 1,  // a collective enqueued on a communicator (ncclProfileColl)
  kP2p = 2,         // a send or receive enqueued (ncclProfileP2p)
  kCommInit = 3,    // NCCL initialised the plugin for a communicator: rank, size, version, chain
};

enum NcclEventFlags : uint16_t {
  kNcclHasSeqNumber = 1u << 0,  // `seq_number` is NCCL's own, per communicator
  kNcclHasCommHash = 1u << 1,   // `comm_hash` is NCCL's (v2/v3 descriptors, v4+ init)
  kNcclChained = 1u << 2,       // kCommInit: the user's own plugin was loaded and is called too
  kNcclChainFailed = 1u << 3,   // kCommInit: the user's plugin could not be loaded or lacks
                                // `version`: it is not called (the text names it)
};

// One NCCL profiler plugin event of the program (inject/nccl_profiler.cc). Followed by `func_len`
// bytes of the function's name ("AllReduce"; kCommInit: the user's chained plugin) and
// `datatype_len` bytes of the datatype's ("ncclFloat32"; kCommInit: the communicator's name).
// Times are the host's, on the recording clock: a collective's start is its enqueue's start
// (the rank arrived), its stop the enqueue's end; the GPU ran it later.
struct NcclEventRecord {
  RecordHeader header;
  uint64_t start_ns;
  uint64_t stop_ns;     // kCommInit: = start_ns
  uint64_t comm_hash;   // kNcclHasCommHash, else 0
  uint64_t seq_number;  // kNcclHasSeqNumber, else 0
  uint64_t count;       // elements
  uint32_t tid;         // the thread that started it
  int32_t rank;         // in the communicator
  int32_t n_ranks;      // 0: not told (v2/v3)
  int32_t peer;         // kP2p: the peer; kCollective: the root (-1: none)
  uint16_t kind;        // NcclEventKind
  uint16_t flags;       // NcclEventFlags
  uint16_t version;     // the plugin interface NCCL asked for (2..6)
  uint8_t func_len;
  uint8_t datatype_len;
};
static_assert(sizeof(NcclEventRecord) == 72);
inline constexpr uint32_t kNcclMaxText = 255;

// A record struct with its header filled in, for `trailing_bytes` more bytes after it.
template <typename Record>
Record MakeRecord(RecordType type, uint64_t trailing_bytes = 0) {
  Record record{};
  record.header.size = static_cast<uint32_t>(sizeof(Record) + trailing_bytes);
  record.header.type = type;
  return record;
}

// FNV-1a, 32 bit: cheap enough for the writer thread, enough to notice a damaged payload.
inline uint32_t Fnv1a32(const void* data, uint64_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t hash = 2166136261u;
  for (uint64_t i = 0; i < size; ++i) {
    hash = (hash ^ bytes[i]) * 16777619u;
  }
  return hash;
}

}  // namespace gprof::format
