"""Issue 19 on real CUDA: programs whose report must name the user's own Python lines.

  python_stacks_programs.py pin-memory   a DataLoader with pin_memory=True on 77 MB batches
                                         (128x3x224x224 float32), the main loop copying each to
                                         the GPU and computing on it
  python_stacks_programs.py gil-holder   a training loop on the GPU while a second thread holds
                                         the GIL in long C calls (sum over a range)

Each prints "line role=<role> function=<name> line=<n>" for the lines the report should name
(computed from this file, not written by hand), then "steps=<n> ms_per_step=<x>".
"""
import inspect
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


def line_of(function, marker):
    lines, first = inspect.getsourcelines(function)
    for index, text in enumerate(lines):
        if marker in text:
            return first + index
    raise SystemExit(f"no {marker} in {function.__name__}")


class SyntheticImages(Dataset):
    def __len__(self):
        return 128 * 16

    def __getitem__(self, index):
        return torch.randn(3, 224, 224), index % 1000


def pin_memory_loop():
    loader = DataLoader(SyntheticImages(), batch_size=128, num_workers=4, pin_memory=True,
                        prefetch_factor=2)
    weight = torch.randn(4096, 4096, device="cuda")
    steps = 0
    start = time.perf_counter()
    for images, labels in loader:  #@wait
        images = images.cuda(non_blocking=True)  #@copy
        x = weight
        for _ in range(20):
            x = torch.relu(x @ weight)
        steps += 1
    torch.cuda.synchronize()
    return steps, time.perf_counter() - start


def hold_gil(stop):
    while not stop.is_set():
        sum(range(30_000_000))  #@hold
        time.sleep(0.05)


def train_loop(steps):
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(256, 4096, device="cuda")
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(data).square().mean()  #@step
        loss.backward()  #@step
        optimizer.step()  #@step
        loss.item()  #@step
    torch.cuda.synchronize()
    return steps, time.perf_counter() - start


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "pin-memory"
    if mode == "pin-memory":
        print(f"line role=waiter function=pin_memory_loop line={line_of(pin_memory_loop, '#@wait')}")
        print(f"line role=copy function=pin_memory_loop line={line_of(pin_memory_loop, '#@copy')}")
        steps, seconds = pin_memory_loop()
    elif mode == "gil-holder":
        lines, first = inspect.getsourcelines(train_loop)
        step_lines = [first + i for i, text in enumerate(lines) if "#@step" in text]
        print(f"line role=waiter function=train_loop line={','.join(map(str, step_lines))}")
        print(f"line role=holder function=hold_gil line={line_of(hold_gil, '#@hold')}")
        stop = threading.Event()
        holder = threading.Thread(target=hold_gil, args=(stop,), name="gil-holder")
        holder.start()
        try:
            steps, seconds = train_loop(200)
        finally:
            stop.set()
            holder.join()
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(f"steps={steps} ms_per_step={seconds / steps * 1e3:.1f}")


if __name__ == "__main__":
    main()
