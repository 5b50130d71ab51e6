"""Issue 18.1 on the H200: a PyTorch program whose main thread launches GPU work while two
threads of its own do what PyTorch programs do beside it: one pins host memory and frees the
caching allocator's blocks (cudaHostAlloc, cudaFree: slow CUDA calls, whose native stacks
gprof-run takes), one looks symbols up through the dynamic loader in a loop (dladdr, dlsym: the
loader's lock, as Python's ctypes and torch's own lazy lookups take it). Under a profiler that
takes the loader's lock itself (to name stacks), the launches wait for it and the loader thread's
lookups get slower. Prints the loader thread's lookups and their longest duration, for a run with
and one without gprof-run to compare."""
import ctypes
import ctypes.util
import threading
import time

import torch

SECONDS = 3.0


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def loader_user(stop, result):
    libc = ctypes.CDLL(None)
    dladdr = libc.dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    dlsym = libc.dlsym
    dlsym.restype = ctypes.c_void_p
    dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    address = ctypes.cast(libc.printf, ctypes.c_void_p).value
    info = DlInfo()
    longest, count = 0.0, 0
    while not stop.is_set():
        start = time.perf_counter()
        dladdr(address, ctypes.byref(info))
        dlsym(None, b"cudaLaunchKernel")
        longest = max(longest, time.perf_counter() - start)
        count += 1
    result["lookups"], result["longest_ms"] = count, longest * 1e3


def pinner(stop):
    while not stop.is_set():
        pinned = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()  # cudaHostAlloc
        on_gpu = pinned.to("cuda", non_blocking=True)
        del pinned, on_gpu
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # cudaFree of the cached blocks


def main():
    weight = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    stop, result = threading.Event(), {}
    threads = [threading.Thread(target=loader_user, args=(stop, result), name="loader-user"),
               threading.Thread(target=pinner, args=(stop,), name="pinner")]
    for thread in threads:
        thread.start()
    launches, end = 0, time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        x = weight
        for _ in range(10):
            x = torch.relu(x @ weight)
            launches += 2
        x.sum().item()  # a sync each round: the launches queue behind nothing else
    stop.set()
    for thread in threads:
        thread.join()
    print(f"self_blame_program: {launches} launches, loader lookups {result['lookups']}, "
          f"longest lookup {result['longest_ms']:.3f} ms")


if __name__ == "__main__":
    main()
