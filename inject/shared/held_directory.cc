#include "inject/shared/held_directory.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace gprof {

int HoldHigh(int fd) {
  rlimit limit{};
  uint64_t top = 1024;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    top = limit.rlim_cur;
  }
  top = std::min<uint64_t>(top, 4096);
  uint64_t floor = top > 64 ? top - 32 : top / 2;
  if (static_cast<uint64_t>(fd) >= floor) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(floor));
  if (high < 0) return fd;
  // Only on kernels before 5.9 does this share the program's table (own_descriptors.h). There
  // the check below is weak: `high` is a dup of the low number, so both name whatever the number
  // named at the dup; a program that closed it and opened its own there before the dup still
  // loses that file to this close.
  struct stat low {}, held {};
  if (fstat(high, &held) == 0 && fstat(fd, &low) == 0 && low.st_dev == held.st_dev &&
      low.st_ino == held.st_ino) {
    close(fd);
  }
  return high;
}

int OpenHigh(const char* path, int flags, FileIdentity* id) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) return -1;
  fd = HoldHigh(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) return -1;  // closed under us already: not ours to close
  *id = {st.st_dev, st.st_ino};
  return fd;
}

void CloseHeld(int fd, const FileIdentity& id) {
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_dev == id.dev && st.st_ino == id.ino) close(fd);
}

HeldState StateOf(int fd, const FileIdentity& id, bool directory) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return HeldState::kClosed;
  return st.st_dev == id.dev && st.st_ino == id.ino &&
                 (directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
             ? HeldState::kSame
             : HeldState::kOther;
}

bool ParseFileIdentity(const char* text, FileIdentity* id) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long dev = strtoull(text, &end, 10);
  if (errno != 0 || *end != ':' || end[1] < '0' || end[1] > '9') return false;
  unsigned long long ino = strtoull(end + 1, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  id->dev = static_cast<dev_t>(dev);
  id->ino = static_cast<ino_t>(ino);
  return true;
}

int OpenDirectory(const char* path, int flags) {
  int fd = open(path, flags);
  if (fd >= 0 || errno != ENAMETOOLONG) return fd;
  // Longer than PATH_MAX (a session made from a deep working directory): a component at a time,
  // each but the last followed as open() would follow it.
  int at = open(*path == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  const char* next = path;
  while (at >= 0) {
    while (*next == '/') ++next;
    const char* end = strchr(next, '/');
    const char* rest = end;
    while (rest != nullptr && *rest == '/') ++rest;
    bool last = end == nullptr || *rest == '\0';
    size_t length = end == nullptr ? strlen(next) : static_cast<size_t>(end - next);
    char name[NAME_MAX + 1];
    if (length > NAME_MAX) {
      close(at);
      errno = ENAMETOOLONG;
      return -1;
    }
    memcpy(name, next, length);
    name[length] = '\0';
    if (length == 0) name[0] = '.', name[1] = '\0';  // "/" itself
    int child = openat(at, name, last ? flags : O_PATH | O_DIRECTORY | O_CLOEXEC);
    int error = errno;
    close(at);
    if (last || child < 0) {
      errno = error;
      return child;
    }
    at = child;
    next = rest;
  }
  return -1;
}

int HeldDirectory::OpenChecked() const {
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow_last_ ? 0 : O_NOFOLLOW);
  for (int attempt = 0; attempt < kReopenAttempts; ++attempt) {
    int fd = OpenDirectory(path_.c_str(), flags);
    if (fd < 0) return -1;
    fd = HoldHigh(fd);
    switch (StateOf(fd, id_, /*directory=*/true)) {
      case HeldState::kSame:
        return fd;
      case HeldState::kOther:
        close(fd);
        errno = ESTALE;
        return -1;
      case HeldState::kClosed:  // the program closed it already (close_range): not ours to close
        break;
    }
  }
  errno = EBADF;
  return -1;
}

int HeldDirectory::Open(const char* path, bool follow_last, const FileIdentity* expected) {
  Close();
  path_ = path;
  follow_last_ = follow_last;
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW);
  int fd = OpenDirectory(path, flags);
  if (fd < 0) return errno;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int error = errno;
    close(fd);
    return error;
  }
  id_ = {st.st_dev, st.st_ino};
  if (expected != nullptr && (id_.dev != expected->dev || id_.ino != expected->ino)) {
    close(fd);
    return ESTALE;
  }
  fd_ = HoldHigh(fd);
  return 0;
}

int HeldDirectory::Get() {
  if (fd_ < 0) return -1;
  if (SameFile(fd_, id_, /*directory=*/true)) return fd_;
  // The number is the program's now: left alone, and the directory opened again.
  fd_ = OpenChecked();
  if (fd_ >= 0) ++reopens_;
  return fd_;
}

void HeldDirectory::Close() {
  if (fd_ >= 0 && SameFile(fd_, id_, /*directory=*/true)) close(fd_);
  fd_ = -1;
}

}  // namespace gprof
