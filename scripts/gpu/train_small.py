"""A small PyTorch training loop on synthetic data: a few convolutions, batch norm, a linear head,
SGD, `--steps` steps. With `--profiler torch` the whole loop runs under torch.profiler and the
per-kernel count and total time it saw are written to `--out` (JSON), for comparison with what
gprof-run recorded of the same loop (scripts/gpu/compare_kernels.py). Prints the mean step time."""
import argparse
import json
import time

import torch
import torch.nn as nn


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1, stride=2), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).cuda()


def train(steps):
    torch.manual_seed(0)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(64, 3, 64, 64, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--profiler", choices=["none", "torch"], default="none")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.profiler == "none":
        step = train(args.steps)
    else:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step = train(args.steps)
        kernels = {}
        for event in prof.events():
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            if event.name.startswith(("Memcpy", "Memset")):  # kernels only
                continue
            count, total_us = kernels.get(event.name, (0, 0.0))
            kernels[event.name] = (count + 1, total_us + event.time_range.elapsed_us())
        with open(args.out, "w") as out:
            json.dump({name: {"count": c, "total_ns": t * 1000} for name, (c, t) in kernels.items()},
                      out, indent=1)
    print(f"step_ms={step * 1e3:.3f}")


if __name__ == "__main__":
    main()
