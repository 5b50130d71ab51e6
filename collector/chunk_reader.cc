#include "chunk_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace gprof::collector {
namespace {

std::string Hex(uint64_t value) {
  char text[24];
  snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// A read-only mapping of a whole file: session files can be large, and the page cache, not the
// collector's heap, should hold them while they are decoded once, front to back.
class MappedFile {
 public:
  static Expected<std::shared_ptr<MappedFile>> Open(const std::string& path) {
    // O_NONBLOCK: a FIFO in the session directory must not hang the reader (it is refused below).
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Status::Error(std::string("cannot open: ") + strerror(errno));
    struct stat info {};
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      close(fd);
      return Status::Error("not a regular file");
    }
    auto file = std::shared_ptr<MappedFile>(new MappedFile());
    file->size_ = static_cast<size_t>(info.st_size);
    if (file->size_ > 0) {
      void* base = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (base == MAP_FAILED) {
        close(fd);
        return Status::Error(std::string("cannot map: ") + strerror(errno));
      }
      madvise(base, file->size_, MADV_SEQUENTIAL);
      file->base_ = static_cast<const uint8_t*>(base);
    }
    close(fd);
    return file;
  }
  ~MappedFile() {
    if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
  }
  std::span<const uint8_t> bytes() const { return {base_, size_}; }

 private:
  MappedFile() = default;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

Status CheckFileHeader(std::span<const uint8_t> data, format::FileHeader* header) {
  if (data.size() < sizeof(format::FileHeader)) {
    return Status::Error("not a gprof-run session file: " + std::to_string(data.size()) +
                         " bytes, shorter than the file header");
  }
  memcpy(header, data.data(), sizeof(*header));
  if (memcmp(header->magic, format::kFileMagic, sizeof(header->magic)) != 0) {
    return Status::Error("not a gprof-run session file (bad magic at offset 0)");
  }
  if (header->version > format::kFormatVersion) {
    return Status::Error("written by a newer gprof-run (format version " +
                         std::to_string(header->version) + ", this build reads up to " +
                         std::to_string(format::kFormatVersion) + ")");
  }
  if (header->header_size < sizeof(format::FileHeader) || header->header_size > data.size()) {
    return Status::Error("corrupt file header (header size " + std::to_string(header->header_size) +
                         ")");
  }
  if (header->clock_id != format::kClockMonotonic) {
    return Status::Error("unknown clock id " + std::to_string(header->clock_id));
  }
  return {};
}

// Offset of the next chunk magic at or after `from`, or data.size() when there is none.
uint64_t FindChunkMagic(std::span<const uint8_t> data, uint64_t from) {
  for (uint64_t offset = from; offset + sizeof(uint32_t) <= data.size(); ++offset) {
    uint32_t word;
    memcpy(&word, data.data() + offset, sizeof(word));
    if (word == format::kChunkMagic) return offset;
  }
  return data.size();
}

class ChunkDecoder {
 public:
  ChunkDecoder() : dctx_(ZSTD_createDCtx(), ZSTD_freeDCtx) {}

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
                                         std::vector<Diagnostic>* diagnostics) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  std::span<const uint8_t> data = file.value()->bytes();

  ChunkFileSummary summary;
  Status header_status = CheckFileHeader(data, &summary.header);
  if (!header_status.ok()) return header_status;

  auto report = [&](uint64_t offset, std::string message) {
    diagnostics->push_back(Diagnostic{path, offset, std::move(message)});
  };

  auto plausible = [](const format::ChunkHeader& chunk) {
    return chunk.magic == format::kChunkMagic && chunk.raw_size <= format::kMaxChunkRawSize &&
           chunk.stored_size <= format::kMaxChunkRawSize * 2ull;
  };
  uint64_t announced = 0;
  for (uint64_t at = summary.header.header_size; data.size() - at >= sizeof(format::ChunkHeader);) {
    format::ChunkHeader chunk;
    memcpy(&chunk, data.data() + at, sizeof(chunk));
    if (!plausible(chunk) || chunk.stored_size > data.size() - at - sizeof(chunk)) break;
    announced += chunk.record_count;
    at += sizeof(chunk) + chunk.stored_size;
  }

  ChunkDecoder decoder;
  std::vector<uint8_t> raw;
  uint64_t expected_sequence = 0;
  uint64_t offset = summary.header.header_size;
  while (offset < data.size()) {
    format::ChunkHeader chunk;
    if (data.size() - offset < sizeof(chunk)) {
      report(offset, "file ends inside a chunk header (" + std::to_string(data.size() - offset) +
                         " bytes): the writer was stopped mid-chunk; earlier chunks kept");
      break;
    }
    memcpy(&chunk, data.data() + offset, sizeof(chunk));
    if (!plausible(chunk)) {
      uint64_t next = FindChunkMagic(data, offset + 1);
      report(offset, "damaged chunk header (" + Hex(chunk.magic) + "); skipped " +
                         std::to_string(next - offset) + " bytes to the next chunk");
      ++summary.damaged_chunks;
      offset = next;
      continue;
    }
    uint64_t payload_offset = offset + sizeof(chunk);
    if (chunk.stored_size > data.size() - payload_offset) {
      report(offset, "file ends inside chunk " + std::to_string(chunk.sequence) + " (" +
                         std::to_string(data.size() - payload_offset) + " of " +
                         std::to_string(chunk.stored_size) +
                         " bytes present): the writer was stopped mid-chunk; earlier chunks kept");
      break;
    }
    std::span<const uint8_t> stored = data.subspan(payload_offset, chunk.stored_size);
    std::string error = decoder.Decode(chunk, stored, &raw);
    if (!error.empty()) {
      report(offset,
             "chunk " + std::to_string(chunk.sequence) + " unreadable: " + error + "; skipped");
      ++summary.damaged_chunks;
      offset = FindChunkMagic(data, offset + 1);
      continue;
    }
    if (chunk.sequence != expected_sequence) {
      report(offset, "chunk sequence jumps from " + std::to_string(expected_sequence) + " to " +
                         std::to_string(chunk.sequence) + ": chunks in between are missing");
    }
    expected_sequence = chunk.sequence + 1;
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
