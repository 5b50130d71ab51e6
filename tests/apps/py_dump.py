# Python threads stuck in known ways for `gprof-run dump` (tests/dump_test.cc). Prints the thread
# ids that matter, then "ready", then stays stuck until killed.
#   gil N:  N threads that want the GIL, which the main thread holds inside a C call that sleeps
#           (libc's sleep through ctypes.PyDLL, which keeps the GIL)
#   queue:  a thread blocked in queue.get() on a queue nobody fills
import ctypes
import queue
import sys
import threading
import time


def want_the_gil(count):
    total = 0
    while True:
        total += 1


def wait_for_work(work):
    print("getter", threading.get_native_id(), flush=True)
    item = work.get()
    return item


def main():
    mode = sys.argv[1]
    if mode == "gil":
        spinners = [threading.Thread(target=want_the_gil, args=(i,), daemon=True)
                    for i in range(int(sys.argv[2]))]
        for thread in spinners:
            thread.start()
            print("spinner", thread.native_id, flush=True)
        print("holder", threading.get_native_id(), flush=True)
        print("ready", flush=True)
        ctypes.PyDLL(None).sleep(3600)
    elif mode == "queue":
        work = queue.Queue()
        getter = threading.Thread(target=wait_for_work, args=(work,), daemon=True)
        getter.start()
        time.sleep(0.1)
        print("ready", flush=True)
        time.sleep(3600)


main()
