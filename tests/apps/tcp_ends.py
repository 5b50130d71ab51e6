#!/usr/bin/python3
"""tcp_ends: the two ends of one TCP connection, each printing every send and receive it made.

  tcp_ends.py server ADDRESS PORT     accept one connection; answer each message
  tcp_ends.py server-peek ADDRESS PORT   the same, peeking at each message's first byte
                                         (MSG_PEEK: it moves none) before reading it
  tcp_ends.py client ADDRESS PORT     connect (retrying for 20 s), send messages from two threads

The client's two threads take turns (a lock and a condition), each sleeping 5-25 ms before its
message, so that the server waits in recv for data that arrives in softirq; message sizes vary from
1 byte to 300 kB (a send may queue part of a message). The server reads each message whole and
answers it with a few bytes; the client's main thread reads the answers. Lines (one write(2) each,
CLOCK_MONOTONIC ns, the recording's clock; offset: the byte's position in that direction's stream,
0 for the first):

  thread tid=<tid> pid=<pid> role=<client-a|client-b|client-reader|server>
  send tid=<tid> start_ns=<ns> end_ns=<ns> offset=<n> bytes=<n>
  recv tid=<tid> start_ns=<ns> end_ns=<ns> offset=<n> bytes=<n>
"""
import os
import socket
import sys
import threading
import time

MESSAGES = 12
SIZES = (1, 700, 64_000, 3, 300_000, 20_000)
ANSWER = 5


def now():
    return time.monotonic_ns()


def say(line):
    os.write(1, (line + "\n").encode())


def thread_line(role):
    say(f"thread tid={threading.get_native_id()} pid={os.getpid()} role={role}")


class Counted:
    """A socket whose every send and recv call is printed with its byte positions."""

    def __init__(self, sock):
        self.sock = sock
        self.sent = 0
        self.received = 0

    def send_all(self, data):
        view = memoryview(data)
        while view:
            start = now()
            n = self.sock.send(view)
            say(f"send tid={threading.get_native_id()} start_ns={start} end_ns={now()} "
                f"offset={self.sent} bytes={n}")
            self.sent += n
            view = view[n:]

    def recv_exactly(self, count):
        got = 0
        while got < count:
            start = now()
            chunk = self.sock.recv(count - got)
            end = now()
            if not chunk:
                raise EOFError("the peer closed the connection")
            say(f"recv tid={threading.get_native_id()} start_ns={start} end_ns={end} "
                f"offset={self.received} bytes={len(chunk)}")
            self.received += len(chunk)
            got += len(chunk)


def family_of(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def server(address, port, peek=False):
    listener = socket.socket(family_of(address), socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(1)
    conn, _ = listener.accept()
    thread_line("server")
    ends = Counted(conn)
    for i in range(MESSAGES):
        if peek:
            conn.recv(1, socket.MSG_PEEK)
        ends.recv_exactly(SIZES[i % len(SIZES)])
        ends.send_all(b"k" * ANSWER)
    conn.close()


def client(address, port):
    deadline = time.monotonic() + 20
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(None)
    ends = Counted(sock)
    turn = threading.Condition()
    state = {"next": 0}

    def writer(role, parity):
        thread_line(role)
        for i in range(parity, MESSAGES, 2):
            with turn:
                turn.wait_for(lambda: state["next"] == i)
            time.sleep((5 + 10 * (i % 3)) / 1000)
            ends.send_all(bytes([65 + i % 26]) * SIZES[i % len(SIZES)])

    def reader():
        thread_line("client-reader")
        for i in range(MESSAGES):
            ends.recv_exactly(ANSWER)
            with turn:
                state["next"] = i + 1
                turn.notify_all()

    threads = [threading.Thread(target=writer, args=("client-a", 0)),
               threading.Thread(target=writer, args=("client-b", 1)),
               threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sock.close()


if __name__ == "__main__":
    role, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role.startswith("server"):
        server(address, port, peek=role == "server-peek")
    else:
        client(address, port)
