// session.json, as gprof-run writes it into the session directory, then the whole of
// `gprof-run report` (the command line, exit status and notes it holds reach every output).
#include "collector/session/session_reader.h"
#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gprof;
  static const std::string dir = fuzz::ScratchSubdir("meta");
  fuzz::WriteBytes(dir + "/" + collector::kSessionMetaFile, data, size);
  fuzz::CollectAndCheck(dir);
  return 0;
}
