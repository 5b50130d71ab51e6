#!/usr/bin/env python3
"""The GPU workloads of issue 6's overhead benchmark, timed from inside (so that a profiler's start
and its post-processing do not count), in one process:

  launch    a launch-bound loop: OPS x a.add_(1) on a 16-element tensor (one tiny kernel each);
            time per op (the median of 5 equal blocks)
  launch4   the same loop from 4 threads at once, each on its own stream; time per op of one
            thread
  resnet50  a ResNet-50 training step on synthetic data (batch 128, 224x224, channels_last, SGD),
            the article's configuration; time per step

usage: gpu_workload.py [--ops N] [--steps N] [--seconds S] [--only NAME,...] [--torch-profiler]

Prints one line per workload: `RESULT name=<workload> per_unit_us=<time>`. With --torch-profiler
the whole run happens inside torch.profiler.profile(activities=[CPU, CUDA]) (what a user of
torch.profiler pays; its trace is exported to /dev/null-like temp storage and not kept).
ResNet-50 is torchvision's when torchvision is installed, else the same network defined here.
"""
import argparse
import contextlib
import statistics
import threading
import time

import torch
import torch.nn as nn


def launch_loop(ops, stream=None, blocks=5):
    """Time per op: the median over BLOCKS equal blocks of the loop, so that one preempted or
    throttled stretch does not decide the figure (the same rule for every configuration)."""
    a = torch.zeros(16, device="cuda")
    per_block = max(1, ops // blocks)
    times = []
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for _ in range(500):  # warm-up
            a.add_(1)
        torch.cuda.synchronize()
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(per_block):
                a.add_(1)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / per_block * 1e6)
    return statistics.median(times)


def launch4(ops):
    results = [0.0] * 4
    barrier = threading.Barrier(4)

    def worker(i):
        stream = torch.cuda.Stream()
        barrier.wait()
        results[i] = launch_loop(ops, stream)

    threads = [threading.Thread(target=worker, args=(i,), name=f"launcher-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(results) / len(results)


class Bottleneck(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def resnet50_here():
    layers, inplanes, blocks = [], 64, []
    for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(count):
            blocks.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
              nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def resnet50(steps, seconds=0.0):
    try:
        import torchvision
        model = torchvision.models.resnet50()
    except ImportError:
        model = resnet50_here()
    model = model.cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (128,), device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()

    for _ in range(3):  # warm-up: cuDNN picks its algorithms
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    done = 0
    while done < steps or time.perf_counter() - start < seconds:
        step()
        done += 1
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / done * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="resnet50: keep stepping until this long has passed (long-run tests)")
    parser.add_argument("--only", default="launch,launch4,resnet50")
    parser.add_argument("--torch-profiler", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    profiler = contextlib.nullcontext()
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with profiler:
        for name in args.only.split(","):
            if name == "launch":
                value = launch_loop(args.ops)
            elif name == "launch4":
                value = launch4(args.ops // 4)
            elif name == "resnet50":
                value = resnet50(args.steps, args.seconds)
            else:
                raise SystemExit(f"unknown workload {name}")
            print(f"RESULT name={name} per_unit_us={value:.3f}", flush=True)


if __name__ == "__main__":
    main()
