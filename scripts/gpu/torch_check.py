"""PyTorch under gprof-run: a launch-bound loop, then (unless the second argument is `loop`) a
DataLoader whose workers are forked without exec and whose pin-memory thread copies batches.
Prints the loop's time per op (us) and 'torch_check: ok'; exits 0. Used by scripts/gpu/*.sh."""
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def launch_bound(ops):
    a = torch.zeros(16, device="cuda")
    for _ in range(1000):
        a.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ops):
        a.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / ops * 1e6


def data_loader():
    data = TensorDataset(torch.randn(512, 3, 32, 32), torch.arange(512))
    loader = DataLoader(data, batch_size=64, num_workers=2, pin_memory=True)
    total = 0
    for images, labels in loader:
        total += int(images.cuda(non_blocking=True).shape[0])
    torch.cuda.synchronize()
    return total


if __name__ == "__main__":
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"per_op_us={launch_bound(ops):.3f}")
    if sys.argv[2:3] != ["loop"]:
        assert data_loader() == 512
    print("torch_check: ok")
