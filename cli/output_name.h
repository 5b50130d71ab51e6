// -o's placeholders, as Nsight Systems names one file per process of a launcher (srun, torchrun,
// mpirun start many copies of one command line): %h the host's name, %p gprof-run's pid,
// %q{VAR} an environment variable's value, %% a percent sign.
#pragma once

#include <string>

#include "inject/shared/status.h"

namespace gprof::cli {

// `requested` with its placeholders replaced; an unknown placeholder, or a %q{VAR} whose variable
// is unset or empty, is an error that names it.
Expected<std::string> ExpandOutputName(const std::string& requested);

// The variable a launcher that starts one copy per process sets to the copy's rank (RANK under
// torchrun, SLURM_PROCID under srun, OMPI_COMM_WORLD_RANK under Open MPI...), as "NAME=value";
// empty when none is set.
std::string LauncherRankVariable();

}  // namespace gprof::cli
