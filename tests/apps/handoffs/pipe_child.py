#!/usr/bin/env python3
"""pipe_child: a parent waits on a pipe for a child process that computes each record in Python.

The child (os.fork) computes ITEMS records, each a pure-Python loop of 50-110 ms (compute_record:
the GIL held, in its own process), and writes each to the pipe; the parent reads them one by one.
The parent's time in read() is the program's time lost to the handoff; the child's compute_record
is why. See common.py for what it prints (the child's lines go through the parent).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import loops_for, now, say, span, thread_line  # noqa: E402

ITEMS = 5


def compute_record(loops):
    total = 0
    for i in range(loops):
        total += (i * i) % 7
    return total


def child(write_fd):
    thread_line("producer")
    for i in range(ITEMS):
        loops = loops_for(compute_record, (50, 80, 110)[i % 3])
        start = now()
        value = compute_record(loops)
        span("work", start, now())
        os.write(write_fd, f"{value}\n".encode())
    os._exit(0)


def main():
    thread_line("consumer")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(write_fd)
    os.close(write_fd)
    reader = os.fdopen(read_fd, "rb", buffering=0)
    for _ in range(ITEMS):
        start = now()
        line = b""
        while not line.endswith(b"\n"):
            line += reader.read(1)
        span("wait", start, now())
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
