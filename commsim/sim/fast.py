"""The ``fast`` engine: the discrete-event simulator's answers without simulating every message.

The DES (``commsim.sim.engine``) runs every rank as a process and every ring step as messages, so
a ring all-reduce over p ranks costs O(p²) events per tensor.  This engine computes the same event
times directly, with numpy over ranks, from the recurrences the DES obeys:

1. Compute.  A rank's forward/backward/optimizer is one job of ``work x straggler factor`` on its
   host's processor-sharing CPU; alone it runs at rate a = min(1, cores/threads).
2. Ring all-reduce (ring, ddp).  Rank i posts step k at R_i.  The transfer i -> i+1 starts when
   both ends posted it (rendezvous) and is delivered c_i later (latency + chunk/bandwidth of the
   edge; intra-host edges use the host's loopback numbers).  No NIC direction is ever contended
   in a ring (each host has one outgoing and one incoming ring edge, used one step at a time), so
       D_i = max(R_i, R_{i+1}) + c_i,   E_i = max(D_i, D_{i-1}),   R_i' = E_i + g_i
   where g_i is the reduction (reduce-scatter) or 0 (all-gather): a max-plus linear system.
   * Aggregated steps: once one step moves every rank by the same λ, the state is a max-plus
     eigenvector and stays one: the remaining steps of the phase are jumped in one addition.
     A homogeneous ring is an eigenvector after one step; a straggler's delay spreads one rank
     per step and the state settles after at most p/2 steps; with equal edges the phase is the
     closed form max(R) + steps·(c + g) (a sliding-window max whose window covers the ring).
   * Symmetry: with no straggler and no slow link, ranks repeat with period ranks_per_host; the
     ring is simulated on one period (a ring of length q behaves like the p-ring it tiles).
3. DDP overlap.  The Gloo thread's reductions share the host's cores with backward (processor
   sharing: both slow to r = min(1, cores/(threads+1))).  Each rank keeps B, the time backward
   would end if nothing more competed; a reduction of w at time E either runs after backward
   (w/b), fully inside it (w/r; B grows by w/r - w/a), or straddles its end.  Buckets start at
   max(ready, previous bucket's end), ready being when backward's progress reaches the bucket.
   Steps are aggregated as above while every rank stays in the same regime, and for at most as
   many steps as keep every overlapping rank's backward running.
4. Parameter server (ps).  The root's receive direction serves the gather work-conservingly:
   its last delivery is max_k(a_k + Σ_{a_j >= a_k} s_j) + α over the senders' match times a and
   transfer times s (the order among simultaneous requests changes nothing); the mean runs on
   the root's CPU; the scatter's transfers leave the root's transmit direction in rank order.
   O(p log p) per tensor.

Where this is exact (agreement with the DES to float rounding, ~1e-12; see tests): any strategy,
any node count, stragglers, slow links, ranks_per_host > 1.  Where it is not, ``unsupported``
says why and ``--engine auto`` uses the DES instead:
* a shared CPU pool (``shared_cpu_cores``): every rank's job slows every other's;
* ranks_per_host > 1 when the host's cores can be oversubscribed (more runnable threads than
  cores: e.g. DDP's Gloo thread next to backward): ranks on one host then interleave on the CPU
  at event granularity;
* a recorded timeline (the engine keeps times, not intervals).
Exact ties between events (e.g. zero reduction cost) may be ordered differently from simpy's
event queue; the times it reports do not depend on that order except in such ties.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commsim.costs import CostInputs
from commsim.errors import UserError
from commsim.spec import RunSpec
from commsim.strategies.base import Timing

# A step whose per-rank advances differ by less than this (relative to the clock) has reached
# the max-plus eigenvector; the rest differ only by float rounding.
_EIGEN_RTOL = 1e-12


def unsupported(spec: RunSpec, costs: CostInputs, *, timeline: bool = False) -> str | None:
    """Why the fast engine cannot reproduce the DES exactly for ``spec``; None if it can."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    strategy = get_strategy(spec.strategy)
    if timeline:
        return "it does not record a timeline"
    if not strategy.has_fast:
        return f"it does not model strategy {spec.strategy!r}"
    if c.cpu_efficiency:
        return "it does not model a CPU efficiency curve"
    if spec.algorithm not in (None, "ring", "linear"):
        return f"it models the default algorithms only, not {spec.algorithm!r}"
    if spec.sync_every != 1 or spec.group_size is not None or spec.compression is not None:
        return "it does not model local aggregation, group averaging or compression"

    if c.shared_cpu_cores is not None:
        return "ranks sharing one CPU pool interleave at event granularity"
    if c.ranks_per_host > 1:
        # At most one compute job and (DDP) one Gloo reduction per rank run at a time.
        per_rank = max(costs.threads_per_rank, 1) + (1 if strategy.overlaps_backward else 0)
        if c.ranks_per_host * per_rank > c.cores_per_host:
            return (f"{c.ranks_per_host} ranks per host can oversubscribe its "
                    f"{c.cores_per_host:g} cores")
    # The most compute threads per core while a message is in flight: DDP ranks compute and
    # communicate at once; the others do one or the other, so only co-located ranks' compute
    # can overlap a message (none with one rank per host).
    threads = max(costs.threads_per_rank, 1)
    others = c.ranks_per_host if strategy.overlaps_backward else c.ranks_per_host - 1
    runnable = others * threads + c.ranks_per_host   # plus one communicating thread per rank
    peak = others * threads / c.cores_per_host if runnable > c.cores_per_host else 0.0
    fastest = max([c.nic_bandwidth_Bps, *(c.slow_links_Bps or {}).values()])
    if costs.contended_Bps(peak) < fastest or costs.compute_speed(peak) < 1.0:
        return "communication slowed by compute on the same cores (calibrated contention)"
    return None


