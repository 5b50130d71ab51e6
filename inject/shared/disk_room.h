// How much of a filesystem gprof-run leaves free (issue 17): it never takes the last free space of
// the filesystem that holds the session, which the program (and the machine) may need.
//
// The margin is 1% of the filesystem, at least 16 MiB and at most 1 GiB. Recording data (every
// chunk of the recorders) stops before the free space would fall below the whole margin; what
// closes a recording (stop records, the last maps and symbols) and what gprof-run writes after the
// command (reports, the trace, the collector's spill files) may use half of it, never more. The
// one exception is session.json at the end, a few KiB without which the session cannot be read.
//
// Free space is f_bavail, what an unprivileged writer may use, for root too: the blocks a
// filesystem keeps back for root are for the machine's own services, not for a profiler. A
// filesystem that cannot say (fstatvfs fails, or reports no blocks) is written as before, and a
// failed write stops the recording as a write failure.
//
// Header-only: the injected library, gprof-run's kernel recorder and the collector all use it.
#pragma once

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>

namespace gprof {

inline constexpr uint64_t kMinDiskMargin = uint64_t{16} << 20;
inline constexpr uint64_t kMaxDiskMargin = uint64_t{1} << 30;

// What a write is for: data keeps the whole margin free, closing records and outputs half of it.
enum class RoomUse { kData, kClosing };

struct DiskRoom {
  bool known = false;       // false: the filesystem did not say (nothing is refused then)
  uint64_t free_bytes = 0;  // f_bavail in bytes
  uint64_t margin_bytes = 0;

  // The free space a write for `use` must leave.
  uint64_t Floor(RoomUse use) const {
    return use == RoomUse::kData ? margin_bytes : margin_bytes / 2;
  }
  // True when `bytes` more can be written for `use`.
  bool Allows(uint64_t bytes, RoomUse use) const {
    return !known || (free_bytes >= bytes && free_bytes - bytes >= Floor(use));
  }
};

inline DiskRoom RoomFrom(const struct statvfs& fs) {
  DiskRoom room;
  uint64_t unit = fs.f_frsize != 0 ? fs.f_frsize : fs.f_bsize;
  if (unit == 0 || fs.f_blocks == 0) return room;
  room.known = true;
  room.free_bytes = static_cast<uint64_t>(fs.f_bavail) * unit;
  room.margin_bytes = std::clamp<uint64_t>(static_cast<uint64_t>(fs.f_blocks) * unit / 100,
                                           kMinDiskMargin, kMaxDiskMargin);
  return room;
}

// The room on the filesystem of `fd` / of `path`.
inline DiskRoom DiskRoomOf(int fd) {
  struct statvfs fs {};
  return fstatvfs(fd, &fs) == 0 ? RoomFrom(fs) : DiskRoom{};
}
inline DiskRoom DiskRoomAt(const char* path) {
  struct statvfs fs {};
  return statvfs(path, &fs) == 0 ? RoomFrom(fs) : DiskRoom{};
}

}  // namespace gprof
