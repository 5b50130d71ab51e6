#!/usr/bin/env python3
"""The house's size rules, checked (CI runs it as the ctest test check_house).

Fails, naming each offender, when a product source file (*.cc, *.h, *.c under inject/, bpf/,
collector/, cli/) is over 1,000 lines, when a function in one is over 120 lines (functions as
universal-ctags finds them, from their first line to their last), or when a tracked file lies
under a results/ folder (raw results stay out of the tree: docs/performance.md keeps the figures).

  scripts/check_house.py [--root DIR]

DIR: the source tree to check (default: the one this script is in).
"""
import argparse
import os
import shutil
import subprocess
import sys

PRODUCT_DIRS = ("inject", "bpf", "collector", "cli")
SOURCE_SUFFIXES = (".cc", ".h", ".c")
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 120


def product_sources(root):
    """Paths relative to root, sorted."""
    found = []
    for top in PRODUCT_DIRS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.endswith(SOURCE_SUFFIXES):
                    found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def function_spans(root, files):
    """(file, function, first line, last line) of every function definition ctags finds."""
    if not files:
        return []
    # Debian's name for it, where another ctags may hold the alternative "ctags".
    ctags = shutil.which("ctags-universal") or shutil.which("ctags")
    if ctags is None:
        sys.exit("check_house: universal-ctags is missing (scripts/setup.sh installs it)")
    out = subprocess.run(
        [ctags, "-x", "--c++-kinds=f", "--c-kinds=f", "--fields=+ne",
         "--_xformat=%F\t%N\t%n\t%{end}", "-L", "-"],
        cwd=root, input="\n".join(files) + "\n", capture_output=True, text=True, check=True).stdout
    spans = []
    for row in out.splitlines():
        fields = row.split("\t")
        if len(fields) != 4 or not fields[2].isdigit() or not fields[3].isdigit():
            continue  # a definition without an end (a macro's, say): nothing to measure
        spans.append((fields[0], fields[1], int(fields[2]), int(fields[3])))
    return spans


def tracked_results(root):
    """Tracked files under a results/ folder; none when root is not a git work tree."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    paths = [p.decode(errors="replace") for p in out.split(b"\0") if p]
    return [p for p in paths if "results" in p.split("/")[:-1]]


def check(root):
    """The problems found, one line each."""
    problems = []
    files = product_sources(root)
    for path in files:
        lines = line_count(os.path.join(root, path))
        if lines > MAX_FILE_LINES:
            problems.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES})")
    for path, name, first, last in function_spans(root, files):
        length = last - first + 1
        if length > MAX_FUNCTION_LINES:
            problems.append(f"{path}:{first}: {name} is {length} lines "
                            f"(at most {MAX_FUNCTION_LINES})")
    for path in tracked_results(root):
        problems.append(f"{path}: a raw result file in the tree (results are written outside it; "
                        f"docs/performance.md keeps the figures)")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(here),
                        help="the source tree to check (default: this script's)")
    args = parser.parse_args()
    problems = check(os.path.abspath(args.root))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_house: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
