// The kernel recorder's records (kernel_events_records' decoder), wrapped into kernel.gpr by the
// real writer, then the whole of `gprof-run report`, each output checked. Records of the injected
// library's types (below 1000) go into an inject file beside it, so that CUDA calls and what the
// kernel did with their threads meet in the analysis as in a real session.
#include <unistd.h>

#include <cstring>

#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gprof;
  static const std::string dir = fuzz::ScratchSubdir("kernel");
  std::string kernel, inject;
  size_t offset = 0;
  while (size - offset >= sizeof(format::RecordHeader)) {
    format::RecordHeader header;
    memcpy(&header, data + offset, sizeof(header));
    if (header.size < sizeof(header) || header.size > size - offset) break;
    (header.type < 1000 ? inject : kernel)
        .append(reinterpret_cast<const char*>(data + offset), header.size);
    offset += header.size;
  }
  kernel.append(reinterpret_cast<const char*>(data + offset), size - offset);  // the broken rest
  auto bytes = [](const std::string& text) {
    return reinterpret_cast<const uint8_t*>(text.data());
  };
  fuzz::WriteRecordsFile(dir + "/kernel.gpr", format::Source::kKernel, 0, bytes(kernel),
                         kernel.size());
  std::string inject_path = dir + "/inject-4242.gpr";
  if (inject.empty()) {
    unlink(inject_path.c_str());
  } else {
    fuzz::WriteRecordsFile(inject_path, format::Source::kInject, 4242, bytes(inject),
                           inject.size());
  }
  fuzz::CollectAndCheck(dir);
  return 0;
}
