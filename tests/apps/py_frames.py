#!/usr/bin/env python3
"""py_frames: waits whose waiter and holder are the program's own Python lines, for the tests of
Python stacks (issue 19). The code that waits and holds is written afresh each run into a module
of its own, with random function names and random blank lines before each function, so that only
a profiler that reads the real frames can name its file, lines and functions.

  py_frames.py lock         a threading.Lock held across a sleep by a thread, wanted by another
  py_frames.py gil          a thread holds the GIL in one long C call (sum over a range) while
                            another wants it after each of its short sleeps; the holder lets it
                            go in a sleep after the call
  py_frames.py deep         the same, the waiter 150 calls deep in a recursive function
  py_frames.py mpqueue      forked multiprocessing workers compute, then put on a Queue that the
                            main process reads
  py_frames.py cuda         slow CUDA calls of the tests' fake runtime (FAKE_CUDART), by ctypes
  py_frames.py dataloader   a torch DataLoader with worker processes whose dataset computes

No thread names itself to the kernel: the names below are Python's (threading.Thread(name=...)).
stdout, once done (kernel_scenarios' format):
  scenario name=py-frames-<mode> pid=<pid> python=<version>
  thread tid=<native tid> role=<role> name=<Python thread name>
  frame role=<role> file=<path> function=<name as co_qualname/co_name> lines=<l1,l2,...>
  span tid=<tid> what=<wait|hold> start_ns=<ns> end_ns=<ns>   CLOCK_MONOTONIC ns
"""
import importlib.util
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

WATCHDOG_S = 60  # SIGALRM's default action ends a run that hangs
QUALNAMES = sys.version_info >= (3, 11)  # co_qualname: a method by its class too
DEEP_CALLS = 150  # deeper than the 96 frames a stack keeps

# The module's source: {name} fields are random names, "#@role" ends a line a frame of that role
# may show (the line a thread waits, holds or releases on), {pad} random blank lines.
SOURCE = '''\
import threading
import time
{pad}
class {holder_class}:
    def {holder}(self, lock, taken, seconds, spans):
        lock.acquire()
        start = time.monotonic_ns()
        taken.set()
        time.sleep(seconds)  #@holder
        spans.append((threading.get_native_id(), "hold", start, time.monotonic_ns()))
        lock.release()  #@release
{pad}
def {waiter}(lock, taken, spans):
    taken.wait()
    start = time.monotonic_ns()
    lock.acquire()  #@waiter
    spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
    lock.release()
{pad}
def {deep}(depth, lock, taken, spans):
    if depth > 0:
        return {deep}(depth - 1, lock, taken, spans)  #@recursion
    taken.wait()
    start = time.monotonic_ns()
    lock.acquire()  #@waiter
    spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
    lock.release()
{pad}
def {gil_holder}(count, spans):
    time.sleep(0.05)  # the thread that started this one is back in its join, without the GIL
    start = time.monotonic_ns()
    total = sum(range(count))  #@holder
    spans.append((threading.get_native_id(), "hold", start, time.monotonic_ns()))
    time.sleep(0.01)  #@release
    return total
{pad}
def {gil_waiter}(done, spans):
    while not done.is_set():
        start = time.monotonic_ns()
        time.sleep(0.001)  #@waiter
        spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
{pad}
def {producer}(queue, rounds):
    for _ in range(3):
        value = 0
        for step in range(rounds):  #@holder
            value = (value * 31 + step) % 1000003  #@holder
        queue.put(value)
{pad}
def {consumer}(queue, count, spans):
    for _ in range(count):
        start = time.monotonic_ns()
        queue.get()  #@waiter
        spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
{pad}
def {launcher}(runtime, launch, synchronize, spans):
    for _ in range(3):
        launch()
        start = time.monotonic_ns()
        synchronize()  #@waiter
        spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
{pad}
class {dataset_class}:
    def __init__(self, rounds):
        self.rounds = rounds
    def __len__(self):
        return 8
    def {item}(self, index):
        value = index
        for step in range(self.rounds):  #@holder
            value = (value * 31 + step) % 1000003  #@holder
        return value
{pad}
def {train}(loader, spans):
    total = 0
    start = time.monotonic_ns()
    for batch in loader:  #@waiter
        spans.append((threading.get_native_id(), "wait", start, time.monotonic_ns()))
        total += int(batch.sum())
        start = time.monotonic_ns()
    return total
'''


