"""Checks `gprof-run dump`'s JSON of a hang_torch.py program against the tids it printed:
each named thread is in the dump with its Python line in the function the program hangs in, and
the wait it is in; a waiter's holder is the thread the program says holds its lock (the RLock's
from its owner field, the Lock's inferred); prints what the dump said of each.
  check_dump_report.py MODE FACTS DUMP_TXT DUMP_JSON"""
import json
import sys

HOLDERS = {  # mode -> waiter role -> (its holder's role, where the holder must be read from)
    "lock": {"waiter": ("holder", "from the RLock's owner field"),
             "lock-waiter": ("lock-holder", "inferred: ")},
}

EXPECTED = {  # role -> the function of hang_torch.py its Python stack must show
    "lock": {"main": "lock_mode", "holder": "hold", "waiter": "wait_for",
             "lock-holder": "hold", "lock-waiter": "wait_for"},
    "dataloader": {"main": "dataloader_mode", "worker": "never_returns"},
}


def main():
    mode, facts_path, text_path, json_path = sys.argv[1:5]
    roles = []
    for line in open(facts_path):
        parts = line.split()
        if parts[:1] != ["tid"]:
            continue
        fields = dict(part.split("=", 1) for part in parts[1:])
        roles.append((fields["role"], int(fields["tid"])))
    try:
        dump = json.load(open(json_path))
    except (OSError, ValueError) as error:
        print(f"{mode}: FAIL no dump JSON: {error}")
        print(open(text_path).read()[:3000])
        return 1
    threads = {thread["tid"]: thread for thread in dump["threads"]}
    print(f"{mode}: read in {dump['read_ms']:.1f} ms, {dump['stopped']}")
    failed = False
    for role, tid in roles:
        thread = threads.get(tid)
        if thread is None:
            print(f"  FAIL {role} {tid}: not in the dump")
            failed = True
            continue
        functions = [frame["function"] for frame in thread["python_stack"]]
        want = EXPECTED[mode][role]
        ok = any(function.split(".")[-1] == want for function in functions)
        failed |= not ok
        top = thread["python_stack"][0]["text"] if thread["python_stack"] else "no Python stack"
        holder = thread["holder"]
        wanted_holder = HOLDERS.get(mode, {}).get(role)
        if wanted_holder:
            holder_tids = [t for r, t in roles if r == wanted_holder[0]]
            holder_ok = bool(holder) and holder["id"] in holder_tids and \
                holder["from"].startswith(wanted_holder[1])
            if not holder_ok:
                print(f"  FAIL {role} {tid}: holder should be {wanted_holder[0]} {holder_tids} "
                      f"({wanted_holder[1]}); the dump says {holder}")
            failed |= not holder_ok
            ok = ok and holder_ok
        print(f"  {'ok' if ok else 'FAIL'} {role} {tid}: {thread['wait']}; Python: {top}"
              f"{'' if ok else ' (wanted ' + want + ')'}; holder: "
              f"{holder['id'] if holder else 'not named'}"
              f"{' (' + holder['from'] + ')' if holder else ''}")
        native = thread["native_stack"]["lines"][:4] if thread["native_stack"] else []
        for line in native:
            print(f"      {line}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
