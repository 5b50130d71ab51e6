// Reads one session file (inject/format/session_format.h) and hands out its records, salvaging
// what is valid: a damaged chunk is reported and skipped (the reader resyncs on the next chunk
// magic), a file cut short keeps every complete chunk before the cut. Every byte is bounds-checked.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collector/model/model.h"
#include "collector/session/read_progress.h"
#include "inject/format/session_format.h"
#include "inject/shared/status.h"

namespace gprof::collector {

struct RecordView {
  uint16_t type = 0;
  std::span<const uint8_t> bytes;  // the whole record, header included
  uint64_t chunk_offset = 0;       // file offset of the chunk that holds it, for messages
  uint64_t payload_offset = 0;     // of the record in its chunk's decoded payload, for messages
  uint32_t writer_pid = 0;         // FileHeader::pid of the file
  // The records the file's chunk headers announce, up to the first damaged one: a reader sizes
  // its vectors from it rather than growing them by doubling and moving.
  uint64_t file_records = 0;
};

struct ChunkFileSummary {
  format::FileHeader header{};
  uint64_t chunks = 0;
  uint64_t records = 0;
  uint64_t damaged_chunks = 0;
  // --flight-recorder (format::kFeatureTrimmed): the chunks of old data punched out by the writer,
  // which read as zeros and are skipped without a diagnostic, and their bytes.
  uint64_t trimmed_chunks = 0;
  uint64_t trimmed_bytes = 0;
};

using RecordVisitor = std::function<void(const RecordView&)>;

// Calls `visit` for every record of every valid chunk of `path`, in file order. Problems that leave
// part of the file readable are appended to `diagnostics` (file, offset, what); only a file that
// cannot be opened or has no valid header is an error (its message does not repeat the path).
// Holes in the file (never written) are skipped unread. `progress`, when given, is told how far
// the read is.
Expected<ChunkFileSummary> ReadChunkFile(const std::string& path, const RecordVisitor& visit,
                                         std::vector<Diagnostic>* diagnostics,
                                         ReadProgress* progress = nullptr);
// The same for the file `name` in the session directory `dir_fd` (session_files.h: only a regular
// file there, never through a link); diagnostics name it `path`.
Expected<ChunkFileSummary> ReadChunkFile(int dir_fd, const std::string& name,
                                         const std::string& path, const RecordVisitor& visit,
                                         std::vector<Diagnostic>* diagnostics,
                                         ReadProgress* progress = nullptr);

// Where a record sits, for a message about it: "record at byte N of the chunk's records".
inline std::string RecordPlace(const RecordView& record) {
  return "record at byte " + std::to_string(record.payload_offset) + " of the chunk's records";
}

// Copies a fixed-size record struct out of `bytes` when it is large enough; false otherwise.
template <typename T>
bool ReadRecord(std::span<const uint8_t> bytes, T* out) {
  if (bytes.size() < sizeof(T)) return false;
  __builtin_memcpy(out, bytes.data(), sizeof(T));
  return true;
}

// Copies a record struct that has grown at its end since its first version, `first_size` bytes
// long: a record from before then leaves the later fields as `out` had them; false when `bytes`
// holds less than the first version.
template <typename T>
bool ReadGrownRecord(std::span<const uint8_t> bytes, size_t first_size, T* out) {
  if (bytes.size() < first_size) return false;
  // A fixed-size copy for the usual case, inlined; a variable one is a call per record.
  if (bytes.size() >= sizeof(T))
    __builtin_memcpy(out, bytes.data(), sizeof(T));
  else
    __builtin_memcpy(out, bytes.data(), bytes.size());
  return true;
}

// A fixed-size, NUL-padded text field of a record ("comm"), without its padding.
inline std::string_view FixedString(const char* text, size_t capacity) {
  return {text, strnlen(text, capacity)};
}

// The `length` bytes that follow a fixed-size record struct T, or nothing if they run past the end.
template <typename T>
std::string_view TrailingText(std::span<const uint8_t> bytes, uint64_t length) {
  if (bytes.size() < sizeof(T) || bytes.size() - sizeof(T) < length) return {};
  return {reinterpret_cast<const char*>(bytes.data() + sizeof(T)), static_cast<size_t>(length)};
}

}  // namespace gprof::collector
