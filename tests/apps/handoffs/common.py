"""What the handoff programs share: the facts each prints on stdout for its test, one a line.

  thread tid=<native tid> pid=<pid> role=<role>
  wait tid=<tid> start_ns=<ns> end_ns=<ns>      a handoff wait the program measured itself
  work tid=<tid> start_ns=<ns> end_ns=<ns>      the producer's work that made it late

CLOCK_MONOTONIC ns, the clock gprof-run's records use. Each line is one write(2) of under PIPE_BUF
bytes: lines of threads and processes that print at once never interleave (print writes the line
and its end apart), and a child's lines reach the pipe before it ends.
"""
import os
import threading
import time


def now():
    return time.monotonic_ns()


def say(line):
    os.write(1, (line + "\n").encode())


def thread_line(role):
    say(f"thread tid={threading.get_native_id()} pid={os.getpid()} role={role}")


def span(kind, start, end):
    say(f"{kind} tid={threading.get_native_id()} start_ns={start} end_ns={end}")


def loops_for(work, ms):
    """How many loops of `work` (a program's own pure-Python loop, named so that its stacks say
    what the producer ran) take about `ms` milliseconds here."""
    start = now()
    work(200_000)
    per_loop = max(1, (now() - start) / 200_000)
    return int(ms * 1_000_000 / per_loop)
