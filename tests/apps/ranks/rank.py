"""One rank: forks one worker (no exec: its environment is the rank's) and prints
"rank=R pid=P worker=W" with R from the launcher's variable, then both sleep a little, long
enough for gprof-run to see them."""
import os
import sys
import time

rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "?"))
worker = os.fork()
if worker == 0:
    time.sleep(0.4)
    os._exit(0)
# One write: the ranks share the launcher's stdout.
os.write(1, f"rank={rank} pid={os.getpid()} worker={worker}\n".encode())
time.sleep(0.5)
os.waitpid(worker, 0)
sys.exit(0)
