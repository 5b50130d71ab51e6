#include "tests/fuzz/fuzz_session.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "collector/collect.h"
#include "inject/shared/chunk_file_writer.h"
#include "tests/clean_utf8.h"
#include "tests/trace_decoder.h"

namespace gprof::fuzz {

[[noreturn]] void Finding(const std::string& what) {
  fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  abort();
}

const std::string& ScratchDir() {
  // The path is kept in a plain array too: the string is destroyed before atexit's cleanup runs.
  static char path[] = "/tmp/gprof-fuzz-XXXXXX";
  static const std::string dir = [] {
    if (mkdtemp(path) == nullptr) Finding("cannot create a scratch directory");
    atexit([] {
      std::error_code error;
      std::filesystem::remove_all(path, error);
    });
    return std::string(path);
  }();
  return dir;
}

void WriteBytes(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) Finding("cannot write " + path);
}

std::string ScratchSubdir(const std::string& name) {
  std::string path = ScratchDir() + "/" + name;
  mkdir(path.c_str(), 0700);
  return path;
}

namespace {

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

void WriteRecordsFile(const std::string& path, format::Source source, uint32_t pid,
                      const uint8_t* data, size_t size) {
  uint32_t records = 0;
  for (size_t offset = 0; size - offset >= sizeof(format::RecordHeader);) {
    format::RecordHeader header;
    memcpy(&header, data + offset, sizeof(header));
    if (header.size < sizeof(header) || header.size > size - offset) break;
    offset += header.size;
    ++records;
  }
  unlink(path.c_str());
  ChunkFileWriter writer;
  if (writer.Create(path.c_str(), source, pid) != 0) Finding("cannot create " + path);
  if (size > 0 && writer.Write(data, size, records) != 0) Finding("cannot write " + path);
  writer.Close();
}

void CollectAndCheck(const std::string& dir) {
  auto result = collector::Collect(dir, collector::CollectOptions{});
  if (!result.ok()) return;  // refused with a message: fine, as long as nothing broke
  for (const std::string& warning : result->warnings) {
    if (!test::IsCleanUtf8(warning)) Finding("a warning that is not clean UTF-8: " + warning);
  }
  std::string text = ReadBytes(dir + "/" + collector::kTextReportFile);
  if (!test::IsCleanUtf8(text, "\n")) Finding("report.txt is not clean UTF-8");
  std::string json_text = ReadBytes(dir + "/" + collector::kJsonReportFile);
  if (!test::IsCleanUtf8(json_text, "\n")) Finding("report.json is not clean UTF-8");
  if (nlohmann::json::parse(json_text, nullptr, false).is_discarded())
    Finding("report.json does not parse");
  test::DecodedTrace trace = test::DecodeTraceFile(dir + "/" + collector::kTraceFile);
  for (const std::string& error : trace.errors) Finding("trace: " + error);
  for (const test::DecodedTrack& track : trace.tracks) {
    bool clean = test::IsCleanUtf8(track.name) &&
                 test::IsCleanUtf8(track.thread_name.value_or("")) &&
                 test::IsCleanUtf8(track.process_name);
    for (const std::string& arg : track.cmdline) clean = clean && test::IsCleanUtf8(arg);
    if (!clean) Finding("trace track " + std::to_string(track.uuid) + ": a name not clean UTF-8");
  }
  for (const test::DecodedEvent& event : trace.events) {
    bool clean = test::IsCleanUtf8(event.name);
    for (const std::string& category : event.categories)
      clean = clean && test::IsCleanUtf8(category);
    for (const auto& [name, value] : event.annotations)
      clean = clean && test::IsCleanUtf8(name) && test::IsCleanUtf8(value, "\n");
    if (!clean)
      Finding("trace event at " + std::to_string(event.timestamp_ns) + ": not clean UTF-8");
  }
}

}  // namespace gprof::fuzz
