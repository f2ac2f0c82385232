"""ddp: PyTorch DistributedDataParallel: bucketed all-reduce overlapping backward (Task 3).

Steps, per iteration:
0. with local aggregation (``sync_every`` k), k-1 forward/backward steps under ``no_sync``;
1. broadcast the buffers (batch-norm statistics) from rank 0, then forward;
2. backward; gradients fill buckets in reverse registration order (first bucket 1 MiB, then
   ``bucket_cap_mb``, 25 MiB); when a bucket's last gradient is ready its all-reduce (ring, then
   divide by p) is launched on the communication thread while backward goes on;
3. buckets are all-reduced one after another, in launch order (one process group, one queue);
4. the optimizer step waits for backward and for every bucket.
With ``compression="fp16"`` each bucket is cast to half precision (and divided by p) before
the all-reduce, which moves half the bytes, and cast back after (PyTorch's fp16_compress_hook).
With ``group_size`` g the all-reduces run within groups of g ranks.
Communication hides behind the rest of backward; what is left after backward is exposed.  The
Gloo thread's reductions compete with backward for the host's cores (processor sharing).
"""
from __future__ import annotations

from commsim import closed_form as cf
from commsim.errors import UserError
from commsim.sim import fast
from commsim.sim.collectives import ALLREDUCE, broadcast_buffers
from commsim.strategies.base import (Strategy, accumulate, accumulation_s, register,
                                     require_uniform_bytes, uniform_timing)


@register
class DistributedDataParallel(Strategy):
    name = "ddp"
    summary = "bucketed ring all-reduce overlapping backward (PyTorch DDP)"
    label = "DDP (buckets)"
    color = "#2ca02c"
    algorithms = cf.ALLREDUCE_ALGORITHMS
    overlaps_backward = True
    broadcasts_buffers = True
    live = True
    wraps_ddp = True
    probed_compute = True

    def bus_factor(self, p):
        return cf.allreduce_bus_factor(p)

    def rank_process(self, ctx, rank):
        costs = ctx.costs
        buckets = costs.buckets
        yield from accumulate(ctx, rank)
        if ctx.spec.broadcast_buffers:
            yield from broadcast_buffers(ctx, rank, costs.buffer_bytes)
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
        group = ctx.spec.group_of(rank)
        fp16 = ctx.spec.compression == "fp16"
        gamma = ctx.costs.gamma_s_per_B
        for bucket, ev in zip(ctx.costs.buckets, ready):
            yield ev
            if fp16 and len(group) > 1:
                # The casts are part of the comm hook: communication time, as in the closed form.
                with ctx.collective(rank, f"fp16 hook {bucket.index}", bucket.bytes):
                    yield from ctx.cpu(rank, bucket.bytes * gamma)    # cast (and divide)
                    yield from allreduce(ctx, rank, bucket.bytes / 2,
                                         name=f"bucket {bucket.index}", ranks=group,
                                         average=False)
                    yield from ctx.cpu(rank, bucket.bytes * gamma)    # cast back
            else:
                yield from allreduce(ctx, rank, bucket.bytes, name=f"bucket {bucket.index}",
                                     ranks=group)

    def fast(self, spec, costs, reach):
        return fast.ring_like(spec, costs, buckets=True,
                              broadcast_buffers=self.broadcasts_buffers, reach=reach)

    def analytic(self, spec, costs):
        """Max-plus recursion over buckets: a bucket starts when it is ready and the previous one
        is done; exact when the Gloo thread does not compete with backward for cores."""
        world = spec.world_size
        p = spec.group_size or world
        if world % p:
            raise UserError("--engine analytic: groups of unequal size; use --engine des")
        if spec.broadcast_buffers and costs.buffer_bytes and world > 1:
            raise UserError("--engine analytic: the buffer broadcast's tree loads ranks "
                            "unevenly; use --engine des")
        fwd, bwd = costs.forward_s, costs.backward_s
        start_fwd = accumulation_s(spec, costs)
        alg = self.algorithm(spec)
        require_uniform_bytes(alg, p)
        fp16 = spec.compression == "fp16" and p > 1
        free = 0.0
        comm = 0.0
        wire = 0.0
        for bucket in costs.buckets:
            ready = start_fwd + fwd + (bucket.ready_fraction if spec.overlap else 1.0) * bwd
            n = bucket.bytes / 2 if fp16 else bucket.bytes
            cost = cf.allreduce_s(alg, n, p, costs.alpha_s, costs.beta("all_reduce"),
                                  costs.gamma_s_per_B, costs.overhead("all_reduce"))
            cost += (2 * bucket.bytes * costs.gamma_s_per_B if fp16
                     else cf.scale_s(bucket.bytes, p, costs.gamma_s_per_B))
            start = max(ready, free)
            free = start + cost
            comm += cost
            wire += cf.allreduce_bytes_per_rank(alg, n, p)
        end = max(start_fwd + fwd + bwd, free)
        iteration = end + costs.optimizer_s
        compute = start_fwd + fwd + bwd + costs.optimizer_s
        return uniform_timing(world, iteration, compute, comm, wire, wire)
