#!/usr/bin/env python3
"""py_lock_convoy: threads of a Python program freeze behind a threading.Lock, for the diagnosis's
tests.

"lock-holder" takes a threading.Lock and keeps it 40 ms, asleep in time.sleep, three times;
"lock-waiter-<i>" each want the lock meanwhile and block on it. CPython up to 3.12 makes a
threading.Lock of a POSIX semaphore: the waiters sleep in sem_wait on one futex word and each
release posts it (sem_post), a plain futex wait that only the waits and posts around it tell from
an event's. Alongside, "queue-consumer" waits on a queue.Queue that "queue-producer" fills every
20 ms: a handoff (a Condition: each wait on a lock of its own), never contention.

Uses only the standard library. stdout, in kernel_scenarios' format, once every thread is done:
  scenario name=py-lock-convoy pid=<pid> python=<version>
  thread tid=<native tid> role=<holder|waiter|consumer|producer|main> name=<thread name>
  span tid=<tid> what=<hold|wait|get> start_ns=<ns> end_ns=<ns>   CLOCK_MONOTONIC ns
"""
import ctypes
import os
import queue
import signal
import sys
import threading
import time

HOLDS = 3
HOLD_S = 0.04
WAITERS = 3
ITEMS = 4
WATCHDOG_S = 20  # SIGALRM's default action ends a run that hangs
PR_SET_NAME = 15

libc = ctypes.CDLL(None, use_errno=True)
lock = threading.Lock()
items = queue.Queue()
spans = []
spans_lock = threading.Lock()
roles = {}


def start_thread(role, name):
    """Python 3.11 names its threads for itself only; the kernel's name is what a profiler sees."""
    if libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")
    roles[name] = (threading.get_native_id(), role)


def span(what, start_ns):
    with spans_lock:
        spans.append((threading.get_native_id(), what, start_ns, time.monotonic_ns()))


def holder(taken, released):
    start_thread("holder", "lock-holder")
    for round_ in range(HOLDS):
        with lock:
            start = time.monotonic_ns()
            taken[round_].set()
            time.sleep(HOLD_S)
            span("hold", start)
        released[round_].wait()  # every waiter had its turn: the next round starts together


def waiter(index, taken, released, done):
    start_thread("waiter", f"lock-waiter-{index}")
    for round_ in range(HOLDS):
        taken[round_].wait()
        start = time.monotonic_ns()
        with lock:
            span("wait", start)
        with done[round_]:
            done[round_].count += 1
            if done[round_].count == WAITERS:
                released[round_].set()


def producer():
    start_thread("producer", "queue-producer")
    for item in range(ITEMS):
        time.sleep(0.02)
        items.put(item)


def consumer():
    start_thread("consumer", "queue-consumer")
    for _ in range(ITEMS):
        start = time.monotonic_ns()
        items.get()
        span("get", start)


class Counter:
    def __init__(self):
        self.count = 0
        self.lock = threading.Lock()

    def __enter__(self):
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()


def main():
    signal.alarm(WATCHDOG_S)
    start_thread("main", "py-main")
    taken = [threading.Event() for _ in range(HOLDS)]
    released = [threading.Event() for _ in range(HOLDS)]
    done = [Counter() for _ in range(HOLDS)]
    threads = [threading.Thread(target=holder, args=(taken, released))]
    threads += [
        threading.Thread(target=waiter, args=(i, taken, released, done)) for i in range(WAITERS)
    ]
    threads += [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    print(f"scenario name=py-lock-convoy pid={os.getpid()} python={sys.version.split()[0]}")
    for name, (tid, role) in sorted(roles.items()):
        print(f"thread tid={tid} role={role} name={name}")
    for tid, what, start, end in sorted(spans, key=lambda s: s[2]):
        print(f"span tid={tid} what={what} start_ns={start} end_ns={end}")


if __name__ == "__main__":
    main()
