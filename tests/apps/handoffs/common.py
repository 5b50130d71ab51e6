"""What the handoff programs share: the facts each prints on stdout for its test, one a line.

  thread tid=<native tid> pid=<pid> role=<role>
  wait tid=<tid> start_ns=<ns> end_ns=<ns>      a handoff wait the program measured itself
  work tid=<tid> start_ns=<ns> end_ns=<ns>      the producer's work that made it late

CLOCK_MONOTONIC ns, the clock gprof-run's records use. Printed with flush, so that a child's lines
reach the pipe before it ends.
"""
import os
import threading
import time


def now():
    return time.monotonic_ns()


def say(line):
    print(line, flush=True)


def thread_line(role):
    say(f"thread tid={threading.get_native_id()} pid={os.getpid()} role={role}")


def span(kind, start, end):
    say(f"{kind} tid={threading.get_native_id()} start_ns={start} end_ns={end}")
