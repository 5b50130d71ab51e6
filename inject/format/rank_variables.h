// The environment variables a launcher sets to tell each process it starts its place in the job:
// torchrun's, Open MPI's, MPICH's (Hydra, Intel MPI) and Slurm's srun. gprof-run keeps these and
// only these of a recorded process's environment (kernel.gpr's gprof_launch_variables,
// session.json's "rank"); the collector reads a rank identity from them
// (collector/session/rank_identity.h).
#pragma once

namespace gprof::format {

// One launcher's variables. In order of precedence: a process torchrun started under srun has
// both, and RANK is the one the program uses; mpirun's daemons may run as srun's tasks.
struct RankVariables {
  const char* rank;
  const char* local_rank;  // nullptr: the launcher sets none
  const char* world_size;
};
inline constexpr RankVariables kRankVariables[] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE"},  // torchrun, torch.distributed.launch
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},  // Open MPI
    {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"},        // MPICH's Hydra, Intel MPI
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"},  // srun
};

// The longest value kept: a rank or a size is a number; a longer value is no rank.
inline constexpr unsigned kMaxRankValueBytes = 20;

}  // namespace gprof::format
