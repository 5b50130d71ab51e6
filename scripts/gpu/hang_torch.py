"""A PyTorch program made to hang, for `gprof-run dump` on the GPU machine (issue 38). It prints
one line per fact (`tid role=... tid=N`) and then hangs until killed:

  lock        the main thread waits in torch.cuda.synchronize() behind a kernel that spins for
              minutes (torch.cuda._sleep), while a thread "holder" holds an RLock and sleeps in
              time.sleep, and two threads "waiter-N" wait for that RLock in acquire(); and a
              thread "lock-holder" inside `with` on a threading.Lock sleeps while "lock-waiter"
              waits for it (a Lock keeps no owner: dump infers its holder)
  dataloader  the main thread waits in next() for a batch that a DataLoader worker never makes
              (its __getitem__ sleeps forever in never_returns)
  train       a training loop that never ends (for `gprof-run -p PID --duration 5`)
"""
import os
import sys
import threading
import time

import torch


def say(line):
    os.write(1, (line + "\n").encode())


def hold(lock, ready, role="holder"):
    say(f"tid role={role} tid={threading.get_native_id()}")
    with lock:
        ready.set()
        time.sleep(3600)


def wait_for(lock, role="waiter"):
    say(f"tid role={role} tid={threading.get_native_id()}")
    with lock:
        pass


def lock_mode():
    torch.ones(1, device="cuda")
    lock = threading.RLock()
    ready = threading.Event()
    threading.Thread(target=hold, args=(lock, ready), name="holder", daemon=True).start()
    ready.wait()
    for n in range(2):
        threading.Thread(target=wait_for, args=(lock,), name=f"waiter-{n}", daemon=True).start()
    plain, plain_ready = threading.Lock(), threading.Event()
    threading.Thread(target=hold, args=(plain, plain_ready, "lock-holder"), daemon=True).start()
    plain_ready.wait()
    threading.Thread(target=wait_for, args=(plain, "lock-waiter"), daemon=True).start()
    say(f"tid role=main tid={threading.get_native_id()}")
    torch.cuda._sleep(1 << 40)  # minutes of spinning on the GPU
    torch.cuda.synchronize()


class NeverReturns(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return never_returns(index)


def never_returns(index):
    say(f"tid role=worker tid={threading.get_native_id()} pid={os.getpid()}")
    time.sleep(3600)
    return torch.ones(4)


def dataloader_mode():
    torch.ones(1, device="cuda")
    loader = torch.utils.data.DataLoader(NeverReturns(), batch_size=None, num_workers=1)
    say(f"tid role=main tid={threading.get_native_id()}")
    for batch in loader:
        batch.cuda()


def train_mode():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(256, 1024, device="cuda")
    say(f"tid role=main tid={threading.get_native_id()}")
    step = 0
    while True:
        optimizer.zero_grad(set_to_none=True)
        model(data).sum().backward()
        optimizer.step()
        torch.cuda.synchronize()
        step += 1
        if step % 200 == 0:
            say(f"step {step}")


if __name__ == "__main__":
    {"lock": lock_mode, "dataloader": dataloader_mode, "train": train_mode}[sys.argv[1]]()
