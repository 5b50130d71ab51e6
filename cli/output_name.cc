#include "cli/output_name.h"

#include <unistd.h>

#include <cstdlib>

#include "collector/model/model.h"

namespace gprof::cli {

Expected<std::string> ExpandOutputName(const std::string& requested) {
  std::string name;
  for (size_t i = 0; i < requested.size(); ++i) {
    if (requested[i] != '%') {
      name += requested[i];
      continue;
    }
    char kind = i + 1 < requested.size() ? requested[i + 1] : '\0';
    if (kind == '%') {
      name += '%';
      ++i;
    } else if (kind == 'p') {
      name += std::to_string(getpid());
      ++i;
    } else if (kind == 'h') {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      for (char* c = host; *c != '\0'; ++c) {
        if (*c == '/') *c = '_';  // a name, never a path
      }
      name += host;
      ++i;
    } else if (kind == 'q') {
      // %q{VAR}: VAR's value, as written (slashes included: %q{OUTDIR}/r0 names a path).
      const size_t close = i + 2 < requested.size() && requested[i + 2] == '{'
                               ? requested.find('}', i + 3)
                               : std::string::npos;
      if (close == std::string::npos || close == i + 3) {
        return Status::Error(StatusCode::kInvalid,
                             "-o " + collector::PrintableName(requested) +
                                 ": %q takes an environment variable's name in braces, as "
                                 "%q{RANK}");
      }
      std::string variable = requested.substr(i + 3, close - i - 3);
      const char* value = getenv(variable.c_str());
      if (value == nullptr || *value == '\0') {
        return Status::Error(StatusCode::kInvalid,
                             "-o " + collector::PrintableName(requested) + ": %q{" +
                                 collector::PrintableName(variable) +
                                 "} names an environment variable that is " +
                                 (value == nullptr ? "not set" : "empty"));
      }
      name += value;
      i = close;
    } else if (kind == '\0') {
      return Status::Error(StatusCode::kInvalid, "-o " + collector::PrintableName(requested) +
                                                     ": a % at the end (%% writes a %)");
    } else {
      return Status::Error(StatusCode::kInvalid,
                           "-o " + collector::PrintableName(requested) + ": unknown placeholder %" +
                               collector::PrintableName(std::string(1, kind)) +
                               " (known: %h host, %p pid, %q{VAR} environment variable, %% a %)");
    }
  }
  return name;
}

std::string LauncherRankVariable() {
  // torchrun, srun, Open MPI, MPICH/Hydra and Intel MPI, PMIx, MVAPICH.
  for (const char* variable : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                               "PMIX_RANK", "MV2_COMM_WORLD_RANK", "LOCAL_RANK"}) {
    const char* value = getenv(variable);
    if (value != nullptr && *value != '\0') return std::string(variable) + "=" + value;
  }
  return {};
}

}  // namespace gprof::cli
