#!/usr/bin/env python3
"""scripts/check_house.py fails where it must: on a temporary tree with a function one line too
long, a file one line too long and a tracked raw result, it names each of them and exits 1, and it
leaves alone a function and a file exactly at the limits."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "check_house.py")


def function(name, lines):
    """C++ text of a function `lines` lines long, first line to closing brace."""
    body = [f"  total += {i};" for i in range(lines - 4)]
    return "\n".join([f"int {name}(int total) {{", "  // planted", *body, "  return total;", "}"])


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text + "\n")


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="check-house-") as root:
        write(root, "inject/at_limit.cc", function("AtTheLimit", 120))
        write(root, "cli/too_long.cc", "#include <cstdio>\n\n" + function("OneLineTooMany", 121))
        write(root, "bpf/probe.bpf.c", function("one_too_many_in_c", 121))
        write(root, "collector/at_limit.h", "\n".join(["// line"] * 1000))
        write(root, "collector/model/too_big.h", "\n".join(["// line"] * 1001))
        write(root, "tests/not_product.cc", function("TestsAreNotChecked", 300))
        write(root, "scripts/bench/results/2026-01-01/run.txt", "a raw figure")
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True)
        run = subprocess.run([sys.executable, CHECK, "--root", root], capture_output=True,
                             text=True)
    lines = run.stdout.splitlines()
    if run.returncode != 1:
        failures.append(f"exit status {run.returncode}, not 1")
    for expected in ["cli/too_long.cc:3: OneLineTooMany is 121 lines (at most 120)",
                     "bpf/probe.bpf.c:1: one_too_many_in_c is 121 lines (at most 120)",
                     "collector/model/too_big.h: 1001 lines (at most 1000)"]:
        if expected not in lines:
            failures.append(f"not named: {expected}")
    if not any(line.startswith("scripts/bench/results/2026-01-01/run.txt: ") for line in lines):
        failures.append("not named: the tracked raw result")
    for innocent in ["AtTheLimit", "collector/at_limit.h", "TestsAreNotChecked"]:
        if any(innocent in line for line in lines):
            failures.append(f"named, but within the rules: {innocent}")
    for failure in failures:
        print("check_house_test: " + failure)
    if failures:
        print("check_house.py printed:\n" + run.stdout + run.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
