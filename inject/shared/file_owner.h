// Files that root makes in a user's session directory are born the user's: for the time of the
// call, this thread takes the user's file-system identity (setfsuid/setfsgid), so the file has
// the user's owner and group from its first moment (a chown after it would leave a root-owned file
// behind if a kill came in between) and is made only where the user may make one. Only the
// calling thread changes (the file-system ids are per thread in Linux, and glibc's wrappers do not
// broadcast them); its capabilities for other work (BPF, ptrace) are untouched.
#pragma once

#include <sys/fsuid.h>
#include <sys/types.h>

namespace gprof {

class FileOwnerScope {
 public:
  // uid or gid -1: that one is kept.
  FileOwnerScope(int uid, int gid) {
    if (gid >= 0) saved_gid_ = setfsgid(static_cast<gid_t>(gid));
    if (uid >= 0) saved_uid_ = setfsuid(static_cast<uid_t>(uid));
    // setfsuid reports no error: asking for an invalid id (-1) answers with the current one.
    ok_ = (uid < 0 || setfsuid(static_cast<uid_t>(-1)) == uid) &&
          (gid < 0 || setfsgid(static_cast<gid_t>(-1)) == gid);
  }
  ~FileOwnerScope() {
    if (saved_uid_ >= 0) setfsuid(static_cast<uid_t>(saved_uid_));
    if (saved_gid_ >= 0) setfsgid(static_cast<gid_t>(saved_gid_));
  }
  FileOwnerScope(const FileOwnerScope&) = delete;
  FileOwnerScope& operator=(const FileOwnerScope&) = delete;

  // False when the kernel refused an id: then nothing may be made, it would be this process's.
  bool ok() const { return ok_; }

 private:
  int saved_uid_ = -1;
  int saved_gid_ = -1;
  bool ok_ = false;
};

}  // namespace gprof
