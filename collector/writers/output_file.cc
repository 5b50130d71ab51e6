#include "collector/writers/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "collector/session/session_files.h"
#include "inject/shared/disk_room.h"

namespace gprof::collector {
namespace {

// The outputs keep half the disk margin free (disk_room.h): each block is checked before it is
// written, and a file that would pass it fails with ENOSPC (its caller removes it).
constexpr size_t kBufferBytes = size_t{1} << 20;  // a check per MiB at most

struct RoomCheckedFile {
  int fd;
};

ssize_t WriteChecked(void* cookie, const char* data, size_t size) {
  int fd = static_cast<RoomCheckedFile*>(cookie)->fd;
  if (!DiskRoomOf(fd).Allows(size, RoomUse::kClosing)) {
    errno = ENOSPC;
    return -1;
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

int CloseChecked(void* cookie) {
  auto* file = static_cast<RoomCheckedFile*>(cookie);
  int rc = close(file->fd);
  delete file;
  return rc;
}

// The room of the filesystem that `name` is made on: the directory's, through its descriptor.
DiskRoom RoomFor(int dir_fd, const std::string& name) {
  if (dir_fd != AT_FDCWD) return DiskRoomOf(dir_fd);
  std::string directory = name.substr(0, name.rfind('/') + 1);
  return DiskRoomAt(directory.empty() ? "." : directory.c_str());
}

}  // namespace

Expected<OutputFile> CreateOutputFile(int dir_fd, const std::string& name,
                                      const std::string& shown) {
  // Said up front when the disk has no room at all: the reader learns why there is no file.
  if (DiskRoom room = RoomFor(dir_fd, name); !room.Allows(0, RoomUse::kClosing)) {
    char why[160];
    snprintf(why, sizeof(why),
             ": its filesystem has %.1f MiB free, and gprof-run leaves %.0f MiB of it free",
             room.free_bytes / 1048576.0, room.Floor(RoomUse::kClosing) / 1048576.0);
    return Status::Error(StatusCode::kIo, shown + why);
  }
  auto fd = CreateSessionFile(dir_fd, name, 0644);
  if (!fd.ok()) return Status::Error(fd.status().code(), shown + ": " + fd.status().message());
  auto* cookie = new RoomCheckedFile{fd->get()};
  FILE* file = fopencookie(cookie, "wb", {nullptr, WriteChecked, nullptr, CloseChecked});
  if (file == nullptr) {
    delete cookie;
    return Status::Error(StatusCode::kOutOfMemory, shown + ": out of memory");
  }
  fd->release();  // the stream's now
  setvbuf(file, nullptr, _IOFBF, kBufferBytes);
  return OutputFile(file, &std::fclose);
}

std::string WriteError(int error) {
  if (error == EFBIG) return "the file size limit (ulimit -f) that gprof-run was started under";
  return error != 0 ? strerror(error) : "unknown error";
}

Status WriteTextFile(int dir_fd, const std::string& name, const std::string& path,
                     const std::string& text) {
  auto file = CreateOutputFile(dir_fd, name, path);
  if (!file.ok())
    return Status::Error(file.status().code(), "cannot write " + file.status().message());
  errno = 0;
  bool written = std::fwrite(text.data(), 1, text.size(), file->get()) == text.size();
  int error = errno;
  if (std::fclose(file->release()) != 0 && written) {
    written = false;
    error = errno;
  }
  if (!written) return Status::Error(StatusCode::kIo, "cannot write " + path + ": " + WriteError(error));
  return {};
}

}  // namespace gprof::collector
