"""ddp: PyTorch DistributedDataParallel: bucketed all-reduce overlapping backward (Task 3).

Steps, per iteration:
1. forward;
2. backward; gradients fill buckets in reverse registration order (first bucket 1 MiB, then
   ``bucket_cap_mb``, 25 MiB); when a bucket's last gradient is ready its all-reduce (ring, then
   divide by p) is launched on the communication thread while backward goes on;
3. buckets are all-reduced one after another, in launch order (one process group, one queue);
4. the optimizer step waits for backward and for every bucket.
Communication hides behind the rest of backward; what is left after backward is exposed.  The
Gloo thread's reductions compete with backward for the host's cores (processor sharing).
"""
from __future__ import annotations

from commsim import closed_form as cf
from commsim.sim.collectives import ALLREDUCE
from commsim.strategies.base import Strategy, register, require_uniform_bytes, uniform_timing


@register
class DistributedDataParallel(Strategy):
    name = "ddp"
    summary = "bucketed ring all-reduce overlapping backward (PyTorch DDP)"
    algorithms = cf.ALLREDUCE_ALGORITHMS

    def bus_factor(self, p):
        return cf.allreduce_bus_factor(p)

    def rank_process(self, ctx, rank):
        costs = ctx.costs
        buckets = costs.buckets
        yield from ctx.compute(rank, "forward", costs.forward_s)
        ready = [ctx.env.event() for _ in buckets]
        comm = ctx.env.process(self._communicate(ctx, rank, ready))
        done = 0.0
        for bucket, ev in zip(buckets, ready):
            if ctx.spec.overlap:
                segment = (bucket.ready_fraction - done) * costs.backward_s
                if segment > 0:
                    yield from ctx.compute(rank, "backward", segment, bucket=bucket.index)
                done = max(done, bucket.ready_fraction)
                ev.succeed()
        if done < 1.0:
            yield from ctx.compute(rank, "backward", (1.0 - done) * costs.backward_s)
        if not ctx.spec.overlap:
            for ev in ready:
                ev.succeed()
        yield comm
        yield from ctx.compute(rank, "optimizer", costs.optimizer_s)
        ctx.finish(rank)

    def _communicate(self, ctx, rank, ready):
        allreduce = ALLREDUCE[self.algorithm(ctx.spec)]
        for bucket, ev in zip(ctx.costs.buckets, ready):
            yield ev
            yield from allreduce(ctx, rank, bucket.bytes, name=f"bucket {bucket.index}")

    def analytic(self, spec, costs):
        """Max-plus recursion over buckets: a bucket starts when it is ready and the previous one
        is done; exact when the Gloo thread does not compete with backward for cores."""
        p = spec.world_size
        fwd, bwd = costs.forward_s, costs.backward_s
        alg = self.algorithm(spec)
        require_uniform_bytes(alg, p)
        free = 0.0
        comm = 0.0
        for bucket in costs.buckets:
            ready = fwd + (bucket.ready_fraction if spec.overlap else 1.0) * bwd
            cost = (cf.allreduce_s(alg, bucket.bytes, p, costs.alpha_s, costs.beta_s_per_B,
                                   costs.gamma_s_per_B, costs.overhead("all_reduce"))
                    + cf.scale_s(bucket.bytes, p, costs.gamma_s_per_B))
            start = max(ready, free)
            free = start + cost
            comm += cost
        end = max(fwd + bwd, free)
        iteration = end + costs.optimizer_s
        compute = fwd + bwd + costs.optimizer_s
        per_rank = sum(cf.allreduce_bytes_per_rank(alg, b.bytes, p) for b in costs.buckets)
        return uniform_timing(p, iteration, compute, comm, per_rank, per_rank)
