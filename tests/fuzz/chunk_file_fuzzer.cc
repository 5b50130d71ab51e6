// ReadChunkFile on a whole session file as it lies on disk: file header, chunk framing, checksums,
// zstd, record framing. Every record handed out must lie inside the file's decoded bytes (ASan
// checks the reads) and every diagnostic must name the file and an offset inside it.
#include <vector>

#include "collector/session/chunk_reader.h"
#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gprof;
  const std::string path = fuzz::ScratchDir() + "/chunk.gpr";
  fuzz::WriteBytes(path, data, size);
  std::vector<collector::Diagnostic> diagnostics;
  uint64_t sum = 0;
  auto visit = [&](const collector::RecordView& record) {
    if (record.bytes.size() < sizeof(format::RecordHeader))
      fuzz::Finding("record shorter than its header");
    for (uint8_t byte : record.bytes) sum += byte;
    if (record.chunk_offset >= size) fuzz::Finding("chunk offset past the file");
  };
  auto summary = collector::ReadChunkFile(path, visit, &diagnostics);
  for (const collector::Diagnostic& diagnostic : diagnostics) {
    if (diagnostic.file != path || diagnostic.offset > size)
      fuzz::Finding("diagnostic without its file or offset: " + diagnostic.message);
  }
  if (!summary.ok() && summary.status().message().empty()) fuzz::Finding("error without a message");
  return sum == 1 ? 1 : 0;  // keeps the reads; libFuzzer ignores the value
}
