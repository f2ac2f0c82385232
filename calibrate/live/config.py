"""What one live run is asked to do (``LiveConfig``), and which requests are impossible.

The config travels to the ranks as a plain dict (``to_dict``/``from_dict``), so a rank started
by the launcher, by torchrun or in-process (tests) trains from exactly the same fields.
``validate`` refuses, naming the option, what cannot run; ``check_what_ifs`` refuses what
``commsim predict`` would refuse, so that a live run only ever measures what can be predicted.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from commsim.calibrate.cifar import SYNTHETIC_KINDS
from commsim.calibrate.live.schedule import LR_SCALINGS
from commsim.errors import UserError
from commsim.spec import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL
from commsim.strategies import get_strategy, live_strategy_names


@dataclass(frozen=True)
class LiveConfig:
    """Everything one live run needs; travels to the ranks as a plain dict (``to_dict``).

    ``global_batch`` is split evenly over the ranks (floored; the batch actually used is
    reported) unless ``batch_per_rank`` is given.  ``threads_per_rank`` 0 keeps the launcher's
    ``max(1, cores // ranks per host)``.  ``gather`` makes rank 0 collect every rank's result
    (torchrun, where no parent process reads them).  ``exit_rank``/``exit_iteration`` inject a crash
    (``os._exit(3)`` on that rank at that step) so tests can prove a dead rank fails the run;
    ``return_params`` adds the final parameters to each rank's result (small models only);
    ``augment`` False turns off the crop/flip augmentation (equality tests need it off).
    ``sync_every``, ``group_size`` and ``compression`` are the simulator's what-ifs
    (``commsim.spec.RunSpec``), refused where the simulator refuses them; ``lr_scaling``
    "linear" with ``warmup_iters`` is the large-batch schedule (``LrSchedule``); ``synthetic``
    is "random" (timing) or "learnable" (accuracy) when there is no ``data_dir``.
    ``trace_cycle``: record this timed cycle's timeline on every rank (``timing``; 0 is the
    first timed cycle, -1 the last; None records nothing), for ``commsim live --trace``.
    """
    strategy: str = "ring"
    global_batch: int = DEFAULT_GLOBAL_BATCH
    batch_per_rank: int | None = None
    iterations: int = 20
    bucket_mb: float = 25.0
    data_dir: str | None = None
    synthetic_size: int = 50000
    test_samples: int | None = None
    model: str = DEFAULT_MODEL
    track_running_stats: bool = True
    seed: int = 0
    threads_per_rank: int = 0
    emulated: bool = False
    # DDP's compute is timed on a communication-free copy: the median of 5 cycles, not 3 (two
    # ranks' 3-cycle probes of the same run differed by 15%: 2.16 vs 1.85 s at batch 128).
    compute_probe_iterations: int = 5
    exit_rank: int | None = None
    exit_iteration: int | None = None
    return_params: bool = False
    augment: bool = True
    gather: bool = False
    sync_every: int = 1
    group_size: int | None = None
    compression: str | None = None
    lr_scaling: str | None = None
    warmup_iters: int = 0
    synthetic: str = "random"
    trace_cycle: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LiveConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"live config: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def validate(self, world_size: int) -> None:
        """Raise UserError naming the argument that makes this run impossible."""
        if self.strategy not in live_strategy_names():
            raise UserError(f"--strategy: {self.strategy!r} is not one of "
                            f"{', '.join(live_strategy_names())}")
        if world_size < 1:
            raise UserError(f"--nodes: must be >= 1, got {world_size}")
        if self.strategy == "single" and world_size != 1:
            raise UserError(f"--nodes: strategy 'single' runs on one rank, got {world_size}")
        if self.iterations < 1:
            raise UserError(f"--iterations: must be >= 1, got {self.iterations}")
        if self.bucket_mb <= 0:
            raise UserError(f"--bucket-mb: must be > 0, got {self.bucket_mb}")
        if self.batch_per_rank is not None and self.batch_per_rank < 1:
            raise UserError(f"--batch-per-rank: must be >= 1, got {self.batch_per_rank}")
        if self.batch_per_rank is None and self.global_batch < world_size:
            raise UserError(f"--global-batch: {self.global_batch} is smaller than the "
                            f"{world_size} ranks it is split over")
        steps_needed = self.rank_batch(world_size) * world_size
        if self.data_dir is None and self.synthetic_size < steps_needed:
            raise UserError(f"synthetic_size: {self.synthetic_size} samples cannot fill one "
                            f"global batch of {steps_needed}")
        if self.synthetic not in SYNTHETIC_KINDS:
            raise UserError(f"--synthetic: {self.synthetic!r} is not one of "
                            f"{', '.join(SYNTHETIC_KINDS)}")
        if self.lr_scaling is not None and self.lr_scaling not in LR_SCALINGS:
            raise UserError(f"--lr-scaling: {self.lr_scaling!r} is not one of "
                            f"{', '.join(LR_SCALINGS)}")
        if self.warmup_iters < 0:
            raise UserError(f"--warmup-iters: must be >= 0, got {self.warmup_iters}")
        if self.warmup_iters and self.lr_scaling is None:
            raise UserError("--warmup-iters: warm-up ramps to the scaled learning rate; add "
                            "--lr-scaling linear")
        self.check_what_ifs(world_size)
        if self.iterations % self.sync_every:
            raise UserError(f"--iterations: {self.iterations} is not a whole number of "
                            f"--sync-every {self.sync_every} cycles")
        cycles = self.iterations // self.sync_every
        if self.trace_cycle is not None and not -cycles <= self.trace_cycle < cycles:
            raise UserError(f"trace_cycle: {self.trace_cycle} is not one of the {cycles} timed "
                            f"cycles (0 to {cycles - 1}, or -1 for the last)")

    def check_what_ifs(self, world_size: int) -> None:
        """Refuse, in the simulator's words, what the simulator refuses: a live run measures
        only what ``commsim predict`` can predict (e.g. fp16 compression is DDP's comm hook, and
        ps averages over every rank through rank 0)."""
        from commsim.spec import ClusterSpec, RunSpec

        nominal = ClusterSpec(hosts=world_size, nic_bandwidth_Bps=1e9, nic_latency_s=0.0,
                              cores_per_host=1.0)  # the checks never look at the link or cores
        spec = RunSpec(strategy=self.strategy, cluster=nominal, global_batch=None,
                       batch_per_rank=self.rank_batch(world_size), sync_every=self.sync_every,
                       group_size=self.group_size, compression=self.compression)
        get_strategy(self.strategy).check(spec)

    def rank_batch(self, world_size: int) -> int:
        if self.batch_per_rank is not None:
            return self.batch_per_rank
        return max(1, self.global_batch // world_size)
