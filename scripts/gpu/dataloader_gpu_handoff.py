#!/usr/bin/env python3
"""A DataLoader-bound training loop on the GPU (issue 35, on the GPU host): a small model trains on
CUDA while a DataLoader with two workers makes its batches; every fourth batch's sample is slow to
make in its worker (a pure-Python loop of 150-250 ms in decode_sample), so the main thread waits in
next() and the GPU runs out of work. Prints, as tests/apps/handoffs/common.py does, one line per
fact (one write each): the consumer thread, each wait in next() for a slow batch, and the work
that made it late, on CLOCK_MONOTONIC, for check_handoff_report.py."""
import os
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

BATCHES = 12


def now():
    return time.monotonic_ns()


def say(line):
    os.write(1, (line + "\n").encode())


def span(kind, start, end):
    say(f"{kind} tid={threading.get_native_id()} start_ns={start} end_ns={end}")


def decode_sample(loops):
    total = 0
    for i in range(loops):
        total += (i * i) % 7
    return total


def loops_for(ms):
    start = now()
    decode_sample(200_000)
    per_loop = max(1, (now() - start) / 200_000)
    return int(ms * 1_000_000 / per_loop)


class SlowSamples(Dataset):
    def __init__(self):
        self.loops = {i: loops_for((150, 200, 250)[(i // 4) % 3]) for i in range(BATCHES)
                      if i % 4 == 1}

    def __len__(self):
        return BATCHES

    def __getitem__(self, index):
        if index in self.loops:
            start = now()
            value = decode_sample(self.loops[index])
            span("work", start, now())
        else:
            value = index
        return torch.full((256, 256), float(value % 7))


def main():
    say(f"thread tid={threading.get_native_id()} pid={os.getpid()} role=consumer")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowSamples(), batch_size=1, num_workers=2, prefetch_factor=1,
                        pin_memory=True)
    batches = iter(loader)
    for index in range(BATCHES):
        start = now()
        batch = next(batches)
        waited = now() - start
        if waited > 50_000_000:  # a slow sample's batch: the waits the program measures
            span("wait", start, now())
        x = batch[0].cuda(non_blocking=True)
        for _ in range(10):  # the step: a few ms on the GPU
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.cuda.synchronize()
    say(f"done loss={float(loss):.6f}")


if __name__ == "__main__":
    main()
