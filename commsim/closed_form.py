"""Closed-form α-β-γ costs of the collectives commsim models.  The one place they live.

Notation (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009):

    n      bytes of the buffer being synchronised
    p      ranks taking part
    α      latency of one message, seconds (``alpha_s``)
    β      seconds per byte on a link, 1 / bandwidth (``beta_s_per_B``)
    γ      seconds per byte to reduce (add) on a CPU (``gamma_s_per_B``)
    o      fixed cost of one collective call (Python, dispatch, bookkeeping; ``overhead_s``)

The message model these match (and that the simulator implements): a message of n bytes from
host A to host B occupies A's transmit and B's receive direction for n·β and is delivered α after
it leaves; a transfer starts when both the sender and the receiver have posted it (rendezvous); a
collective whose messages are all posted at once serialises only on the NIC they share.

Pure functions of numbers: no simulator, no profile, no state.  ``FORMS`` reads the same closed
forms as the linear terms calibration fits (``commsim.calibrate.fit``) and the report draws.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def message_s(n: float, alpha_s: float, beta_s_per_B: float) -> float:
    """One point-to-point message: α + nβ."""
    return alpha_s + n * beta_s_per_B


def ring_reduce_scatter_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                          gamma_s_per_B: float) -> float:
    """Ring reduce-scatter: p-1 steps, each sends and reduces one chunk of n/p bytes.

    (p-1)·α + (p-1)/p·n·β + (p-1)/p·n·γ
    """
    if p <= 1:
        return 0.0
    chunk = n / p
    return (p - 1) * (alpha_s + chunk * beta_s_per_B + chunk * gamma_s_per_B)


def ring_allgather_s(n: float, p: int, alpha_s: float, beta_s_per_B: float) -> float:
    """Ring all-gather of n bytes in p chunks: (p-1)·α + (p-1)/p·n·β."""
    if p <= 1:
        return 0.0
    return (p - 1) * (alpha_s + n / p * beta_s_per_B)


def ring_allreduce_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                     gamma_s_per_B: float, overhead_s: float = 0.0) -> float:
    """Ring all-reduce (Patarasuk & Yuan 2009): reduce-scatter then all-gather, 2(p-1) steps.

    o + 2(p-1)·α + 2(p-1)/p·n·β + (p-1)/p·n·γ.  Bandwidth-optimal: each rank sends and receives
    2(p-1)/p·n bytes whatever p is.  One rank needs no communication (and no call).
    """
    if p <= 1:
        return 0.0
    return (overhead_s + ring_reduce_scatter_s(n, p, alpha_s, beta_s_per_B, gamma_s_per_B)
            + ring_allgather_s(n, p, alpha_s, beta_s_per_B))


def linear_gather_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                    overhead_s: float = 0.0) -> float:
    """Gather of n bytes from each of p-1 ranks to a root that posts all receives at once
    (Gloo's gather): they serialise on the root's receive link.  o + α + (p-1)·n·β."""
    if p <= 1:
        return 0.0
    return overhead_s + alpha_s + (p - 1) * n * beta_s_per_B


def linear_scatter_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                     overhead_s: float = 0.0) -> float:
    """Scatter of n bytes to each of p-1 ranks from a root that posts all sends at once (Gloo's
    scatter): they serialise on the root's transmit link.  o + α + (p-1)·n·β."""
    return linear_gather_s(n, p, alpha_s, beta_s_per_B, overhead_s)


def mean_on_root_s(n: float, p: int, gamma_s_per_B: float) -> float:
    """Elementwise mean of p buffers of n bytes on one CPU: p·n·γ (p-1 adds and a divide)."""
    return p * n * gamma_s_per_B if p > 1 else 0.0


def ps_sync_s(n: float, p: int, alpha_s: float, beta_s_per_B: float, gamma_s_per_B: float,
              gather_overhead_s: float = 0.0, scatter_overhead_s: float = 0.0) -> float:
    """Parameter-server sync of one tensor through rank 0 (the seeds' Task 2a):
    gather to the root, mean there, scatter the mean.

    2·α + 2(p-1)·n·β + p·n·γ + o_gather + o_scatter: linear in p, the root's link is the
    bottleneck in both phases.
    """
    if p <= 1:
        return 0.0
    return (linear_gather_s(n, p, alpha_s, beta_s_per_B, gather_overhead_s)
            + mean_on_root_s(n, p, gamma_s_per_B)
            + linear_scatter_s(n, p, alpha_s, beta_s_per_B, scatter_overhead_s))


def scale_s(n: float, p: int, gamma_s_per_B: float) -> float:
    """Dividing a summed gradient by p in place: one pass over n bytes, n·γ (none when p = 1)."""
    return n * gamma_s_per_B if p > 1 else 0.0


# -- bytes and bus bandwidth ---------------------------------------------------------------------

def allreduce_bus_factor(p: int) -> float:
    """nccl-tests' bus bandwidth factor for all-reduce: busbw = algbw · 2(p-1)/p."""
    return 2 * (p - 1) / p if p > 1 else 0.0


def ps_bus_factor(p: int) -> float:
    """Bytes through the root's busiest NIC direction per byte synchronised: p-1.

    Gather fills the root's receive direction and scatter its transmit direction one after the
    other, so a perfectly run parameter server reaches at most half the link in busbw terms.
    """
    return float(p - 1) if p > 1 else 0.0


def ring_bytes_per_rank(n: float, p: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of n bytes: 2(p-1)/p·n."""
    return allreduce_bus_factor(p) * n


# -- more all-reduce algorithms (Thakur, Rabenseifner & Gropp 2005) ------------------------------
#
# Non-powers of two use MPICH's fold: with p' = 2^floor(lg p) and r = p - p', the first 2r ranks
# pair up, the odd one of each pair adds its partner's buffer before the power-of-two algorithm
# (α + nβ + nγ) and hands the result back after it (α + nβ).

def pow2_floor(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


def _fold_s(n: float, p: int, alpha_s: float, beta_s_per_B: float, gamma_s_per_B: float) -> float:
    if p == pow2_floor(p):
        return 0.0
    return 2 * alpha_s + 2 * n * beta_s_per_B + n * gamma_s_per_B


def recursive_doubling_allreduce_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                                   gamma_s_per_B: float, overhead_s: float = 0.0) -> float:
    """lg p' exchanges of the whole buffer with partner rank XOR 2^k: lg p'·(α + nβ + nγ).
    Latency-optimal; bandwidth grows with lg p (good for small tensors)."""
    if p <= 1:
        return 0.0
    q = pow2_floor(p)
    return (overhead_s + _fold_s(n, p, alpha_s, beta_s_per_B, gamma_s_per_B)
            + ceil_log2(q) * (alpha_s + n * beta_s_per_B + n * gamma_s_per_B))


def rabenseifner_allreduce_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                             gamma_s_per_B: float, overhead_s: float = 0.0) -> float:
    """Reduce-scatter by recursive halving, then all-gather by recursive doubling:
    2·lg p'·α + 2(p'-1)/p'·nβ + (p'-1)/p'·nγ.  Bandwidth-optimal with lg p latency terms."""
    if p <= 1:
        return 0.0
    q = pow2_floor(p)
    frac = (q - 1) / q
    return (overhead_s + _fold_s(n, p, alpha_s, beta_s_per_B, gamma_s_per_B)
            + 2 * ceil_log2(q) * alpha_s + 2 * frac * n * beta_s_per_B + frac * n * gamma_s_per_B)


