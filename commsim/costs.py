"""Cost inputs: everything the cost model needs, resolved once from a profile and a run spec.

Both engines (the discrete-event simulator and the closed forms) read the same ``CostInputs``,
so they can only differ in how they combine the numbers, never in the numbers themselves.
"""
from __future__ import annotations

from dataclasses import dataclass

from commsim.buckets import Bucket, assign_buckets
from commsim.profile import Profile
from commsim.spec import RunSpec


@dataclass(frozen=True)
class CostInputs:
    alpha_s: float                      # one-way message latency between hosts
    beta_s_per_B: float                 # seconds per byte on a (homogeneous) link
    gamma_s_per_B: float                # CPU seconds per byte reduced
    overhead_s: dict                    # collective name -> fixed cost of one call
    forward_s: float                    # per rank, at its batch size, measured alone
    backward_s: float
    optimizer_s: float
    threads_per_rank: int
    param_bytes: tuple[int, ...]        # registration order
    grad_ready_fraction: tuple[float, ...]
    buckets: tuple[Bucket, ...]         # DDP launch order
    buffer_bytes: int = 0               # DDP broadcasts these from rank 0 before every forward
    wire_factor: dict = None            # collective -> link time per byte vs a plain message
    input_shape: tuple = (3, 32, 32)    # one sample (dp scatters inputs)
    output_width: int = 10              # outputs per sample (dp gathers outputs)

    def wire(self, collective: str) -> float:
        """How much longer a byte of ``collective`` holds a NIC than a plain message's byte:
        the link bandwidth over the bandwidth the collective's calibration fit reached."""
        return (self.wire_factor or {}).get(collective, 1.0)

    def beta(self, collective: str) -> float:
        return self.beta_s_per_B * self.wire(collective)

    @property
    def model_bytes(self) -> int:
        return sum(self.param_bytes)

    def overhead(self, collective: str) -> float:
        return self.overhead_s.get(collective, 0.0)


def cost_inputs(spec: RunSpec, profile: Profile) -> CostInputs:
    c = spec.cluster
    batch = spec.per_rank_batch
    comp = profile.compute
    gamma = profile.collective("all_reduce").reduction_s_per_B
    overheads = {name: fit.overhead_s for name, fit in profile.collectives.items()}
    return CostInputs(
        alpha_s=c.nic_latency_s,
        beta_s_per_B=1.0 / c.nic_bandwidth_Bps,
        gamma_s_per_B=gamma,
        overhead_s=overheads,
        forward_s=comp.time_s("forward", batch),
        backward_s=comp.time_s("backward", batch),
        optimizer_s=comp.time_s("optimizer", batch),
        threads_per_rank=comp.threads_per_rank,
        param_bytes=tuple(p.bytes for p in profile.params),
        grad_ready_fraction=profile.grad_ready_fraction,
        buckets=assign_buckets(profile.params, profile.grad_ready_fraction,
                               spec.bucket_bytes, spec.first_bucket_bytes),
        buffer_bytes=profile.buffer_bytes,
        wire_factor=wire_factors(profile),
        input_shape=tuple(profile.input_shape),
        output_width=profile.params[-1].numel,   # the classifier's bias: one per class
    )


def wire_factors(profile: Profile) -> dict:
    """Per collective: point-to-point link bandwidth / the collective's fitted bandwidth, at
    least 1.  A fit slower than the link means the calibrated system could not drive the link
    at full rate inside that collective (CPU-bound Gloo threads, co-located ranks)."""
    out = {}
    link = profile.network.bandwidth_Bps
    for name, fit in profile.collectives.items():
        if name != "send_recv" and fit.bandwidth_Bps > 0:
            out[name] = max(1.0, link / fit.bandwidth_Bps)
    return out
