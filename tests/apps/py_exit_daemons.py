# Issue 34, case 6: the interpreter shuts down while daemon threads wait. "holder" takes a
# threading.Lock and sleeps; "waiter1" and "waiter2" block on the lock; the main thread returns
# once they sleep, and the interpreter's exit ends them. Prints its threads as facts
# (tests/scenario_facts.h): "thread tid=TID name=NAME".
import os
import threading
import time

lock = threading.Lock()
locked = threading.Event()


printing = threading.Lock()


def say(name):
    with printing:  # one whole line at a time: print writes the end of line on its own
        print(f"thread tid={threading.get_native_id()} name={name}", flush=True)


def holder():
    say("holder")
    with lock:
        locked.set()
        time.sleep(30)


def waiter(name):
    locked.wait()
    say(name)
    with lock:
        pass


def asleep(tid):
    with open(f"/proc/self/task/{tid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "S"


print(f"scenario name=py-exit-daemons pid={os.getpid()}", flush=True)
say("MainThread")
threads = [threading.Thread(target=holder, name="holder", daemon=True)]
threads += [threading.Thread(target=waiter, args=(n,), name=n, daemon=True)
            for n in ("waiter1", "waiter2")]
for thread in threads:
    thread.start()
locked.wait()
for thread in threads[1:]:
    while thread.native_id is None or not asleep(thread.native_id):
        time.sleep(0.001)
time.sleep(0.05)
