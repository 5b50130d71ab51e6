#!/usr/bin/env python3
"""gil_convoy: a convoy on CPython's GIL, for the kernel recorder's tests (issue 4, design.md 6).

Threads "gil-worker-<i>" run pure-Python loops for the same second; only the thread that holds
the GIL runs. Each other one waits on the GIL's condition variable with a timeout of the switch
interval (5 ms): a run of timed futex waits (FUTEX_WAIT_BITSET, private) inside _PyRuntime, in
the data of libpython (or of a statically linked python executable), each ended by its timeout
(the waiter then asks the holder to drop the GIL) or by the futex wake of the holder that drops
it. glibc's condition variable alternates between two adjacent futex words, one per group of
waiters, so a run uses both.

Uses only the standard library. stdout, in kernel_scenarios' format, once the workers are done:
  scenario name=gil-convoy pid=<pid> cpus=<n> python=<version> switch_interval_ns=<ns>
  thread tid=<native tid> role=<main|worker> name=<thread name>
  object kind=python_runtime addr=0x<hex> mapping=<file>   _PyRuntime, which holds the GIL
  span tid=<tid> what=work start_ns=<ns> end_ns=<ns> iterations=<n>   CLOCK_MONOTONIC ns
"""
import ctypes
import os
import signal
import sys
import threading
import time

WORKERS = 4
WORK_NS = 1_000_000_000
WATCHDOG_S = 20  # SIGALRM's default action ends a run that hangs
PR_SET_NAME = 15

libc = ctypes.CDLL(None, use_errno=True)


def set_kernel_thread_name(name):
    """Python 3.11 names its threads for itself only; the kernel's name is what a profiler sees."""
    if libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")


def mapping_of(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            low, high = (int(part, 16) for part in fields[0].split("-"))
            if low <= address < high:
                return fields[5] if len(fields) > 5 else "[anonymous]"
    return "[unmapped]"


def work(start_ns, spans):
    set_kernel_thread_name(threading.current_thread().name)
    tid = threading.get_native_id()
    while time.monotonic_ns() < start_ns:  # start together
        time.sleep(0.001)
    iterations, value = 0, 1
    while time.monotonic_ns() < start_ns + WORK_NS:
        for _ in range(1000):
            value = value * 3 % 1_000_003
        iterations += 1000
    spans.append((tid, start_ns, time.monotonic_ns(), iterations))


def main():
    signal.alarm(WATCHDOG_S)
    set_kernel_thread_name("gil-main")
    spans = []
    start_ns = time.monotonic_ns() + 50_000_000  # once every worker exists
    workers = [
        threading.Thread(target=work, args=(start_ns, spans), name=f"gil-worker-{i}")
        for i in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    print(
        f"scenario name=gil-convoy pid={os.getpid()} cpus={len(os.sched_getaffinity(0))}"
        f" python={sys.version.split()[0]}"
        f" switch_interval_ns={round(sys.getswitchinterval() * 1e9)}"
    )
    print(f"thread tid={threading.get_native_id()} role=main name=gil-main")
    for worker in workers:
        print(f"thread tid={worker.native_id} role=worker name={worker.name}")
    print(f"object kind=python_runtime addr={runtime:#x} mapping={mapping_of(runtime)}")
    for tid, start, end, iterations in sorted(spans, key=lambda span: span[1]):
        print(f"span tid={tid} what=work start_ns={start} end_ns={end} iterations={iterations}")


if __name__ == "__main__":
    main()
