// A line on a terminal while the collector reads a session's files, updated in place:
// "gprof-run: reading kernel.gpr: 12.3 of 100.0 GiB...". Only once the read has taken a second,
// so that the usual session shows nothing; only when the line's descriptor (stderr) is a terminal,
// as git and curl do (a log would fill with carriage returns); erased when the read ends, so that
// what comes next (the report, on stdout) starts on a clean line. Never on stdout.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace gprof::collector {

class ReadProgress {
 public:
  // `fd`: where the line goes; nothing is written unless it is a terminal. `delay_ns`: how long
  // the read runs before the line appears.
  explicit ReadProgress(int fd = STDERR_FILENO, uint64_t delay_ns = 1'000'000'000);
  ~ReadProgress();  // erases the line, if one was written
  ReadProgress(const ReadProgress&) = delete;
  ReadProgress& operator=(const ReadProgress&) = delete;

  // Reading the file named `name` (printed escaped), `size` bytes long, begins.
  void StartFile(std::string_view name, uint64_t size);
  // The read of the current file has reached `offset`. Cheap: a clock read, and a write at most
  // every kUpdateNs.
  void At(uint64_t offset);

 private:
  static constexpr uint64_t kUpdateNs = 200'000'000;

  int fd_ = -1;  // -1: not a terminal, nothing to do
  uint64_t show_after_ns_ = 0;
  uint64_t next_update_ns_ = 0;
  bool shown_ = false;
  std::string name_;
  uint64_t size_ = 0;
};

}  // namespace gprof::collector
