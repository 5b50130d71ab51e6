// What the fuzz targets share: a scratch session directory of their own, the real session file
// writer to wrap fuzzed records into a file the readers get past (checksums, compression), and the
// checks that every output of `gprof-run report` must pass whatever the input. A failed check
// aborts: libFuzzer then keeps the input as a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "inject/format/session_format.h"

namespace gprof::fuzz {

[[noreturn]] void Finding(const std::string& what);

// A directory that lives as long as the process: each input overwrites the files it tests.
const std::string& ScratchDir();
// ScratchDir()/name, made on first use.
std::string ScratchSubdir(const std::string& name);

void WriteBytes(const std::string& path, const uint8_t* data, size_t size);

// Writes `size` bytes of records (each starting with a RecordHeader) as one chunk of a new
// session file, through the writer the recorders use; records past one that does not fit still
// go in, for the reader to find.
void WriteRecordsFile(const std::string& path, format::Source source, uint32_t pid,
                      const uint8_t* data, size_t size);

// Runs the collector on `dir` as `gprof-run report DIR` does and checks what it wrote: report.txt
// and every trace string clean UTF-8 (clean_utf8.h), report.json parsing, the trace decoding.
void CollectAndCheck(const std::string& dir);

}  // namespace gprof::fuzz