def binomial_reduce_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                      gamma_s_per_B: float) -> float:
    """Binomial-tree reduce to rank 0: ⌈lg p⌉·(α + nβ + nγ)."""
    return ceil_log2(p) * (alpha_s + n * beta_s_per_B + n * gamma_s_per_B) if p > 1 else 0.0


def binomial_broadcast_s(n: float, p: int, alpha_s: float, beta_s_per_B: float) -> float:
    """Binomial-tree broadcast from rank 0: ⌈lg p⌉·(α + nβ)."""
    return ceil_log2(p) * (alpha_s + n * beta_s_per_B) if p > 1 else 0.0


def tree_allreduce_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                     gamma_s_per_B: float, overhead_s: float = 0.0) -> float:
    """Binomial reduce to rank 0 then binomial broadcast: ⌈lg p⌉·(2α + 2nβ + nγ)."""
    if p <= 1:
        return 0.0
    return (overhead_s + binomial_reduce_s(n, p, alpha_s, beta_s_per_B, gamma_s_per_B)
            + binomial_broadcast_s(n, p, alpha_s, beta_s_per_B))


def binomial_gather_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                      overhead_s: float = 0.0) -> float:
    """Binomial-tree gather of n bytes per rank to rank 0 (p a power of two): at step k a rank
    forwards the 2^k·n bytes it holds: ⌈lg p⌉·α + (p-1)·n·β."""
    if p <= 1:
        return 0.0
    return overhead_s + ceil_log2(p) * alpha_s + (p - 1) * n * beta_s_per_B


