#!/usr/bin/env python3
"""queue_producer: a consumer thread waits on a queue.Queue for a producer thread that is slow.

The main thread takes ITEMS items from the queue, each as soon as it can; the "producer" thread
makes each one by hashing a large buffer (hashlib lets go of the GIL while it hashes), 60-120 ms a
item, then puts it. The main thread's time in get() is the program's time lost to the handoff;
the producer's hashing (make_item) is why. See common.py for what it prints.
"""
import hashlib
import queue
import sys
import threading

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import now, say, span, thread_line  # noqa: E402

ITEMS = 6
BLOCK = bytes(range(256)) * 4096  # 1 MiB


def make_item(rounds):
    digest = b""
    for _ in range(rounds):
        digest = hashlib.sha256(BLOCK + digest).digest()
    return digest


def calibrate():
    start = now()
    make_item(8)
    per_round = max(1, (now() - start) // 8)
    return per_round


def producer(q, rounds):
    thread_line("producer")
    for i in range(ITEMS):
        start = now()
        item = make_item(rounds[i % len(rounds)])
        span("work", start, now())
        q.put(item)
    q.put(None)


def main():
    thread_line("consumer")
    per_round = calibrate()
    # 60, 90 and 120 ms of hashing: varied, so the waits are not one length.
    rounds = [max(1, int(ms * 1_000_000 // per_round)) for ms in (60, 90, 120)]
    q = queue.Queue()
    t = threading.Thread(target=producer, args=(q, rounds), name="producer")
    t.start()
    while True:
        start = now()
        item = q.get()
        span("wait", start, now())
        if item is None:
            break
    t.join()


if __name__ == "__main__":
    main()
