"""Cost inputs: everything the cost model needs, resolved once from a profile and a run spec.

Both engines (the discrete-event simulator and the closed forms) read the same ``CostInputs``,
so they can only differ in how they combine the numbers, never in the numbers themselves.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from commsim.buckets import Bucket, assign_buckets
from commsim.profile import Profile
from commsim.spec import RunSpec


@dataclass(frozen=True)
class CostInputs:
    alpha_s: float                      # one-way message latency between hosts
    beta_s_per_B: float                 # seconds per byte on a (homogeneous) link
    gamma_s_per_B: float                # CPU seconds per byte reduced
    mean_s_per_B: float                 # parameter server: root CPU seconds per byte gathered
    overhead_s: dict                    # collective name -> fixed cost of one call
    forward_s: float                    # per rank at its batch size, alone: loading + forward
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
    contention: tuple = ()              # ((load, bandwidth_Bps, compute_speed), ...), see below

    def wire(self, collective: str) -> float:
        """How much longer a byte of ``collective`` holds a NIC than a plain message's byte:
        the link bandwidth over the bandwidth the collective's calibration fit reached."""
        return (self.wire_factor or {}).get(collective, 1.0)

    def beta(self, collective: str) -> float:
        return self.beta_s_per_B * self.wire(collective)

    def contended_Bps(self, load: float) -> float:
        """The most bytes per second a rank's transfers reach while its CPU runs ``load``
        compute threads per core (inf when nothing limits them beyond the link)."""
        memo = self._memo[0]
        bandwidth = memo.get(load)
        if bandwidth is None:
            bandwidth = memo[load] = contended_bandwidth_Bps(self._contention_bandwidth, load)
        return bandwidth

    def compute_speed(self, load: float) -> float:
        """The fraction of its speed compute keeps while a collective runs on the same cores at
        ``load`` (1 without contention data)."""
        memo = self._memo[1]
        speed = memo.get(load)
        if speed is None:
            speed = memo[load] = clamped_piecewise(self._contention_speed, load)
        return speed

    # Split once, and each load's answer kept: the simulators ask for these on every message
    # and every CPU rate change, most often at a few loads.
    @functools.cached_property
    def _memo(self) -> tuple:
        return {}, {}

    @functools.cached_property
    def _contention_bandwidth(self) -> tuple:
        return tuple((x, bw) for x, bw, _ in self.contention)

    @functools.cached_property
    def _contention_speed(self) -> tuple:
        return tuple((x, sp) for x, _, sp in self.contention)

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
    # Ranks running another count of compute threads than calibrated (an emulated cluster of
    # more nodes on the same cores gives each fewer) keep the compute's thread-seconds: alone,
    # t threads take calibrated / t times as long (near enough over a few cores: docs/model.md),
    # and the pool then shares t threads a rank.
    threads = c.threads_per_rank or comp.threads_per_rank
    scale = spec.compute_scale * comp.threads_per_rank / threads
    overheads = {name: fit.overhead_s for name, fit in profile.collectives.items()}
    return CostInputs(
        alpha_s=c.nic_latency_s,
        beta_s_per_B=1.0 / c.nic_bandwidth_Bps,
        gamma_s_per_B=gamma,
        # The gather fit's reduction cost is the root's mean (calibrate measures it); older
        # profiles carry γ there.
        mean_s_per_B=profile.collective("gather").reduction_s_per_B or gamma,
        overhead_s=overheads,
        # Loading the batch runs on the rank's thread right before forward: part of it here,
        # so every engine and closed form counts it the same way.  The compute what-if scales
        # the work itself, as a straggler factor on every rank would.
        forward_s=(comp.time_s("data", batch) + comp.time_s("forward", batch)) * scale,
        backward_s=comp.time_s("backward", batch) * scale,
        optimizer_s=comp.time_s("optimizer", batch) * scale,
        threads_per_rank=threads,
        param_bytes=tuple(p.bytes for p in profile.params),
        grad_ready_fraction=profile.grad_ready_fraction,
        buckets=assign_buckets(profile.params, profile.grad_ready_fraction,
                               spec.bucket_bytes, spec.first_bucket_cap),
        buffer_bytes=profile.buffer_bytes,
        wire_factor=wire_factors(profile, c.nic_bandwidth_Bps),
        input_shape=tuple(profile.input_shape),
        output_width=profile.params[-1].numel,   # the classifier's bias: one per class
        contention=contention_points(profile.network,
                                     contention_link_scale(profile, c.nic_bandwidth_Bps)),
    )


def contention_link_scale(profile: Profile, link_Bps: float) -> float:
    """How much faster than calibrated the contended all-reduce can go on a ``link_Bps`` link:
    what the all-reduce reaches there (the link over its ``wire_factors``, so at most the
    hosts' rate where calibration measured it) over what it reached at the calibrated link,
    and never below 1.

    Why: the contention curve is measured at the calibrated link, as bandwidths.  Where that
    link was the limit (100 Mbit/s), a loaded CPU barely showed, and taken as absolute caps
    the points held a 1 Gbit/s what-if's DDP buckets at 100 Mbit/s (+37 to +78 % over the
    measured iteration).  The points are fractions of what the all-reduce reached (``fit.
    fit_contention``): on a faster link they scale with what it reaches there, up to the
    hosts' rate, where CPU load is what limits.  On a slower link they stay as measured:
    the link is the limit there, and a loaded CPU that fed the faster link feeds it too."""
    calibrated = profile.network.bandwidth_Bps
    if link_Bps == calibrated or "all_reduce" not in profile.collectives:
        return 1.0
    reached = link_Bps / wire_factors(profile, link_Bps).get("all_reduce", 1.0)
    reached_calibrated = calibrated / wire_factors(profile).get("all_reduce", 1.0)
    return max(1.0, reached / reached_calibrated)


