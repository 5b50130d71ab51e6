#include "inject/shared/shared_segment.h"

#include <sys/ipc.h>
#include <sys/random.h>
#include <sys/shm.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gprof {
namespace {

// "<shmid>:<token>", both decimal.
bool ParseHandle(const char* text, int* id, uint64_t* token) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || *end != ':' || value > INT32_MAX || end[1] < '0' || end[1] > '9') return false;
  *id = static_cast<int>(value);
  *token = strtoull(end + 1, &end, 10);
  return errno == 0 && *end == '\0';
}

}  // namespace

int CreateSharedSegment(size_t size, const char (&magic)[8], int uid, int gid, void** memory,
                        std::string* handle) {
  SharedSegmentHeader header{};
  memcpy(header.magic, magic, sizeof(header.magic));
  if (getrandom(&header.token, sizeof(header.token), 0) != sizeof(header.token)) return errno;
  int id = shmget(IPC_PRIVATE, size, IPC_CREAT | IPC_EXCL | 0600);
  if (id < 0) return errno;
  void* attached = shmat(id, nullptr, 0);
  int error = attached == reinterpret_cast<void*>(-1) ? errno : 0;
  shmid_ds info{};
  if (error == 0 && (uid >= 0 || gid >= 0)) {
    if (shmctl(id, IPC_STAT, &info) != 0) error = errno;
    if (uid >= 0) info.shm_perm.uid = static_cast<uid_t>(uid);
    if (gid >= 0) info.shm_perm.gid = static_cast<gid_t>(gid);
    if (error == 0 && shmctl(id, IPC_SET, &info) != 0) error = errno;
  }
  // Gone with the last process that holds it.
  shmctl(id, IPC_RMID, nullptr);
  if (error != 0) {
    if (attached != reinterpret_cast<void*>(-1)) shmdt(attached);
    return error;
  }
  // Every page written now: a segment's pages are never a filesystem's, but they are made here.
  memset(attached, 0, size);
  memcpy(attached, &header, sizeof(header));
  *memory = attached;
  *handle = std::to_string(id) + ":" + std::to_string(header.token);
  return 0;
}

int AttachSharedSegment(const char* handle, size_t size, const char (&magic)[8], void** memory) {
  int id = -1;
  uint64_t token = 0;
  if (!ParseHandle(handle, &id, &token)) return EINVAL;
  shmid_ds info{};
  if (shmctl(id, IPC_STAT, &info) != 0) return errno;
  if (info.shm_segsz != size) return EINVAL;
  void* attached = shmat(id, nullptr, 0);
  if (attached == reinterpret_cast<void*>(-1)) return errno;
  const auto* header = static_cast<const SharedSegmentHeader*>(attached);
  if (memcmp(header->magic, magic, sizeof(header->magic)) != 0 || header->token != token) {
    shmdt(attached);
    return EINVAL;
  }
  *memory = attached;
  return 0;
}

void DetachSharedSegment(void* memory) {
  if (memory != nullptr) shmdt(memory);
}

}  // namespace gprof
