# Python threads stuck on threading's locks, for `gprof-run dump` (tests/dump_python_locks_test.cc).
# Prints the thread ids that matter ("holder TID", "waiter TID"), then "ready", then stays stuck
# until killed.
#   rlock N:  a thread takes an RLock N times and sleeps in time.sleep; two threads wait for it,
#             one in `with rlock:`, one in rlock.acquire()
#   with:     a thread inside `with lock:` (a threading.Lock) in a long C call (libc's sleep, which
#             releases the GIL), called from a function below the `with`; a thread and the main
#             thread wait in `with lock:`
#   acquire:  a thread took the Lock by lock.acquire() and sleeps; a thread waits in `with lock:`
import ctypes
import sys
import threading
import time

taken = threading.Event()


def say(label, tid=None):
    # One write per line: threads printing at once must not interleave their words.
    sys.stdout.write(f"{label} {tid or threading.get_native_id()}\n" if label != "ready" else "ready\n")
    sys.stdout.flush()


def sleep_in_c():
    ctypes.CDLL(None).sleep(3600)


def hold_with(lock):
    say("holder")
    with lock:
        taken.set()
        sleep_in_c()


def hold_rlock(rlock, times):
    say("holder")
    for _ in range(times):
        rlock.acquire()
    taken.set()
    time.sleep(3600)


def hold_acquired(lock):
    say("holder")
    lock.acquire()
    taken.set()
    time.sleep(3600)


def wait_with(lock):
    say("waiter")
    with lock:  # the waiter's line
        pass


def wait_acquire(lock):
    say("waiter")
    lock.acquire(blocking=True)


def start(target, *args):
    threading.Thread(target=target, args=args, daemon=True).start()


def main():
    mode = sys.argv[1]
    if mode == "rlock":
        lock = threading.RLock()
        start(hold_rlock, lock, int(sys.argv[2]))
        taken.wait()
        start(wait_with, lock)
        start(wait_acquire, lock)
    elif mode == "with":
        lock = threading.Lock()
        start(hold_with, lock)
        taken.wait()
        start(wait_with, lock)
    elif mode == "acquire":
        lock = threading.Lock()
        start(hold_acquired, lock)
        taken.wait()
        start(wait_with, lock)
    time.sleep(0.1)
    if mode == "with":
        say("waiter")
        say("ready")
        with lock:
            pass
    say("ready")
    time.sleep(3600)


main()