def contention_points(net, link_scale: float = 1.0) -> tuple:
    """(load, bandwidth_Bps, compute_speed) per measured contention point of a NetworkFit, its
    bandwidths times ``link_scale`` (``contention_link_scale``), plus a knee at load 1 when the
    first loaded point lies beyond it.

    Why the knee: compute loses its speed to a collective as soon as compute threads fill the
    cores (load 1), not in proportion to the load: the collective's threads, waking from
    waiting on the network, pre-empt it (calibrations at 2 ranks on 2 cores measured compute
    kept 60% at load 1 and 57% at loads 2 and 3; 4 ranks on 2 cores 70% at load 2).  A
    calibration with more co-located ranks than cores cannot run at load 1, so its curve takes
    the first loaded point's speed there.  The bandwidth at the knee stays on the line between
    the measured points (live DDP buckets at 2 ranks on 2 cores ran at 65-108 MB/s of a 117
    MB/s link while backward ran)."""
    speeds = net.contention_compute_speed or (1.0,) * len(net.contention_load)
    bandwidths = (net.contention_bandwidth_Bps if link_scale == 1.0 else
                  tuple(bw * link_scale for bw in net.contention_bandwidth_Bps))
    points = tuple(zip(net.contention_load, bandwidths, speeds))
    if len(points) >= 2 and points[0][0] == 0.0 and points[1][0] > 1.0:
        (x0, bw0, _), (x1, bw1, speed1) = points[0], points[1]
        knee = (1.0, bw0 + (bw1 - bw0) * (1.0 - x0) / (x1 - x0), speed1)
        points = (points[0], knee) + points[1:]
    return points


def contended_bandwidth_Bps(points: tuple, load: float) -> float:
    """Bandwidth cap under CPU ``load`` from measured (load, bandwidth_Bps) points: none (inf)
    at or below the first, communication-only, load, where the collectives' own fits apply;
    piecewise linear between points; flat beyond the last (never extrapolated)."""
    if not points or load <= points[0][0]:
        return math.inf
    return clamped_piecewise(points, load)


def cpu_load(cores: float, computing: float, talking: float) -> float:
    """Compute threads per core, as the contention calibration counts its load; 0 while the
    ``computing`` threads and one thread per rank inside a collective (``talking``) fit in
    the ``cores`` (nothing to contend)."""
    return 0.0 if computing + talking <= cores else computing / cores


def job_rate(cores: float, busy: float, efficiency: tuple = (), speed: float = 1.0) -> float:
    """Every job's speed on ``cores`` while ``busy`` threads run there: processor sharing
    (full speed while they fit, else cores / busy), times the measured ``efficiency`` curve at
    ``busy``, times ``speed`` (the calibrated compute speed while a rank there communicates,
    ``CostInputs.compute_speed``; 1 otherwise)."""
    share = 1.0 if busy <= cores else cores / busy
    # (no curve: 1, without the call; the fast engine asks this a few hundred thousand times)
    return share * (clamped_piecewise(efficiency, busy) if efficiency else 1.0) * speed


def clamped_piecewise(points: tuple, x: float) -> float:
    """Piecewise linear through (x, y) ``points``: 1 at or before the first x, flat after the
    last (measured curves are not extrapolated)."""
    if not points or x <= points[0][0]:
        return 1.0
    if x > points[-1][0]:                      # (the commonest at scale: many threads a core)
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def wire_factors(profile: Profile, link_Bps: float | None = None) -> dict:
    """Per collective: how much longer one of its bytes holds the link than a plain message's,
    on a link of ``link_Bps`` (None: the calibrated one).  Two sides, the larger wins:

    * the wire side, as calibrated: point-to-point link bandwidth / the collective's fitted
      bandwidth, at least 1 (Gloo could not drive the link at full rate inside it);
    * the host side, where calibration measured it (``host_bandwidth_Bps``: the rate with the
      link out of the way): link / host rate, so that a what-if link faster than the host can
      feed leaves the collective at the host's rate instead of scaling it with the link.
    At the calibrated link the host side never exceeds the fitted one: calibrated predictions
    are the same with or without it."""
    out = {}
    calibrated = profile.network.bandwidth_Bps
    link = calibrated if link_Bps is None else link_Bps
    for name, fit in profile.collectives.items():
        if name != "send_recv" and fit.bandwidth_Bps > 0:
            factor = max(1.0, calibrated / fit.bandwidth_Bps)
            if fit.host_bandwidth_Bps:
                factor = max(factor, link / max(fit.host_bandwidth_Bps, fit.bandwidth_Bps))
            out[name] = factor
    return out
