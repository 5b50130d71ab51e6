#include "collector/session/session_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "collector/model/value_format.h"

namespace gprof::collector {
namespace {

std::string ErrnoText(int error) {
  // O_NOFOLLOW's answer for a link, in words a user can act on.
  if (error == ELOOP) return "a symbolic link, not a session file";
  return std::strerror(error);
}

}  // namespace

void FileDescriptor::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Expected<FileDescriptor> OpenSessionDirectory(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return Status::FromErrno(error, PrintableName(path) + (error == ENOENT
                                                               ? ": no such session directory"
                                                               : ": cannot open: " +
                                                                     ErrnoText(error)));
  }
  return FileDescriptor(fd);
}

Expected<FileDescriptor> OpenSessionFile(int dir_fd, const std::string& name) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
  FileDescriptor fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "cannot open: " + ErrnoText(errno));
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return Status::Error(StatusCode::kInvalid, "not a regular file");
  }
  // Reads block again, as on any regular file.
  int flags = fcntl(fd.get(), F_GETFL);
  if (flags >= 0) fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

Expected<FileDescriptor> CreateSessionFile(int dir_fd, const std::string& name, mode_t mode) {
  if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "cannot remove what is there: " + ErrnoText(errno));
  }
  FileDescriptor fd(
      openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::FromErrno(errno, ErrnoText(errno));
  return fd;
}

}  // namespace gprof::collector
