"""How each end of an emulated link is shaped: tbf's burst and queue, and the GSO cap.

tbf lets ``burst`` bytes leave at memory speed, so a large burst makes short messages look faster
than a real link would send them.  The burst is therefore the smallest one that still lets Gloo's
ring all-reduce reach the TCP payload ceiling (95.6% of the rate) with 4 ranks on 2 cores:
``MIN_BURST_FRAMES`` frames, or the bytes the link sends in ``BURST_TIME_S`` if that is more (late
timer wake-ups otherwise leave the link idle, and a small bucket caps the GSO packets small, which
costs CPU per byte).  Measured bus bandwidth, 4 ranks: 100mbit (1-16 MiB) with 2 frames 88-89
Mbit/s, 4 frames 93, 8 frames 95; 1gbit (16-64 MiB, 4-6 runs each) with 100 µs (GSO 8 KB) 835-939
Mbit/s, 300 µs (GSO 25 KB) 938-952, 1 ms 948-955, 300 µs with GSO held at 8 KB 883-916.  The
price: a message sent after an idle gap gets up to ~1 ms (100mbit) or 300 µs (1gbit) of line time
free, which a real NIC never gives.  The queue ``limit`` is a switch-like buffer of
``QUEUE_TIME_S`` at line rate (at least ``QUEUE_MIN_BYTES``), enough for TCP to keep the link busy
and for incast (gather) to queue a little before dropping, like a shallow-buffered switch port.
Every link end also caps its GSO packet size below the burst (and at the kernel's 64 KiB): tbf
must otherwise split each 64 KiB TCP super-packet into frames, which under CPU contention (load 7
on 2 cores) cut 1gbit throughput to ~50%; with the cap it stays ~90%.  Measured figures: see
``bench/cluster_throughput.py`` and docs/emulated-cluster.md.
"""
from __future__ import annotations

# Frame on the wire as tbf counts it (IP MTU 1500 + Ethernet header).
FRAME_BYTES = 1514
MIN_BURST_FRAMES = 8
GSO_DEFAULT_BYTES = 65536  # the kernel's default gso_max_size
BURST_TIME_S = 300e-6
QUEUE_TIME_S = 5e-3
QUEUE_MIN_BYTES = 64 * 1024


def shaping(bandwidth_Bps: float) -> tuple[int, int, int]:
    """(burst_bytes, limit_bytes, gso_max_bytes) of each end of a link shaped to the rate.

    gso_max_bytes caps the size of the TSO/GSO super-packets TCP hands to the link so that one
    fits the bucket whole (at rates where the bucket holds at least three frames): tbf would
    otherwise cut every 64 KiB GSO packet into 1514-byte segments, and under CPU contention (ranks
    computing) that halved the 1gbit throughput."""
    burst = max(MIN_BURST_FRAMES * FRAME_BYTES, round(bandwidth_Bps * BURST_TIME_S))
    limit = max(QUEUE_MIN_BYTES, round(bandwidth_Bps * QUEUE_TIME_S), 2 * burst)
    # Two thirds: the headers tc adds back per segment stay within the burst.  A cap below two
    # frames would make TCP send one frame per packet, which cost ~3% at 100mbit, while tbf
    # splitting GSO packets is cheap at such low rates: keep the default there.
    gso = (min(burst * 2 // 3, GSO_DEFAULT_BYTES) if burst * 2 // 3 >= 2 * FRAME_BYTES
           else GSO_DEFAULT_BYTES)
    return int(burst), int(limit), int(gso)