def random_name(prefix):
    return prefix + "_" + "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))


def write_module(directory):
    names = {
        key: random_name(key)
        for key in ("holder", "waiter", "deep", "gil_holder", "gil_waiter", "producer", "consumer",
                    "launcher", "item", "train")
    }
    names["holder_class"] = random_name("Holder").capitalize()
    names["dataset_class"] = random_name("Data").capitalize()
    text = SOURCE
    while "{pad}" in text:
        text = text.replace("{pad}", "\n" * random.randint(1, 40), 1)
    text = text.format(**names)
    path = os.path.join(directory, random_name("frames") + ".py")
    with open(path, "w") as out:
        out.write(text)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Each function's lines of each role, counted from the file as written.
    roles = {}
    function = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("def "):
            function = stripped[4:stripped.index("(")]
        for role in ("holder", "waiter", "release", "recursion"):
            if "#@" + role in line:
                roles.setdefault((function, role), []).append(number)
    return module, names, path, roles


def frame_line(role, path, function, lines):
    print(f"frame role={role} file={path} function={function} "
          f"lines={','.join(str(line) for line in lines)}")


def qualified(class_name, function):
    return f"{class_name}.{function}" if QUALNAMES else function


def run_lock(module, names, path, roles, spans, threads, deep=False):
    lock = threading.Lock()
    taken = threading.Event()
    holder = getattr(module, names["holder_class"])()
    hold = threading.Thread(target=getattr(holder, names["holder"]),
                            args=(lock, taken, 0.3, spans), name=random_name("holder"))
    if deep:
        wait = threading.Thread(target=getattr(module, names["deep"]),
                                args=(DEEP_CALLS, lock, taken, spans), name=random_name("waiter"))
    else:
        wait = threading.Thread(target=getattr(module, names["waiter"]),
                                args=(lock, taken, spans), name=random_name("waiter"))
    for thread in (hold, wait):
        thread.start()
    for thread in (hold, wait):
        thread.join()
    threads.update({"holder": hold, "waiter": wait})
    klass = names["holder_class"]
    waiter = names["deep" if deep else "waiter"]
    frame_line("waiter", path, waiter, roles[(waiter, "waiter")])
    if deep:
        frame_line("recursion", path, waiter, roles[(waiter, "recursion")])
    frame_line("holder", path, qualified(klass, names["holder"]),
               roles[(names["holder"], "holder")])
    frame_line("release", path, qualified(klass, names["holder"]),
               roles[(names["holder"], "release")])


def run_gil(module, names, path, roles, spans, threads):
    # A sum long enough to hold the GIL about half a second on this machine.
    start = time.monotonic()
    sum(range(2_000_000))
    count = int(2_000_000 * 0.5 / max(time.monotonic() - start, 1e-4))
    # No switch-interval timeouts: the waiter's wait for the GIL is one wait that the holder ends
    # when it lets the GIL go, not 5 ms waits whose last a loaded machine may end by its timeout.
    sys.setswitchinterval(30)
    done = threading.Event()
    wait = threading.Thread(target=getattr(module, names["gil_waiter"]), args=(done, spans),
                            name=random_name("waiter"))
    hold = threading.Thread(target=getattr(module, names["gil_holder"]), args=(count, spans),
                            name=random_name("holder"))
    wait.start()
    time.sleep(0.05)
    hold.start()
    hold.join()
    time.sleep(0.05)
    done.set()
    wait.join()
    threads.update({"holder": hold, "waiter": wait})
    frame_line("waiter", path, names["gil_waiter"], roles[(names["gil_waiter"], "waiter")])
    frame_line("holder", path, names["gil_holder"], roles[(names["gil_holder"], "holder")])
    frame_line("release", path, names["gil_holder"], roles[(names["gil_holder"], "release")])


