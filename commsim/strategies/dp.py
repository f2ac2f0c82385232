"""dp: single-server torch.nn.DataParallel: device 0 drives every device through its own link.

Steps, per iteration (``--nodes`` counts devices; each device's link is the cluster's NIC, e.g.
``--bandwidth 12GBps`` for PCIe 3.0 x16), all through device 0 (the seeds' multi-GPU lab):
1. scatter the inputs: device 0 sends every other device its share of the batch;
2. replicate: device 0 sends the parameters to every other device (every iteration);
3. forward on every device;
4. gather the outputs to device 0 (loss there), then scatter their gradients back;
5. backward on every device;
6. reduce the gradients to device 0 (every device sends its gradients; device 0 adds them);
7. optimizer step on device 0 only.
Device 0's link carries (p-1) copies of the model twice per iteration, and its CPU (or GPU)
does all the reduction: like ``ps``, it stops scaling as devices are added.
"""
from __future__ import annotations

import math

from commsim import closed_form as cf
from commsim.errors import UserError
from commsim.sim import fast
from commsim.strategies.base import Strategy, Timing, register


def _sizes(costs, spec):
    """Bytes of one device's inputs and of its outputs (float32)."""
    sample = math.prod(costs.input_shape) * 4
    return spec.per_rank_batch * sample, spec.per_rank_batch * costs.output_width * 4


def _to_all(ctx, name: str, nbytes: float, collective: str):
    """Device 0 sends ``nbytes`` to every other device, all posted at once."""
    with ctx.collective(0, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead(collective))
        yield ctx.all_of(ctx.send(0, r, nbytes, collective=collective)
                         for r in range(1, ctx.world))


def _from_all(ctx, name: str, nbytes: float, add: bool = False):
    """Device 0 receives ``nbytes`` from every other device; with ``add`` it sums them."""
    with ctx.collective(0, name, nbytes):
        yield from ctx.wait(ctx.costs.overhead("gather"))
        yield ctx.all_of(ctx.recv(0, r) for r in range(1, ctx.world))
        if add:
            yield from ctx.cpu(0, (ctx.world - 1) * nbytes * ctx.costs.gamma_s_per_B)


@register
class DataParallel(Strategy):
    name = "dp"
    summary = "single-server DataParallel: scatter, replicate, gather, reduce through device 0"
    label = "DataParallel (dp)"
    color = "#9467bd"

    def bus_factor(self, p):
        return cf.ps_bus_factor(p)

    def check(self, spec):
        super().check(spec)
        if spec.sync_every != 1 or spec.group_size is not None or spec.compression is not None:
            raise UserError("dp replicates the model every iteration: --sync-every, "
                            "--group-size and --compress do not apply")

    def rank_process(self, ctx, rank):
        costs, spec = ctx.costs, ctx.spec
        p = ctx.world
        inputs, outputs = _sizes(costs, spec)
        model = costs.model_bytes
        if rank == 0:
            if p > 1:
                yield from _to_all(ctx, "scatter inputs", inputs, "scatter")
                yield from _to_all(ctx, "replicate", model, "broadcast")
            yield from ctx.compute(0, "forward", costs.forward_s)
            if p > 1:
                yield from _from_all(ctx, "gather outputs", outputs)
                yield from _to_all(ctx, "scatter output grads", outputs, "scatter")
            yield from ctx.compute(0, "backward", costs.backward_s)
            if p > 1:
                yield from _from_all(ctx, "reduce grads", model, add=True)
            yield from ctx.compute(0, "optimizer", costs.optimizer_s)
        else:
            with ctx.collective(rank, "receive inputs+parameters", inputs + model):
                yield from ctx.wait(costs.overhead("scatter"))
                yield ctx.recv(rank, 0)
                yield from ctx.wait(costs.overhead("broadcast"))
                yield ctx.recv(rank, 0)
            yield from ctx.compute(rank, "forward", costs.forward_s)
            with ctx.collective(rank, "outputs", outputs):
                yield from ctx.wait(costs.overhead("gather"))
                yield ctx.send(rank, 0, outputs, collective="gather")
                yield from ctx.wait(costs.overhead("scatter"))
                yield ctx.recv(rank, 0)
            yield from ctx.compute(rank, "backward", costs.backward_s)
            with ctx.collective(rank, "reduce grads", model):
                yield from ctx.wait(costs.overhead("gather"))
                yield ctx.send(rank, 0, model, collective="gather")
        ctx.finish(rank)

    def fast(self, spec, costs, reach):
        # (its replay's reach is checked up front: ``fast.unsupported``)
        return fast.data_parallel(spec, costs, *_sizes(costs, spec))

    def analytic(self, spec, costs):
        p = spec.world_size
        inputs, outputs = _sizes(costs, spec)
        n = costs.model_bytes
        a, g = costs.alpha_s, costs.gamma_s_per_B
        sc, bc, ga = costs.beta("scatter"), costs.beta("broadcast"), costs.beta("gather")
        comm = 0.0
        if p > 1:
            comm = (cf.linear_scatter_s(inputs, p, a, sc, costs.overhead("scatter"))
                    + cf.linear_scatter_s(n, p, a, bc, costs.overhead("broadcast"))
                    + cf.linear_gather_s(outputs, p, a, ga, costs.overhead("gather"))
                    + cf.linear_scatter_s(outputs, p, a, sc, costs.overhead("scatter"))
                    + cf.linear_gather_s(n, p, a, ga, costs.overhead("gather"))
                    + (p - 1) * n * g)
        compute = costs.forward_s + costs.backward_s + costs.optimizer_s
        iteration = compute + comm
        root = (p - 1) * (inputs + n + outputs)
        root_in = (p - 1) * (outputs + n)
        sent = (root,) + (outputs + n,) * (p - 1)
        received = (root_in,) + (inputs + n + outputs,) * (p - 1)
        # Device 0 is the critical rank; the others finish earlier (no optimizer step).
        return Timing(finish_s=(iteration,) + (0.0,) * (p - 1),
                      compute_s=(compute,) + (costs.forward_s + costs.backward_s,) * (p - 1),
                      comm_s=(comm,) * p, sent_bytes=sent, received_bytes=received,
                      nic_tx_bytes=sent, nic_rx_bytes=received)
