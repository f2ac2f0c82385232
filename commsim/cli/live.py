"""commsim live: real data-parallel training, measured the way predict predicts it."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o
from commsim.cli.cluster import (ClusterPrefixOpt, CollectiveTimeoutOpt, QuietOpt, VerboseOpt,
                                 quiet_torch)
from commsim.limits import TIMEOUT_S
from commsim.spec import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL

DIGITS = "digits"                                            # --data digits (calibrate.digits)
DIGITS_MODEL = "commsim.calibrate.digits:digits_cnn"

LrScalingOpt = typer.Option(None, "--lr-scaling", help="linear: lr = 0.1 x (samples one step "
                            "averages) / 256 (Goyal et al.); default: 0.1.")
WarmupOpt = typer.Option(0, "--warmup-iters", min=0, help="Ramp the lr linearly from 0.1 to "
                         "the scaled lr over this many iterations (needs --lr-scaling).")
SyntheticOpt = typer.Option("random", "--synthetic", help="Without --data: random (random "
                            "labels, timing only) or learnable (class templates plus noise: "
                            "test accuracy means something).")


def register(app: typer.Typer) -> None:
    app.command(help="Train VGG-11 (or --model) data-parallel for real and measure time per "
                     "iteration, compute vs sync, bytes per rank, loss and test accuracy.")(live)


def live(
    strategy: str = typer.Option(..., "--strategy", help="single, ps, ring or ddp."),
    nodes: int = typer.Option(1, "--nodes", min=1, max=250, help="Ranks (one per emulated node)."),
    emulate: Optional[str] = typer.Option(None, "--emulate", help="Run each rank in a node of an "
                                          "emulated cluster with links of this rate (1gbit, "
                                          "100mbit); needs root.  The cluster is left up."),
    global_batch: Optional[int] = o.GlobalBatchOpt,
    batch_per_rank: Optional[int] = o.BatchPerRankOpt,
    iterations: int = typer.Option(20, "--iterations", min=1, max=10**6,
                                   help="Timed iterations, a multiple of --sync-every (one more "
                                        "cycle runs first, discarded)."),
    bucket_mb: float = o.BucketOpt,
    data: Optional[Path] = typer.Option(None, "--data", help="CIFAR-10 binary directory, or "
                                        "'digits': scikit-learn's real handwritten digits "
                                        "(8x8; the model defaults to a small CNN for them) "
                                        "(default: --synthetic images)."),
    synthetic: str = SyntheticOpt,
    synthetic_size: int = typer.Option(50000, "--synthetic-size", min=1, max=10**6,
                                       help="Training images of synthetic data."),
    sync_every: int = o.SyncEveryOpt,
    group_size: Optional[int] = o.GroupSizeOpt,
    compress: Optional[str] = o.CompressOpt,
    lr_scaling: Optional[str] = LrScalingOpt,
    warmup_iters: int = WarmupOpt,
    test_samples: Optional[int] = typer.Option(None, "--test-samples", min=1,
                                               help="Evaluate on the first N test images only."),
    model: str = typer.Option(DEFAULT_MODEL, "--model",
                              help="Model factory module:function."),
    no_running_stats: bool = typer.Option(False, "--no-running-stats", help="BatchNorm keeps "
                                          "no running statistics (as the seed report did)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, max=1024, help="Torch threads per "
                                          "rank (default: cores // ranks)."),
    seed: int = typer.Option(0, "--seed"),
    timeout: float = typer.Option(900.0, "--timeout", min=1, max=TIMEOUT_S.hi, help="Seconds for the whole run."),
    collective_timeout: float = CollectiveTimeoutOpt,
    cluster_prefix: str = ClusterPrefixOpt,
    verbose: bool = VerboseOpt,
    quiet: bool = QuietOpt,
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False, help="Also write the JSON "
                                       "here."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out (and --trace)."),
    trace: Optional[Path] = typer.Option(None, "--trace", dir_okay=False, help="Also write "
                                         "each rank's last timed iteration (cycle with "
                                         "--sync-every) as a Chrome trace, in commsim trace's "
                                         "schema; open it in ui.perfetto.dev."),
) -> None:
    quiet_torch(verbose)
    from commsim.calibrate import live as lv
    from commsim.errors import UserError
    from commsim.files import check_output, write_files
    from commsim.strategies import live_strategy_names

    if strategy not in live_strategy_names():
        raise UserError(f"--strategy must be one of {', '.join(live_strategy_names())}, got "
                        f"{strategy!r}")
    if global_batch is not None and batch_per_rank is not None:
        raise UserError("give --global-batch or --batch-per-rank, not both")
    if not bucket_mb > 0 or bucket_mb == float("inf"):
        raise UserError(f"--bucket-mb must be positive, got {bucket_mb}")
    data_dir, model = data_and_model(data, model)
    for path in (out, trace):
        if path is not None:
            check_output(path, force=force)
    cfg = lv.LiveConfig(strategy=strategy, global_batch=global_batch or DEFAULT_GLOBAL_BATCH,
                        batch_per_rank=batch_per_rank, iterations=iterations,
                        bucket_mb=bucket_mb, data_dir=data_dir,
                        test_samples=test_samples, model=model,
                        track_running_stats=not no_running_stats, seed=seed,
                        threads_per_rank=threads or 0, synthetic=synthetic,
                        synthetic_size=synthetic_size, sync_every=sync_every,
                        group_size=group_size, compression=compress, lr_scaling=lr_scaling,
                        warmup_iters=warmup_iters,
                        trace_cycle=None if trace is None else -1)
    result = _run(lv, cfg, nodes=nodes, emulate=emulate, timeout_s=timeout, quiet=quiet,
                  collective_timeout_s=collective_timeout, cluster_prefix=cluster_prefix)
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return
    files = {}
    if trace is not None:
        from commsim.analysis.measured import from_live, measured_json

        files[trace] = measured_json(from_live(result)).encode("utf-8")
        result = {k: v for k, v in result.items() if k != "timeline"}   # it is in the trace
    text = o.dumps(result)
    if out is not None:
        files[out] = (text + "\n").encode("utf-8")
    write_files(files, force=force)
    typer.echo(text if json_out else render(result))


def data_and_model(data: Optional[Path], model: str) -> tuple[Optional[str], str]:
    """``--data`` as live takes it (a CIFAR-10 folder or 'digits'), and the model for it: the
    digits are 8x8, so the default VGG-11 gives way to the small CNN made for them."""
    from commsim.errors import UserError

    if data is None:
        return None, model
    if str(data) == DIGITS:
        return DIGITS, DIGITS_MODEL if model == DEFAULT_MODEL else model
    if not data.is_dir():
        raise UserError(f"--data {data} is neither a directory nor '{DIGITS}'")
    return str(data), model


def _run(lv, cfg, *, nodes: int, emulate: Optional[str], timeout_s: float,
         collective_timeout_s: float, cluster_prefix: str, quiet: bool):
    """Join torchrun when RANK/WORLD_SIZE are set, else launch (locally or emulated), with rank
    0's progress on one display (plain lines with ``quiet`` or without a terminal)."""
    import os

    from commsim.errors import UserError
    from commsim.progress import Progress, Relay

    if os.environ.get("RANK") and os.environ.get("WORLD_SIZE"):
        if emulate is not None:
            raise UserError("--emulate cannot be used under torchrun (torchrun placed the ranks)")
        return lv.run_live_torchrun(cfg, collective_timeout_s=collective_timeout_s)
    cfg.validate(nodes)  # before building an emulated cluster for a run that cannot start
    lv.live_model(cfg)   # and a --model that cannot be built is one line here, not a rank's
    cluster_info = None
    if emulate is not None:
        from commsim.calibrate import cluster
        from commsim.units import parse_rate_Bps

        # ensure, not up: a bigger cluster the user has up is used as it is, not rebuilt.
        cluster_info = cluster.ensure(nodes, parse_rate_Bps(emulate), prefix=cluster_prefix)
    with Relay(Progress("live", plain=True if quiet else None)) as shown:
        return lv.run_live(cfg, nodes=nodes, emulate=cluster_info, timeout_s=timeout_s,
                           collective_timeout_s=collective_timeout_s, progress=shown)


