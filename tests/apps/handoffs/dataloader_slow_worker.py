#!/usr/bin/python3
"""dataloader_slow_worker: a training loop whose DataLoader (num_workers=2) has a slow sample.

Every fourth batch's sample (1, 5) is slow to make: a pure-Python loop of 150-250 ms in decode_sample
(CPU work in the worker process that owns that batch). The main thread's time in next() for those
batches is the program's time lost to the handoff, through the worker's result queue; the
slow decode_sample is why. See common.py for what it prints.
"""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(__file__))
from common import loops_for, now, span, thread_line  # noqa: E402

BATCHES = 8


def decode_sample(loops):
    total = 0
    for i in range(loops):
        total += (i * i) % 7
    return total


class SlowSamples(Dataset):
    def __init__(self):
        self.loops = {i: loops_for(decode_sample, (150, 200, 250)[(i // 4) % 3])
                      for i in range(BATCHES) if i % 4 == 1}

    def __len__(self):
        return BATCHES

    def __getitem__(self, index):
        if index in self.loops:
            start = now()
            value = decode_sample(self.loops[index])
            span("work", start, now())
        else:
            value = index
        return torch.full((16,), float(value))


def main():
    thread_line("consumer")
    loader = DataLoader(SlowSamples(), batch_size=1, num_workers=2, prefetch_factor=1,
                        persistent_workers=False)
    batches = iter(loader)
    weights = torch.zeros(16)
    for index in range(BATCHES):
        start = now()
        batch = next(batches)
        if int(batch[0][0]) != index:  # a slow sample's batch: the waits the program measures
            span("wait", start, now())
        weights += batch[0] * 0.1  # the step: quick, so the loader is the bottleneck
    assert next(batches, None) is None


if __name__ == "__main__":
    main()
