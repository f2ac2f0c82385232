"""``commsim calibrate``: measure compute and Gloo collectives on N ranks, fit, write a profile.

1. ``run`` validates the options, refuses to overwrite the profile without ``--force``, opens
   the samples log ``<out>.samples.jsonl`` (a header with the run's fingerprint, then one JSON
   record per measurement; ``--resume`` reuses the records of an interrupted run with the same
   fingerprint), brings the emulated cluster up if ``--emulate`` asks for it, then launches
   ``calibrate_rank`` on every rank (or runs it in-process under torchrun).
2. ``calibrate_rank`` (each rank, phases separated by monitored barriers with timeouts):
   a. compute *alone*: with co-located ranks only rank 0 measures while the others wait
      (on separate hosts all measure at once, which is the same thing);
   b. compute *contended*: every rank measures at once (co-located ranks share the cores);
      b2. and again with co-runners beside the ranks, up to ``OVERSUBSCRIBE`` x the cores
      (``corunner``), where the ranks alone do not reach that;
   c. the local reduction cost (``a.add_(b)``, one thread) on rank 0;
   d. every collective over the size sweep (``collectives.sweep``).
   Rank 0 appends each record to the samples log as soon as it has it, and prints progress.
3. ``profile_from_records`` fits (``fit``: collectives, and compute as a smooth function of the
   batch size where the sweep follows one, ``fit.fit_compute``) and assembles the schema-v1
   ``Profile`` with the raw samples and the metadata; it is also how a samples log is re-fitted
   offline (``refit_profile``).
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

from commsim.calibrate import collectives as C
from commsim.calibrate import compute as K
from commsim.calibrate import corunner
from commsim.calibrate import fit as F
from commsim.calibrate.launch import (DEFAULT_COLLECTIVE_TIMEOUT_S, cpu_cores, default_threads,
                                      from_env, launch, run_from_env)
from commsim.calibrate.launch.heartbeat import Beat, heartbeat
from commsim.calibrate.launch.settings import runtime_info
from commsim.calibrate.models import VGG11_FACTORY, buffer_specs, build_model, param_specs
from commsim.errors import RunFailed, UserError
from commsim.files import atomic_write_text, check_output, parse_json, read_text
from commsim.profile import SCHEMA_VERSION, ComputeTable, Profile, save

DEFAULT_BATCH_SIZES = (16, 32, 64, 128, 256, 512)
QUICK_BATCH_SIZES = (4, 8)
DEFAULT_SIZES = C.log_sizes(4, 64 << 20, 4)
QUICK_SIZES = C.log_sizes(4, 256 << 10, 16)
# The seeds' per-rank batch (256 over 4 nodes): where the gradient-ready shape is taken.
GRAD_READY_BATCH = 64
# Repetitions per rank of the contended compute (every rank at once; pooled over ranks).  3, not
# 2: at 4 ranks on 2 cores two repetitions left batch 64 ~15% off the curve through 16 and 256.
CONTENDED_REPS = 3
# Co-runners load each host to this many times its cores (phase b2): what 4 ranks on 2 cores cost
# is then measured by a 2-rank calibration.  None when a rank would need more than MAX_CORUNNERS
# of them (a host with many cores per rank: it is not going to be oversubscribed).
OVERSUBSCRIBE = 2.0
MAX_CORUNNERS = 2
SAMPLES_SUFFIX = ".samples.jsonl"
WORKER = "commsim.calibrate.runner:calibrate_rank"


# Options whose value is a path on the machine that ran the command.
PATH_OPTIONS = ("--out", "--data", "--profile", "--network")


def public_command(argv: list[str]) -> str:
    """The command as the profile's metadata records it: every path reduced to its file name,
    so a profile says how it was made without naming a machine's folders."""
    out, after_path = [], False
    for arg in argv:
        name, eq, value = arg.partition("=")
        if after_path:
            arg = Path(arg).name
        elif eq and name in PATH_OPTIONS:
            arg = f"{name}={Path(value).name}"
        after_path = arg in PATH_OPTIONS
        out.append(arg)
    return shlex.join(out)


