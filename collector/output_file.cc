#include "output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gprof::collector {

Expected<OutputFile> CreateOutputFile(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FILE* file = fd >= 0 ? fdopen(fd, "wb") : nullptr;
  if (file == nullptr) {
    int error = errno;
    if (fd >= 0) close(fd);
    return Status::Error(path + ": " + std::strerror(error));
  }
  return OutputFile(file, &std::fclose);
}

}  // namespace gprof::collector
