"""``commsim report``: every table as data, then the PDF, CSV and JSON files.

1. ``build_report`` predicts what the pages need (``Runs`` memoises each run with its timeline)
   and returns ``ReportData``: the title page's sections and every table as rows.
2. ``render_report_pdf`` turns it into PDF bytes (``plots`` + ``pdf``, matplotlib imported
   there, lazily).
3. ``write_report`` writes the PDF and one CSV/JSON file per table, all or none
   (``commsim.files.write_files``); ``check_outputs`` is the same check, run before the work.
Nothing in the data depends on the clock or the paths, so equal inputs give equal bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from commsim.analysis import compare, fits, tables, timeline
from commsim.api import Scenario
from commsim.errors import UserError
from commsim.files import check_output, write_files
from commsim.profile import Profile
from commsim.strategies import SEED_STRATEGIES
from commsim.table import csv_text
from commsim.units import fmt_bytes, fmt_rate, fmt_time

DEFAULT_NODES = (1, 2, 3, 4, 8, 16)
DEFAULT_BATCH_SIZES = (16, 64, 128)   # 16 and 64: strong scaling's 16 and 4 nodes
TITLE = "commsim report: communication cost of data-parallel training"


@dataclass(frozen=True)
class ReportOptions:
    """What the report covers.

    nodes:           node counts of the scaling pages.
    batch_sizes:     samples per rank for the compute/communication and bandwidth pages.
    global_batch:    strong scaling's fixed global batch; weak_batch: weak scaling's per rank.
    timeline_nodes:  node count of the Gantt and per-rank pages (None: 4 if listed, else the
                     largest listed).
    scenario:        the what-ifs every run shares (link, bucket, ranks per host...).
    validation_name: the validation file's name for the title page (not its path: paths would
                     make two otherwise equal reports differ).
    validation_tolerance_pct: the error band of the predicted-vs-measured scatter.
    """
    nodes: tuple[int, ...] = DEFAULT_NODES
    strategies: tuple[str, ...] = SEED_STRATEGIES
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    global_batch: int = tables.DEFAULT_GLOBAL_BATCH
    weak_batch: int = tables.DEFAULT_WEAK_BATCH
    timeline_nodes: int | None = None
    scenario: Scenario = field(default_factory=Scenario)
    validation_name: str | None = None
    validation_tolerance_pct: float = 10.0

    @property
    def gantt_nodes(self) -> int:
        if self.timeline_nodes is not None:
            return self.timeline_nodes
        return 4 if 4 in self.nodes else max(self.nodes)


@dataclass(frozen=True)
class ReportData:
    """Everything on the pages: title sections, tables (name -> rows) and fit views."""
    options: ReportOptions
    sections: tuple
    tables: dict
    fit_views: tuple
    threads_per_rank: int
    validation_summary: dict | None = None


def _metadata_items(meta: dict) -> list[tuple[str, str]]:
    known = ("source", "created", "command", "host", "cpu", "cores", "threads_per_rank",
             "torch_version", "backend", "interface")
    items = [(k, meta[k]) for k in known if meta.get(k) not in (None, "")]
    rate = meta.get("emulated_rate_Bps")
    if rate:
        items.append(("emulated link", fmt_rate(rate)))
    return [(k, str(v)) for k, v in items] or [("source", "unknown")]


def _sections(profile: Profile, opt: ReportOptions) -> tuple:
    meta = dict(profile.metadata)
    net = profile.network
    cluster = [("calibrated on", f"{meta.get('nodes', '?')} node(s) x "
                                 f"{meta.get('ranks_per_host', 1)} rank(s)"),
               ("link latency", fmt_time(net.latency_s)),
               ("link bandwidth", fmt_rate(net.bandwidth_Bps))]
    if net.intra_host_bandwidth_Bps:
        cluster.append(("intra-host bandwidth", fmt_rate(net.intra_host_bandwidth_Bps)))
    cluster.append(("collectives fitted", ", ".join(
        f"{name} ({fit.world_size})" for name, fit in sorted(profile.collectives.items()))
        or "none"))
    model = [("model", profile.model_name),
             ("input shape", "x".join(map(str, profile.input_shape))),
             ("parameters", f"{profile.model_numel:,} in {len(profile.params)} tensors"),
             ("gradient bytes", f"{fmt_bytes(profile.model_bytes)} per iteration"),
             ("compute measured at", "batch " + ", ".join(map(str, profile.compute.batch_sizes))),
             ("threads per rank", str(profile.compute.threads_per_rank))]
    sc = opt.scenario
    report = [("strategies", ", ".join(opt.strategies)),
              ("nodes", ", ".join(map(str, opt.nodes))),
              ("strong scaling", f"global batch {opt.global_batch}"),
              ("weak scaling", f"{opt.weak_batch} samples per rank"),
              ("batch sizes per rank", ", ".join(map(str, opt.batch_sizes))),
              ("DDP bucket", fmt_bytes(sc.bucket_bytes)),
              ("ranks per host", str(sc.ranks_per_host)),
              ("timelines on", f"{opt.gantt_nodes} nodes")]
    if sc.bandwidth_Bps is not None:
        report.append(("what-if bandwidth", fmt_rate(sc.bandwidth_Bps)))
    if sc.latency_s is not None:
        report.append(("what-if latency", fmt_time(sc.latency_s)))
    report.append(("validation", opt.validation_name or "none given"))
    return (("Calibration", _metadata_items(meta)), ("Cluster", cluster), ("Model", model),
            ("This report", report))


def _check(opt: ReportOptions) -> None:
    if not opt.nodes or any(n < 1 for n in opt.nodes):
        raise UserError("--nodes must list node counts >= 1")
    if not opt.batch_sizes or any(b < 1 for b in opt.batch_sizes):
        raise UserError("--batch-sizes must list batch sizes >= 1")
    if opt.global_batch < 1 or opt.weak_batch < 1:
        raise UserError("--global-batch and --weak-batch must be >= 1")


def build_report(profile: Profile, options: ReportOptions = ReportOptions(),
                 validation: Sequence[dict] | None = None,
                 traffic_accuracy: Sequence[dict] | None = None,
                 validation_timelines: Sequence[dict] | None = None) -> ReportData:
    """Predict every run the pages need and collect the tables (no plotting here).

    ``validation_timelines``: a traced validation's Gantt rows (``side`` predicted/measured,
    ``compare.load_validation_extras``); one page per strategy draws a cell of it."""
    opt = options
    _check(opt)
    runs = tables.Runs(profile, base=opt.scenario, global_batch=opt.global_batch,
                       weak_batch=opt.weak_batch)
    multi = [s for s in opt.strategies if s != "single"]
    multi_nodes = [n for n in opt.nodes if runs.world(n) > 1]
    views = fits.fit_views(profile)
    t = {
        "scaling": (tables.scaling_table(runs, opt.strategies, opt.nodes, mode=tables.STRONG)
                    + tables.scaling_table(runs, opt.strategies, opt.nodes, mode=tables.WEAK)),
        "compute_comm": tables.compute_comm_table(runs, multi, multi_nodes, opt.batch_sizes),
        "compute_comm_ranks": tables.compute_comm_table(runs, multi, [opt.gantt_nodes],
                                                        [opt.weak_batch]),
        "bandwidth": tables.bandwidth_table(runs, multi, opt.nodes, opt.batch_sizes),
        "timeline": timeline.timeline_rows(runs, opt.strategies, opt.gantt_nodes),
        "compute": tables.compute_table(profile),
        "compute_curve": tables.compute_curve(profile),
        "fits": fits.fit_rows(views),
        "fit_samples": fits.sample_rows(views),
    }
    summary = None
    if validation:
        t["validation"] = [dict(r) for r in validation]
        summary = compare.error_summary(list(validation))
        if validation_timelines:
            t["validation_timeline"] = [dict(r) for r in validation_timelines]
    if traffic_accuracy:
        t["traffic_accuracy"] = [dict(r) for r in traffic_accuracy]
    return ReportData(options=opt, sections=_sections(profile, opt), tables=t,
                      fit_views=tuple(views), threads_per_rank=profile.compute.threads_per_rank,
                      validation_summary=summary)


def page_builders(data: ReportData) -> list:
    """One callable per page (or group of table pages), in report order."""
    from commsim.analysis import plots as P

    opt, t = data.options, data.tables
    strong = [r for r in t["scaling"] if r["scaling"] == tables.STRONG]
    weak = [r for r in t["scaling"] if r["scaling"] == tables.WEAK]
    multi = [s for s in opt.strategies if s != "single"]
    pages = [
        lambda: P.title_page(TITLE, data.sections,
                             "What was calibrated, where and when, the cluster and model it "
                             "describes, and the scenario every page of this report predicts."),
        lambda: P.scaling_figure(strong, weak, opt.global_batch, opt.weak_batch),
    ]
    for rows, mode, what in ((strong, "strong scaling", f"the global batch fixed at "
                              f"{opt.global_batch}"),
                             (weak, "weak scaling", f"{opt.weak_batch} samples per rank")):
        pages.append(lambda rows=rows, mode=mode, what=what: P.table_pages(
            f"Speedup and efficiency per strategy and node count ({mode})",
            f"Predicted time per iteration with {what}, speedup over one node running the same "
            f"global batch, and efficiency (speedup / ranks); 'not computing' is the time the "
            f"slowest rank spends outside compute.", P.SCALING_COLUMNS, rows))
    # Pages about communication only where some run communicates (not for one node alone).
    if t["compute_comm"]:
        pages.append(lambda: P.breakdown_figure(tables.critical_rows(t["compute_comm"]), multi,
                                                opt.batch_sizes))
    if len({r["rank"] for r in t["compute_comm_ranks"]}) > 1:
        pages.append(lambda: P.rank_figure(t["compute_comm_ranks"], multi, opt.gantt_nodes,
                                           opt.weak_batch))
    if t["bandwidth"]:
        pages.append(lambda: P.table_pages(
            "Bandwidth utilisation per node count and batch size",
            "Gradient bytes synchronised per iteration, algorithm and bus bandwidth of the "
            "collectives, busbw as a share of the link, and how busy the busiest NIC direction "
            "is over the iteration.", P.BANDWIDTH_COLUMNS, t["bandwidth"]))
    for strategy in dict.fromkeys(r["strategy"] for r in t["timeline"]):
        rows = [r for r in t["timeline"] if r["strategy"] == strategy]
        pages.append(lambda s=strategy, rows=rows: P.gantt_figure(s, rows))
    pages += [
        lambda: P.fits_figure(data.fit_views, t["fits"]),
        lambda: P.table_pages("Calibration fit numbers",
                              "The fitted per-message latency α, bandwidth B with the low end "
                              "of its 95% interval, reduction cost γ and per-call overhead of "
                              "every collective.", P.FIT_COLUMNS, t["fits"]),
        lambda: P.compute_figure(t["compute"], t["compute_curve"], data.threads_per_rank),
    ]
    if "validation" in t:
        pages += [
            lambda: P.validation_figure(t["validation"], data.validation_summary),
            lambda: P.validation_scatter_figure(t["validation"], opt.validation_tolerance_pct),
        ]
        for strategy, predicted, measured in traced_cells(t.get("validation_timeline", ())):
            pages.append(lambda s=strategy, p=predicted, m=measured:
                         P.timeline_pair_figure(s, p, m))
        pages += [
            lambda: P.table_pages("Prediction error per strategy and node count",
                                  "Predicted and measured seconds per iteration, the measured "
                                  "spread, and the prediction error in percent of the "
                                  "measurement.", P.VALIDATION_COLUMNS, t["validation"]),
        ]
    if "traffic_accuracy" in t:
        pages += [
            lambda: P.traffic_figure(t["traffic_accuracy"]),
            lambda: P.table_pages("Traffic and accuracy per setting",
                                  "Bytes every interface counted (all ranks, both directions) "
                                  "and predicted, and the test accuracy over the seeds, per "
                                  "worker count, local aggregation k, groups g and epochs.",
                                  P.TRAFFIC_COLUMNS, t["traffic_accuracy"]),
        ]
    return pages


def traced_cells(rows: Sequence[dict]) -> list[tuple[str, list[dict], list[dict]]]:
    """Per validated strategy, the traced cell its page shows: the most nodes, then the first
    link rate of the file; as (strategy, predicted rows, measured rows)."""
    cells: dict[str, tuple] = {}
    for r in rows:
        key = (r["nodes"], r.get("rate_Bps"), r.get("variant") or "")
        best = cells.get(r["strategy"])
        if best is None or r["nodes"] > best[0]:
            cells[r["strategy"]] = key
    out = []
    for strategy, key in cells.items():
        mine = [r for r in rows if r["strategy"] == strategy
                and (r["nodes"], r.get("rate_Bps"), r.get("variant") or "") == key]
        out.append((strategy, [r for r in mine if r["side"] == "predicted"],
                    [r for r in mine if r["side"] == "measured"]))
    return [c for c in out if c[1] and c[2]]


def render_report_pdf(data: ReportData) -> bytes:
    from commsim.analysis.pdf import render_pdf
    return render_pdf(page_builders(data), title=TITLE)


def dumps(rows) -> str:
    return json.dumps(rows, indent=1, sort_keys=True, allow_nan=False) + "\n"


def output_paths(data: ReportData, out: Path, csv_dir: Path | None,
                 json_dir: Path | None) -> list[Path]:
    paths = [Path(out)]
    for folder, ext in ((csv_dir, "csv"), (json_dir, "json")):
        if folder is not None:
            paths += [Path(folder) / f"{name}.{ext}" for name in data.tables]
    return paths


def check_outputs(out: str | Path, *, csv_dir: str | Path | None = None,
                  json_dir: str | Path | None = None, force: bool = False) -> None:
    """Before the work: can the PDF and the table folders be written?"""
    check_output(out, force=force)
    for folder in (csv_dir, json_dir):
        if folder is not None:
            check_output(folder, folder=True)


def write_report(data: ReportData, out: str | Path, *, csv_dir: str | Path | None = None,
                 json_dir: str | Path | None = None, force: bool = False) -> list[Path]:
    """Write the PDF and the tables, all or none: nothing is overwritten without ``force``, and
    a failure part-way (a full disk, a folder that cannot be made) leaves no file behind."""
    csv_dir = None if csv_dir is None else Path(csv_dir)
    json_dir = None if json_dir is None else Path(json_dir)
    check_outputs(out, csv_dir=csv_dir, json_dir=json_dir, force=force)
    paths = output_paths(data, Path(out), csv_dir, json_dir)
    files = {paths[0]: render_report_pdf(data)}
    for name, rows in data.tables.items():
        if csv_dir is not None:
            files[csv_dir / f"{name}.csv"] = csv_text(rows).encode("utf-8")
        if json_dir is not None:
            files[json_dir / f"{name}.json"] = dumps(rows).encode("utf-8")
    write_files(files, force=force)
    return paths