@dataclass(frozen=True)
class CalibrateOptions:
    """Everything ``commsim calibrate`` was asked to do."""
    out: Path
    nodes: int = 2
    emulate_Bps: float | None = None
    quick: bool = False
    force: bool = False
    resume: bool = False
    model: str = VGG11_FACTORY
    input_shape: tuple[int, ...] = (3, 32, 32)
    batch_sizes: tuple[int, ...] | None = None
    sizes_bytes: tuple[int, ...] | None = None
    timeout_s: float = 900.0
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S
    threads_per_rank: int | None = None
    # Co-runners load each host to this many times its cores (phase b2); None: OVERSUBSCRIBE,
    # or 0 (off) with --quick.
    oversubscribe: float | None = None
    # Which emulated cluster --emulate uses (tests use their own, never a user's "csim").
    cluster_prefix: str = "csim"
    # Timed repetitions of every batch size alone; None: ``ComputeSpec``'s rule (3, 2 past 2 s
    # an iteration, more for fast sizes), or 2 with --quick.
    compute_reps: int | None = None
    command: str = field(default_factory=lambda: public_command(["commsim", *sys.argv[1:]]))

    @property
    def batches(self) -> tuple[int, ...]:
        return self.batch_sizes or (QUICK_BATCH_SIZES if self.quick else DEFAULT_BATCH_SIZES)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.sizes_bytes or (QUICK_SIZES if self.quick else DEFAULT_SIZES)

    @property
    def compute(self) -> dict:
        """``ComputeSpec`` fields that differ from its defaults."""
        n = self.compute_reps
        if n:
            # Every size at least n times, slow ones included; fast ones still fill
            # ``min_measure_s`` (up to ``max_reps``, raised to n if below).
            return {"reps": n, "min_reps": n, "max_reps": max(K.ComputeSpec.max_reps, n)}
        return {"reps": 2} if self.quick else {}


def samples_path(out: Path) -> Path:
    return out.with_name(out.name + SAMPLES_SUFFIX)


# ---------------------------------------------------------------------------------------------
# The samples log
# ---------------------------------------------------------------------------------------------

