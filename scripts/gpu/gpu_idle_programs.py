"""PyTorch programs of the shapes issue 18 (sections 2, 4 and 5) found the diagnosis wrong on, one
per mode; run each under gprof-run and check the report with check_gpu_idle_report.py.

  decode-streams  four threads ("decode-0".."decode-3"), each on its own CUDA stream, decode JPEGs
                  on the GPU with torchvision.io.decode_jpeg (or, without torchvision, do 2 ms of
                  CPU work and a small matmul), 3 s in all: the GPU is idle while all four decode
                  on the CPU; their streams are idle while the GPU runs the others.
  lazy-matmul     warms up elementwise kernels, then runs the process's first matmul: cuBLAS's
                  first GEMM loads its module (lazy loading, the default: 94-124 ms on the CPU in
                  the launch on the H200). Run it again with CUDA_MODULE_LOADING=EAGER to compare.
  cpu-between     a kernel, then 2 s of Python on the CPU (as torch.compile's compiling is), then
                  a pinned copy with non_blocking=True (cudaMemcpyAsync) that queues the next work.
  graphs          captures a small MLP's forward into a CUDA graph (torch.cuda.graph) and replays
                  it 20 times.
  shared-gpu      two processes (spawned) take turns on GPU 0: one GPU, whose idle time is the
                  time neither runs anything."""
import os
import sys
import threading
import time

import torch

# The mode's name, to tell the checker what to expect; flushed before any CUDA work.
MODE = sys.argv[1] if len(sys.argv) > 1 else ""


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def decode_streams():
    try:
        import torchvision
        from torchvision.io import decode_jpeg, encode_jpeg
        image = (torch.rand(3, 480, 640) * 255).to(torch.uint8)
        jpeg = encode_jpeg(image, quality=90)
    except Exception as error:  # torchvision missing, or built without nvjpeg
        print(f"decode-streams: no torchvision JPEG ({error}); synthetic decode")
        torchvision = None
    weight = torch.randn(512, 512, device="cuda")
    stop = time.perf_counter() + 3.0

    def decoder(index):
        threading.current_thread().name = f"decode-{index}"
        try:  # the kernel's thread name, which the report shows
            import ctypes
            ctypes.CDLL(None).prctl(15, f"decode-{index}".encode(), 0, 0, 0)
        except Exception:
            pass
        stream = torch.cuda.Stream()
        count = 0
        with torch.cuda.stream(stream):
            while time.perf_counter() < stop:
                if torchvision is not None:
                    decode_jpeg(jpeg, device="cuda")
                else:
                    spin(0.002)
                    (weight @ weight).relu_()
                count += 1
        stream.synchronize()
        print(f"decode-{index}: {count} images")

    threads = [threading.Thread(target=decoder, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def lazy_matmul():
    x = torch.randn(1024, 1024, device="cuda")
    for _ in range(10):
        x = (x * 0.5 + 1.0).relu()
    torch.cuda.synchronize()
    time.sleep(0.05)
    start = time.perf_counter()
    y = x @ x  # cuBLAS's first GEMM: its module loads here under lazy loading
    torch.cuda.synchronize()
    print(f"lazy-matmul: first matmul {1e3 * (time.perf_counter() - start):.1f} ms "
          f"(CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', 'LAZY (default)')})")
    for _ in range(10):
        y = y @ x
    torch.cuda.synchronize()


def cpu_between():
    x = torch.randn(1024, 1024, device="cuda")
    host = torch.randn(1024, 1024).pin_memory()
    (x @ x).relu_()
    spin(2.0)  # Python on the CPU, outside any CUDA call
    x.copy_(host, non_blocking=True)  # cudaMemcpyAsync: only queues the next work
    (x @ x).relu_()
    torch.cuda.synchronize()


def graphs():
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512)).cuda()
    static_input = torch.randn(64, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch's docs do
        for _ in range(3):
            model(static_input)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = model(static_input)
    for _ in range(20):
        static_input.copy_(torch.randn(64, 512, device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    print(f"graphs: 20 replays, output {static_output.sum().item():.3f}")


def shared_worker(turn, barrier):
    x = torch.randn(2048, 2048, device="cuda:0")
    torch.cuda.synchronize()
    barrier.wait()
    for step in range(20):
        if step % 2 == turn:
            for _ in range(20):
                x = (x @ x).tanh_()
            torch.cuda.synchronize()
        else:
            time.sleep(0.03)


def shared_gpu():
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    workers = [context.Process(target=shared_worker, args=(turn, barrier)) for turn in (0, 1)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            sys.exit(worker.exitcode)


if __name__ == "__main__":
    modes = {"decode-streams": decode_streams, "lazy-matmul": lazy_matmul,
             "cpu-between": cpu_between, "graphs": graphs, "shared-gpu": shared_gpu}
    if MODE not in modes:
        sys.exit(f"usage: gpu_idle_programs.py {'|'.join(modes)}")
    modes[MODE]()
