// Descriptors that live among the program's own (issue 17): the injected library's session file
// and session directory sit in the program's descriptor table, where the program may close every
// number above 2 (close_range, closefrom), dup2 a file of its own over one, or close a stale one
// twice. So each is held at a high number (HoldHigh) and checked by device and inode before use.
//
// HeldDirectory is the session directory so held: opened once by path; every session file is made
// relative to it (openat, O_CREAT|O_EXCL|O_NOFOLLOW). When the program took its number, the
// directory is opened again by the same path and used only if it is the same directory.
//
// A directory given with an identity (gprof-run's GPROF_SESSION_DIR_ID) is used only when it is
// that directory: root's processes must never make a file in a directory that a user who can
// rename a component of the path has put in its place. The last component is never followed
// (O_NOFOLLOW); a link among the earlier ones is followed, and then the identity decides.
#pragma once

#include <sys/types.h>

#include <string>

namespace gprof {

// Environment of the target: the session directory's identity as gprof-run made it,
// "<st_dev>:<st_ino>"; the injected library records nothing into a directory found at
// GPROF_SESSION_DIR that is not that one. Unset: the library runs without gprof-run, and the
// directory is taken as found.
inline constexpr char kSessionDirIdEnv[] = "GPROF_SESSION_DIR_ID";

// A file's identity: device and inode.
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
};

// Moves `fd` near the top of the soft RLIMIT_NOFILE (at most near 4096: a number makes the kernel
// size the process's descriptor table to it), where open() and dup(), which take the lowest free
// number, reach only a program that has nearly every descriptor in use. Keeps the number it has
// when no higher one is free. Returns the descriptor's number.
int HoldHigh(int fd);

// What `fd` is: the file `id` (a directory or a regular file as asked), another file, or no open
// descriptor at all (another thread of the program closed it, close_range, since it was opened).
enum class HeldState { kSame, kOther, kClosed };
HeldState StateOf(int fd, const FileIdentity& id, bool directory);
// A file the library opens for a moment among the program's descriptors (a /proc file): opened
// (O_CLOEXEC added) and held high (HoldHigh), its identity in *id; -1 when it cannot be. Read it,
// then CloseHeld: that closes the number only while it names that file still.
int OpenHigh(const char* path, int flags, FileIdentity* id);
void CloseHeld(int fd, const FileIdentity& id);
// True when `fd` is open on the file `id`, a directory or a regular file as asked.
inline bool SameFile(int fd, const FileIdentity& id, bool directory) {
  return StateOf(fd, id, directory) == HeldState::kSame;
}
// How many times a descriptor just opened again is opened once more when the program closed it
// before it could be checked.
inline constexpr int kReopenAttempts = 8;

// open(path, flags) for a directory, also where `path` is longer than PATH_MAX: then it is
// walked a component at a time (openat), every component but the last followed as open() would.
int OpenDirectory(const char* path, int flags);

// "<st_dev>:<st_ino>", as gprof-run exports the session directory's identity; false when `text`
// is not that.
bool ParseFileIdentity(const char* text, FileIdentity* id);

class HeldDirectory {
 public:
  HeldDirectory() = default;
  ~HeldDirectory() { Close(); }
  HeldDirectory(const HeldDirectory&) = delete;
  HeldDirectory& operator=(const HeldDirectory&) = delete;

  // Opens the directory `path` (O_DIRECTORY; O_NOFOLLOW unless `follow_last`, for a path such as
  // /proc/self/fd/N that names a directory through a link on purpose). With `expected`, only that
  // directory: ESTALE otherwise. Returns 0 or an errno.
  int Open(const char* path, bool follow_last, const FileIdentity* expected);
  // The descriptor, checked to be the directory still; opened again (by path, checked to be the
  // same directory) when the program took the number. -1 when it is gone or was replaced.
  int Get();
  // Closes the descriptor, when the number is still the directory's.
  void Close();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint64_t reopens() const { return reopens_; }

 private:
  int OpenChecked() const;

  int fd_ = -1;
  FileIdentity id_;
  std::string path_;
  bool follow_last_ = false;
  uint64_t reopens_ = 0;
};

}  // namespace gprof
