// Writes one session file (inject/session_format.h): the header, then one chunk per Write().
// Used by the injected library's writer thread and by gprof-run's kernel recorder. No exceptions,
// no output on the target's streams: every failure is an errno value for the caller to count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "recording_limits.h"
#include "session_format.h"
#include "zstd_loader.h"

namespace gprof {

class ChunkFileWriter {
 public:
  ChunkFileWriter() = default;
  ~ChunkFileWriter();
  ChunkFileWriter(const ChunkFileWriter&) = delete;
  ChunkFileWriter& operator=(const ChunkFileWriter&) = delete;

  // Charges everything this writer writes, header included, to the session's --max-size budget
  // file (recording_limits.h). Before Create. Returns 0 or an errno.
  int AttachBudget(const char* path) { return budget_.Attach(path); }
  // From now on chunks are the writer's last ones (recording_limits.h: closing chunks).
  void SetClosing() { closing_ = true; }
  // True once the budget refused a chunk (of any writer of the session): data is no longer written.
  bool budget_stopped() const { return budget_.stopped(); }

  // Creates `path`, which must not exist yet, and writes the file header. Returns 0 or an errno
  // (EDQUOT: the size budget is spent; no file is created then).
  int Create(const char* path, format::Source source, uint32_t pid);
  // Appends one chunk holding `size` bytes of encoded records, zstd-compressed when libzstd is
  // available. Returns 0 or an errno (ENOSPC, EIO, ...; EDQUOT when the size budget refused it,
  // which the budget counts itself); on failure nothing of the chunk stays in the file (what got
  // out is truncated away) and nothing of it counts.
  int Write(const void* records, size_t size, uint32_t record_count);
  // Closes the file; a writer that was never created or is already closed ignores the call.
  void Close();
  // Forgets the file without touching it: for a forked child that inherited a parent's writer.
  void Abandon();

  bool is_open() const { return fd_ >= 0; }
  uint64_t chunks_written() const { return sequence_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  int WriteAll(const void* first, size_t first_size, const void* second, size_t second_size);

  int fd_ = -1;
  SizeBudget budget_;
  bool closing_ = false;
  uint64_t sequence_ = 0;
  uint64_t bytes_written_ = 0;
  const ZstdApi* zstd_ = nullptr;
  void* cctx_ = nullptr;
  char* compressed_ = nullptr;  // reused between chunks
  size_t compressed_capacity_ = 0;
};

}  // namespace gprof
