#!/usr/bin/env python3
"""fd_reuse.py: fd_reuse_app's close-range case in Python (issue 17), as python-daemon and
multiprocessing's spawn code do it in process: CUDA calls through ctypes, then
os.closerange(3, SC_OPEN_MAX), then files of its own, written while more CUDA calls are made.

  fd_reuse.py LIBCUDART DIR CALLS

Writes DIR/own-1 .. DIR/own-4, each holding exactly PART_ONE + PART_TWO, and prints
"calls=<n>", the CUDA calls it made. Uses only the standard library.
"""
import ctypes
import os
import sys
import time

PART_ONE = b"the program's own bytes, part one\n"
PART_TWO = b"and part two, after more CUDA calls\n"


def make_calls(cudart, count):
    pointer = ctypes.c_void_p()
    made = 0
    while made < count:
        if cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(256)) != 0:
            sys.exit("fd_reuse.py: cudaMalloc failed")
        if cudart.cudaFree(pointer) != 0:
            sys.exit("fd_reuse.py: cudaFree failed")
        made += 2
    return made


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: fd_reuse.py LIBCUDART DIR CALLS")
    cudart = ctypes.CDLL(sys.argv[1])
    directory, count = sys.argv[2], int(sys.argv[3])
    made = make_calls(cudart, count)
    time.sleep(0.3)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    files = [os.open(f"{directory}/own-{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
             for i in range(1, 5)]
    for fd in files:
        os.write(fd, PART_ONE)
    made += make_calls(cudart, count)
    time.sleep(0.3)
    for fd in files:
        os.write(fd, PART_TWO)
        os.close(fd)
    print(f"calls={made}")


if __name__ == "__main__":
    main()
