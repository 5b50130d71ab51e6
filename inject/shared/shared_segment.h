// State that every process of a session shares (the size budget, recording_limits.h; the
// session's control, session_control.h): a System V shared memory segment, not a file. Stores
// into a file's shared mapping die of SIGBUS wherever the filesystem cannot give the page room
// (a full disk, a disk quota; on a copy-on-write filesystem such as btrfs even a page written
// before needs new room), and that SIGBUS would kill the program. A segment's pages are memory,
// made whole when it is created; it has no path anyone can swap and holds no descriptor the
// program can take. It is marked for removal at once, so it goes with the last process of the
// session that holds it, even when gprof-run is killed.
//
// The environment names a segment "<shmid>:<token>": the token, 64 random bits that the segment
// holds, keeps a segment made later with the same id by someone else from being taken for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "inject/format/shared_memory.h"

namespace gprof {

// gprof-run: makes a zeroed segment of `size` bytes holding `magic` and a new token, mode 0600,
// owned by `uid`:`gid` (-1: this process's), and attaches it at *memory. Returns 0 or an errno;
// *handle gets the segment's name for the environment.
int CreateSharedSegment(size_t size, const char (&magic)[8], int uid, int gid, void** memory,
                        std::string* handle);
// Attaches the segment `handle` names when it is `size` bytes and holds `magic` and the handle's
// token. Returns 0 or an errno.
int AttachSharedSegment(const char* handle, size_t size, const char (&magic)[8], void** memory);
void DetachSharedSegment(void* memory);

}  // namespace gprof
