"""Starts ranks as torchrun and srun do: one process per rank, each with its launcher's variables.

`launcher.py torchrun|srun N [-- COMMAND...]`: N processes of COMMAND (default: rank.py beside
this file), rank i with RANK/LOCAL_RANK/WORLD_SIZE (torchrun; local ranks count per "node" of 2)
or SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS (srun), and %r in COMMAND replaced by the rank. Waits
for all, prints "launcher pid=P", and exits with the first failure's status.
"""
import os
import subprocess
import sys

VARIABLES = {
    "torchrun": ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    "srun": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
}


def main():
    kind, count = sys.argv[1], int(sys.argv[2])
    command = sys.argv[4:] if len(sys.argv) > 3 and sys.argv[3] == "--" else [
        sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")]
    rank_name, local_name, size_name = VARIABLES[kind]
    children = []
    for rank in range(count):
        env = dict(os.environ)
        for names in VARIABLES.values():  # only this launcher's
            for name in names:
                env.pop(name, None)
        env[rank_name], env[local_name], env[size_name] = str(rank), str(rank % 2), str(count)
        argv = [arg.replace("%r", str(rank)) for arg in command]
        children.append(subprocess.Popen(argv, env=env))
    print(f"launcher pid={os.getpid()}", flush=True)
    status = 0
    for child in children:
        code = child.wait()
        if code != 0 and status == 0:
            status = code
    sys.exit(status)


if __name__ == "__main__":
    main()
