"""How close the emulated cluster's links come to their shaped rate.

For each rate (default 100mbit and 1gbit):
  1. build a 2-node emulated cluster (prefix ``csimbench``, so a user's cluster is left alone);
  2. bulk TCP throughput node 0 -> node 1 and node 1 -> node 0, ``--reps`` times ``--seconds`` s;
     print the median (and range) as % of the shaped rate and as % of the TCP payload ceiling
     (1448 payload bytes per 1514-byte frame that tbf counts = 95.6% of the rate);
  3. short messages after an idle gap (the token bucket is full, the worst case): median time of
     a one-way message of each size (timed by a 1-byte reply; the fastest of 15 tries, since
     other processes on the machine only add time) against size/rate, so a burst that
     makes short messages unrealistically fast shows up as "apparent rate" well above 100%;
  4. tear the cluster down (also on failure or Ctrl-C).

Run as root:  python bench/cluster_throughput.py [--rates 100mbit,1gbit] [--seconds 2] [--reps 3]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from commsim.calibrate import cluster
from commsim.units import fmt_rate, fmt_time, parse_rate_Bps

PREFIX = "csimbench"
PAYLOAD_CEILING = 1448 / 1514  # TCP payload per full frame (timestamps on) / bytes tbf counts

_ECHO = r"""
import socket, sys
srv = socket.socket(); srv.bind((sys.argv[1], 0)); srv.listen(1); srv.settimeout(30)
print(srv.getsockname()[1], flush=True)
c, _ = srv.accept(); c.settimeout(30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray(1 << 20)
while True:
    head = c.recv(8)
    if not head:
        break
    size = int.from_bytes(head, "big"); got = 0
    while got < size:
        got += c.recv_into(buf, min(len(buf), size - got))
    c.sendall(b"k")
"""

_PING = r"""
import json, socket, sys, time
addr, port, reps, gap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sizes = [int(x) for x in sys.argv[5].split(",")]
s = socket.create_connection((addr, port), timeout=30)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = {}
for size in [8] + sizes:  # 8 B: the round-trip floor, subtracted below
    times = []
    for _ in range(reps):
        time.sleep(gap)  # let the token bucket refill: the worst case for a short message
        t0 = time.perf_counter()
        s.sendall(size.to_bytes(8, "big") + b"\0" * size)
        s.recv(1)
        times.append(time.perf_counter() - t0)
    out[size] = min(times)  # the least-disturbed try: other processes only add time
print(json.dumps(out))
"""


def bulk(info: cluster.ClusterInfo, seconds: float, reps: int) -> list[float]:
    """Throughputs (bytes/s) alternating direction 0->1 and 1->0."""
    return [cluster.measure_throughput(k % 2, 1 - k % 2, seconds, prefix=info.prefix)
            for k in range(reps * 2)]


def short_messages(info: cluster.ClusterInfo, sizes: list[int],
                   reps: int) -> tuple[dict[int, float], float]:
    """({size: fastest one-way time (s) minus the 8-byte round trip}, that round trip)."""
    import json

    server = subprocess.Popen(cluster.exec_argv(1, [sys.executable, "-c", _ECHO,
                                                    cluster.address(1)], info.prefix),
                              stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        out = subprocess.run(cluster.exec_argv(0, [sys.executable, "-c", _PING,
                                                   cluster.address(1), port, str(reps), "0.01",
                                                   ",".join(map(str, sizes))], info.prefix),
                             capture_output=True, text=True, timeout=120, check=True)
        times = {int(k): v for k, v in json.loads(out.stdout).items()}
    finally:
        server.kill()
        server.wait()
    floor = times.pop(8)
    return {size: t - floor for size, t in times.items()}, floor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3, help="bulk runs per direction")
    ap.add_argument("--tcp-congestion", default=None,
                    help="congestion control in the nodes (default: the cluster's, reno)")
    ap.add_argument("--sizes", default="1500,16384,65536,1048576",
                    help="short-message sizes in bytes")
    args = ap.parse_args()
    cluster.check_prereqs()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{'rate':>12}  {'burst':>8}  {'queue':>8}  {'median':>12}  {'% of rate':>9}  "
          f"{'range %':>11}  {'% of ceiling':>12}")
    short_rows = []
    try:
        for text in args.rates.split(","):
            rate = parse_rate_Bps(text)
            info = cluster.up(2, rate, prefix=PREFIX, tcp_congestion=args.tcp_congestion)
            got = bulk(info, args.seconds, args.reps)
            med = statistics.median(got)
            print(f"{fmt_rate(rate):>12}  {info.burst_bytes:>7}B  {info.limit_bytes:>7}B  "
                  f"{fmt_rate(med):>12}  {med / rate:>9.1%}  "
                  f"{min(got) / rate:>5.1%}-{max(got) / rate:.1%}  "
                  f"{med / rate / PAYLOAD_CEILING:>12.1%}", flush=True)
            times, floor = short_messages(info, sizes, 15)
            short_rows += [(rate, size, t, size / rate, floor) for size, t in times.items()]
    finally:
        cluster.down(PREFIX)
    print("\nshort messages after 10 ms idle (fastest of 15, minus the fastest 8 B round trip; "
          "TCP/IP headers make ~96% the ideal):")
    print(f"{'rate':>12}  {'8 B rtt':>10}  {'bytes':>8}  {'measured':>10}  {'size/rate':>10}  "
          f"{'apparent rate':>13}")
    for rate, size, t, ideal, floor in short_rows:
        # Within the burst a message can beat the round-trip floor: no rate can be inferred.
        apparent = f"{ideal / t:.0%}" if t > 0 else "within burst"
        print(f"{fmt_rate(rate):>12}  {fmt_time(floor):>10}  {size:>8}  {fmt_time(max(t, 0)):>10}  "
              f"{fmt_time(ideal):>10}  {apparent:>13}")
    print(f"\nTCP congestion control in the namespaces: {info.tcp_congestion}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
