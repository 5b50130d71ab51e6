#!/usr/bin/env python3
"""A small real PyTorch CUDA loop for gprof-run's container checks (scripts/gpu/run_all.sh
containers): two threads launch and synchronize; prints what it did, deterministically, so that its
stdout can be compared with a run without gprof-run."""
import threading

import torch


results = {}


def work(name, steps):
    x = torch.ones(1024, 1024, device="cuda")
    for _ in range(steps):
        x = x * 1.0001 + 0.5
        torch.cuda.synchronize()
    results[name] = float(x[0, 0])


threads = [threading.Thread(target=work, args=(f"worker{i}", 200), name=f"worker{i}")
           for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for name in sorted(results):
    print(f"{name}: {results[name]:.4f}")
