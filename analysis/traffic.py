"""Bytes on a rank's network interface, from the messages a prediction sends.

``commsim predict`` counts payload: what Gloo's collectives hand to their sockets.  An
interface counts more, and ``bench/traffic_accuracy`` compares against an interface (as the seed
document compared against ``docker stats``).  Per message of n payload bytes between two hosts
(the DES's NIC transfers, ``Result.intervals`` of a ``timeline=True`` prediction):

* the sender writes Gloo's preamble before the payload (``gloo/transport/tcp``'s per-send header
  of six 8-byte fields): n + 48 bytes of TCP payload;
* the sender's interface carries them in frames of at most ``gso_bytes`` (the emulated cluster's
  GSO cap; one skb is counted once, with one Ethernet+IPv4+TCP header of 66 bytes);
* around every message, whatever its size, about 11 more header-only frames of 66 bytes cross
  the link (TCP acknowledgements and Gloo's own small exchanges): the interface counters of ddp
  and ring runs on the emulated cluster (digits CNN, 2 to 6 ranks, messages of 7 B to 30 KB)
  imply 9.3 to 11.2 a message, 11 in the median, with no trend in the message size.  They are
  counted as sent by the receiving rank (as acknowledgements are).
A rank's sent bytes are its data frames and the control frames it returns; its received bytes
are the other way round.  With local aggregation (``sync_every`` k) the prediction's intervals
cover one k-iteration cycle; figures are per iteration (the cycle / k), as ``predict`` reports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GLOO_PREAMBLE_B = 48      # gloo tcp Pair: a 6 x size_t preamble before every send
FRAME_HEADER_B = 66       # Ethernet 14 + IPv4 20 + TCP 20 + timestamp option 12
CONTROL_FRAMES = 11       # header-only frames around each message (measured: see above)


@dataclass(frozen=True)
class InterfaceBytes:
    """Per rank (one per host) per iteration: what its interface counts each way."""
    sent: tuple[float, ...]
    received: tuple[float, ...]

    @property
    def total(self) -> float:
        """Both directions of every interface: what the seed document summed."""
        return sum(self.sent) + sum(self.received)


def message_frames(payload_B: float, gso_bytes: float) -> tuple[float, float]:
    """(bytes the sender's interface counts, bytes of control frames the receiver's sends) for
    one message of ``payload_B``."""
    tcp = payload_B + GLOO_PREAMBLE_B
    skbs = math.ceil(tcp / max(1.0, gso_bytes - FRAME_HEADER_B))
    return tcp + skbs * FRAME_HEADER_B, CONTROL_FRAMES * FRAME_HEADER_B


def interface_bytes(result, gso_bytes: float) -> InterfaceBytes:
    """Per-host interface bytes of ``result`` (predicted with ``timeline=True``, one rank per
    host) per iteration."""
    if not result.intervals:
        raise ValueError("predict with timeline=True: the messages are in its intervals")
    hosts = result.nodes
    sent, received = [0.0] * hosts, [0.0] * hosts
    for iv in result.intervals:
        if iv.track != "tx":
            continue
        src, dst = (int(x) for x in iv.name.split("->"))
        hs, hd = src // result.ranks_per_host, dst // result.ranks_per_host
        data, acks = message_frames(iv.args["bytes"], gso_bytes)
        sent[hs] += data
        received[hd] += data
        sent[hd] += acks
        received[hs] += acks
    k = result.sync_every
    return InterfaceBytes(tuple(s / k for s in sent), tuple(r / k for r in received))
