#!/usr/bin/python3
"""unseen_ranks: gloo jobs whose late rank is late for reasons, and around collectives, that
straggler_ranks.py does not use (issue 37's straggler diagnosis against programs of other shapes).

  unseen_ranks.py launch --world N --program P [--steps S] [--prefix ARGS...]
  unseen_ranks.py spawn --world N --program P [--steps S]

`launch` starts each rank as torchrun and srun do (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), as PREFIX... python3 unseen_ranks.py rank ...; {rank} in PREFIX is the rank.
`spawn` uses torch.multiprocessing.spawn (no rank variable anywhere).

Programs (the late rank, its cause, the collective):
  pagefault   rank 1 faults in 64 MB of a fresh mmap 6-10 times a step; broadcast from rank 0
  loader2     rank 1's DataLoader has 2 workers, every other sample slow in a C sleep; all_gather
  starved     rank 1 pinned to a CPU where a `sh` busy loop runs, does fixed work; barrier
  saver       rank 2's checkpoint thread holds an RLock while it works; the main thread waits on
              a Condition of that RLock; all_reduce
  queue       rank 1 takes its batch from a queue.Queue its producer thread fills slowly
              (numpy work); reduce
  subproc     rank 0 runs `sleep 0.2` with subprocess.run before each step; all_reduce
  usleep      rank 1 sleeps in libc's usleep through ctypes; all_gather
  alternate   rank 1 late (sleep) in odd steps, rank 2 late (spin) in even steps; all_reduce

Each rank prints, one line per fact (CLOCK_MONOTONIC ns):
  rank rank=<r> pid=<pid> tid=<main tid>
  wait rank=<r> late=<late rank> start_ns=<ns> end_ns=<ns>   each collective after the first
  cause rank=<r> tid=<tid>                                   a thread that is the cause
"""
import ctypes
import mmap
import os
import queue
import socket
import subprocess
import sys
import threading
import time


def say(line):
    os.write(1, (line + "\n").encode())


def arg(name, default=None):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def measured(rank, late, call):
    """Times one collective call as the program sees it."""
    start = time.monotonic_ns()
    call()
    say(f"wait rank={rank} late={late} start_ns={start} end_ns={time.monotonic_ns()}")


def spin_until(deadline):
    n = 0
    while time.monotonic() < deadline:
        n += 1
    return n


# --- pagefault: a fresh mapping touched page by page, each step -----------------------------
def touch_fresh_mapping(rounds):
    """Faults in 64 MB page by page, gives it back, again: `rounds` times."""
    area = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(area)
    for _ in range(rounds):
        for offset in range(0, len(area), 4096):
            view[offset] = 1
        area.madvise(mmap.MADV_DONTNEED)
    view.release()
    area.close()


def program_pagefault(rank, dist, torch, steps):
    weights = torch.zeros(4096)
    dist.broadcast(weights, src=0)
    for step in range(steps):
        if rank == 1:
            touch_fresh_mapping((6, 8, 10)[step % 3])
        measured(rank, 1, lambda: dist.broadcast(weights, src=0))


# --- loader2: two workers, a slow sample in a C sleep -------------------------------------------
class SlowEveryOther:
    def __len__(self):
        return 64

    def __getitem__(self, index):
        import torch
        if index % 2 == 1:
            ctypes.CDLL(None).usleep(300_000)
        return torch.full((8,), float(index))


def program_loader2(rank, dist, torch, steps):
    out = [torch.zeros(8) for _ in range(dist.get_world_size())]
    batches = None
    if rank == 1:
        batches = iter(torch.utils.data.DataLoader(SlowEveryOther(), batch_size=2, num_workers=2,
                                                   prefetch_factor=1))
    dist.all_gather(out, torch.ones(8))
    for _ in range(steps):
        batch = next(batches).sum(0) if batches else torch.ones(8)
        measured(rank, 1, lambda: dist.all_gather(out, batch))


# --- starved: a busy shell on the rank's CPU -----------------------------------------------------
def program_starved(rank, dist, torch, steps):
    hog = None
    if rank == 1:
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        hog = subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"])
    dist.barrier()
    for _ in range(steps):
        if rank == 1:
            total = 0
            for i in range(3_000_000):  # about 150 ms alone, twice that beside the hog
                total += i * i
        measured(rank, 1, dist.barrier)
    if hog:
        hog.kill()
        hog.wait()


