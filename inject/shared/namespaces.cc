#include "inject/shared/namespaces.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "inject/shared/held_directory.h"

namespace gprof {

uint32_t OwnPidNamespace() {
  // readlink takes no descriptor: nothing of the program's can be disturbed.
  char link[64];
  ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  if (strncmp(link, "pid:[", 5) != 0) return 0;
  char* end = nullptr;
  unsigned long long inode = strtoull(link + 5, &end, 10);
  if (end == nullptr || *end != ']' || inode == 0 || inode > UINT32_MAX) return 0;
  return static_cast<uint32_t>(inode);
}

namespace {

// The offset of `clock` ("monotonic ", "boottime ": the line's name and its space) in
// /proc/self/timens_offsets, in ns.
int64_t ReadOffsetOf(const char* clock) {
  FileIdentity id;
  int fd = OpenHigh("/proc/self/timens_offsets", O_RDONLY, &id);
  if (fd < 0) return 0;  // a kernel without time namespaces, or no /proc: none
  char text[256];
  ssize_t n;
  do {
    n = read(fd, text, sizeof(text) - 1);
  } while (n < 0 && errno == EINTR);
  CloseHeld(fd, id);
  if (n <= 0) return 0;
  text[n] = '\0';
  // "monotonic           7         0\nboottime ...": seconds and nanoseconds, either may be
  // negative.
  const size_t length = strlen(clock);
  for (const char* line = text; line != nullptr && *line != '\0';) {
    if (strncmp(line, clock, length) == 0) {
      char* end = nullptr;
      long long seconds = strtoll(line + length, &end, 10);
      long long nanoseconds = strtoll(end, nullptr, 10);
      return seconds * 1'000'000'000ll + nanoseconds;
    }
    line = strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return 0;
}

}  // namespace

int64_t ReadTimeNamespaceOffset() { return ReadOffsetOf("monotonic "); }

int64_t ReadBoottimeNamespaceOffset() { return ReadOffsetOf("boottime "); }

}  // namespace gprof