def run_fast(spec: RunSpec, costs: CostInputs) -> Timing:
    """One iteration of ``spec``, per rank and per host, as the DES would time it."""
    reason = unsupported(spec, costs)
    if reason is not None:
        raise UserError(f"--engine fast cannot model this run exactly: {reason}; "
                        "use --engine auto or des")
    from commsim.strategies import get_strategy

    return get_strategy(spec.strategy).fast(spec, costs, _layout(spec, costs))


# -- the cluster as arrays -------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    """The ranks simulated (one period of the ring when ranks repeat) and their links.

    p:          ranks in the run; size: ranks simulated (a divisor of p; p // size copies).
    factor:     straggler compute factor per simulated rank.
    edge_lat_s / edge_Bps: the ring edge from each simulated rank to the next rank.
    a, b, r:    CPU rate of backward alone, of one Gloo thread alone, of either when both run.
    """
    p: int
    size: int
    factor: np.ndarray
    edge_lat_s: np.ndarray
    edge_Bps: np.ndarray
    edge_intra: np.ndarray
    a: float
    b: float
    r: float


def _cpu_rate(cores: float, threads: float) -> float:
    """The DES's processor sharing: full speed while the threads fit, else cores / threads."""
    return 1.0 if threads <= cores else cores / threads


def _host_bandwidths(c) -> np.ndarray:
    bw = np.full(c.hosts, float(c.nic_bandwidth_Bps))
    for host, rate in c.slow_links_Bps.items():
        bw[host] = rate
    return bw


def _intra(c) -> tuple[float, float]:
    """Latency and bandwidth of a message between two ranks of one host (as the DES takes them)."""
    bw = c.intra_host_bandwidth_Bps or c.nic_bandwidth_Bps
    lat = c.nic_latency_s if c.intra_host_latency_s is None else c.intra_host_latency_s
    return lat, bw


def _layout(spec: RunSpec, costs: CostInputs) -> _Layout:
    c = spec.cluster
    p, rph = spec.world_size, c.ranks_per_host
    if spec.stragglers or c.slow_links_Bps:
        size = p                      # uneven: every rank its own class
    elif c.hosts == 1:
        size = 1                      # every ring edge is inside the one host
    else:
        size = rph                    # ranks repeat host by host
    idx = np.arange(size)
    nxt = (idx + 1) % p
    hs, hd = idx // rph, nxt // rph
    bw = _host_bandwidths(c)
    intra_lat, intra_bw = _intra(c)
    same = hs == hd
    factor = np.ones(size)
    for rank, f in spec.stragglers.items():
        factor[rank] = f
    t = costs.threads_per_rank
    cores = c.cores_per_host
    return _Layout(p=p, size=size, factor=factor,
                   edge_lat_s=np.where(same, intra_lat, c.nic_latency_s),
                   edge_Bps=np.where(same, intra_bw, np.minimum(bw[hs], bw[hd])), edge_intra=same,
                   a=_cpu_rate(cores, t), b=_cpu_rate(cores, 1), r=_cpu_rate(cores, t + 1))


# -- Gloo CPU work next to backward ------------------------------------------------------------------

def _reduce(start, backward_end, work, lay: _Layout):
    """A Gloo reduction of ``work`` starting at ``start`` on each rank's host.

    ``backward_end`` (or None: nothing competes) is when backward would end if nothing more
    competed.  Returns (end, new backward_end, regime) with regime 0: after backward, 1: wholly
    inside it, 2: straddling its end.
    """
    if work <= 0:
        return start, backward_end, None
    if backward_end is None:
        return start + work / lay.b, None, None
    a, b, r = lay.a, lay.b, lay.r
    left = a * (backward_end - start)            # backward work still to do at ``start``
    regime = np.where(left <= 0, 0, np.where(left >= work, 1, 2))
    end = np.where(regime == 0, start + work / b,
                   np.where(regime == 1, start + work / r, start + left / r + (work - left) / b))
    new_b = np.where(regime == 0, backward_end,
                     np.where(regime == 1, backward_end + work / r - work / a, start + left / r))
    return end, new_b, regime


def _phase(post, backward_end, steps: int, edge_s, work, lay: _Layout):
    """``steps`` ring steps (send right, receive left, then reduce ``work``) from post times.

    Returns the post times of the step after, and backward_end.
    """
    k = 0
    prev_regime = None
    contended = backward_end is not None and work > 0
    while k < steps:
        if contended and np.all(backward_end <= post.min()):
            contended = False          # every backward is over: plain max-plus from here
        if not contended:
            g = work / lay.b if work > 0 else 0.0
            if edge_s.min() == edge_s.max() and steps - k >= post.size // 2:
                # Equal edges: R_i after k steps is k(c+g) + the max of R over ranks within k;
                # the window covers the ring.
                return np.full(post.size, post.max() + (steps - k) * (edge_s[0] + g)), \
                    backward_end
        sent = np.maximum(post, np.roll(post, -1)) + edge_s
        done = np.maximum(sent, np.roll(sent, 1))
        if contended:
            nxt, new_b, regime = _reduce(done, backward_end, work, lay)
        else:
            nxt, new_b, regime = done + g, backward_end, None
        k += 1
        advance = nxt - post
        lam = float(advance.max())
        same_regime = regime is None or (prev_regime is not None and not np.any(regime == 2)
                                         and np.array_equal(regime, prev_regime))
        if (k < steps and same_regime
                and lam - advance.min() <= _EIGEN_RTOL * max(1.0, float(np.abs(nxt).max()))):
            # An eigenvector: every later step of the phase adds lam, while regimes hold.
            jump = steps - k
            if regime is not None and np.any(regime == 1):
                grow = work / lay.r - work / lay.a    # backward's delay per overlapped step
                slack = (new_b - nxt)[regime == 1]
                jump = min(jump, int(np.floor(slack.min() / (lam - grow))) - 1)
            if jump > 0:
                nxt = nxt + jump * lam
                if regime is not None:
                    new_b = np.where(regime == 1, new_b + jump * (work / lay.r - work / lay.a),
                                     new_b)
                k += jump
        post, backward_end, prev_regime = nxt, new_b, regime
    return post, backward_end


def _ring_allreduce(lay: _Layout, costs: CostInputs, start, backward_end, nbytes: float):
    """Gloo's ring all-reduce then divide by p (``collectives.ring_allreduce``), per rank."""
    p = lay.p
    post = start + costs.overhead("all_reduce")
    chunk = nbytes / p
    edge_s = lay.edge_lat_s + chunk * np.where(lay.edge_intra, 1.0, costs.wire("all_reduce")) \
        / lay.edge_Bps
    post, backward_end = _phase(post, backward_end, p - 1, edge_s, chunk * costs.gamma_s_per_B,
                                lay)
    post, backward_end = _phase(post, backward_end, p - 1, edge_s, 0.0, lay)
    end, backward_end, _ = _reduce(post, backward_end, nbytes * costs.gamma_s_per_B, lay)
    return end, backward_end


# -- strategies ---------------------------------------------------------------------------------------

def _buffer_broadcast(spec: RunSpec, costs: CostInputs):
    """DDP's buffer broadcast (``collectives.broadcast_buffers``): a binomial tree from rank 0,
    every rank leaving when it is done.  Returns (end time, bytes sent per rank, per host tx,
    per host rx); level by level, O(p log p)."""
    c = spec.cluster
    p, n = spec.world_size, float(costs.buffer_bytes)
    if not spec.broadcast_buffers or p <= 1 or n <= 0:
        return 0.0, None, None, None
    host = np.arange(p) // c.ranks_per_host
    bw = _host_bandwidths(c)
    intra_lat, intra_bw = _intra(c)
    busy = np.full(p, costs.overhead("broadcast"))   # when each rank can send (has the data)
    sent = np.zeros(p)
    tx, rx = np.zeros(c.hosts), np.zeros(c.hosts)
    mask = 1 << max(0, (p - 1).bit_length() - 1)
    while mask >= 1:
        src = np.arange(0, p - mask, 2 * mask)
        dst = src + mask
        same = host[src] == host[dst]
        cost = np.where(same, intra_lat + n / intra_bw,
                        c.nic_latency_s + n * costs.wire("broadcast")
                        / np.minimum(bw[host[src]], bw[host[dst]]))
        done = np.maximum(busy[src], busy[dst]) + cost
        busy[src] = done
        busy[dst] = done
        sent[src] += n
        np.add.at(tx, host[src][~same], n)
        np.add.at(rx, host[dst][~same], n)
        mask >>= 1
    return float(busy.max()), sent, tx, rx


def ring_like(spec: RunSpec, costs: CostInputs, lay: _Layout, *, buckets: bool,
              broadcast_buffers: bool = False) -> Timing:
    """Ring all-reduces: every tensor after backward (single, ring), or with ``buckets`` DDP's
    buckets overlapping backward, after the buffer broadcast when ``broadcast_buffers``."""
    p, f, a = lay.p, lay.factor, lay.a
    no_broadcast = (0.0, None, None, None)
    t0, buf_sent, buf_tx, buf_rx = (_buffer_broadcast(spec, costs) if broadcast_buffers
                                    else no_broadcast)
    forward = t0 + costs.forward_s * f / a
    backward_work = costs.backward_s * f
    backward_end = forward + backward_work / a
    optimizer = costs.optimizer_s * f / a
    comm = np.zeros(lay.size)
    if buckets:
        # Reductions compete with backward only if they can start before it ends.
        compete = spec.overlap and lay.r < lay.a
        end = forward
        sizes = [bucket.bytes for bucket in costs.buckets]
        for bucket in costs.buckets:
            if spec.overlap:   # when backward's progress reaches the bucket's last gradient
                ready = backward_end - backward_work * (1.0 - bucket.ready_fraction) / a
            else:
                ready = backward_end
            start = np.maximum(ready, end)
            if p > 1:
                end, new_b = _ring_allreduce(lay, costs, start, backward_end if compete else None,
                                             bucket.bytes)
                backward_end = new_b if compete else backward_end
                comm = comm + (end - start)
            else:
                end = start
        synced = np.maximum(backward_end, end)
    else:
        sizes = list(costs.param_bytes)
        synced = backward_end
        if p > 1:
            for nbytes in sizes:
                synced, _ = _ring_allreduce(lay, costs, synced, None, nbytes)
            comm = synced - backward_end
    finish = synced + optimizer
    compute = (forward - t0) + (backward_end - forward) + optimizer
    comm = comm + t0
    # Bytes: every rank sends and receives 2(p-1) chunks of every tensor; a host's NIC carries
    # those of its ring edge that leaves (enters) it.
    per_rank = sum(2 * (p - 1) * (n / p) for n in sizes) if p > 1 else 0.0
    c = spec.cluster
    ranks = np.arange(p)
    host = ranks // c.ranks_per_host
    crossing = host != ((ranks + 1) % p) // c.ranks_per_host
    tx = np.bincount(host[crossing], minlength=c.hosts) * per_rank
    rx = np.bincount(((ranks + 1) % p)[crossing] // c.ranks_per_host, minlength=c.hosts) * per_rank
    sent = np.full(p, per_rank)
    received = np.full(p, per_rank)
    if buf_sent is not None:
        sent = sent + buf_sent
        received = received + np.where(np.arange(p) > 0, float(costs.buffer_bytes), 0.0)
        tx, rx = tx + buf_tx, rx + buf_rx
    return _timing(p, finish, compute, comm, sent, received, tx, rx)


def parameter_server(spec: RunSpec, costs: CostInputs, lay: _Layout) -> Timing:
    """Gather to rank 0, mean there, scatter, tensor by tensor (``gather_mean_scatter``)."""
    c = spec.cluster
    p = lay.p
    f = _tile(lay.factor, p)
    a = lay.a
    forward = costs.forward_s * f / a
    backward_end = forward + costs.backward_s * f / a
    optimizer = costs.optimizer_s * f / a
    host = np.arange(p) // c.ranks_per_host
    bw = _host_bandwidths(c)
    inter = host[1:] != 0                       # senders whose messages cross the root's NIC
    intra_lat, intra_bw = _intra(c)
    o_gather, o_scatter = costs.overhead("gather"), costs.overhead("scatter")
    alpha = c.nic_latency_s
    t = backward_end.copy()
    for n in costs.param_bytes if p > 1 else ():
        link = np.minimum(bw[host[1:]], bw[0])
        wire = n * costs.wire("gather") / link         # transfer time of each sender's n bytes
        wire_out = n * costs.wire("scatter") / link
        local = intra_lat + n / intra_bw
        post = t + o_gather
        match = np.maximum(post[1:], post[0])
        gathered = float((match[~inter] + local).max()) if not inter.all() else -np.inf
        if inter.any():
            arrive, serve = match[inter], wire[inter]
            order = np.argsort(arrive, kind="stable")
            arrive, serve = arrive[order], serve[order]
            tail = np.cumsum(serve[::-1])[::-1]           # Σ s_j over j >= k in arrival order
            gathered = max(gathered, float((arrive + tail).max()) + alpha)
        mean_work = p * n * costs.mean_s_per_B
        scatter = gathered + (mean_work / lay.b if mean_work > 0 else 0.0) + o_scatter
        delivered = np.empty(p - 1)
        delivered[~inter] = scatter + local
        delivered[inter] = scatter + np.cumsum(wire_out[inter]) + alpha
        t = np.concatenate(([delivered.max()], delivered))
    comm = t - backward_end if p > 1 else np.zeros(p)
    model = float(costs.model_bytes) if p > 1 else 0.0
    sent = np.full(p, model)
    sent[0] = (p - 1) * model
    crossing = np.bincount(host[1:][inter], minlength=c.hosts) * model
    crossing[0] = inter.sum() * model
    return _timing(p, t + optimizer, forward + (backward_end - forward) + optimizer, comm,
                   sent, sent, crossing, crossing)


def _tile(x, p: int) -> np.ndarray:
    """Per-rank values from one period of them (the simulated ranks repeat p / size times)."""
    x = np.asarray(x, dtype=float)
    return x if x.size == p else np.tile(x, p // x.size)


def _timing(p: int, finish, compute, comm, sent, received, nic_tx, nic_rx) -> Timing:
    def per_rank(x):
        return tuple(_tile(x, p).tolist())
    return Timing(finish_s=per_rank(finish), compute_s=per_rank(compute), comm_s=per_rank(comm),
                  sent_bytes=per_rank(sent), received_bytes=per_rank(received),
                  nic_tx_bytes=tuple(np.asarray(nic_tx, dtype=float).tolist()),
                  nic_rx_bytes=tuple(np.asarray(nic_rx, dtype=float).tolist()))
