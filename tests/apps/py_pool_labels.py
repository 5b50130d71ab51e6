#!/usr/bin/env python3
"""py_pool_labels: a multiprocessing.Pool of two forked workers computes while the parent waits,
for python_locks_test (issue 35, item 7): each thread is to be shown with its process.

Uses only the standard library. stdout, in kernel_scenarios' format, once the pool is done:
  scenario name=py-pool-labels pid=<pid> python=<version>
  worker pid=<pid>        each process that ran a task
"""
import multiprocessing
import os
import signal
import sys
import time

WATCHDOG_S = 30


def work(seconds):
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass
    return os.getpid()


def main():
    signal.alarm(WATCHDOG_S)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pids = set(pool.map(work, [0.05] * 8, chunksize=1))
    print(f"scenario name=py-pool-labels pid={os.getpid()} python={sys.version.split()[0]}")
    for pid in sorted(pids):
        print(f"worker pid={pid}")


if __name__ == "__main__":
    main()
