"""Collectives as simpy generators, one call per participating rank.

Each rank runs the same generator with its own ``rank``; they meet through rendezvous messages.
Their costs on a homogeneous cluster equal ``commsim.closed_form`` exactly (tests prove it).
"""
from __future__ import annotations

from commsim.sim.context import SimContext


def ring_allreduce(ctx: SimContext, rank: int, nbytes: float, name: str = "all_reduce",
                   ranks: tuple[int, ...] | None = None, average: bool = True):
    """Ring all-reduce (Gloo's ring / Patarasuk & Yuan), for ``rank``.

    1. pay the call overhead;
    2. reduce-scatter: p-1 steps; in each, send one n/p chunk to the right neighbour, receive
       one from the left, and add it into the local chunk (γ per byte on this rank's CPU);
    3. all-gather: p-1 steps of send right / receive left, no reduction;
    4. with ``average``, divide the sum by p in place (n·γ): the seeds' Task 2b divides after
       all_reduce, DDP divides before; the cost is the same.
    """
    ranks = tuple(ranks) if ranks is not None else tuple(range(ctx.world))
    if len(ranks) <= 1:
        return
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("all_reduce"))
        yield from _ring_steps(ctx, rank, nbytes, ranks)
        if average:
            yield from ctx.cpu(rank, nbytes * ctx.costs.gamma_s_per_B)


def _ring_steps(ctx: SimContext, rank: int, nbytes: float, ranks: tuple[int, ...]):
    """The 2(p-1) steps of a ring all-reduce among ``ranks`` (no overhead, no averaging)."""
    p = len(ranks)
    pos = ranks.index(rank)
    right, left = ranks[(pos + 1) % p], ranks[(pos - 1) % p]
    chunk = nbytes / p
    gamma = ctx.costs.gamma_s_per_B
    for _ in range(p - 1):
        yield ctx.all_of((ctx.send(rank, right, chunk), ctx.recv(rank, left)))
        yield from ctx.cpu(rank, chunk * gamma)
    for _ in range(p - 1):
        yield ctx.all_of((ctx.send(rank, right, chunk), ctx.recv(rank, left)))


def gather_mean_scatter(ctx: SimContext, rank: int, nbytes: float, root: int = 0,
                        name: str = "gather+scatter"):
    """Parameter-server sync of one tensor through ``root`` (the seeds' Task 2a), for ``rank``.

    1. gather: every rank sends its n bytes to the root, which has posted all receives;
    2. the root computes the elementwise mean of the p buffers (p·n times the calibrated cost
       per byte gathered, ``mean_s_per_B``, on its CPU);
    3. scatter: the root sends the mean to every rank, all sends posted at once.
    """
    p = ctx.world
    if p <= 1:
        return
    others = [r for r in range(p) if r != root]
    costs = ctx.costs
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(costs.overhead("gather"))
        if rank == root:
            yield ctx.all_of(ctx.recv(root, r) for r in others)
            yield from ctx.cpu(rank, p * nbytes * costs.mean_s_per_B)
            yield from ctx.wait(costs.overhead("scatter"))
            yield ctx.all_of(ctx.send(root, r, nbytes, collective="scatter") for r in others)
        else:
            yield ctx.send(rank, root, nbytes, collective="gather")
            yield from ctx.wait(costs.overhead("scatter"))
            yield ctx.recv(rank, root)


# -- more all-reduce algorithms: each equals its closed form in commsim.closed_form ---------------

def _exchange(ctx: SimContext, rank: int, partner: int, nbytes: float):
    """Send ``nbytes`` to and receive from ``partner`` at once (full duplex); done when both
    are (the partner sends the same size)."""
    yield ctx.all_of((ctx.send(rank, partner, nbytes), ctx.recv(rank, partner)))


def _fold_in(ctx, rank, ranks, nbytes, gamma):
    """MPICH's fold for non-powers of two: of the first 2r ranks, each even one hands its buffer
    to the next odd one, which adds it.  Returns (the rank's index among the p' that go on, or
    None for a rank that sat out)."""
    p = len(ranks)
    q = 1 << (p.bit_length() - 1)
    r = p - q
    i = ranks.index(rank)
    if i < 2 * r:
        if i % 2 == 0:
            yield ctx.send(rank, ranks[i + 1], nbytes)
            return None
        yield ctx.recv(rank, ranks[i - 1])
        yield from ctx.cpu(rank, nbytes * gamma)
        return i // 2
    return i - r


