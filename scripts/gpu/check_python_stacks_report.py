"""Checks a report of python_stacks_programs.py (issue 19): the lines the program printed (its own
"line role=... function=... line=..." facts) are named where the report explains a wait.

usage: check_python_stacks_report.py MODE PROGRAM_STDOUT REPORT_JSON REPORT_TXT
  pin-memory  some stall of the main thread waited at the loop's line (pin_memory_loop), and the
              report.txt names that line
  gil-holder  some stall of the main thread waited in train_loop, and its releaser (or a chain
              link's sampled stacks) is hold_gil at its sum line; report.txt names both
Prints what it found; exits 1 on a miss.
"""
import json
import sys


def facts(path):
    found = {}
    for line in open(path):
        if line.startswith("line "):
            fields = dict(part.split("=", 1) for part in line.split()[1:])
            found[fields["role"]] = (fields["function"], {int(n) for n in fields["line"].split(",")})
    return found


def shows(stack, function, lines):
    if not isinstance(stack, dict):
        return False
    return any(frame.get("function") == function and frame.get("line") in lines
               for frame in stack.get("frames", []))


def stacks_in(node, out):
    if isinstance(node, dict):
        if "frames" in node and "incomplete" in node:
            out.append(node)
        for value in node.values():
            stacks_in(value, out)
    elif isinstance(node, list):
        for value in node:
            stacks_in(value, out)


def main():
    mode, stdout_path, json_path, text_path = sys.argv[1:5]
    want = facts(stdout_path)
    report = json.load(open(json_path))
    text = open(text_path).read()
    stalls = report["diagnosis"]["stalls"]
    ok = True
    waiter_function, waiter_lines = want["waiter"]
    waited = [s for s in stalls if shows(s["wait"].get("python_stack"), waiter_function, waiter_lines)]
    print(f"{mode}: {len(waited)} stalls waited at {waiter_function}:{sorted(waiter_lines)}")
    ok &= bool(waited)
    ok &= any(f" in {waiter_function}" in line and any(f":{n} in" in line for n in waiter_lines)
              for line in text.splitlines())
    if mode == "gil-holder":
        holder_function, holder_lines = want["holder"]
        stacks = []
        stacks_in(report["diagnosis"], stacks)
        held = [s for s in stacks if shows(s, holder_function, holder_lines)]
        print(f"{mode}: {len(held)} stacks of the holder at {holder_function}:{sorted(holder_lines)}")
        ok &= bool(held)
    for line in text.splitlines():
        if ".py:" in line and (" waited at " in line or " released at " in line or " running " in line):
            print("  " + line.strip())
    print(f"{mode}: {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