def binomial_scatter_s(n: float, p: int, alpha_s: float, beta_s_per_B: float,
                       overhead_s: float = 0.0) -> float:
    """Binomial-tree scatter (the gather reversed): ⌈lg p⌉·α + (p-1)·n·β."""
    return binomial_gather_s(n, p, alpha_s, beta_s_per_B, overhead_s)


def hierarchical_allreduce_s(n: float, hosts: int, local: int, alpha_s: float,
                             beta_s_per_B: float, gamma_s_per_B: float,
                             intra_alpha_s: float, intra_beta_s_per_B: float,
                             overhead_s: float = 0.0) -> float:
    """Reduce inside each host to its first rank (binomial, intra-host link), ring all-reduce
    among the hosts' first ranks, broadcast inside each host (binomial)."""
    if hosts * local <= 1:
        return 0.0
    return (overhead_s
            + binomial_reduce_s(n, local, intra_alpha_s, intra_beta_s_per_B, gamma_s_per_B)
            + ring_allreduce_s(n, hosts, alpha_s, beta_s_per_B, gamma_s_per_B)
            + binomial_broadcast_s(n, local, intra_alpha_s, intra_beta_s_per_B))


ALLREDUCE_ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "tree", "hierarchical")


def allreduce_s(algorithm: str, n: float, p: int, alpha_s: float, beta_s_per_B: float,
                gamma_s_per_B: float, overhead_s: float = 0.0) -> float:
    """Closed form of a flat (one rank per host) all-reduce by name."""
    fn = {"ring": ring_allreduce_s, "recursive_doubling": recursive_doubling_allreduce_s,
          "rabenseifner": rabenseifner_allreduce_s, "tree": tree_allreduce_s,
          "hierarchical": ring_allreduce_s}[algorithm]   # one rank per host: just the ring
    return fn(n, p, alpha_s, beta_s_per_B, gamma_s_per_B, overhead_s)


def allreduce_bytes_per_rank(algorithm: str, n: float, p: int) -> float:
    """Bytes each rank sends in a flat all-reduce (powers of two for the doubling algorithms)."""
    if p <= 1:
        return 0.0
    if algorithm in ("ring", "hierarchical"):
        return ring_bytes_per_rank(n, p)
    if algorithm == "recursive_doubling":
        return ceil_log2(p) * n
    if algorithm == "rabenseifner":
        return 2 * (p - 1) / p * n
    raise ValueError(f"no uniform byte count for {algorithm!r}")


def barrier_s(p: int, alpha_s: float) -> float:
    """Gloo's barrier: a zero-byte all-reduce through a binomial tree and back, 2⌈lg p⌉·α."""
    return 2 * ceil_log2(p) * alpha_s if p > 1 else 0.0


# -- whole Gloo calls, as calibration times them --------------------------------------------------
#
# Each call by its profile name, as f(n, p, α, β, γ): the closed form of one call of n bytes per
# rank on p ranks, without its overhead o (calibration fits o on top).

GLOO_CALLS: dict[str, Callable[[float, int, float, float, float], float]] = {
    "send_recv": lambda n, p, a, b, g: message_s(n, a, b),
    "all_reduce": lambda n, p, a, b, g: ring_allreduce_s(n, p, a, b, g),
    "gather": lambda n, p, a, b, g: linear_gather_s(n, p, a, b),
    "scatter": lambda n, p, a, b, g: linear_scatter_s(n, p, a, b),
    "broadcast": lambda n, p, a, b, g: binomial_broadcast_s(n, p, a, b),
    "barrier": lambda n, p, a, b, g: barrier_s(p, a),
}


@dataclass(frozen=True)
class Form:
    """t = o + latency_mult(p)·α + bytes_mult(p)·n/B + reduce_mult(p)·n·γ: a call's closed form
    as the linear model calibration fits (each multiplier is the closed form at a unit α, β or
    γ, so the two cannot disagree)."""
    latency_mult: Callable[[int], float]
    bytes_mult: Callable[[int], float]
    reduce_mult: Callable[[int], float]


def call_form(op: str) -> Form:
    f = GLOO_CALLS[op]
    return Form(latency_mult=lambda p: f(0.0, p, 1.0, 0.0, 0.0),
                bytes_mult=lambda p: f(1.0, p, 0.0, 1.0, 0.0),
                reduce_mult=lambda p: f(1.0, p, 0.0, 0.0, 1.0))


FORMS: dict[str, Form] = {op: call_form(op) for op in GLOO_CALLS}
