"""ring: after backward, every parameter in turn is ring all-reduced, then divided by p (Task 2b).

Steps, per iteration:
1. forward and backward on the rank's share of the global batch;
2. for every parameter in registration order: ``all_reduce(grad, SUM)`` (Gloo's ring:
   reduce-scatter then all-gather, 2(p-1) steps of n/p bytes) and ``grad /= p``;
3. optimizer step.
No overlap: every byte of communication is exposed, and small tensors pay 2(p-1) latencies each.
"""
from __future__ import annotations

from commsim import closed_form as cf
from commsim.sim.collectives import ALLREDUCE
from commsim.errors import UserError
from commsim.sim import fast
from commsim.strategies.base import (Strategy, accumulation_s, forward_backward, register,
                                     require_uniform_bytes, uniform_timing)


@register
class Ring(Strategy):
    name = "ring"
    summary = "per-parameter ring all-reduce after backward, then divide"
    label = "all-reduce (ring)"
    color = "#1f77b4"
    algorithms = cf.ALLREDUCE_ALGORITHMS
    live = True

    def bus_factor(self, p):
        return cf.allreduce_bus_factor(p)

    def check(self, spec):
        super().check(spec)
        if spec.compression is not None:
            raise UserError("--compress applies to ddp's buckets (its comm hook), not to ring")

    def rank_process(self, ctx, rank):
        yield from forward_backward(ctx, rank)
        allreduce = ALLREDUCE[self.algorithm(ctx.spec)]
        group = ctx.spec.group_of(rank)
        for i, nbytes in enumerate(ctx.costs.param_bytes):
            yield from allreduce(ctx, rank, nbytes, name=f"all_reduce p{i}", ranks=group)
        yield from ctx.compute(rank, "optimizer", ctx.costs.optimizer_s)
        ctx.finish(rank)

    def fast(self, spec, costs, reach):
        return fast.ring_like(spec, costs, buckets=False, reach=reach)

    def live_sync(self, model, comm):
        """All-reduce (Gloo's ring) per parameter within the rank's group, then divide (the
        seed report's listing 4).  A group of one has nothing to average (nothing is sent).
        Each all-reduce with its divide is one ``comm.span`` (timed when tracing)."""
        import torch.distributed as dist

        if comm.size == 1:
            return
        for i, param in enumerate(model.parameters()):
            grad = param.grad.data
            with comm.span(f"all_reduce p{i}", grad.numel() * grad.element_size()):
                dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=comm.group)
                grad /= comm.size

    def analytic(self, spec, costs):
        p = spec.group_size or spec.world_size
        alg = self.algorithm(spec)
        comm = sum(cf.allreduce_s(alg, n, p, costs.alpha_s, costs.beta("all_reduce"),
                                  costs.gamma_s_per_B, costs.overhead("all_reduce"))
                   + cf.scale_s(n, p, costs.gamma_s_per_B) for n in costs.param_bytes)
        compute = (accumulation_s(spec, costs) + costs.forward_s + costs.backward_s
                   + costs.optimizer_s)
        require_uniform_bytes(alg, p)
        per_rank = sum(cf.allreduce_bytes_per_rank(alg, n, p) for n in costs.param_bytes)
        if spec.world_size % p:
            raise UserError("--engine analytic: groups of unequal size; use --engine des")
        return uniform_timing(spec.world_size, compute + comm, compute, comm, per_rank, per_rank)
