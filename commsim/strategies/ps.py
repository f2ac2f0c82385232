"""ps: parameter server through rank 0 with gather and scatter, parameter by parameter (Task 2a).

Steps, per iteration:
1. forward and backward on the rank's share of the global batch;
2. for every parameter in registration order: ``gather`` all gradients to rank 0, which takes
   their elementwise mean, then ``scatter``s the mean back to every rank;
3. optimizer step.
Rank 0's link carries (p-1)·n bytes in each phase and its CPU does all the averaging, so the
sync time grows linearly with p: the bottleneck the seed reports saw beyond 3 nodes.
"""
from __future__ import annotations

from commsim import closed_form as cf
from commsim.errors import UserError
from commsim.sim import fast
from commsim.sim.collectives import GATHER_SCATTER
from commsim.strategies.base import (Strategy, Timing, accumulation_s, forward_backward,
                                     register)


@register
class ParameterServer(Strategy):
    name = "ps"
    summary = "per-parameter gather to rank 0, mean, scatter"
    label = "gather/scatter (ps)"
    color = "#d62728"
    algorithms = ("linear", "binomial")
    live = True

    def bus_factor(self, p):
        return cf.ps_bus_factor(p)

    def check(self, spec):
        super().check(spec)
        if spec.group_size is not None or spec.compression is not None:
            raise UserError("ps averages through rank 0 over all ranks: --group-size and "
                            "--compress apply to ring and ddp")

    def rank_process(self, ctx, rank):
        yield from forward_backward(ctx, rank)
        sync = GATHER_SCATTER[self.algorithm(ctx.spec)]
        for i, nbytes in enumerate(ctx.costs.param_bytes):
            yield from sync(ctx, rank, nbytes, name=f"gather+scatter p{i}")
        yield from ctx.compute(rank, "optimizer", ctx.costs.optimizer_s)
        ctx.finish(rank)

    def fast(self, spec, costs, reach):
        # (its replay's reach is checked up front: ``fast.unsupported``)
        return fast.parameter_server(spec, costs)

    def live_sync(self, model, comm):
        """Parameter server through rank 0, per parameter (the seed report's listing 3); each
        parameter's gather, mean and scatter is one ``comm.span`` (timed when tracing)."""
        import torch
        import torch.distributed as dist

        for i, param in enumerate(model.parameters()):
            grad = param.grad.data
            # One span per parameter, named as the simulator names its collective.
            with comm.span(f"gather+scatter p{i}", grad.numel() * grad.element_size()):
                if comm.rank == 0:
                    gradients = [torch.zeros_like(grad) for _ in range(comm.size)]
                    dist.gather(grad, gradients, dst=0)
                    mean = torch.mean(torch.stack(gradients), dim=0)
                    dist.scatter(grad, [mean for _ in range(comm.size)], src=0)
                else:
                    dist.gather(grad, dst=0)
                    dist.scatter(grad, src=0)

    def analytic(self, spec, costs):
        p = spec.world_size
        if self.algorithm(spec) == "binomial":
            raise UserError("--engine analytic: binomial gather/scatter puts uneven bytes on "
                            "ranks; use --engine des")
        a = costs.alpha_s
        comm = sum(cf.linear_gather_s(n, p, a, costs.beta("gather"), costs.overhead("gather"))
                   + cf.mean_on_root_s(n, p, costs.mean_s_per_B)
                   + cf.linear_scatter_s(n, p, a, costs.beta("scatter"), costs.overhead("scatter"))
                   for n in costs.param_bytes)
        compute = (accumulation_s(spec, costs) + costs.forward_s + costs.backward_s
                   + costs.optimizer_s)
        iteration = compute + comm
        model = costs.model_bytes if p > 1 else 0
        root_bytes = (p - 1) * model
        # Every rank is busy until the root's last scatter message lands: the same wall time.
        sent = (root_bytes,) + (model,) * (p - 1)
        received = sent
        return Timing(finish_s=(iteration,) * p, compute_s=(compute,) * p, comm_s=(comm,) * p,
                      sent_bytes=sent, received_bytes=received,
                      nic_tx_bytes=sent, nic_rx_bytes=received)
