#!/usr/bin/env python3
"""Where the measurement and validation scripts write their results by default: outside the source
tree, in $GPROF_RESULTS_DIR/<date>/ (default ${XDG_CACHE_HOME:-~/.cache}/gprof-run/results/<date>/),
made mode 0700 where it does not exist. The figures worth keeping go in docs/performance.md with
their command; raw results are never committed (.gitignore, scripts/check_house.py).

As root, every existing part of that path must be root's and writable by no one else: a folder a
user could change is one where they could plant a link for root to write through.

  scripts/results_dir.py [SUBFOLDER]   prints the folder (made), for shell scripts
  results_dir.folder(subfolder="")     the same, from Python
"""
import os
import stat
import sys
import time


def base():
    configured = os.environ.get("GPROF_RESULTS_DIR")
    if configured:
        return os.path.abspath(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(cache), "gprof-run", "results")


def check_owned_by_root(path):
    """As root: every folder of `path`, links resolved, root's and writable by no one else."""
    part = os.path.realpath(path)
    while True:
        if os.path.lexists(part):
            info = os.lstat(part)
            others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if info.st_uid != 0 or (others_write and not info.st_mode & stat.S_ISVTX):
                sys.exit(f"results_dir: {part} is not root's alone: as root, results are written "
                         f"only under folders no one else can change (set GPROF_RESULTS_DIR)")
        parent = os.path.dirname(part)
        if parent == part:
            return
        part = parent


def folder(subfolder=""):
    """The results folder of today (and `subfolder` in it), made; its path."""
    path = os.path.join(base(), time.strftime("%Y-%m-%d"), subfolder).rstrip("/")
    if os.geteuid() == 0:
        check_owned_by_root(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        check_owned_by_root(path)  # again: nothing was swapped while it was made
    return path


if __name__ == "__main__":
    print(folder(sys.argv[1] if len(sys.argv) > 1 else ""))
