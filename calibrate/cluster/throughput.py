"""The two ends of the throughput test's bulk TCP transfer, each run inside a node.

``python -m commsim.calibrate.cluster.throughput server ADDR TIMEOUT_S`` listens on ADDR (a free
port, printed first), receives until the sender closes and prints ``{"bytes", "seconds"}``: the
bytes after the first read and the time from that read to the last one, so connection set-up and
the sender's start-up are not counted.  ``... client ADDR PORT SECONDS`` sends zeros for SECONDS,
closes its side, and waits for the server to close.  ``links.measure_throughput`` starts both
(the server first, for its port) and kills them if they overrun.
"""
from __future__ import annotations

import json
import socket
import sys
import time

CHUNK_BYTES = 256 * 1024
RECV_BYTES = 1 << 20


def server(addr: str, timeout_s: float) -> None:
    srv = socket.socket()
    srv.bind((addr, 0))
    srv.listen(1)
    srv.settimeout(timeout_s)
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    conn.settimeout(timeout_s)
    buf = bytearray(RECV_BYTES)
    conn.recv_into(buf)  # the clock starts at the first byte
    t0 = t1 = time.perf_counter()
    n = 0
    while True:
        k = conn.recv_into(buf)
        if not k:
            break
        n += k
        t1 = time.perf_counter()
    conn.close()
    print(json.dumps({"bytes": n, "seconds": (t1 - t0) if n else 0.0}), flush=True)


def client(addr: str, port: int, seconds: float) -> None:
    s = socket.create_connection((addr, port), timeout=5)
    chunk = b"\0" * CHUNK_BYTES
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # until the server closes: every byte sent was received
    s.close()


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "server":
        server(argv[1], float(argv[2]))
    elif len(argv) == 4 and argv[0] == "client":
        client(argv[1], int(argv[2]), float(argv[3]))
    else:
        print("usage: python -m commsim.calibrate.cluster.throughput "
              "server ADDR TIMEOUT_S | client ADDR PORT SECONDS", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