def _fold_out(ctx, rank, ranks, nbytes, sat_out):
    """Hand the result back to the ranks that sat out of the power-of-two part."""
    p = len(ranks)
    q = 1 << (p.bit_length() - 1)
    i = ranks.index(rank)
    if i < 2 * (p - q):
        if sat_out:
            yield ctx.recv(rank, ranks[i + 1])
        else:
            yield ctx.send(rank, ranks[i - 1], nbytes)


def _survivor(ranks, j):
    """The rank at power-of-two index j after the fold."""
    p = len(ranks)
    r = p - (1 << (p.bit_length() - 1))
    return ranks[2 * j + 1] if j < r else ranks[j + r]


def _folded_allreduce(ctx: SimContext, rank: int, nbytes: float, name: str, ranks, average: bool,
                      power_of_two):
    """The frame both doubling algorithms share: call overhead, MPICH's fold for non-powers of
    two around ``power_of_two(j, q)`` (run by the q surviving ranks, j the rank's index among
    them), then the divide by p."""
    ranks = tuple(ranks) if ranks is not None else tuple(range(ctx.world))
    if len(ranks) <= 1:
        return
    gamma = ctx.costs.gamma_s_per_B
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("all_reduce"))
        j = yield from _fold_in(ctx, rank, ranks, nbytes, gamma)
        if j is not None:
            yield from power_of_two(ranks, j, 1 << (len(ranks).bit_length() - 1))
        yield from _fold_out(ctx, rank, ranks, nbytes, sat_out=j is None)
        if average:
            yield from ctx.cpu(rank, nbytes * gamma)


def recursive_doubling_allreduce(ctx: SimContext, rank: int, nbytes: float,
                                 name: str = "all_reduce", ranks=None, average: bool = True):
    """Recursive doubling: in step k exchange the whole buffer with the rank 2^k away and add."""
    gamma = ctx.costs.gamma_s_per_B

    def doubling(ranks, j, q):
        mask = 1
        while mask < q:
            yield from _exchange(ctx, rank, _survivor(ranks, j ^ mask), nbytes)
            yield from ctx.cpu(rank, nbytes * gamma)
            mask <<= 1

    yield from _folded_allreduce(ctx, rank, nbytes, name, ranks, average, doubling)


def rabenseifner_allreduce(ctx: SimContext, rank: int, nbytes: float, name: str = "all_reduce",
                           ranks=None, average: bool = True):
    """Rabenseifner: reduce-scatter by recursive halving (halves of the current segment with the
    rank q/2, q/4, ... away), then all-gather by recursive doubling (segments doubling back)."""
    gamma = ctx.costs.gamma_s_per_B

    def halving_doubling(ranks, j, q):
        seg, dist = nbytes, q // 2
        while dist >= 1:
            seg /= 2
            yield from _exchange(ctx, rank, _survivor(ranks, j ^ dist), seg)
            yield from ctx.cpu(rank, seg * gamma)
            dist //= 2
        dist = 1
        while dist < q:
            yield from _exchange(ctx, rank, _survivor(ranks, j ^ dist), seg)
            seg *= 2
            dist *= 2

    yield from _folded_allreduce(ctx, rank, nbytes, name, ranks, average, halving_doubling)


def binomial_reduce(ctx: SimContext, rank: int, nbytes: float, ranks):
    """Binomial tree to ranks[0]: at mask 2^k a rank with that bit set sends up and stops; the
    others receive from rank + 2^k (if it exists) and add."""
    i, p = ranks.index(rank), len(ranks)
    gamma = ctx.costs.gamma_s_per_B
    mask = 1
    while mask < p:
        if i & mask:
            yield ctx.send(rank, ranks[i - mask], nbytes)
            return
        if i + mask < p:
            yield ctx.recv(rank, ranks[i + mask])
            yield from ctx.cpu(rank, nbytes * gamma)
        mask <<= 1


def binomial_broadcast(ctx: SimContext, rank: int, nbytes: float, ranks,
                       collective: str = "all_reduce"):
    """Binomial tree from ranks[0]: receive once from the parent, then send to each child in
    decreasing distance."""
    i, p = ranks.index(rank), len(ranks)
    top = 1 << max(0, (p - 1).bit_length() - 1) if p > 1 else 0
    mask = top
    if i:
        low = i & -i                     # the parent is i - lowest set bit
        yield ctx.recv(rank, ranks[i - low])
        mask = low >> 1
    while mask >= 1:
        if i + mask < p:
            yield ctx.send(rank, ranks[i + mask], nbytes, collective=collective)
        mask >>= 1


