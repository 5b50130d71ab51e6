#include "output_file.h"

#include <unistd.h>

#include "session_files.h"

namespace gprof::collector {

Expected<OutputFile> CreateOutputFile(int dir_fd, const std::string& name,
                                      const std::string& shown) {
  auto fd = CreateSessionFile(dir_fd, name, 0644);
  if (!fd.ok()) return Status::Error(shown + ": " + fd.status().message());
  FILE* file = fdopen(fd->get(), "wb");
  if (file == nullptr) return Status::Error(shown + ": out of memory");
  fd->release();
  return OutputFile(file, &std::fclose);
}

}  // namespace gprof::collector
