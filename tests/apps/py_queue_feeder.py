#!/usr/bin/env python3
"""py_queue_feeder: a multiprocessing.Queue's first put starts its feeder thread, for the
diagnosis's tests.

A "queue-consumer" process gets one item from each of three multiprocessing.Queues in turn. In the
parent, "producer" computes 30, 45, then 60 ms of CPU time for each item and puts it: the first
put on a queue starts the queue's "QueueFeederThread", which writes the item to the queue's pipe
and so ends the consumer's read. The thread that ends each wait did not exist for most of it: the
producer's work before the put is what held the consumer up.

Uses only the standard library. stdout, in kernel_scenarios' format, once the consumer is done:
  scenario name=py-queue-feeder pid=<pid> python=<version>
  thread tid=<native tid> role=<producer|feeder|consumer|main> name=<thread name>
  span tid=<tid> what=<work|get> start_ns=<ns> end_ns=<ns> item=<i>   CLOCK_MONOTONIC ns
"""
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time

WORK_S = (0.03, 0.045, 0.06)
WATCHDOG_S = 20  # SIGALRM's default action ends a run that hangs
PR_SET_NAME = 15

libc = ctypes.CDLL(None, use_errno=True)


def name_thread(name):
    """Python 3.11 names its threads for itself only; the kernel's name is what a profiler sees."""
    if libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")


def consume(queues, report, started):
    name_thread("queue-consumer")
    spans = []
    for item, q in enumerate(queues):
        started.set()
        start = time.monotonic_ns()
        q.get()
        spans.append((threading.get_native_id(), "get", start, time.monotonic_ns(), item))
    report.send((threading.get_native_id(), spans))
    report.close()


def compute(seconds):
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def produce(queues, started, spans, feeders):
    name_thread("producer")
    for item, (q, seconds) in enumerate(zip(queues, WORK_S)):
        started.wait()
        started.clear()
        time.sleep(0.005)  # the consumer is asleep in its read
        start = time.monotonic_ns()
        compute(seconds)
        spans.append((threading.get_native_id(), "work", start, time.monotonic_ns(), item))
        q.put(item)
        time.sleep(0.02)  # the feeder runs without waiting for the GIL
        feeders.append(q._thread.native_id)  # the feeder thread this put started


def main():
    signal.alarm(WATCHDOG_S)
    name_thread("py-main")
    context = multiprocessing.get_context("fork")
    queues = [context.Queue() for _ in WORK_S]
    receive, report = context.Pipe(duplex=False)
    started = context.Event()
    # The consumer forks before any thread is started.
    consumer = context.Process(target=consume, args=(queues, report, started))
    consumer.start()
    spans, feeders = [], []
    producer = threading.Thread(target=produce, args=(queues, started, spans, feeders))
    producer.start()
    consumer_tid, consumer_spans = receive.recv()
    producer.join()
    consumer.join()
    for q in queues:
        q.close()
        q.join_thread()

    print(f"scenario name=py-queue-feeder pid={os.getpid()} python={sys.version.split()[0]}")
    print(f"thread tid={threading.get_native_id()} role=main name=py-main")
    print(f"thread tid={producer.native_id} role=producer name=producer")
    for item, tid in enumerate(feeders):
        print(f"thread tid={tid} role=feeder name=QueueFeederThread item={item}")
    print(f"thread tid={consumer_tid} role=consumer name=queue-consumer pid={consumer.pid}")
    for tid, what, start, end, item in sorted(spans + consumer_spans, key=lambda s: s[2]):
        print(f"span tid={tid} what={what} start_ns={start} end_ns={end} item={item}")


if __name__ == "__main__":
    main()