def run_mpqueue(module, names, path, roles, spans, threads):
    import multiprocessing
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [
        context.Process(target=getattr(module, names["producer"]), args=(queue, 300_000))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    getattr(module, names["consumer"])(queue, 3 * len(workers), spans)
    for worker in workers:
        worker.join()
    print(f"workers pids={','.join(str(worker.pid) for worker in workers)}")
    frame_line("waiter", path, names["consumer"], roles[(names["consumer"], "waiter")])
    frame_line("holder", path, names["producer"], roles[(names["producer"], "holder")])


def run_cuda(module, names, path, roles, spans, threads):
    """The test's fake CUDA runtime (FAKE_CUDART: its libcudart.so.13), through ctypes: 40 ms
    kernels, each waited for in cudaDeviceSynchronize, a slow CUDA call."""
    import ctypes

    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    runtime = ctypes.CDLL(os.environ["FAKE_CUDART"])
    kernel = ctypes.c_char(0)
    duration_us = ctypes.c_uint32(40_000)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(duration_us))
    runtime.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                         ctypes.c_size_t, ctypes.c_void_p]

    def launch():
        if runtime.cudaLaunchKernel(ctypes.addressof(kernel), Dim3(1, 1, 1), Dim3(1, 1, 1), args,
                                    0, None) != 0:
            raise SystemExit("cudaLaunchKernel failed")

    def synchronize():
        if runtime.cudaDeviceSynchronize() != 0:
            raise SystemExit("cudaDeviceSynchronize failed")

    getattr(module, names["launcher"])(runtime, launch, synchronize, spans)
    frame_line("waiter", path, names["launcher"], roles[(names["launcher"], "waiter")])


def run_dataloader(module, names, path, roles, spans, threads):
    import torch
    import torch.utils.data
    dataset_class = getattr(module, names["dataset_class"])
    # torch wants a Dataset: a subclass made here keeps the generated method's code object.
    dataset_type = type(names["dataset_class"], (dataset_class, torch.utils.data.Dataset),
                        {"__getitem__": getattr(dataset_class, names["item"])})
    dataset = dataset_type(300_000)
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=2,
                                         multiprocessing_context="fork")
    getattr(module, names["train"])(loader, spans)
    frame_line("waiter", path, names["train"], roles[(names["train"], "waiter")])
    frame_line("holder", path, qualified(names["dataset_class"], names["item"]),
               roles[(names["item"], "holder")])


def main():
    signal.alarm(WATCHDOG_S)
    mode = sys.argv[1] if len(sys.argv) > 1 else "lock"
    runs = {"lock": run_lock, "gil": run_gil,
            "deep": lambda *args: run_lock(*args, deep=True), "cuda": run_cuda, "mpqueue": run_mpqueue,
            "dataloader": run_dataloader}
    directory = tempfile.mkdtemp(prefix="py_frames_")
    try:
        module, names, path, roles = write_module(directory)
        spans, threads = [], {}
        print(f"scenario name=py-frames-{mode} pid={os.getpid()} "
              f"python={sys.version.split()[0]}")
        runs[mode](module, names, path, roles, spans, threads)
        threads["main"] = threading.main_thread()
        for role, thread in sorted(threads.items()):
            print(f"thread tid={thread.native_id} role={role} name={thread.name}")
        for tid, what, start, end in sorted(spans, key=lambda span: span[2]):
            print(f"span tid={tid} what={what} start_ns={start} end_ns={end}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
