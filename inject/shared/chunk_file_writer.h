// Writes one session file (inject/format/session_format.h): the header, then one chunk per Write().
// Used by the injected library's writer thread and by gprof-run's kernel recorder. No exceptions,
// no output on the target's streams: every failure is an errno value for the caller to count.
//
// The descriptor lives among the program's own (issue 17, held_directory.h): the file is held at
// a high number, written at explicit offsets (pwritev: the open file's offset is never used), and
// checked before each write and at Close to still be this file (device, inode, opened
// write-only). When it is not, the number is left alone (it is the program's now) and the file is
// opened again by its name in its directory, through the directory's held descriptor (itself
// checked, and opened again by path and checked when it was taken too), O_NOFOLLOW and checked to
// be the same file; writing goes on after the last whole chunk. When that fails, Write returns
// EBADF and descriptor_lost() says why nothing more is written.
//
// Each chunk (and the header) is also checked against the free space of the filesystem
// (disk_room.h): a chunk that would leave less than the margin is not written (ENOSPC, and
// refused_for_room()).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "inject/format/session_format.h"
#include "inject/shared/disk_room.h"
#include "inject/shared/held_directory.h"
#include "inject/shared/recording_limits.h"
#include "inject/shared/zstd_loader.h"

namespace gprof {

class ChunkFileWriter {
 public:
  // What Create and Write return when the --max-size budget refused the bytes (the budget counts
  // them itself). Not an errno: no error of the kernel's, a real EDQUOT of a filesystem quota
  // included, can be taken for it.
  static constexpr int kSizeBudgetRefused = -1;

  ChunkFileWriter() = default;
  ~ChunkFileWriter();
  ChunkFileWriter(const ChunkFileWriter&) = delete;
  ChunkFileWriter& operator=(const ChunkFileWriter&) = delete;

  // Charges everything this writer writes, header included, to the session's --max-size budget
  // that `handle` names (recording_limits.h). Before Create. Returns 0 or an errno.
  int AttachBudget(const char* handle) { return budget_.Attach(handle); }
  // From now on chunks are the writer's last ones (recording_limits.h: closing chunks); they may
  // also use half of the disk margin (disk_room.h).
  void SetClosing() { closing_ = true; }
  // True once the budget refused a chunk (of any writer of the session): data is no longer written.
  bool budget_stopped() const { return budget_.stopped(); }

  // --flight-recorder: chunks written as trimmable (data, not state) may later be punched out by
  // TrimBefore; the file header says so (format::kFeatureTrimmed). Before Create.
  void KeepRecentDataOnly() { trims_ = true; }
  bool trims() const { return trims_; }
  // Punches out of the file the trimmable chunks written before `before_ns` (CLOCK_MONOTONIC):
  // their disk blocks go, their bytes read as zeros, the file keeps its length, and the --max-size
  // budget gets them back. Returns the bytes punched now; 0 when the filesystem cannot (then
  // trim_error() says why) or the file is not ours at the moment (tried again next time).
  uint64_t TrimBefore(uint64_t before_ns);
  int trim_error() const { return trim_error_; }
  uint64_t bytes_trimmed() const { return bytes_trimmed_; }

  // Creates `path`, which must not exist yet, and writes the file header. Returns 0, an errno
  // (ENOSPC with refused_for_room(): the disk margin would be passed), or kSizeBudgetRefused (the
  // size budget is spent); no file is created then.
  int Create(const char* path, format::Source source, uint32_t pid);
  // The same for `name` in `directory`, which must outlive the writer; every later use of the
  // directory (a reopen) goes through it.
  int Create(HeldDirectory* directory, const char* name, format::Source source, uint32_t pid);
  // Appends one chunk holding `size` bytes of encoded records, zstd-compressed when libzstd is
  // available. Returns 0, kSizeBudgetRefused (the size budget refused it and counts it), or an
  // errno (ENOSPC, EDQUOT, EIO, ...; ENOSPC with refused_for_room() when the disk margin would be
  // passed; EBADF with descriptor_lost() when the program took the descriptor and the file could
  // not be opened again; EFBIG, unwritten, when the file would pass the writing process's file
  // size limit, RLIMIT_FSIZE, less 4 KiB kept for closing records: passing it would raise
  // SIGXFSZ); on failure nothing of the chunk stays in the file (what got out is truncated away)
  // and nothing of it counts.
  // `trimmable`: data that KeepRecentDataOnly lets TrimBefore punch out later.
  int Write(const void* records, size_t size, uint32_t record_count, bool trimmable = false);
  // Closes the file; a writer that was never created or is already closed ignores the call.
  void Close();

  bool is_open() const { return fd_ >= 0; }
  uint64_t chunks_written() const { return sequence_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // Whether the last Create or Write was refused for the disk margin (disk_room.h).
  bool refused_for_room() const { return refused_for_room_; }
  // How the file was lost, once it was: empty while it is not.
  const char* descriptor_lost() const { return lost_; }
  // How often the file was opened again after the program took its descriptor.
  uint64_t reopens() const { return reopens_; }
  // The room on the file's filesystem now (known: false when the directory is gone).
  DiskRoom Room() const;

 private:
  bool StillOurs() const;
  int Reopen();
  int WriteAll(const void* first, size_t first_size, const void* second, size_t second_size);

  int fd_ = -1;
  FileIdentity id_;                     // the file's, to tell it from what a reused number names
  HeldDirectory own_directory_;         // when created by path
  HeldDirectory* directory_ = nullptr;  // its directory: own_directory_ or the caller's
  std::string name_;
  const char* lost_ = "";
  uint64_t reopens_ = 0;
  bool refused_for_room_ = false;
  SizeBudget budget_;
  bool closing_ = false;
  uint64_t sequence_ = 0;
  uint64_t bytes_written_ = 0;
  struct TrimmableChunk {
    uint64_t offset, size, written_ns;
  };
  bool trims_ = false;
  std::deque<TrimmableChunk> trimmable_;  // in file order: as many as SEC seconds write
  int trim_error_ = 0;
  uint64_t bytes_trimmed_ = 0;
  const ZstdApi* zstd_ = nullptr;
  void* cctx_ = nullptr;
  char* compressed_ = nullptr;  // reused between chunks
  size_t compressed_capacity_ = 0;
};

}  // namespace gprof
