// Makes seeds for the record fuzzers from a real session file: writes the records of FILE.gpr to
// stdout, decoded and concatenated as one chunk's payload, keeping the first MAX of each record
// type so that a seed stays small but holds every kind the file has.
// Usage: extract_records FILE.gpr [MAX]
#include <cstdio>
#include <cstdlib>
#include <map>

#include "collector/session/chunk_reader.h"

int main(int argc, char** argv) {
  using namespace gprof::collector;
  if (argc < 2) {
    fprintf(stderr, "usage: extract_records FILE.gpr [MAX]\n");
    return 2;
  }
  size_t max_per_type = argc > 2 ? strtoul(argv[2], nullptr, 10) : 3;
  std::map<uint16_t, size_t> kept;
  std::vector<Diagnostic> diagnostics;
  auto summary = ReadChunkFile(
      argv[1],
      [&](const RecordView& record) {
        if (kept[record.type]++ < max_per_type)
          fwrite(record.bytes.data(), 1, record.bytes.size(), stdout);
      },
      &diagnostics);
  if (!summary.ok()) {
    fprintf(stderr, "%s: %s\n", argv[1], summary.status().message().c_str());
    return 1;
  }
  return 0;
}