class SampleLog:
    """Append-only JSON lines, flushed and fsynced per record so a killed run keeps them."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _fingerprint(opts: CalibrateOptions, world_size: int) -> dict:
    return {"nodes": world_size, "emulated_rate_Bps": opts.emulate_Bps, "model": opts.model,
            "input_shape": list(opts.input_shape), "batch_sizes": list(opts.batches),
            "sizes_bytes": list(opts.sizes), "quick": opts.quick,
            "oversubscribe": opts.oversubscribe,
            # Only when set: logs taken before the option existed still resume.
            **({"compute_reps": opts.compute_reps} if opts.compute_reps else {})}


def open_samples(opts: CalibrateOptions, world_size: int) -> list[dict]:
    """Start the samples log (or, with --resume, read its records); the records to reuse."""
    path = samples_path(opts.out)
    fingerprint = _fingerprint(opts, world_size)
    if opts.resume and path.exists():
        text = read_text(path, "samples log", max_bytes=1024**3)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(parse_json(line, f"{path} line {i + 1}"))
            except UserError:
                if i < len(lines) - 1:
                    raise
                # A run killed mid-write leaves a partial last line: drop it, keep the rest.
        if not rows or rows[0].get("kind") != "header":
            raise UserError(f"{path} is not a commsim samples log (no header line)")
        if rows[0].get("fingerprint") != fingerprint:
            raise UserError(f"{path} was taken with different settings "
                            f"({rows[0].get('fingerprint')}); rerun with the same options or "
                            f"--force to start over")
        return rows[1:]
    if path.exists() and not opts.force:
        raise UserError(f"{path} exists (samples of an earlier run): pass --resume to continue "
                        f"it or --force to start over")
    atomic_write_text(path, json.dumps({"kind": "header", "fingerprint": fingerprint,
                                        "command": opts.command}) + "\n", force=True)
    return []


def _key(record: dict) -> tuple:
    kind = record["kind"]
    if kind == "compute":
        # The alone sweep saves a record per (size, round): resume skips those rounds.
        rnd = (record["round"],) if "round" in record else ()
        return (kind, record["mode"], record["batch_size"], *rnd)
    if kind == "collective":
        return (kind, record["op"], record["bytes"])
    if kind == "contention":
        return (kind, record["burn_threads"])
    return (kind,)


# ---------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------

class _Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.monotonic()

    def __call__(self, text: str) -> None:
        if self.enabled:
            print(f"[calibrate {time.monotonic() - self.start:6.1f}s] {text}", file=sys.stderr,
                  flush=True)


def calibrate_rank(rank: int, world_size: int, config: dict) -> dict:
    """The launched worker (see the module docstring, step 2); rank 0 returns all records."""
    import torch.distributed as dist

    log = SampleLog(config["samples_path"]) if rank == 0 else None
    say = _Progress(rank == 0)
    holder = [config.get("done", []) if rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    done = {tuple(json.loads(json.dumps(_key(r)))): r for r in holder[0]}
    records: list[dict] = list(holder[0]) if rank == 0 else []

    def keep(record: dict) -> None:
        if rank == 0:
            log.append(record)
            records.append(record)

    hosts: list[Any] = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    colocated = hosts.count(hosts[rank])
    # Waiting for rank 0's solo phases can take minutes, longer than any collective timeout:
    # the ranks heartbeat on their own group meanwhile, so a dead link is still found quickly.
    beat_s = float(config["collective_timeout_s"])
    beat_group = dist.new_group(timeout=timedelta(seconds=beat_s))
    bench = K.ComputeBench(lambda: build_model(config["model"]), tuple(config["input_shape"]))
    spec = K.ComputeSpec(model=config["model"], input_shape=tuple(config["input_shape"]),
                         batch_sizes=tuple(config["batch_sizes"]), **config.get("compute", {}))

    # a. alone, the sizes in interleaved rounds (``compute.interleaved``)
    with heartbeat(beat_group, beat_s):
        swept = {k[2] for k in done if k[:2] == ("compute", "alone") and len(k) == 3}
        todo = [b for b in spec.batch_sizes if b not in swept]
        measuring = bool(todo) and (rank == 0 or colocated == 1)
        rounds_done = frozenset(k[2:] for k in done if k[:2] == ("compute", "alone")
                                and len(k) == 4)
        for rec in K.interleaved(bench, spec, todo, done=rounds_done) if measuring else ():
            keep({"kind": "compute", "mode": "alone", "threads": _threads(), **rec})
            total = rec["forward_s"][0] + rec["backward_s"][0] + rec["optimizer_s"][0]
            say(f"compute alone   batch {rec['batch_size']:4d} (round {rec['round'] + 1}, "
                f"{rec['of']} for this size): {total:.3f} s")
        for b in todo if measuring and tuple(config["input_shape"]) == K.CIFAR_SHAPE else ():
            if ("compute", "data", b) not in done:
                keep({"kind": "compute", "mode": "data", "batch_size": b,
                      "data_s": K.measure_data(b, reps=3)})

    contended_reps = int(config.get("contended_reps", CONTENDED_REPS))

    def all_ranks(b: int, mode: str, **fields) -> dict:
        """Every rank times batch ``b`` at once (``measure_together``); the record pools their
        repetitions and keeps each rank's (the table takes the slowest rank's: see
        ``slowest_rank``)."""
        dist.barrier()
        # A slower rank may take longer than a collective's timeout: heartbeat meanwhile.
        with heartbeat(beat_group, beat_s) as beat:
            rec = measure_together(bench, b, contended_reps, beat)
        per_rank: list[Any] = [None] * world_size
        dist.all_gather_object(per_rank, rec)
        merged = {f"{ph}_s": [x for r in per_rank for x in r[f"{ph}_s"]] for ph in K.PHASES}
        keep({"kind": "compute", "mode": mode, "batch_size": b, **fields,
              "threads": _threads(), **merged,
              "per_rank": {f"{ph}_s": [r[f"{ph}_s"] for r in per_rank] for ph in K.PHASES}})
        return merged

    # b. contended: all co-located ranks at once
    if colocated > 1:
        # Every other batch size: contention scales the times by a near-constant factor, and
        # this phase is the slowest of a run on shared cores.
        for i, b in enumerate(spec.batch_sizes[::2]):
            if ("compute", "contended", b) in done:
                continue
            merged = all_ranks(b, "contended", ranks=colocated)
            say(f"compute {colocated} ranks batch {b:4d} ({i + 1}/{len(spec.batch_sizes[::2])}): "
                f"fwd {_med(merged['forward_s'])} bwd {_med(merged['backward_s'])}")

    # b2. oversubscribed: co-runners beside every rank (see ``corunner``)
    helpers = corunner.helpers_per_rank(hosts[:rank].count(hosts[rank]), colocated, cpu_cores(),
                                        _threads(), float(config.get("oversubscribe",
                                                                     OVERSUBSCRIBE)),
                                        MAX_CORUNNERS)
    plan: list[Any] = [None] * world_size
    dist.all_gather_object(plan, helpers)
    busy = sum(1 + n for n, h in zip(plan, hosts) if h == hosts[0]) * _threads()
    todo = [b for b in spec.batch_sizes[::2] if ("compute", "oversubscribed", b) not in done]
    runners: list[corunner.CoRunner] = []
    try:
        for i, b in enumerate(todo if any(plan) else ()):
            with heartbeat(beat_group, beat_s):
                if not runners:
                    runners = [corunner.CoRunner(config["model"], tuple(config["input_shape"]),
                                                 _threads()) for _ in range(helpers)]
                for r in runners:
                    r.set_batch(b)
            merged = all_ranks(b, "oversubscribed", ranks=colocated, busy_threads=busy)
            say(f"compute {busy} busy threads batch {b:4d} ({i + 1}/{len(todo)}): "
                f"fwd {_med(merged['forward_s'])} bwd {_med(merged['backward_s'])}")
    finally:
        for r in runners:
            r.close()
    bench = None  # the model and its activations: freed before the collectives

    # c. local reduction cost
    with heartbeat(beat_group, beat_s):
        if rank == 0 and ("reduction",) not in done:
            keep({"kind": "reduction", **K.measure_reduction(world=world_size)})

    # d. collectives
    cspec = C.CollectiveSpec(sizes_bytes=tuple(config["sizes_bytes"]),
                             **config.get("collectives", {}))
    for op in C.OPS:
        if op == "send_recv" and world_size < 2:
            continue
        prior = {k[2]: v for k, v in done.items() if k[:2] == ("collective", op)}

        def on_record(rec: dict, op=op) -> None:
            keep({"kind": "collective", **rec})
            say(f"{op:10s} {rec['bytes']:>9d} B: {_med(rec['times_s'])} x{rec['inner']} "
                f"#wrong {rec['wrong']}")
        C.sweep(op, cspec, done={n: {k: v for k, v in r.items() if k != "kind"}
                                 for n, r in prior.items()}, on_record=on_record)
        dist.monitored_barrier(timeout=timedelta(seconds=float(config["collective_timeout_s"])),
                               wait_all_ranks=True)

    # e. contention: a large all_reduce while every rank also computes (DDP's overlap)
    if world_size > 1:
        nbytes = min(C.CONTENTION_BYTES, max(cspec.sizes_bytes))
        for k in C.CONTENTION_BURNS:
            if ("contention", k) in done:
                continue
            rec = C.measure_contention(nbytes, k, cspec)
            keep({"kind": "contention", "ranks_per_cpu": colocated, "cores": cpu_cores(),
                  "threads": _threads(), **rec})
            say(f"contention {k} compute threads per rank: all_reduce {nbytes} B "
                f"{_med(rec['times_s'])}, compute kept "
                f"{rec['burn_rate_during'] / max(rec['burn_rate_alone'], 1e-9):.0%}"
                if k else f"contention alone: all_reduce {nbytes} B {_med(rec['times_s'])}")
    if rank != 0:
        return {"rank": rank}
    return {"rank": 0, "records": records, "ranks_per_host": colocated, "hosts": hosts,
            "runtime": runtime_info()}


def measure_together(bench: K.ComputeBench, batch_size: int, reps: int, beat: Beat) -> dict:
    """Time ``reps`` iterations of ``batch_size`` while every rank computes: a rank done with
    its own keeps computing, untimed, until every rank is done.  Why: ranks drift apart by
    whole iterations, and a slow rank's last repetitions then ran on cores the others had left
    (a 4-rank calibration timed batch 64 at 1.35-1.7 s in some repetitions, below twice its
    0.95 s alone on 2 cores, where live 4-rank training computed it in 2.66 s)."""
    rec = K.measure_batch(bench, batch_size, warmup=1, reps=reps)
    beat.finish()
    x, y = bench.batch(batch_size)
    while not beat.everyone_finished():
        bench.iteration(x, y)
    return rec


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _med(values: list[float]) -> str:
    from commsim.units import fmt_time

    return fmt_time(K.median_iqr(values)[0])


# ---------------------------------------------------------------------------------------------
# Records -> profile
# ---------------------------------------------------------------------------------------------

def slowest_rank(record: dict) -> dict:
    """A record of every rank timing compute at once, with the repetitions of its slowest rank
    (highest median iteration) in place of the pooled ones; unchanged without ``per_rank``.

    Why: synchronous training waits for its slowest rank every iteration, and on shared cores
    ranks are not alike (here vCPU 0, which also takes the network's interrupts, runs 2-10%
    slower: live 2-rank cells computed 1.64 vs 1.84 s, 1.58 vs 1.52 s).  The slowest rank's
    median over the pooled median was 1.00-1.33 (median 1.05) over 32 calibrations, and
    re-predicting saved fidelity runs with it lowered the main tables' median error in most of
    them (docs/calibration.md).  The slowest rank of each repetition instead (a max of single
    noisy repetitions) over-predicted 4-node compute by 15-35%."""
    per_rank = record.get("per_rank")
    if not per_rank:
        return record
    totals = [statistics.median(sum(reps) for reps in zip(*(per_rank[f"{ph}_s"][k]
                                                            for ph in K.PHASES)))
              for k in range(len(per_rank["forward_s"]))]
    k = totals.index(max(totals))
    return {**record, **{f"{ph}_s": per_rank[f"{ph}_s"][k] for ph in K.PHASES}}


def profile_from_records(records: list[dict], *, model: str, input_shape: tuple[int, ...],
                         world_size: int, metadata: dict) -> Profile:
    """Fit everything measured and build the profile (raw records kept under ``samples``)."""
    alone = K.merge_rounds([r for r in records
                            if r["kind"] == "compute" and r["mode"] in ("alone", "data")])
    contended = [r for r in records if r["kind"] == "compute" and r["mode"] == "contended"]
    oversubscribed = [r for r in records
                      if r["kind"] == "compute" and r["mode"] == "oversubscribed"]
    colls = [r for r in records if r["kind"] == "collective"]
    reduction = next((r for r in records if r["kind"] == "reduction"), None)
    contention = [r for r in records if r["kind"] == "contention"]
    if not alone:
        raise RunFailed("no compute samples were taken")
    table = K.summarize(alone)
    phases = tuple(k[:-2] for k in table if k.endswith("_s") and not k.endswith("spread_s"))
    compute_fits = {"alone": F.fit_compute(alone, phases)}
    table = F.smooth_compute(table, compute_fits["alone"])
    threads = int(alone[0].get("threads", 1))

    def loaded(mode: str, records: list[dict], *keys: str) -> dict | None:
        """The table of every rank computing at once (``mode``): the slowest rank's
        repetitions, fitted across batch sizes like the alone table; ``keys`` copied over."""
        if not records:
            return None
        slow = [slowest_rank(r) for r in records]
        compute_fits[mode] = F.fit_compute(slow, K.PHASES)
        t = F.smooth_compute(K.summarize(slow), compute_fits[mode])
        return {**{k: records[0][k] for k in keys}, "batch_sizes": t["batch_sizes"],
                **{f"{ph}_s": t[f"{ph}_s"] for ph in K.PHASES}}

    compute = ComputeTable(threads_per_rank=threads, batch_sizes=tuple(table["batch_sizes"]),
                           **{k: tuple(v) for k, v in table.items() if k != "batch_sizes"},
                           contended=loaded("contended", contended, "ranks"),
                           oversubscribed=loaded("oversubscribed", oversubscribed, "ranks",
                                                 "busy_threads"))
    ready = min(alone, key=lambda r: (abs(r["batch_size"] - GRAD_READY_BATCH), r["batch_size"]))
    by_op = {op: [r for r in colls if r["op"] == op] for op in C.OPS}
    if len({r["bytes"] for r in by_op["send_recv"]}) < 2:
        raise RunFailed("send/recv was measured at fewer than 2 sizes: cannot fit the link")
    try:
        network, fits = F.fit_network(by_op["send_recv"])
        gamma, gamma_ci = (F.fit_reduction(reduction["sizes_bytes"], reduction["times_s"])
                           if reduction else (0.0, [0.0, 0.0]))
        collectives = {"send_recv": fits}
        for op in ("all_reduce", "gather", "scatter", "broadcast", "barrier"):
            if by_op[op]:
                collectives[op] = F.fit_collective(op, by_op[op], world_size=world_size,
                                                   network=network, reduction_s_per_B=gamma)
        if "all_reduce" in collectives:
            network = F.with_contention(network, contention,
                                        collectives["all_reduce"].bandwidth_Bps)
        if "gather" in collectives and reduction and "mean_times_s" in reduction:
            # The root's reduction after a gather is the parameter server's mean: per byte
            # gathered (world x size), not Gloo's in-place add.
            mean, _ = F.fit_reduction([n * reduction["world"] for n in reduction["sizes_bytes"]],
                                      reduction["mean_times_s"])
            collectives["gather"] = replace(collectives["gather"], reduction_s_per_B=mean)
    except ValueError as exc:
        raise RunFailed(f"fitting failed: {exc}") from None
    built = build_model(model)
    params, buffers = param_specs(built), buffer_specs(built)
    samples = {"compute": alone, "compute_contended": contended,
               "compute_oversubscribed": oversubscribed, "compute_fit": compute_fits,
               "collectives": colls,
               "contention": contention,
               "reduction": reduction, "reduction_s_per_B_ci95": gamma_ci,
               "nccl_table": F.nccl_table(colls)}
    return Profile(schema_version=SCHEMA_VERSION, metadata=metadata, model_name=model,
                   input_shape=tuple(input_shape), params=params, compute=compute,
                   grad_ready_fraction=tuple(ready["grad_ready"]),
                   grad_ready_batch_size=ready["batch_size"], network=network,
                   collectives=collectives, samples=samples, buffers=buffers)


def refit_profile(profile: Profile) -> Profile:
    """``profile`` fitted again from its own raw samples by this version's fits (the metadata is
    kept): how a change to the fits is checked against measurements already taken."""
    s = profile.samples
    records = [*s.get("compute", []), *s.get("compute_contended", []),
               *s.get("compute_oversubscribed", []), *s.get("collectives", []), *s.get("contention", [])]
    if s.get("reduction"):
        records.append(s["reduction"])
    return profile_from_records(records, model=profile.model_name,
                                input_shape=profile.input_shape,
                                world_size=int(profile.metadata["nodes"]),
                                metadata=dict(profile.metadata))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def _validate(opts: CalibrateOptions) -> None:
    if opts.nodes < 2:
        raise UserError(f"--nodes must be >= 2 (collectives need two ranks), got {opts.nodes}")
    if any(b < 1 for b in opts.batches) or list(opts.batches) != sorted(set(opts.batches)):
        raise UserError(f"--batch-sizes must be increasing positive integers, got "
                        f"{','.join(map(str, opts.batches))}")
    if len(opts.input_shape) < 1 or any(d < 1 for d in opts.input_shape):
        raise UserError(f"--input-shape must be positive integers, got {opts.input_shape}")
    if opts.timeout_s <= 0:
        raise UserError(f"--timeout must be > 0, got {opts.timeout_s}")
    if opts.compute_reps is not None and opts.compute_reps < 1:
        raise UserError(f"--compute-reps must be >= 1, got {opts.compute_reps}")
    build_model(opts.model)  # fail fast (one line) on a bad --model, before any rank starts


def run(opts: CalibrateOptions, progress: IO[str] | None = None) -> Profile | None:
    """Calibrate and write the profile; returns it (None on torchrun ranks other than 0)."""
    env = from_env()
    if env is not None and opts.emulate_Bps is not None:
        raise UserError("--emulate cannot be used under torchrun (the job already has its ranks)")
    world = env.world_size if env is not None else opts.nodes
    is_writer = env is None or env.rank == 0
    if env is not None and env.world_size < 2:
        raise UserError("calibrate needs WORLD_SIZE >= 2 under torchrun")
    _validate(opts if env is None else _with_nodes(opts, world))
    if is_writer:  # before minutes of measuring: is the profile (and its log) writable?
        check_output(opts.out, force=opts.force)
    done = open_samples(opts, world) if is_writer else []
    info = None
    if opts.emulate_Bps is not None:
        from commsim.calibrate import cluster

        if progress is not None and cluster.status(opts.cluster_prefix) is None:
            print(f"[calibrate] bringing up an emulated cluster of {opts.nodes} nodes",
                  file=progress, flush=True)
        info = cluster.ensure(opts.nodes, opts.emulate_Bps, prefix=opts.cluster_prefix)
    ranks_per_host = env.local_world_size if env is not None else opts.nodes
    threads = opts.threads_per_rank or default_threads(ranks_per_host)
    config = {"model": opts.model, "input_shape": list(opts.input_shape),
              "batch_sizes": list(opts.batches), "sizes_bytes": list(opts.sizes),
              "samples_path": str(samples_path(opts.out).resolve()), "done": done,
              "collective_timeout_s": opts.collective_timeout_s,
              "compute": opts.compute,
              "oversubscribe": (opts.oversubscribe if opts.oversubscribe is not None
                                else 0.0 if opts.quick else OVERSUBSCRIBE),
              "collectives": {"reps": 3, "slow_reps": 2} if opts.quick else {}}
    work = opts.out.parent / f".{opts.out.name}.ranks"
    if env is not None:
        results = [run_from_env(WORKER, config, env, collective_timeout_s=opts.collective_timeout_s,
                                threads_per_rank=threads)]
        if env.rank != 0:
            return None
    else:
        results = launch(WORKER, config, nodes=opts.nodes, emulate=info, timeout_s=opts.timeout_s,
                         out_dir=work, threads_per_rank=threads,
                         collective_timeout_s=opts.collective_timeout_s, progress=progress)
    head = results[0]
    runtime = head["runtime"]
    metadata = {
        "source": "commsim calibrate", "command": opts.command,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": runtime["host"], "cpu": cpu_model(), "cores": cpu_cores(),
        "nodes": world, "ranks_per_host": head["ranks_per_host"],
        "threads_per_rank": runtime["torch_threads"],
        "omp_num_threads": runtime["omp_num_threads"],
        "torch_version": _torch_version(), "backend": "gloo",
        "interface": runtime["interface"] or "default",
        "emulated_rate_Bps": opts.emulate_Bps, "quick": opts.quick,
        "launch": "torchrun" if env is not None else ("emulated" if info else "local"),
    }
    if info is not None:
        metadata["shared_cpu_cores"] = cpu_cores()
        metadata["emulated_cluster"] = {"qdisc": info.qdisc, "burst_bytes": info.burst_bytes,
                                        "limit_bytes": info.limit_bytes,
                                        "gso_max_bytes": info.gso_max_bytes,
                                        "tcp_congestion": info.tcp_congestion,
                                        "addresses": list(info.addresses[:world])}
    elif env is None:
        metadata["shared_cpu_cores"] = cpu_cores()
    profile = profile_from_records(head["records"], model=opts.model,
                                   input_shape=opts.input_shape, world_size=world,
                                   metadata=metadata)
    save(profile, opts.out, force=opts.force)
    return profile


def _with_nodes(opts: CalibrateOptions, nodes: int) -> CalibrateOptions:
    from dataclasses import replace

    return replace(opts, nodes=nodes)


def _torch_version() -> str:
    import torch

    return torch.__version__
