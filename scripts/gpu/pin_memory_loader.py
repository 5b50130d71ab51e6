"""The article's freeze (reading-torch-profiler, sections 7-8): a DataLoader with pin_memory=True
on large float32 batches (128x3x224x224: 77 MB each) feeding a main thread that keeps the GPU busy.
After each batch is pinned, the pin-memory thread and the main thread stall together. Run under
gprof-run to see what they waited on. Prints the mean time per step."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __len__(self):
        return 128 * 24

    def __getitem__(self, index):
        return torch.randn(3, 224, 224), index % 1000


def main():
    loader = DataLoader(SyntheticImages(), batch_size=128, num_workers=4, pin_memory=True,
                        prefetch_factor=2, persistent_workers=False)
    weight = torch.randn(4096, 4096, device="cuda")
    start = time.perf_counter()
    steps = 0
    for images, labels in loader:
        images = images.cuda(non_blocking=True)
        x = weight
        for _ in range(20):  # keep the GPU busy between batches, launched from the main thread
            x = torch.relu(x @ weight)
        steps += 1
    torch.cuda.synchronize()
    print(f"pin_memory_loader: {steps} steps, {(time.perf_counter() - start) / steps * 1e3:.1f} ms/step")


if __name__ == "__main__":
    main()
