// The injected library's records (session_reader's and capture_records' decoders), wrapped into
// an inject-PID.gpr by the real writer so the fuzzer's bytes reach the decoders, then the whole of
// `gprof-run report`: analysis, diagnosis, text and JSON reports, Perfetto trace, each checked.
#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gprof;
  static const std::string dir = fuzz::ScratchSubdir("inject");
  fuzz::WriteRecordsFile(dir + "/inject-4242.gpr", format::Source::kInject, 4242, data, size);
  fuzz::CollectAndCheck(dir);
  return 0;
}
