#include "chunk_file_writer.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gprof {
namespace {

uint64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The writers share the target's CPUs: faster beats smaller. On recorded sessions (a futex
// ping-pong's kernel.gpr, a CUDA loop's inject file) level -1 took 0.83x and 0.88x the CPU of
// level 1 and wrote 0.86x and 1.01x its bytes (scripts/bench/zstd_levels.cc).
constexpr int kCompressionLevel = -1;

}  // namespace

ChunkFileWriter::~ChunkFileWriter() {
  Close();
  if (cctx_ != nullptr) zstd_->free_cctx(cctx_);
  free(compressed_);
}

int ChunkFileWriter::Create(const char* path, format::Source source, uint32_t pid) {
  if (fd_ >= 0) return EBUSY;
  if (!budget_.Charge(sizeof(format::FileHeader), 0, 0, closing_)) return EDQUOT;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int error = errno;
    budget_.Refund(sizeof(format::FileHeader));
    return error;
  }
  fd_ = fd;
  sequence_ = 0;
  bytes_written_ = 0;

  zstd_ = LoadZstd();
  if (zstd_ != nullptr && cctx_ == nullptr) {
    cctx_ = zstd_->create_cctx();
    if (cctx_ != nullptr) {
      zstd_->cctx_set_parameter(cctx_, ZSTD_c_compressionLevel, kCompressionLevel);
      zstd_->cctx_set_parameter(cctx_, ZSTD_c_checksumFlag, 1);
    }
  }

  format::FileHeader header{};
  memcpy(header.magic, format::kFileMagic, sizeof(header.magic));
  header.version = format::kFormatVersion;
  header.header_size = sizeof(header);
  header.source = static_cast<uint32_t>(source);
  header.clock_id = format::kClockMonotonic;
  header.pid = pid;
  header.start_monotonic_ns = ClockNs(CLOCK_MONOTONIC);
  header.start_realtime_ns = ClockNs(CLOCK_REALTIME);
  int error = WriteAll(&header, sizeof(header), nullptr, 0);
  if (error != 0) {  // no room even for the header: leave no half file behind
    close(fd_);
    fd_ = -1;
    unlink(path);
  }
  return error;
}

int ChunkFileWriter::Write(const void* records, size_t size, uint32_t record_count) {
  if (fd_ < 0) return EBADF;
  if (size == 0) return 0;
  if (size > format::kMaxChunkRawSize) return EMSGSIZE;
  // Recording stopped at the size cap: no need to compress what will not be written.
  if (!closing_ && budget_.stopped()) {
    budget_.Charge(0, size, record_count, false);
    return EDQUOT;
  }

  format::ChunkHeader chunk{};
  chunk.magic = format::kChunkMagic;
  chunk.raw_size = static_cast<uint32_t>(size);
  chunk.record_count = record_count;
  chunk.sequence = sequence_;

  const void* payload = records;
  size_t payload_size = size;
  chunk.compression = static_cast<uint32_t>(format::Compression::kNone);
  if (cctx_ != nullptr) {
    size_t bound = zstd_->compress_bound(size);
    if (bound > compressed_capacity_) {
      char* grown = static_cast<char*>(realloc(compressed_, bound));
      if (grown != nullptr) {
        compressed_ = grown;
        compressed_capacity_ = bound;
      }
    }
    if (bound <= compressed_capacity_) {
      size_t n = zstd_->compress2(cctx_, compressed_, compressed_capacity_, records, size);
      if (!zstd_->is_error(n) && n < size) {
        payload = compressed_;
        payload_size = n;
        chunk.compression = static_cast<uint32_t>(format::Compression::kZstd);
      }
    }
  }
  chunk.stored_size = static_cast<uint32_t>(payload_size);
  chunk.payload_checksum = format::Fnv1a32(payload, payload_size);
  if (!budget_.Charge(sizeof(chunk) + payload_size, size, record_count, closing_)) return EDQUOT;

  uint64_t whole_size = bytes_written_;
  int error = WriteAll(&chunk, sizeof(chunk), payload, payload_size);
  if (error == 0) {
    ++sequence_;
  } else if (bytes_written_ != whole_size) {
    // Part of the chunk got out (the disk filled up mid-write): cut it off, so the file stays a
    // run of whole chunks and a later chunk (a stop record, once there is room) follows the last
    // whole one.
    if (ftruncate(fd_, static_cast<off_t>(whole_size)) == 0 &&
        lseek(fd_, static_cast<off_t>(whole_size), SEEK_SET) >= 0) {
      bytes_written_ = whole_size;
    }
  }
  return error;
}

void ChunkFileWriter::Close() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
}

void ChunkFileWriter::Abandon() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  // The compression context and buffer are the parent's heap copies; dropping them without freeing
  // keeps the child away from allocator state that another parent thread may have left locked.
  cctx_ = nullptr;
  compressed_ = nullptr;
  compressed_capacity_ = 0;
}

int ChunkFileWriter::WriteAll(const void* first, size_t first_size, const void* second,
                              size_t second_size) {
  iovec parts[2] = {{const_cast<void*>(first), first_size},
                    {const_cast<void*>(second), second_size}};
  int count = second_size > 0 ? 2 : 1;
  iovec* next = parts;
  while (count > 0) {
    ssize_t n = writev(fd_, next, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes_written_ += static_cast<uint64_t>(n);
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= next->iov_len) {
      left -= next->iov_len;
      ++next;
      --count;
    }
    if (count > 0) {
      next->iov_base = static_cast<char*>(next->iov_base) + left;
      next->iov_len -= left;
    }
  }
  return 0;
}

}  // namespace gprof
