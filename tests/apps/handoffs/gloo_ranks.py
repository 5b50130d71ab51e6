#!/usr/bin/python3
"""gloo_ranks: two torch.distributed gloo ranks over loopback TCP, rank 1 late at every step.

The launcher starts both ranks as torchrun would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in their environment; Debian's torchrun is broken) and waits for them. Before each
all_reduce, rank 1 augments its batch: a pure-Python loop of 60-120 ms in augment. Rank 0's time
in all_reduce is the program's time lost to the handoff (through gloo's threads and the socket);
rank 1's augment is why. See common.py for what it prints.
"""
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import loops_for, now, span, thread_line  # noqa: E402

STEPS = 5


def augment(loops):
    total = 0
    for i in range(loops):
        total += (i * i) % 7
    return total


def rank_main():
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    gradients = torch.ones(1024)
    dist.all_reduce(gradients)  # the connection's first use, not a step
    thread_line("consumer" if rank == 0 else "producer")
    for step in range(STEPS):
        if rank == 1:
            loops = loops_for(augment, (60, 90, 120)[step % 3])
            start = now()
            augment(loops)
            span("work", start, now())
        start = now()
        dist.all_reduce(gradients)
        if rank == 0:
            span("wait", start, now())
    dist.destroy_process_group()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch():
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    ranks = [subprocess.Popen([sys.executable, __file__, "rank"],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(2)]
    sys.exit(max(rank.wait() for rank in ranks))


if __name__ == "__main__":
    rank_main() if sys.argv[1:] == ["rank"] else launch()
