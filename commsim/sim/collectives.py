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
    ranks = ranks if ranks is not None else tuple(range(ctx.world))
    p = len(ranks)
    if p <= 1:
        return
    pos = ranks.index(rank)
    right, left = ranks[(pos + 1) % p], ranks[(pos - 1) % p]
    chunk = nbytes / p
    gamma = ctx.costs.gamma_s_per_B
    with ctx.collective(rank, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("all_reduce"))
        for _ in range(p - 1):
            yield ctx.all_of((ctx.send(rank, right, chunk), ctx.recv(rank, left)))
            yield from ctx.cpu(rank, chunk * gamma)
        for _ in range(p - 1):
            yield ctx.all_of((ctx.send(rank, right, chunk), ctx.recv(rank, left)))
        if average:
            yield from ctx.cpu(rank, nbytes * gamma)


def gather_mean_scatter(ctx: SimContext, rank: int, nbytes: float, root: int = 0,
                        name: str = "gather+scatter"):
    """Parameter-server sync of one tensor through ``root`` (the seeds' Task 2a), for ``rank``.

    1. gather: every rank sends its n bytes to the root, which has posted all receives;
    2. the root computes the elementwise mean of the p buffers (p·n·γ on its CPU);
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
            yield from ctx.cpu(rank, p * nbytes * costs.gamma_s_per_B)
            yield from ctx.wait(costs.overhead("scatter"))
            yield ctx.all_of(ctx.send(root, r, nbytes) for r in others)
        else:
            yield ctx.send(rank, root, nbytes)
            yield from ctx.wait(costs.overhead("scatter"))
            yield ctx.recv(rank, root)
