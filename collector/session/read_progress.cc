#include "collector/session/read_progress.h"

#include <time.h>

#include <cstdio>

#include "collector/model/model.h"

namespace gprof::collector {
namespace {

uint64_t NowNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(now.tv_nsec);
}

void WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;  // a terminal gone or full: the line is only a courtesy
    done += static_cast<size_t>(n);
  }
}

// "12.3 of 100.0 GiB": both in the unit of the whole.
std::string Amounts(uint64_t done, uint64_t whole) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double scale = 1024;
  size_t unit = 0;
  while (whole / scale >= 1024 && unit + 1 < std::size(kUnits)) {
    scale *= 1024;
    ++unit;
  }
  char text[64];
  snprintf(text, sizeof(text), "%.1f of %.1f %s", done / scale, whole / scale, kUnits[unit]);
  return text;
}

}  // namespace

ReadProgress::ReadProgress(int fd, uint64_t delay_ns) {
  if (fd >= 0 && isatty(fd)) fd_ = fd;
  show_after_ns_ = NowNs() + delay_ns;
}

ReadProgress::~ReadProgress() {
  if (shown_) WriteAll(fd_, "\r\x1b[K");
}

void ReadProgress::StartFile(std::string_view name, uint64_t size) {
  if (fd_ < 0) return;
  name_ = PrintableName(name);
  size_ = size;
  next_update_ns_ = 0;  // the new name at the next At
}

void ReadProgress::At(uint64_t offset) {
  if (fd_ < 0) return;
  uint64_t now = NowNs();
  if (now < show_after_ns_ || now < next_update_ns_) return;
  next_update_ns_ = now + kUpdateNs;
  shown_ = true;
  // \r to the line's start, and \e[K to erase what a longer line before left.
  WriteAll(fd_, "\rgprof-run: reading " + name_ + ": " + Amounts(offset, size_) + "...\x1b[K");
}

}  // namespace gprof::collector
