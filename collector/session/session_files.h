// The session directory's files, opened relative to a descriptor of the directory: once it is
// open, nothing re-resolves its path, so no one who can rename or relink a component of that path
// can send a read or a write elsewhere. Used by the collector's readers and writers and by
// gprof-run, which may run as root in a directory a user controls.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <string>
#include <utility>

#include "inject/shared/status.h"

namespace gprof::collector {

// An owned file descriptor, closed when the object goes.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// Opens a directory for reading and for opening files in it (O_DIRECTORY; a link given as the
// directory itself is followed, once). The error names the path and says why: "no such session
// directory" only when there is none (a directory it may not read says so).
Expected<FileDescriptor> OpenSessionDirectory(const std::string& path);

// Opens the session file `name` in the directory `dir_fd` (AT_FDCWD: `name` is a path) for
// reading, only when it is a regular file: never through a symbolic link at its last component,
// and never a FIFO or device (opened without blocking, then refused). The error says why, without
// the name.
Expected<FileDescriptor> OpenSessionFile(int dir_fd, const std::string& name);

// Creates `name` in `dir_fd` afresh for writing: whatever has that name is removed first (a
// symbolic link, a hard link to someone else's file, a FIFO), then the file is made with
// O_CREAT|O_EXCL|O_NOFOLLOW, so nothing is ever written through a link or into a file someone
// else made; a name planted again in between makes it fail (EEXIST). The error says why, without
// the name.
Expected<FileDescriptor> CreateSessionFile(int dir_fd, const std::string& name, mode_t mode);

}  // namespace gprof::collector
