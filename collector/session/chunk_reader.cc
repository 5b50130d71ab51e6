#include "collector/session/chunk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_d_forceIgnoreChecksum
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "collector/session/session_files.h"

namespace gprof::collector {
namespace {

std::string Hex(uint64_t value) {
  char text[24];
  snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// A session file read with pread, chunk by chunk: memory stays at one chunk whatever the file's
// size, and a file that shrinks while it is read (a writer still at work on a damaged disk, a
// user's truncate) reads as cut short where a memory mapping would die of SIGBUS.
class SessionFile {
 public:
  static Expected<std::unique_ptr<SessionFile>> Open(int dir_fd, const std::string& name) {
    auto opened = OpenSessionFile(dir_fd, name);
    if (!opened.ok()) return opened.status();
    int fd = opened->release();
    struct stat info {};
    fstat(fd, &info);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<SessionFile>(new SessionFile(fd, static_cast<uint64_t>(info.st_size)));
  }
  ~SessionFile() { close(fd_); }
  SessionFile(const SessionFile&) = delete;
  SessionFile& operator=(const SessionFile&) = delete;

  // The size when opened: where reading stops even if the writer appends meanwhile.
  uint64_t size() const { return size_; }

  // The first offset at or after `offset` that holds data: past a hole (a range never written,
  // which reads as zeros and so is never a chunk), without reading it. The size when there is no
  // data left; `offset` itself where the filesystem cannot say.
  uint64_t NextData(uint64_t offset) const {
    if (offset >= size_) return size_;
    off_t data = lseek(fd_, static_cast<off_t>(offset), SEEK_DATA);
    if (data < 0) return errno == ENXIO ? size_ : offset;
    return std::min(static_cast<uint64_t>(data), size_);
  }
  // The first offset at or after `offset` in a hole (the size when none is before the end).
  uint64_t NextHole(uint64_t offset) const {
    if (offset >= size_) return size_;
    off_t hole = lseek(fd_, static_cast<off_t>(offset), SEEK_HOLE);
    return hole < 0 ? size_ : std::min(static_cast<uint64_t>(hole), size_);
  }

  // Up to `length` bytes at `offset` into `out`, resized to what could be read: fewer at the end
  // of the file, or where it has shrunk since it was opened.
  void Read(uint64_t offset, uint64_t length, std::vector<uint8_t>* out) const {
    length = offset >= size_ ? 0 : std::min(length, size_ - offset);
    out->resize(length);
    uint64_t done = 0;
    while (done < length) {
      ssize_t n = pread(fd_, out->data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // shrunk, or unreadable from here: what came before is kept
      done += static_cast<uint64_t>(n);
    }
    out->resize(done);
  }

 private:
  SessionFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_;
  uint64_t size_;
};

Status CheckFileHeader(std::span<const uint8_t> head, uint64_t file_size,
                       format::FileHeader* header) {
  if (head.size() < sizeof(format::FileHeader)) {
    return Status::Error(StatusCode::kInvalid,
                         "not a gprof-run session file: " + std::to_string(head.size()) +
                             " bytes, shorter than the file header");
  }
  memcpy(header, head.data(), sizeof(*header));
  if (memcmp(header->magic, format::kFileMagic, sizeof(header->magic)) != 0) {
    return Status::Error(StatusCode::kInvalid,
                         "not a gprof-run session file (bad magic at offset 0)");
  }
  if (header->version > format::kFormatVersion) {
    return Status::Error(StatusCode::kUnsupported,
                         "written by a newer gprof-run (format version " +
                             std::to_string(header->version) + ", this build reads up to " +
                             std::to_string(format::kFormatVersion) + ")");
  }
  if (header->header_size < sizeof(format::FileHeader) || header->header_size > file_size) {
    return Status::Error(StatusCode::kInvalid, "corrupt file header (header size " +
                                                   std::to_string(header->header_size) + ")");
  }
  if (header->clock_id != format::kClockMonotonic) {
    return Status::Error(StatusCode::kInvalid,
                         "unknown clock id " + std::to_string(header->clock_id));
  }
  return {};
}

// Offset of the next chunk magic at or after `from`, or the file's size when there is none. Holes
// are skipped, not read: a sparse file of 100 GB with a few chunks is read in the time of those.
// The first window is small and each next one twice as large: a file of many small damaged
// chunks costs a few KiB a chunk, not a window of 1 MiB each.
uint64_t FindChunkMagic(const SessionFile& file, uint64_t from, std::vector<uint8_t>* window,
                        ReadProgress* progress) {
  constexpr uint64_t kFirstWindowBytes = 4u << 10, kMaxWindowBytes = 1u << 20;
  const uint32_t magic = format::kChunkMagic;
  uint64_t window_bytes = kFirstWindowBytes;
  for (uint64_t start = file.NextData(from); start < file.size();) {
    if (progress != nullptr) progress->At(start);
    file.Read(start, window_bytes, window);
    if (window->size() < sizeof(magic)) break;
    if (const void* found = memmem(window->data(), window->size(), &magic, sizeof(magic)))
      return start + static_cast<uint64_t>(static_cast<const uint8_t*>(found) - window->data());
    if (window->size() < window_bytes) break;  // the end, or the file shrank
    // The next window overlaps this one by the magic's length less one: a magic across the
    // boundary is found there.
    start = file.NextData(start + window->size() - sizeof(magic) + 1);
    window_bytes = std::min(window_bytes * 2, kMaxWindowBytes);
  }
  return file.size();
}

// Whether a chunk magic is at `offset`.
bool ChunkMagicAt(const SessionFile& file, uint64_t offset, std::vector<uint8_t>* bytes) {
  file.Read(offset, sizeof(uint32_t), bytes);
  uint32_t word = 0;
  if (bytes->size() == sizeof(word)) memcpy(&word, bytes->data(), sizeof(word));
  return word == format::kChunkMagic;
}

class ChunkDecoder {
 public:
  static constexpr uint64_t kMaxExpansion = 1024;
  static constexpr uint64_t kExpansionFloorBytes = 1u << 20;  // smaller chunks cost little

  // zstd's own checksum of the decoded bytes is not verified: the chunk's checksum, checked first,
  // already covers every stored byte, and hashing the decoded ones again costs a pass over data
  // several times larger.
  ChunkDecoder() : dctx_(ZSTD_createDCtx(), ZSTD_freeDCtx) {
    if (dctx_)
      ZSTD_DCtx_setParameter(dctx_.get(), ZSTD_d_forceIgnoreChecksum, ZSTD_d_ignoreChecksum);
  }

  // Decodes the payload of a validated chunk header into `raw`; an error text on failure.
  std::string Decode(const format::ChunkHeader& chunk, std::span<const uint8_t> stored,
                     std::vector<uint8_t>* raw) {
    if (format::Fnv1a32(stored.data(), stored.size()) != chunk.payload_checksum) {
      return "payload checksum mismatch";
    }
    switch (static_cast<format::Compression>(chunk.compression)) {
      case format::Compression::kNone:
        if (chunk.raw_size != chunk.stored_size) return "raw chunk with mismatched sizes";
        raw->assign(stored.begin(), stored.end());
        return {};
      case format::Compression::kZstd: {
        // 64 MiB of zeros is 2 KiB of zstd: a file of such chunks would cost 15 ms of decoding
        // each, a minute for a file of 4 MB. The recorders' records (times, ids, addresses) come
        // out 3-8 times smaller at the writers' level; past kMaxExpansion a chunk is refused.
        if (chunk.raw_size > kExpansionFloorBytes &&
            chunk.raw_size / std::max<uint64_t>(chunk.stored_size, 1) > kMaxExpansion) {
          return "would decompress to " + std::to_string(chunk.raw_size) + " bytes from " +
                 std::to_string(chunk.stored_size) + ", more than " +
                 std::to_string(kMaxExpansion) + " times: no recorder's records compress so";
        }
        raw->resize(chunk.raw_size);
        size_t n = ZSTD_decompressDCtx(dctx_.get(), raw->data(), raw->size(), stored.data(),
                                       stored.size());
        if (ZSTD_isError(n)) return std::string("zstd: ") + ZSTD_getErrorName(n);
        if (n != chunk.raw_size) return "decompressed size differs from the chunk header";
        return {};
      }
    }
    return "unknown compression " + std::to_string(chunk.compression);
  }

 private:
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx_;
};

// Walks the records of one decoded chunk; returns an error text if they do not tile the payload
// exactly (the records before the fault have been visited).
std::string VisitRecords(std::span<const uint8_t> raw, uint64_t chunk_offset, uint32_t writer_pid,
                         uint64_t file_records, uint32_t record_count, const RecordVisitor& visit,
                         uint64_t* visited) {
  uint64_t offset = 0;
  uint32_t count = 0;
  while (offset < raw.size()) {
    format::RecordHeader header;
    if (raw.size() - offset < sizeof(header))
      return "record header cut at payload offset " + std::to_string(offset);
    memcpy(&header, raw.data() + offset, sizeof(header));
    if (header.size < sizeof(header) || header.size > raw.size() - offset) {
      return "record of size " + std::to_string(header.size) + " at payload offset " +
             std::to_string(offset) + " overruns the chunk";
    }
    visit(RecordView{header.type, raw.subspan(offset, header.size), chunk_offset, offset,
                     writer_pid, file_records});
    offset += header.size;
    ++count;
    ++*visited;
  }
  if (count != record_count) {
    return "chunk holds " + std::to_string(count) + " records, header says " +
           std::to_string(record_count);
  }
  return {};
}

}  // namespace

Expected<ChunkFileSummary> ReadChunkFile(const std::string& path, const RecordVisitor& visit,
                                         std::vector<Diagnostic>* diagnostics,
                                         ReadProgress* progress) {
  return ReadChunkFile(AT_FDCWD, path, path, visit, diagnostics, progress);
}

Expected<ChunkFileSummary> ReadChunkFile(int dir_fd, const std::string& name,
                                         const std::string& path, const RecordVisitor& visit,
                                         std::vector<Diagnostic>* diagnostics,
                                         ReadProgress* progress) {
  auto opened = SessionFile::Open(dir_fd, name);
  if (!opened.ok()) return opened.status();
  const SessionFile& file = *opened.value();
  if (progress != nullptr) {
    size_t slash = name.rfind('/');
    progress->StartFile(slash == std::string::npos ? name : name.substr(slash + 1), file.size());
  }

  ChunkFileSummary summary;
  std::vector<uint8_t> bytes;  // what was last read: a header, a chunk's payload, a scan window
  file.Read(0, sizeof(format::FileHeader), &bytes);
  Status header_status = CheckFileHeader(bytes, file.size(), &summary.header);
  if (!header_status.ok()) return header_status;

  auto report = [&](uint64_t offset, std::string message) {
    diagnostics->push_back(Diagnostic{path, offset, std::move(message)});
  };

  auto plausible = [](const format::ChunkHeader& chunk) {
    return chunk.magic == format::kChunkMagic && chunk.raw_size <= format::kMaxChunkRawSize &&
           chunk.stored_size <= format::kMaxChunkRawSize * 2ull;
  };
  // What the chunk headers announce, up to the first damaged one: one small read per chunk.
  uint64_t announced = 0;
  for (uint64_t at = summary.header.header_size;;) {
    format::ChunkHeader chunk;
    file.Read(at, sizeof(chunk), &bytes);
    if (bytes.size() < sizeof(chunk)) break;
    memcpy(&chunk, bytes.data(), sizeof(chunk));
    if (!plausible(chunk) || chunk.stored_size > file.size() - at - sizeof(chunk)) break;
    // No more than its payload could hold: the count is only a hint to size vectors with.
    announced +=
        std::min<uint64_t>(chunk.record_count, chunk.raw_size / sizeof(format::RecordHeader));
    at += sizeof(chunk) + chunk.stored_size;
  }

  // A file the flight recorder trimmed: zeros where the chunks of old data were.
  const bool trimmed_file = (summary.header.features & format::kFeatureTrimmed) != 0;
  auto zeros = [](std::span<const uint8_t> span) {
    return std::all_of(span.begin(), span.end(), [](uint8_t byte) { return byte == 0; });
  };
  bool after_trim = false;

  ChunkDecoder decoder;
  std::vector<uint8_t> raw;
  uint64_t expected_sequence = 0;
  uint64_t offset = summary.header.header_size;
  while (offset < file.size()) {
    if (progress != nullptr) progress->At(offset);
    format::ChunkHeader chunk;
    file.Read(offset, sizeof(chunk), &bytes);
    if (bytes.size() < sizeof(chunk)) {
      report(offset, "file ends inside a chunk header (" + std::to_string(bytes.size()) +
                         " bytes): the writer was stopped mid-chunk; earlier chunks kept");
      break;
    }
    memcpy(&chunk, bytes.data(), sizeof(chunk));
    if (trimmed_file && zeros(bytes)) {
      uint64_t next = FindChunkMagic(file, offset + 1, &bytes, progress);
      summary.trimmed_bytes += next - offset;
      after_trim = true;
      offset = next;
      continue;
    }
    if (!plausible(chunk)) {
      uint64_t next = FindChunkMagic(file, offset + 1, &bytes, progress);
      // A hole (bytes never written: a file extended by truncate or a seek) is not the writer's
      // damage, but says the same: what was there is gone.
      bool hole = file.NextHole(offset) < next;
      report(offset, "damaged chunk header (" + Hex(chunk.magic) + ")" +
                         (hole ? ", then a hole in the file (bytes never written)" : "") +
                         "; skipped " + std::to_string(next - offset) + " bytes to the next chunk");
      ++summary.damaged_chunks;
      offset = next;
      continue;
    }
    uint64_t payload_offset = offset + sizeof(chunk);
    file.Read(payload_offset, chunk.stored_size, &bytes);
    if (bytes.size() < chunk.stored_size) {
      report(offset, "file ends inside chunk " + std::to_string(chunk.sequence) + " (" +
                         std::to_string(bytes.size()) + " of " + std::to_string(chunk.stored_size) +
                         " bytes present): the writer was stopped mid-chunk; earlier chunks kept");
      break;
    }
    std::string error = decoder.Decode(chunk, bytes, &raw);
    if (!error.empty()) {
      report(offset,
             "chunk " + std::to_string(chunk.sequence) + " unreadable: " + error + "; skipped");
      ++summary.damaged_chunks;
      // Its header held (it is plausible and fits the file): where it says it ends, the next
      // chunk usually starts; else the header was damaged too, and the next is searched for.
      uint64_t end = payload_offset + chunk.stored_size;
      offset = ChunkMagicAt(file, end, &bytes) ? end
                                                : FindChunkMagic(file, offset + 1, &bytes, progress);
      continue;
    }
    if (after_trim && chunk.sequence > expected_sequence) {
      summary.trimmed_chunks += chunk.sequence - expected_sequence;
    } else if (chunk.sequence != expected_sequence) {
      report(offset, "chunk sequence jumps from " + std::to_string(expected_sequence) + " to " +
                         std::to_string(chunk.sequence) + ": chunks in between are missing");
    }
    expected_sequence = chunk.sequence + 1;
    after_trim = false;
    error = VisitRecords(raw, offset, summary.header.pid, announced, chunk.record_count, visit,
                         &summary.records);
    if (!error.empty()) {
      report(offset, "chunk " + std::to_string(chunk.sequence) + ": " + error);
      ++summary.damaged_chunks;
    }
    ++summary.chunks;
    offset = payload_offset + chunk.stored_size;
  }
  return summary;
}

}  // namespace gprof::collector
