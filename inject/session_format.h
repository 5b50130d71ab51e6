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
  uint64_t features;     // reserved for optional capabilities, 0 today
  uint32_t pid;          // writing process (the target process for kInject)
  uint32_t reserved0;
  uint64_t start_monotonic_ns;
  uint64_t start_realtime_ns;  // wall clock at the same moment, to print dates
  uint64_t reserved1;
};
static_assert(sizeof(FileHeader) == 64);

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
// (bpf/kernel_events.h defines those). Never reuse or renumber a value.
enum RecordType : uint16_t {
  kProcessInfo = 1,
  kApiName = 2,
  kApiCall = 3,
  kThreadName = 4,
  kMapsSnapshot = 5,
  kDropped = 6,
  kMessage = 7,
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

enum class ApiDomain : uint32_t { kRuntime = 1, kDriver = 2 };

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
