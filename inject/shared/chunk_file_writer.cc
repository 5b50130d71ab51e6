#include "inject/shared/chunk_file_writer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"

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

// Left under a file size limit for what closes a recording (its stop record).
constexpr uint64_t kLastWordsBytes = 4096;

// Whether a file `end` bytes long would pass RLIMIT_FSIZE as it is now (the program may change
// it): the write would raise SIGXFSZ, which kills the program (or gprof-run) by default.
bool PastFileSizeLimit(uint64_t end, bool closing) {
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return false;
  uint64_t allowed = limit.rlim_cur;
  if (!closing) allowed = allowed > kLastWordsBytes ? allowed - kLastWordsBytes : 0;
  return end > allowed;
}

}  // namespace

ChunkFileWriter::~ChunkFileWriter() {
  Close();
  if (cctx_ != nullptr) zstd_->free_cctx(cctx_);
  free(compressed_);
}

int ChunkFileWriter::Create(const char* path, format::Source source, uint32_t pid) {
  if (fd_ >= 0) return EBUSY;
  const char* slash = strrchr(path, '/');
  std::string directory =
      slash == nullptr ? "." : std::string(path, slash == path ? 1 : slash - path);
  // The directory as the caller names it (gprof-run's kernel recorder: /proc/self/fd/N).
  if (int error = own_directory_.Open(directory.c_str(), /*follow_last=*/true, nullptr);
      error != 0) {
    return error;
  }
  return Create(&own_directory_, slash == nullptr ? path : slash + 1, source, pid);
}

int ChunkFileWriter::Create(HeldDirectory* directory, const char* name, format::Source source,
                            uint32_t pid) {
  if (fd_ >= 0) return EBUSY;
  refused_for_room_ = false;
  directory_ = directory;
  name_ = name;
  int dir_fd = directory->Get();
  if (dir_fd < 0) return EBADF;
  if (!DiskRoomOf(dir_fd).Allows(sizeof(format::FileHeader),
                                 closing_ ? RoomUse::kClosing : RoomUse::kData)) {
    refused_for_room_ = true;
    return ENOSPC;
  }
  if (PastFileSizeLimit(sizeof(format::FileHeader), closing_)) return EFBIG;
  if (!budget_.Charge(sizeof(format::FileHeader), 0, 0, closing_)) return kSizeBudgetRefused;
  int fd =
      openat(dir_fd, name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    int error = errno;
    budget_.Refund(sizeof(format::FileHeader));
    return error;
  }
  fd_ = HoldHigh(fd);
  struct stat st {};
  fstat(fd_, &st);
  id_ = {st.st_dev, st.st_ino};
  // The umask narrowed 0644: a program's `umask 0777` would leave a file its owner cannot read
  // (the report then has nothing of it) nor open again (Reopen). Its owner always reads and
  // writes it; group and others keep no more than the umask left them, and never write.
  if (mode_t mode = (st.st_mode & 0644) | 0600; (st.st_mode & 07777) != mode) fchmod(fd_, mode);
  lost_ = "";
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
  header.start_monotonic_ns = MonotonicNs();  // the host's, in a time namespace too
  header.start_realtime_ns = ClockNs(CLOCK_REALTIME);
  if (trims_) header.features |= format::kFeatureTrimmed;
  trimmable_.clear();
  int error = WriteAll(&header, sizeof(header), nullptr, 0);
  if (error != 0) {  // no room even for the header: leave no half file behind
    close(fd_);
    fd_ = -1;
    if (int dir = directory_->Get(); dir >= 0) unlinkat(dir, name_.c_str(), 0);
  }
  return error;
}

