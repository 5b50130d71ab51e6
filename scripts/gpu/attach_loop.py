"""A launch-bound PyTorch loop that runs on its own for SECONDS, for `gprof-run -p` to attach to
(scripts/gpu/validate_attach.sh): 16-element a.add_(1) in batches of 100, synchronized every half
second. Each half second's rate goes to stderr as "<time.time()> <ops per second>"; at the end,
one line on stdout that depends on nothing but what the GPU computed ("loop ok: N ops"), and exit 0.

usage: python3 attach_loop.py SECONDS
"""
import sys
import time

import torch


def main():
    seconds = float(sys.argv[1])
    a = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    start = time.monotonic()
    ops = 0
    while time.monotonic() - start < seconds:
        window = time.monotonic()
        done = 0
        while time.monotonic() - window < 0.5:
            for _ in range(100):
                a.add_(1)
            done += 100
        torch.cuda.synchronize()
        print(f"{time.time():.3f} {done / (time.monotonic() - window):.0f}", file=sys.stderr,
              flush=True)
        ops += done
    torch.cuda.synchronize()
    ok = int(a[0].item()) == ops and bool((a == a[0]).all())
    print("loop ok" if ok else "loop MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