# --- saver: a checkpoint thread holding an RLock; the main thread waits on its Condition --------
class Checkpointer:
    def __init__(self, rank):
        self.rank = rank
        self.guard = threading.RLock()
        self.saved = threading.Condition(self.guard)
        self.pending = 0

    def save_async(self, seconds):
        with self.guard:
            self.pending += 1
        threading.Thread(target=self._save, args=(seconds,), name="ckpt-saver").start()

    def _save(self, seconds):
        say(f"cause rank={self.rank} tid={threading.get_native_id()}")
        with self.guard:
            with self.guard:  # re-entered, as nested saving helpers do
                spin_until(time.monotonic() + seconds)
            self.pending -= 1
            self.saved.notify_all()

    def wait_saved(self):
        with self.saved:
            self.saved.wait_for(lambda: self.pending == 0)


def program_saver(rank, dist, torch, steps):
    grads = torch.ones(2048)
    saver = Checkpointer(rank)
    dist.all_reduce(grads)
    for step in range(steps):
        if rank == 2:
            saver.save_async((0.15, 0.25, 0.2)[step % 3])
            time.sleep(0.01)
            saver.wait_saved()
        measured(rank, 2, lambda: dist.all_reduce(grads))


# --- queue: a slow producer thread ---------------------------------------------------------------
def produce(batches, rank, steps):
    import numpy
    say(f"cause rank={rank} tid={threading.get_native_id()}")
    for step in range(steps):
        deadline = time.monotonic() + (0.15, 0.2, 0.25)[step % 3]
        block = numpy.ones(1 << 16)
        while time.monotonic() < deadline:
            block = numpy.sqrt(block + 1.0)
        batches.put(block[:8].copy())


def program_queue(rank, dist, torch, steps):
    grads = torch.ones(512)
    batches = queue.Queue(maxsize=1)
    if rank == 1:
        threading.Thread(target=produce, args=(batches, rank, steps), daemon=True,
                         name="producer").start()
    dist.reduce(grads, dst=0)
    for _ in range(steps):
        if rank == 1:
            grads += float(batches.get().sum())
        measured(rank, 1, lambda: dist.reduce(grads, dst=0))


# --- subproc: a child process the rank waits for ------------------------------------------------
def program_subproc(rank, dist, torch, steps):
    grads = torch.ones(256)
    dist.all_reduce(grads)
    for _ in range(steps):
        if rank == 0:
            subprocess.run(["sleep", "0.2"], check=True)
        measured(rank, 0, lambda: dist.all_reduce(grads))


# --- usleep: a sleep in C ---------------------------------------------------------------------
def program_usleep(rank, dist, torch, steps):
    libc = ctypes.CDLL("libc.so.6")
    out = [torch.zeros(16) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.ones(16))
    for step in range(steps):
        if rank == 1:
            libc.usleep((150_000, 250_000, 200_000)[step % 3])
        measured(rank, 1, lambda: dist.all_gather(out, torch.ones(16)))


# --- alternate: two late ranks ------------------------------------------------------------------
def program_alternate(rank, dist, torch, steps):
    grads = torch.ones(1024)
    dist.all_reduce(grads)
    for step in range(steps):
        late = 1 if step % 2 else 2
        if rank == late == 1:
            time.sleep(0.2)
        elif rank == late == 2:
            spin_until(time.monotonic() + 0.2)
        measured(rank, late, lambda: dist.all_reduce(grads))


PROGRAMS = {name[len("program_"):]: f for name, f in globals().items()
            if name.startswith("program_")}


def rank_main(rank=None, world=None):
    import torch
    import torch.distributed as dist

    if rank is None:
        rank = int(os.environ["RANK"])
    say(f"rank rank={rank} pid={os.getpid()} tid={threading.get_native_id()}")
    if world is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    PROGRAMS[arg("--program")](rank, dist, torch, int(arg("--steps", "6")))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_args():
    return ["--program", arg("--program"), "--steps", arg("--steps", "6")]


def launch():
    prefix = sys.argv[sys.argv.index("--prefix") + 1:] if "--prefix" in sys.argv else []
    if prefix:
        sys.argv = sys.argv[:sys.argv.index("--prefix")]
    world = int(arg("--world", "2"))
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    ranks = []
    for r in range(world):
        command = [part.replace("{rank}", str(r)) for part in prefix]
        command += [sys.executable, os.path.abspath(__file__), "rank"] + rank_args()
        ranks.append(subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r))))
    sys.exit(max(rank.wait() for rank in ranks))


def spawned(rank, world, args):
    sys.argv = [sys.argv[0], "rank"] + args
    rank_main(rank, world)


def spawn():
    import torch.multiprocessing

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    world = int(arg("--world", "2"))
    torch.multiprocessing.spawn(spawned, args=(world, rank_args()), nprocs=world)


if __name__ == "__main__":
    command = sys.argv[1:2]
    rank_main() if command == ["rank"] else spawn() if command == ["spawn"] else launch()
