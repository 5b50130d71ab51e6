#!/usr/bin/env python3
"""py_gil_logging: four threads log through one logging.StreamHandler while the GIL passes between
them, for python_locks_test (issue 35, item 5).

"logger-<i>" log short messages in a loop; every HEAVY_EVERY messages, logger-0 logs a record whose
message takes a long C call to make (bytes.count over a large buffer, which keeps the GIL): the
other threads wait for the GIL meanwhile, or for the handler's lock, which logger-0 holds while
it formats. "ticker" sleeps 2 ms at a time and measures how late each sleep ends: a lateness of
more than a millisecond is its wait for the GIL (it asked for it when its sleep ended, and ran
again once it had it). Nothing waits for anything that does not come: the run never deadlocks.

Uses only the standard library. stdout, in kernel_scenarios' format, once every thread is done:
  scenario name=py-gil-logging pid=<pid> python=<version>
  thread tid=<native tid> role=<logger|heavy|ticker|main> name=<thread name>
  span tid=<tid> what=<late|heavy> start_ns=<ns> end_ns=<ns>   CLOCK_MONOTONIC ns
"""
import io
import logging
import os
import signal
import sys
import threading
import time

LOGGERS = 4
RUN_S = 1.2
HEAVY_EVERY = 400
TICK_S = 0.002
WATCHDOG_S = 30  # SIGALRM's default action ends a run that hangs

handler = logging.StreamHandler(io.StringIO())
handler.setFormatter(logging.Formatter("%(threadName)s %(message)s"))
log = logging.getLogger("py_gil_logging")
log.addHandler(handler)
log.setLevel(logging.INFO)
log.propagate = False
BIG = b"x" * (120 << 20)  # counted in one C call that keeps the GIL: tens of milliseconds
spans = []
spans_lock = threading.Lock()
stop = threading.Event()


class Heavy:
    """A message that takes one long C call to make."""

    def __str__(self):
        start = time.monotonic_ns()
        count = BIG.count(b"y")
        with spans_lock:
            spans.append((threading.get_native_id(), "heavy", start, time.monotonic_ns()))
        return f"heavy {count}"


def logger(index):
    n = 0
    while not stop.is_set():
        if index == 0 and n % HEAVY_EVERY == HEAVY_EVERY - 1:
            log.info("%s", Heavy())
        else:
            log.info("message %d of %d", n, index)
        n += 1


def ticker():
    while not stop.is_set():
        before = time.monotonic_ns()
        time.sleep(TICK_S)
        after = time.monotonic_ns()
        asked = before + int(TICK_S * 1e9)
        if after - asked > 1_000_000:
            with spans_lock:
                spans.append((threading.get_native_id(), "late", asked, after))


def main():
    signal.alarm(WATCHDOG_S)
    threads = [threading.Thread(target=logger, args=(i,), name=f"logger-{i}")
               for i in range(LOGGERS)]
    threads.append(threading.Thread(target=ticker, name="ticker"))
    for thread in threads:
        thread.start()
    time.sleep(RUN_S)
    stop.set()
    for thread in threads:
        thread.join()
    print(f"scenario name=py-gil-logging pid={os.getpid()} python={sys.version.split()[0]}")
    print(f"thread tid={threading.get_native_id()} role=main name=MainThread")
    for thread in threads:
        role = "ticker" if thread.name == "ticker" else "heavy" if thread.name == "logger-0" else "logger"
        print(f"thread tid={thread.native_id} role={role} name={thread.name}")
    for tid, what, start, end in sorted(spans, key=lambda s: s[2]):
        print(f"span tid={tid} what={what} start_ns={start} end_ns={end}")


if __name__ == "__main__":
    main()
