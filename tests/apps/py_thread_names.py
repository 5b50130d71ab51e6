# Issue 34, case 9: threads named in Python ("qprod", "qcons") whose native name stays the
# interpreter's, short-lived, contending for a lock (so that the report names them as holder and
# waiter). Prints its threads as facts (tests/scenario_facts.h): "thread tid=TID name=NAME".
import os
import threading
import time

lock = threading.Lock()
printing = threading.Lock()


def work():
    with printing:  # one whole line at a time: print writes the end of line on its own
        print(f"thread tid={threading.get_native_id()} name={threading.current_thread().name}",
              flush=True)
    for _ in range(6):
        with lock:
            time.sleep(0.005)


print(f"scenario name=py-thread-names pid={os.getpid()}", flush=True)
threads = [threading.Thread(target=work, name=name) for name in ("qprod", "qcons")]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
# The interpreter lives on a little after the threads ended, as a program's main thread would.
time.sleep(0.3)
