#!/usr/bin/env python3
"""py_lock_queue: a threading.Lock held across a long call and a queue.Queue fed slowly, for
python_locks_test (issue 35, item 5): each lock is to be named by what it is, at its line.

"holder" takes a threading.Lock and sleeps 60 ms in it (time.sleep: a C call), three times;
"waiter-<i>" want the lock meanwhile, at the line printed as role=lock. Then the main thread gets
four items from a queue.Queue that "producer" puts every 40 ms: it waits in Queue.get on the
queue's not_empty condition, at the queue.py line printed as role=not_empty.

Uses only the standard library. stdout, in kernel_scenarios' format, once every thread is done:
  scenario name=py-lock-queue pid=<pid> python=<version>
  line role=<lock|not_empty> file=<file> line=<n>
"""
import inspect
import os
import queue
import signal
import sys
import threading
import time

HOLDS = 3
WAITERS = 2
ITEMS = 4
WATCHDOG_S = 30

lock = threading.Lock()
items = queue.Queue()
WAIT_LINE = 0


def holder(taken, done):
    for round_ in range(HOLDS):
        with lock:
            taken[round_].set()
            time.sleep(0.06)
        done[round_].wait()


def waiter(taken, done, count):
    global WAIT_LINE
    for round_ in range(HOLDS):
        taken[round_].wait()
        time.sleep(0.005)
        WAIT_LINE = inspect.currentframe().f_lineno + 1
        with lock:
            pass
        with count[round_][1]:
            count[round_][0] += 1
            if count[round_][0] == WAITERS:
                done[round_].set()


def producer():
    for item in range(ITEMS):
        time.sleep(0.04)
        items.put(item)


def not_empty_line():
    source, first = inspect.getsourcelines(queue.Queue.get)
    for offset, text in enumerate(source):
        if "self.not_empty.wait()" in text:
            return first + offset
    return 0


def main():
    signal.alarm(WATCHDOG_S)
    taken = [threading.Event() for _ in range(HOLDS)]
    done = [threading.Event() for _ in range(HOLDS)]
    count = [[0, threading.Lock()] for _ in range(HOLDS)]
    threads = [threading.Thread(target=holder, args=(taken, done), name="holder")]
    threads += [threading.Thread(target=waiter, args=(taken, done, count), name=f"waiter-{i}")
                for i in range(WAITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    feeder = threading.Thread(target=producer, name="producer")
    feeder.start()
    for _ in range(ITEMS):
        items.get()
    feeder.join()
    print(f"scenario name=py-lock-queue pid={os.getpid()} python={sys.version.split()[0]}")
    print(f"line role=lock file={os.path.basename(__file__)} line={WAIT_LINE}")
    print(f"line role=not_empty file=queue.py line={not_empty_line()}")


if __name__ == "__main__":
    main()
