#!/usr/bin/python3
"""straggler_ranks: torch.distributed gloo ranks, one of them late before each all_reduce for a
known reason, for the tests of the job's rank waits (issue 37).

  straggler_ranks.py launch --world N --late R --mode MODE [--steps S] [--hosts]
                            [--skew-ns N] [--prefix ARGS...]
  straggler_ranks.py spawn --world N --late R --mode MODE [--steps S]
  straggler_ranks.py rank --late R --mode MODE --steps S

`launch` starts the ranks as torchrun and srun do (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in each rank's environment; Debian's torchrun fails on Python 3.11): each as
PREFIX... python3 straggler_ranks.py rank ..., where {rank} in PREFIX is the rank (a gprof-run per
rank, `ip netns exec` for a host of its own). `spawn` starts them with torch.multiprocessing.spawn
instead: no rank variable in any environment, each rank told its rank by its argument, as
init_process_group(rank=, world_size=) is. MASTER_ADDR and GLOO_SOCKET_IFNAME come from the
launcher's environment when set (ranks in network namespaces), else loopback. With --hosts each
rank's gprof-run is told a boot id of its own (GPROF_TEST_BOOT_ID, test-only), and with --skew-ns
its wall clock is skewed by rank x N ns (GPROF_TEST_REALTIME_SKEW_NS, test-only): sessions of one
machine the merge must align as another host's.

Rank R is late before each all_reduce, by MODE:
  sleep       it sleeps 60-120 ms (time.sleep)
  dataloader  its DataLoader's worker takes 60-120 ms to make the batch (in slow_sample)
  cpu         it computes 60-120 ms of work pinned to one CPU that two busy processes share
  lock        its logging thread holds a lock for 60-120 ms that its main thread then needs

Each rank prints, one line per fact (CLOCK_MONOTONIC ns of its own namespace):
  rank rank=<r> pid=<pid> tid=<main tid>
  wait rank=<r> start_ns=<ns> end_ns=<ns>     its time in each all_reduce after the first
  logger rank=<r> tid=<tid>                   (lock) the logging thread of a step
"""
import os
import socket
import subprocess
import sys
import threading
import time

LATE_MS = (60, 90, 120)


def now():
    return time.monotonic_ns()


def say(line):
    os.write(1, (line + "\n").encode())


def arg(name, default=None):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def spin(seconds):
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        total += 1
    return total


def slow_sample(ms):
    time.sleep(ms / 1000)
    return ms


class LateDataset:
    """The late rank's data: each batch takes LATE_MS[step % 3] ms in its worker."""

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        import torch
        slow_sample(LATE_MS[index % 3])
        return torch.ones(4)


def busy_forever():
    while True:
        pass


def rank_main(rank=None, world=None):
    import torch
    import torch.distributed as dist

    if rank is None:
        rank = int(os.environ["RANK"])
    late = int(arg("--late"))
    mode = arg("--mode")
    steps = int(arg("--steps", "5"))
    say(f"rank rank={rank} pid={os.getpid()} tid={threading.get_native_id()}")
    hogs = []
    lock = threading.Lock()
    loader = None
    if rank == late and mode == "cpu":
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})
        for _ in range(2):
            hog = subprocess.Popen([sys.executable, "-c",
                                    "import os\nos.sched_setaffinity(0, {%d})\nwhile True: pass" % cpu])
            hogs.append(hog)
    if rank == late and mode == "dataloader":
        loader = iter(torch.utils.data.DataLoader(LateDataset(), batch_size=None, num_workers=1,
                                                  prefetch_factor=1))

    def logging_thread(step_ms, ready):
        say(f"logger rank={rank} tid={threading.get_native_id()}")
        with lock:
            ready.set()
            spin(step_ms / 1000)

    if world is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    gradients = torch.ones(1024)
    dist.all_reduce(gradients)  # the connection's first use, not a step
    for step in range(steps):
        if rank == late:
            ms = LATE_MS[step % 3]
            if mode == "sleep":
                time.sleep(ms / 1000)
            elif mode == "dataloader":
                next(loader)
            elif mode == "cpu":
                spin(ms / 1000 / 3)  # a third of the CPU: about ms of wall time
            elif mode == "lock":
                ready = threading.Event()
                logger = threading.Thread(target=logging_thread, args=(ms, ready), name="logger")
                logger.start()
                ready.wait()
                with lock:
                    pass
                logger.join()
        start = now()
        dist.all_reduce(gradients)
        say(f"wait rank={rank} start_ns={start} end_ns={now()}")
    dist.destroy_process_group()
    for hog in hogs:
        hog.kill()
        hog.wait()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch():
    world = int(arg("--world", "2"))
    prefix = sys.argv[sys.argv.index("--prefix") + 1:] if "--prefix" in sys.argv else []
    before_prefix = sys.argv[:sys.argv.index("--prefix")] if prefix else sys.argv
    sys.argv = before_prefix
    rank_args = ["--late", arg("--late", "1"), "--mode", arg("--mode", "sleep"),
                 "--steps", arg("--steps", "5")]
    env = dict(os.environ, WORLD_SIZE=str(world),
               MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"),
               MASTER_PORT=os.environ.get("MASTER_PORT", str(free_port())))
    ranks = []
    for r in range(world):
        command = [part.replace("{rank}", str(r)) for part in prefix]
        command += [sys.executable, os.path.abspath(__file__), "rank"] + rank_args
        rank_env = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        if "--hosts" in sys.argv:
            rank_env["GPROF_TEST_BOOT_ID"] = f"test-host-{r}"
        if arg("--skew-ns"):
            rank_env["GPROF_TEST_REALTIME_SKEW_NS"] = str(r * int(arg("--skew-ns")))
        ifname = os.environ.get("GLOO_IFNAME_TEMPLATE")
        if ifname:
            rank_env["GLOO_SOCKET_IFNAME"] = ifname.replace("{rank}", str(r))
        ranks.append(subprocess.Popen(command, env=rank_env))
    sys.exit(max(rank.wait() for rank in ranks))


def spawned_rank(rank, world, rank_args):
    sys.argv = [sys.argv[0], "rank"] + rank_args
    rank_main(rank, world)


def spawn():
    import torch.multiprocessing

    world = int(arg("--world", "2"))
    rank_args = ["--late", arg("--late", "1"), "--mode", arg("--mode", "sleep"),
                 "--steps", arg("--steps", "5")]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    torch.multiprocessing.spawn(spawned_rank, args=(world, rank_args), nprocs=world)


if __name__ == "__main__":
    command = sys.argv[1:2]
    rank_main() if command == ["rank"] else spawn() if command == ["spawn"] else launch()
