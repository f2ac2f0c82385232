"""One record for a live run from its ranks' results, in ``commsim predict --json``'s terms.

A synchronous step waits for its slowest rank, so times are the slowest rank's; bytes are the
mean over ranks, with the busiest rank beside them, as ``commsim predict`` defines them.
"""
from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commsim.calibrate.live.config import LiveConfig


RANK_METRICS = ("iteration_s", "iteration_s_mean", "iteration_s_spread", "compute_s", "comm_s",
                "exposed_comm_s", "bytes_sent_per_rank", "bytes_received_per_rank")


def aggregate(per_rank: list[dict], cfg: "LiveConfig") -> dict:
    """One record for the run; field names match ``commsim predict --json``.

    Times are the maximum over ranks (a synchronous step waits for the slowest rank); bytes per
    rank are the mean over ranks and ``bytes_*_max`` the busiest rank (rank 0 in ``ps``), as
    ``commsim predict`` defines them; ``rank_mean``/``rank_max`` give both for every metric.
    Per iteration, with ``sync_every`` k: a k-iteration cycle's figure / k.  ``epoch_s`` is
    iteration_s x ``iterations_per_epoch`` (the training set over the global batch, rounded
    up).  ``loss`` is the per-iteration mean of the ranks' local losses (equal shard sizes, so
    it is the global-batch loss); it has ``iterations + k`` entries, the first k from the
    discarded warm-up cycle.  ``timeline`` (traced runs only): every rank's recorded cycle
    (``timing.Recorder.to_dict``), by rank.
    """
    per_rank = sorted(per_rank, key=lambda r: r["rank"])
    # Traced runs: the ranks' timelines of one cycle go to one list beside the figures.
    timelines = [r["timeline"] for r in per_rank if "timeline" in r]
    per_rank = [{k: v for k, v in r.items() if k != "timeline"} for r in per_rank]
    nodes = len(per_rank)
    rank_max, rank_mean = {}, {}
    for key in RANK_METRICS:
        vals = [r[key] for r in per_rank]
        if any(v is None for v in vals):
            rank_max[key] = rank_mean[key] = None
        else:
            rank_max[key], rank_mean[key] = max(vals), statistics.fmean(vals)
    batch = per_rank[0]["batch_per_rank"]
    losses = [None if None in col else statistics.fmean(col)
              for col in zip(*(r["loss"] for r in per_rank))]
    first = per_rank[0]
    train_samples = first.get("train_samples")
    per_epoch = None if train_samples is None else math.ceil(train_samples / (batch * nodes))
    out = {"strategy": cfg.strategy, "nodes": nodes, "global_batch": batch * nodes,
           "batch_per_rank": batch, **rank_max,
           "bytes_sent_per_rank": rank_mean["bytes_sent_per_rank"],
           "bytes_received_per_rank": rank_mean["bytes_received_per_rank"],
           "bytes_sent_max": rank_max["bytes_sent_per_rank"],
           "bytes_received_max": rank_max["bytes_received_per_rank"],
           "iterations_per_epoch": per_epoch,
           "epoch_s": None if per_epoch is None else per_epoch * rank_max["iteration_s"],
           "sync_every": cfg.sync_every, "group_size": cfg.group_size,
           "compression": cfg.compression, "lr_schedule": first.get("lr_schedule"),
           "synthetic": None if cfg.data_dir else cfg.synthetic,
           "iterations": cfg.iterations, "threads_per_rank": first["threads"],
           "seed": cfg.seed,  # with the config, the run can be repeated exactly
           "loss": losses, "test_loss": first["test_loss"],
           "test_accuracy": first["test_accuracy"],
           "rank_max": rank_max, "rank_mean": rank_mean, "per_rank": per_rank}
    if cfg.batch_per_rank is None and batch * nodes != cfg.global_batch:
        out["requested_global_batch"] = cfg.global_batch
    for note in ("bytes_note", "compute_note"):
        if note in per_rank[0]:
            out[note] = per_rank[0][note]
    if timelines:
        out["timeline"] = timelines
    return out