int ChunkFileWriter::Write(const void* records, size_t size, uint32_t record_count,
                           bool trimmable) {
  refused_for_room_ = false;
  if (fd_ < 0) return EBADF;
  if (size == 0) return 0;
  if (size > format::kMaxChunkRawSize) return EMSGSIZE;
  // Recording stopped at the size cap: no need to compress what will not be written.
  if (!closing_ && budget_.stopped()) {
    budget_.Charge(0, size, record_count, false);
    return kSizeBudgetRefused;
  }
  if (!StillOurs()) {
    if (int error = Reopen(); error != 0) return error;
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
  if (PastFileSizeLimit(bytes_written_ + sizeof(chunk) + payload_size, closing_)) return EFBIG;
  if (!DiskRoomOf(fd_).Allows(sizeof(chunk) + payload_size,
                              closing_ ? RoomUse::kClosing : RoomUse::kData)) {
    refused_for_room_ = true;
    return ENOSPC;
  }
  if (!budget_.Charge(sizeof(chunk) + payload_size, size, record_count, closing_)) {
    return kSizeBudgetRefused;
  }

  uint64_t whole_size = bytes_written_;
  int error = WriteAll(&chunk, sizeof(chunk), payload, payload_size);
  if (error == 0) {
    ++sequence_;
    if (trims_ && trimmable) {
      trimmable_.push_back({whole_size, bytes_written_ - whole_size, MonotonicNs()});
    }
  } else if (bytes_written_ != whole_size) {
    // Part of the chunk got out (the disk filled up mid-write): cut it off, so the file stays a
    // run of whole chunks and a later chunk (a stop record, once there is room) follows the last
    // whole one.
    if (StillOurs() && ftruncate(fd_, static_cast<off_t>(whole_size)) == 0) {
      bytes_written_ = whole_size;
    }
  }
  return error;
}

uint64_t ChunkFileWriter::TrimBefore(uint64_t before_ns) {
  if (fd_ < 0 || trim_error_ != 0 || trimmable_.empty() || !StillOurs()) return 0;
  uint64_t punched = 0;
  while (!trimmable_.empty() && trimmable_.front().written_ns < before_ns) {
    // Chunks written one after another (no state chunk between them) go in one call.
    uint64_t offset = trimmable_.front().offset, end = offset;
    while (!trimmable_.empty() && trimmable_.front().written_ns < before_ns &&
           trimmable_.front().offset == end) {
      end += trimmable_.front().size;
      trimmable_.pop_front();
    }
    if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(end - offset)) != 0) {
      trim_error_ = errno;  // EOPNOTSUPP: a filesystem without holes; the file then grows
      trimmable_.clear();
      break;
    }
    punched += end - offset;
  }
  if (punched > 0) budget_.Refund(punched);
  bytes_trimmed_ += punched;
  return punched;
}

void ChunkFileWriter::Close() {
  if (fd_ < 0) return;
  if (StillOurs()) close(fd_);  // else the number is the program's now: not ours to close
  fd_ = -1;
  own_directory_.Close();
}

DiskRoom ChunkFileWriter::Room() const {
  int dir_fd = directory_ != nullptr ? directory_->Get() : -1;
  return dir_fd >= 0 ? DiskRoomOf(dir_fd) : DiskRoom{};
}

bool ChunkFileWriter::StillOurs() const {
  if (!SameFile(fd_, id_, /*directory=*/false)) return false;
  int flags = fcntl(fd_, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == O_WRONLY;
}

int ChunkFileWriter::Reopen() {
  int fd = -1;
  lost_ = "";
  // Again while another thread of the program closes what was just opened (close_range): the
  // directory's number between Get and openat (EBADF), or the file's before it is checked.
  for (int attempt = 0; fd < 0 && attempt < kReopenAttempts; ++attempt) {
    // The directory's own descriptor, checked (and opened again, checked, if it was taken too).
    int dir_fd = directory_ != nullptr ? directory_->Get() : -1;
    if (dir_fd < 0) {
      lost_ = "its directory is gone or was replaced";
      break;
    }
    fd = openat(dir_fd, name_.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == EBADF) continue;
      lost_ = "the file is gone or was replaced";
      break;
    }
    int held = HoldHigh(fd);
    fd = -1;
    HeldState state = StateOf(held, id_, /*directory=*/false);
    if (state == HeldState::kSame) {
      fd = held;
    } else if (state == HeldState::kOther) {
      lost_ = "the file is gone or was replaced";
      close(held);
      break;
    }  // kClosed: closed under us, not ours to close
  }
  if (fd < 0 && lost_[0] == '\0') lost_ = "the program closed it each time it was opened again";
  if (fd < 0) {
    fd_ = -1;  // the old number is not ours to close
    return EBADF;
  }
  fd_ = fd;
  ++reopens_;
  // Only this writer writes the file, and only whole chunks stay in it: anything past the last
  // one is not a whole chunk.
  struct stat st {};
  if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) != bytes_written_ &&
      ftruncate(fd_, static_cast<off_t>(bytes_written_)) != 0) {
    return errno;
  }
  return 0;
}

// At the file's end as this writer knows it, never through the open file's offset (which a
// descriptor shared with the program would move).
int ChunkFileWriter::WriteAll(const void* first, size_t first_size, const void* second,
                              size_t second_size) {
  iovec parts[2] = {{const_cast<void*>(first), first_size},
                    {const_cast<void*>(second), second_size}};
  int count = second_size > 0 ? 2 : 1;
  iovec* next = parts;
  // Checked again right before the write (compressing the chunk since Write's check takes a while),
  // and once more when the write finds the number closed: another thread of the program can close
  // it (close_range) at any moment.
  bool reopened = false;
  if (!StillOurs()) {
    if (int error = Reopen(); error != 0) return error;
    reopened = true;
  }
  while (count > 0) {
    ssize_t n = pwritev(fd_, next, count, static_cast<off_t>(bytes_written_));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EBADF && !reopened && !StillOurs()) {
        if (int error = Reopen(); error != 0) return error;
        reopened = true;
        continue;
      }
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
