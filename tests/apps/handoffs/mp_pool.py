#!/usr/bin/env python3
"""mp_pool: a multiprocessing.Pool whose results come back one at a time, some late.

The main thread takes the results of imap (in order) from a pool of 2 worker processes; every
third task is slow (a pure-Python loop of ~150 ms in slow_task), the others quick. The main
thread's time in next() is the program's time lost to the handoff (through the pool's result
handler thread, from the worker process); the slow task is why. See common.py for what it prints.
"""
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import now, span, thread_line  # noqa: E402

TASKS = 6


def slow_task(loops):
    total = 0
    for i in range(loops):
        total += (i * i) % 7
    return total


def task(arg):
    index, loops = arg
    start = now()
    value = slow_task(loops if index % 3 == 2 else loops // 50)
    span("work", start, now())
    return value


def main():
    thread_line("consumer")
    start = now()
    slow_task(200_000)
    per_loop = max(1, (now() - start) / 200_000)
    loops = int(150 * 1_000_000 / per_loop)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.imap(task, [(i, loops) for i in range(TASKS)])
        for _ in range(TASKS):
            start = now()
            next(results)
            span("wait", start, now())


if __name__ == "__main__":
    main()
