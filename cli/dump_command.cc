#include "cli/dump_command.h"

#include <fcntl.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/dump_python.h"
#include "cli/exit_codes.h"
#include "collector/live/cuda_driver_waits.h"
#include "collector/live/dump_analysis.h"
#include "collector/live/proc_snapshot.h"
#include "collector/model/model.h"
#include "collector/writers/dump_json.h"
#include "collector/writers/dump_text.h"
#include "collector/writers/output_file.h"

namespace gprof::cli {
namespace {

int Fail(const std::string& line) {
  fprintf(stderr, "gprof-run dump: %s\n", collector::PrintableName(line).c_str());
  return kExitToolFailure;
}

}  // namespace

int DumpCommand(const DumpCommandOptions& options) {
  std::vector<pid_t> pids;
  for (const std::string& given : options.pids) {
    std::stringstream list(given);
    std::string item;
    while (std::getline(list, item, ',')) {
      char* end = nullptr;
      long pid = strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || pid <= 0 || pid > 0x3fffffff)
        return Fail("'" + item + "' is not a process id");
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  if (pids.empty()) return Fail("no process given: gprof-run dump -p PID[,PID...]");
  Expected<collector::live::Snapshot> snapshot = collector::live::ReadProcessTrees(pids);
  if (!snapshot.ok()) return Fail(snapshot.status().message());
  AddPythonStacks(&*snapshot);
  collector::live::InferCudaDriverHolders(&*snapshot);
  collector::live::DumpAnalysis analysis = collector::live::AnalyzeDump(*snapshot);
  std::string text = collector::DumpText(*snapshot, analysis);
  fwrite(text.data(), 1, text.size(), stdout);
  fflush(stdout);
  for (const auto& [path, write] : {std::pair{options.json_path, &collector::DumpJson},
                                    {options.html_path, &collector::DumpHtml}}) {
    if (path.empty()) continue;
    Status written = collector::WriteTextFile(AT_FDCWD, path, path, write(*snapshot, analysis));
    if (!written.ok()) return Fail(written.message());
  }
  return 0;
}

}  // namespace gprof::cli
