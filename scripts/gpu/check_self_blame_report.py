"""Checks a report.json of scripts/gpu/self_blame_program.py (issue 18.1): gprof-run's own threads
(the injected library's writer, CUPTI's threads) are named as such, and are no cause, no holder,
no freeze's holder and no link of any chain; no program thread's wait was held up by one of them
(Stall.profiler_cost, the raw record's waits that gprof-run's threads ended on a lock or on its own
memory); a cause on the loader's lock is only the program's own. Prints what it found; exits 1 on a miss."""
import json
import sys


def main(path):
    report = json.load(open(path))
    diagnosis = report["diagnosis"]
    cost = diagnosis["profiler_cost"]
    ours = {t["thread"]["tid"]: t["role"] for t in cost["threads"]}
    print(f"gprof-run's threads: {sorted(ours.items())}")
    print(f"cost line: {cost['text']}")
    misses = []
    if "writer" not in ours.values():
        misses.append("the writer thread is not named as gprof-run's")

    def is_ours(thread):
        return isinstance(thread, dict) and thread.get("tid") in ours

    for i, cause in enumerate(diagnosis["causes"]):
        if is_ours(cause.get("holder")):
            misses.append(f"cause {i + 1} is held by gprof-run's thread: {cause['identity']}")
        if cause.get("root") and is_ours(cause["root"]["thread"]):
            misses.append(f"cause {i + 1} has gprof-run's thread as its root: {cause['identity']}")
        if "_rtld_global" in json.dumps(cause):
            # The program's own loader user (dladdr, dlsym in a loop) contends with its other
            # threads' loader work without gprof-run too: that is the program's cause. Only a
            # holder of gprof-run's (a miss above) or gprof-run's code taking it would be ours,
            # and nothing of gprof-run's takes it in the process while it runs.
            holder = cause.get("holder") or {}
            print(f"cause {i + 1} names the loader's lock, held by the program's "
                  f"{holder.get('name')} ({holder.get('tid')}): {cause['identity']}")
    held_up = 0
    rtld_waits = 0
    for stall in diagnosis["stalls"]:
        if is_ours(stall["thread"]):
            misses.append(f"a wait of gprof-run's own thread is listed: {stall['thread']}")
        for link in stall["chain"]:
            if is_ours(link["thread"]):
                misses.append(f"gprof-run's thread is a link of {stall['thread']}'s chain")
        held_up += bool(stall.get("profiler_cost"))
        rtld_waits += "_rtld_global" in json.dumps(stall["wait"]["object"])
    for freeze in report["freezes"]:
        if is_ours(freeze.get("holder")):
            misses.append(f"a freeze is held by gprof-run's thread at {freeze['start_ns']}")
    print(f"program waits held up by gprof-run's threads: {held_up} ({cost['total_ns'] / 1e6:.3f} ms)")
    print(f"program waits on the loader's lock (_rtld_global), any holder: {rtld_waits}")
    if held_up:
        misses.append(f"{held_up} program waits were held up by gprof-run's threads")
    stacks = [c for c in report["slow_calls"] if c.get("native_stack")]
    print(f"slow calls with a native stack: {len(stacks)} of {len(report['slow_calls'])}")
    if stacks:
        print("  e.g. " + " <- ".join(stacks[0]["native_stack"][:8]))
    for miss in misses:
        print("MISS: " + miss)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