def broadcast_buffers(ctx: SimContext, rank: int, nbytes: float):
    """DDP's buffer sync before forward: one coalesced broadcast from rank 0 (binomial tree).

    Modelling choice: every rank leaves when the whole tree is done.  A real rank leaves when it
    has its copy; the difference is a few latencies for kilobytes of batch-norm statistics, and
    keeping ranks aligned lets the fast engine stay exact at any scale.
    """
    if ctx.world <= 1 or nbytes <= 0:
        return
    with ctx.collective(rank, "broadcast buffers", nbytes):
        yield from ctx.wait(ctx.costs.overhead("broadcast"))
        yield from binomial_broadcast(ctx, rank, nbytes, tuple(range(ctx.world)),
                                      collective="broadcast")
        yield ctx.together("broadcast buffers")


def tree_allreduce(ctx: SimContext, rank: int, nbytes: float, name: str = "all_reduce",
                   ranks=None, average: bool = True):
    """Binomial reduce to the first rank, then binomial broadcast of the sum."""
    ranks = tuple(ranks) if ranks is not None else tuple(range(ctx.world))
    if len(ranks) <= 1:
        return
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("all_reduce"))
        yield from binomial_reduce(ctx, rank, nbytes, ranks)
        yield from binomial_broadcast(ctx, rank, nbytes, ranks)
        if average:
            yield from ctx.cpu(rank, nbytes * ctx.costs.gamma_s_per_B)


def hierarchical_allreduce(ctx: SimContext, rank: int, nbytes: float, name: str = "all_reduce",
                           ranks=None, average: bool = True):
    """Reduce inside the host to its first rank, ring all-reduce among the hosts' first ranks
    over the network, broadcast inside the host (Horovod's hierarchical all-reduce); within
    ``ranks`` (a group), the group's ranks on each host and the first of them."""
    c = ctx.cluster
    ranks = tuple(ranks) if ranks is not None else tuple(range(ctx.world))
    if len(ranks) <= 1:
        return
    host = c.host_of(rank)
    local = tuple(r for r in ranks if c.host_of(r) == host)
    leaders = tuple(sorted({min(r for r in ranks if c.host_of(r) == h)
                            for h in {c.host_of(r) for r in ranks}}))
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("all_reduce"))
        yield from binomial_reduce(ctx, rank, nbytes, local)
        if rank in leaders and len(leaders) > 1:
            yield from _ring_steps(ctx, rank, nbytes, leaders)
        yield from binomial_broadcast(ctx, rank, nbytes, local)
        if average:
            yield from ctx.cpu(rank, nbytes * ctx.costs.gamma_s_per_B)


def binomial_gather_mean_scatter(ctx: SimContext, rank: int, nbytes: float, root: int = 0,
                                 name: str = "gather+scatter"):
    """Parameter-server sync through a binomial tree: gather (a rank forwards everything its
    subtree sent it), the mean on the root, scatter (each subtree's share sent down)."""
    p = ctx.world
    if p <= 1:
        return
    ranks = tuple(range(root, p)) + tuple(range(root))
    i = ranks.index(rank)
    costs = ctx.costs
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(costs.overhead("gather"))
        held, mask = 1, 1                       # buffers this rank holds
        while mask < p:
            if i & mask:
                yield ctx.send(rank, ranks[i - mask], held * nbytes, collective="gather")
                break
            if i + mask < p:
                yield ctx.recv(rank, ranks[i + mask])
                held += min(mask, p - i - mask)
            mask <<= 1
        if i == 0:
            yield from ctx.cpu(rank, p * nbytes * costs.gamma_s_per_B)
        yield from ctx.wait(costs.overhead("scatter"))
        top = 1 << max(0, (p - 1).bit_length() - 1)
        mask = top
        if i:
            low = i & -i
            yield ctx.recv(rank, ranks[i - low])
            mask = low >> 1
        while mask >= 1:
            if i + mask < p:
                yield ctx.send(rank, ranks[i + mask], min(mask, p - i - mask) * nbytes,
                               collective="scatter")
            mask >>= 1


ALLREDUCE = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "tree": tree_allreduce,
    "hierarchical": hierarchical_allreduce,
}

GATHER_SCATTER = {"linear": gather_mean_scatter, "binomial": binomial_gather_mean_scatter}