def render(r: dict) -> str:
    """Human summary: one table row per rank plus the aggregate, then loss and notes."""
    from commsim.units import fmt_bytes, fmt_time

    def b(v):
        return "n/a" if v is None else fmt_bytes(v)

    head = (f"commsim live: {r['strategy']} on {r['nodes']} rank(s), global batch "
            f"{r['global_batch']} ({r['batch_per_rank']}/rank), {r['iterations']} timed "
            f"iterations (first discarded), {r['threads_per_rank']} thread(s)/rank")
    what_ifs = [f"sync every {r['sync_every']}" if r.get("sync_every", 1) > 1 else "",
                f"groups of {r['group_size']}" if r.get("group_size") else "",
                f"{r['compression']} compression" if r.get("compression") else ""]
    if any(what_ifs):
        head += "; " + ", ".join(w for w in what_ifs if w)
    rows = [("rank", "iteration", "mean", "spread", "compute", "comm", "exposed", "sent/it",
             "recv/it")]
    for p in r["per_rank"] + [dict(r, rank="all")]:
        rows.append((str(p["rank"]), fmt_time(p["iteration_s"]), fmt_time(p["iteration_s_mean"]),
                     fmt_time(p["iteration_s_spread"]), fmt_time(p["compute_s"]),
                     fmt_time(p["comm_s"]), fmt_time(p["exposed_comm_s"]),
                     b(p["bytes_sent_per_rank"]), b(p["bytes_received_per_rank"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [head, ""]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                        enumerate(zip(row, widths))) for row in rows]
    losses = [x for x in r["loss"] if x is not None]
    lines.append("")
    if losses:
        lines.append(f"training loss: first {losses[0]:.4f}, last {losses[-1]:.4f}")
    sched = r.get("lr_schedule")
    if sched and sched["rule"] != "constant":
        lines.append(f"learning rate: {sched['rule']} scaling, {sched['base']:g} -> "
                     f"{sched['peak']:g} (step batch {sched['update_batch']}) over "
                     f"{sched['warmup_iters']} warm-up iterations")
    if r.get("epoch_s") is not None:
        lines.append(f"epoch ({r['iterations_per_epoch']} iterations): {fmt_time(r['epoch_s'])}")
    if r.get("test_loss") is not None:
        lines.append(f"test loss {r['test_loss']:.4f}, accuracy {r['test_accuracy']:.2%}")
    for note in ("compute_note", "bytes_note"):
        if r.get(note):
            lines.append(f"note: {r[note]}")
    lines.append("'all' row: the slowest rank's time (a synchronous step waits for it), the "
                 "mean of the ranks' bytes.")
    if r.get("sync_every", 1) > 1:
        lines.append(f"per iteration: a {r['sync_every']}-iteration cycle's figure / "
                     f"{r['sync_every']}, as commsim predict reports it.")
    return "\n".join(lines)
