"""Report figures (matplotlib, Agg): one landscape page per function, heading + caption.

Every page has a heading (the figure's suptitle, which the tests look for in the PDF text), axes
labelled with units, and a one-sentence caption at the bottom saying what it shows.  The data
comes from ``commsim.analysis.tables``/``timeline``/``fits``/``compare``; nothing here predicts.
matplotlib is imported when this module is, so import it lazily (``commsim.analysis.pdf`` does).
"""
from __future__ import annotations

import textwrap
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from commsim.strategies import get_strategy  # noqa: E402
from commsim.units import fmt_bytes, fmt_rate, fmt_time  # noqa: E402

PAGE_IN = (11.0, 8.5)   # US letter, landscape
PHASE_COLORS = {"forward": "#9ecae1", "backward": "#3182bd", "optimizer": "#08519c"}
PART_COLORS = {"compute": "#3182bd", "overlapped": "#9ecae1", "exposed": "#e6550d",
               "idle": "#d9d9d9"}
IDLE_COLOR = "#eeeeee"
WAIT_COLOR = "#fdae6b"   # a measured rank blocked in backward until its buckets are reduced
# Collectives cycle through these; no blues, which mean compute.
COMM_COLORS = ("#fd8d3c", "#74c476", "#9e9ac8", "#e7969c", "#bcbd22", "#fdd0a2", "#31a354",
               "#d6616b", "#c7e9c0", "#756bb1", "#e6550d", "#dadaeb")
MAX_TABLE_ROWS = 24

Column = tuple[str, str, Callable]   # (header, key, formatter)


def _color(strategy: str) -> str:
    return get_strategy(strategy).color


def _label(strategy: str) -> str:
    return get_strategy(strategy).label


def page(heading: str, caption: str) -> Figure:
    """A blank landscape page with its heading on top and its caption at the bottom."""
    fig = plt.figure(figsize=PAGE_IN)
    fig.suptitle(heading, fontsize=16, fontweight="bold", y=0.965)
    fig.text(0.5, 0.035, "\n".join(textwrap.wrap(caption, 150)), ha="center", va="center",
             fontsize=10, style="italic")
    return fig


def pct(v: float | None) -> str:
    return "" if v is None else f"{v:.0%}"


def num(fmt: str) -> Callable:
    return lambda v: "" if v is None else format(v, fmt)


def _nodes_axis(ax, nodes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(nodes))
    ax.set_xticklabels([str(n) for n in nodes])
    ax.minorticks_off()
    ax.set_xlabel("nodes (one rank each, log scale)")


# ----------------------------------------------------------------------------------------------
# Title and tables
# ----------------------------------------------------------------------------------------------

def title_page(title: str, sections: Sequence[tuple[str, Sequence[tuple[str, str]]]],
               caption: str) -> Figure:
    """Key/value sections in two columns under the title."""
    fig = page(title, caption)
    x, y = 0.06, 0.88
    for k, (name, items) in enumerate(sections):
        if k == (len(sections) + 1) // 2:
            x, y = 0.53, 0.88
        fig.text(x, y, name, fontsize=13, fontweight="bold", va="top")
        y -= 0.04
        for key, value in items:
            lines = textwrap.wrap(str(value), 40, max_lines=3, placeholder="...") or [""]
            fig.text(x + 0.01, y, f"{key.replace('_', ' ')}:", fontsize=9.5, va="top",
                     color="#444444")
            fig.text(x + 0.17, y, "\n".join(lines), fontsize=9.5, va="top",
                     family="monospace", linespacing=1.3)
            y -= 0.03 * len(lines)
        y -= 0.025
    return fig


def table_pages(heading: str, caption: str, columns: Sequence[Column],
                rows: Sequence[dict]) -> list[Figure]:
    """The rows as a table, split over as many pages as it takes.

    Each column is one multi-line text (a cell per text object, as ``ax.table`` draws it, is
    ten times slower to render and the report has to stay fast).
    """
    figs = []
    chunks = [rows[i:i + MAX_TABLE_ROWS] for i in range(0, len(rows), MAX_TABLE_ROWS)] or [[]]
    for k, chunk in enumerate(chunks):
        more = f" ({k + 1}/{len(chunks)})" if len(chunks) > 1 else ""
        fig = page(heading + more, caption)
        cells = [[fmt(r.get(key)) for _, key, fmt in columns] for r in chunk]
        if not cells:
            fig.text(0.5, 0.8, "(no rows)", ha="center", fontsize=11)
        widths = [max([len(h)] + [len(row[i]) for row in cells]) + 4
                  for i, (h, _, _) in enumerate(columns)]
        scale = 0.9 / sum(widths)
        top, line = 0.87, 0.028
        x = 0.05
        for i, (header, _, _) in enumerate(columns):
            x += widths[i] * scale
            left = i == 0
            xt = x - widths[i] * scale if left else x
            ha = "left" if left else "right"
            fig.text(xt, top, header, ha=ha, va="top", fontsize=9.5, fontweight="bold")
            fig.text(xt, top - 1.3 * line, "\n".join(row[i] for row in cells), ha=ha, va="top",
                     fontsize=9.5, linespacing=1.62, family="DejaVu Sans")
        fig.add_artist(matplotlib.lines.Line2D([0.05, 0.95], [top - 1.05 * line] * 2,
                                               color="#333333", lw=0.8))
        figs.append(fig)
    return figs


# ----------------------------------------------------------------------------------------------
# Scaling
# ----------------------------------------------------------------------------------------------

def scaling_figure(strong: Sequence[dict], weak: Sequence[dict], strong_batch: int,
                   weak_batch: int) -> Figure:
    fig = page("Time per iteration vs nodes",
               f"Predicted seconds per training iteration for each strategy: left with the "
               f"global batch fixed at {strong_batch} (strong scaling), right with "
               f"{weak_batch} samples per node (weak scaling); lower is better.")
    for k, (rows, what) in enumerate(((strong, f"strong scaling, global batch {strong_batch}"),
                                      (weak, f"weak scaling, {weak_batch} samples per node"))):
        ax = fig.add_axes((0.07 + k * 0.48, 0.14, 0.4, 0.72))
        nodes = sorted({r["nodes"] for r in rows})
        for strategy in dict.fromkeys(r["strategy"] for r in rows):
            pts = [(r["nodes"], r["iteration_s"]) for r in rows if r["strategy"] == strategy]
            xs, ys = zip(*pts)
            if len(pts) == 1:
                ax.axhline(ys[0], color=_color(strategy), ls="--", lw=1,
                           label=f"{_label(strategy)} (1 node)")
            else:
                ax.plot(xs, ys, marker="o", color=_color(strategy), label=_label(strategy))
        if nodes:
            _nodes_axis(ax, nodes)
        ax.set_ylabel("time per iteration (s)")
        ax.set_ylim(bottom=0)
        ax.set_title(what)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return fig


SCALING_COLUMNS: tuple[Column, ...] = (
    ("scaling", "scaling", str), ("strategy", "strategy", str), ("nodes", "nodes", str),
    ("batch/rank", "batch_per_rank", str), ("global batch", "global_batch", str),
    ("time/iteration", "iteration_s", fmt_time), ("compute", "compute_s", fmt_time),
    ("not computing", "exposed_comm_s", fmt_time), ("speedup", "speedup", num(".2f")),
    ("efficiency", "efficiency", pct), ("epoch", "epoch_s", fmt_time))


# ----------------------------------------------------------------------------------------------
# Compute vs communication
# ----------------------------------------------------------------------------------------------

PARTS = (("compute", "compute only"), ("overlapped", "compute with communication hidden"),
         ("exposed", "communication exposed"), ("idle", "idle (waiting)"))


def _parts(row: dict) -> dict:
    return {"compute": row["compute_s"] - row["overlapped_comm_s"],
            "overlapped": row["overlapped_comm_s"], "exposed": row["exposed_comm_s"],
            "idle": row["idle_s"]}


def _stack(ax, xs, rows, width=0.8) -> None:
    bottom = [0.0] * len(rows)
    for part, label in PARTS:
        vals = [_parts(r)[part] for r in rows]
        ax.bar(xs, vals, width, bottom=bottom, color=PART_COLORS[part], label=label,
               edgecolor="white", linewidth=0.3)
        bottom = [b + v for b, v in zip(bottom, vals)]


def _legend(fig) -> None:
    fig.legend(handles=[Patch(color=PART_COLORS[p], label=label) for p, label in PARTS],
               loc="upper center", ncol=4, bbox_to_anchor=(0.5, 0.93), fontsize=9, frameon=False)


def breakdown_figure(rows: Sequence[dict], strategies: Sequence[str],
                     batch_sizes: Sequence[int]) -> Figure:
    """Grid: batch size per row, strategy per column; bars per node count (critical rank)."""
    fig = page("Computation vs communication per batch size and node count",
               "Where the slowest rank's iteration goes, for each batch size per rank (rows), "
               "strategy (columns) and node count (bars): compute alone, compute with "
               "communication hidden behind it, communication it waits for, and idle time.")
    _legend(fig)
    nb, ns = len(batch_sizes), len(strategies)
    gs = fig.add_gridspec(nb, ns, left=0.07, right=0.98, top=0.87, bottom=0.11, hspace=0.45,
                          wspace=0.25)
    for i, batch in enumerate(batch_sizes):
        for j, strategy in enumerate(strategies):
            ax = fig.add_subplot(gs[i, j])
            mine = [r for r in rows if r["strategy"] == strategy and r["batch_per_rank"] == batch]
            xs = list(range(len(mine)))
            _stack(ax, xs, mine)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(r["nodes"]) for r in mine], fontsize=8)
            ax.tick_params(axis="y", labelsize=8)
            ax.set_title(f"{_label(strategy)}, batch {batch}/rank", fontsize=9)
            if i == nb - 1:
                ax.set_xlabel("nodes", fontsize=9)
            if j == 0:
                ax.set_ylabel("time/iteration (s)", fontsize=9)
    return fig


def rank_figure(rows: Sequence[dict], strategies: Sequence[str], nodes: int,
                batch: int) -> Figure:
    """One panel per strategy: the four parts of every rank's iteration."""
    fig = page(f"Computation vs communication per rank ({nodes} nodes)",
               f"Every rank's iteration on {nodes} nodes with {batch} samples per rank, split "
               f"into compute alone, compute with communication hidden, exposed "
               f"communication and idle time (the parameter server is rank 0 for ps).")
    _legend(fig)
    gs = fig.add_gridspec(1, len(strategies), left=0.07, right=0.98, top=0.85, bottom=0.14,
                          wspace=0.25)
    for j, strategy in enumerate(strategies):
        ax = fig.add_subplot(gs[0, j])
        mine = [r for r in rows if r["strategy"] == strategy and r["nodes"] == nodes
                and r["batch_per_rank"] == batch]
        xs = [r["rank"] for r in mine]
        _stack(ax, xs, mine)
        ax.set_xticks(xs)
        ax.set_xlabel("rank")
        ax.set_title(_label(strategy), fontsize=10)
        if j == 0:
            ax.set_ylabel("time per iteration (s)")
    return fig


BANDWIDTH_COLUMNS: tuple[Column, ...] = (
    ("strategy", "strategy", str), ("nodes", "nodes", str),
    ("batch/rank", "batch_per_rank", str), ("gradients", "bytes_synced", fmt_bytes),
    ("comm time", "comm_s", fmt_time), ("algbw", "algbw_Bps", fmt_rate),
    ("busbw", "busbw_Bps", fmt_rate), ("link", "link_bandwidth_Bps", fmt_rate),
    ("busbw / link", "busbw_fraction", pct), ("busiest NIC busy", "link_utilization", pct))


# ----------------------------------------------------------------------------------------------
# Gantt timeline
# ----------------------------------------------------------------------------------------------

def gantt_figure(strategy: str, rows: Sequence[dict]) -> Figure:
    """Ranks top to bottom; per rank a compute lane, its communication lane(s), idle shading."""
    n = rows[0]["nodes"]
    iteration = rows[0]["iteration_s"]
    fig = page(f"One iteration: {_label(strategy)} on {n} node{'s' if n > 1 else ''}",
               f"Simulated timeline of one iteration ({fmt_time(iteration)}) for every rank: "
               f"forward, backward and optimizer compute, each bucket's or tensor's "
               f"communication (one colour per bucket/tensor), and idle time in grey.")
    ax = fig.add_axes((0.13, 0.12, 0.85, 0.72))
    _gantt(ax, rows, iteration)
    ax.set_xlim(0, iteration * 1e3 * 1.01)
    ax.set_xlabel("time since the iteration started (ms)")
    _gantt_legend(fig)
    return fig


def _gantt(ax, rows: Sequence[dict], iteration: float, order: dict | None = None) -> None:
    """Draw ``rows`` (``analysis.timeline`` segments) as a Gantt chart on ``ax``: per rank a
    compute lane and its communication lane(s), idle hatched, ranks top to bottom.  ``order``
    maps a collective's name to its colour index (default: launch order in ``rows``)."""
    ranks = sorted({r["rank"] for r in rows})
    # One colour per collective, in launch order, so neighbours always differ and a bucket has
    # the same colour on every rank.
    if order is None:
        order = collective_order(rows)
    y, ticks, labels = 0.0, [], []
    for rank in ranks:
        mine = [r for r in rows if r["rank"] == rank]
        lanes = 1 + max((r["lane"] for r in mine if r["kind"] == "comm"), default=-1)
        height = 1 + lanes
        for r in mine:
            x, w = r["start_s"] * 1e3, (r["end_s"] - r["start_s"]) * 1e3
            if r["kind"] == "idle":
                ax.broken_barh([(x, w)], (y, height * 0.9), facecolors=IDLE_COLOR,
                               edgecolor="#bbbbbb", hatch="//", linewidth=0.3)
            elif r["kind"] == "compute" and r["name"] == "wait":
                ax.broken_barh([(x, w)], (y, 0.85), facecolors="white", edgecolor=WAIT_COLOR,
                               hatch="xx", linewidth=0.3)
            elif r["kind"] == "compute":
                ax.broken_barh([(x, w)], (y, 0.85), facecolors=PHASE_COLORS.get(r["name"],
                               "#6baed6"), edgecolor="white", linewidth=0.3)
            else:
                color = COMM_COLORS[order.get(r["name"], 0) % len(COMM_COLORS)]
                ax.broken_barh([(x, w)], (y + 1 + r["lane"], 0.85), facecolors=color,
                               edgecolor="black", linewidth=0.2)
                # Label what is wide enough to read: the full name, or its last word.
                label = (r["name"] if w > 0.12 * iteration * 1e3 else
                         r["name"].split()[-1] if w > 0.035 * iteration * 1e3 else "")
                if label:
                    ax.text(x + w / 2, y + 1.42 + r["lane"], label, ha="center",
                            va="center", fontsize=7, clip_on=True)
        ticks += [y + 0.42] + [y + 1.42 + k for k in range(lanes)]
        labels += [f"rank {rank} compute"] + [f"rank {rank} comm" + (f" {k + 1}" if lanes > 1
                                                                      else "")
                                              for k in range(lanes)]
        y += height + 0.5
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7 if len(ticks) > 16 else 9)
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)


def collective_order(rows: Sequence[dict]) -> dict:
    """Colour index per collective name, in launch order."""
    return {name: k for k, name in enumerate(dict.fromkeys(
        r["name"] for r in sorted(rows, key=lambda r: r["start_s"]) if r["kind"] == "comm"))}


def _gantt_legend(fig, wait: bool = False) -> None:
    """The Gantt pages' legend; ``wait`` adds the measured "waiting for buckets" entry."""
    handles = [Patch(color=c, label=p) for p, c in PHASE_COLORS.items()]
    if wait:
        handles.append(Patch(facecolor="white", edgecolor=WAIT_COLOR, hatch="xx",
                             label="waiting for buckets"))
    handles += [Patch(color=COMM_COLORS[0], label="communication (colour = bucket/tensor)"),
                Patch(facecolor=IDLE_COLOR, edgecolor="#bbbbbb", hatch="//", label="idle")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles),
               bbox_to_anchor=(0.5, 0.93), fontsize=9, frameon=False)


# ----------------------------------------------------------------------------------------------
# Calibration fits and compute
# ----------------------------------------------------------------------------------------------

def fits_figure(views, rows: Sequence[dict]) -> Figure:
    """One log-log panel per collective: measured repetitions and the fitted model."""
    has_samples = any(v.points for v in views)
    note = "" if has_samples else " (no raw samples in this profile: fitted lines only)"
    fig = page("Calibration fits per collective",
               "Measured time of one call vs message size per rank (dots, one per timed "
               "repetition) and the fitted latency-bandwidth model (line) for every calibrated "
               f"collective{note}.")
    if not has_samples:
        fig.text(0.5, 0.9, "No raw samples in this profile: only the fitted lines are shown.",
                 ha="center", fontsize=11, color="#a50f15")
    cols = 2 if len(views) <= 4 else 3
    nrows = max(1, -(-len(views) // cols))
    gs = fig.add_gridspec(nrows, cols, left=0.07, right=0.98, top=0.86, bottom=0.13,
                          hspace=0.45, wspace=0.2)
    for k, (v, row) in enumerate(zip(views, rows)):
        ax = fig.add_subplot(gs[k // cols, k % cols])
        pts = [(n, t) for n, t in v.points if n > 0]
        if pts:
            ax.scatter([n for n, _ in pts], [t for _, t in pts], s=8, color="#555555",
                       alpha=0.7, label="measured", zorder=3)
        if v.line:
            ax.plot([n for n, _ in v.line], [t for _, t in v.line], color="#d62728",
                    label="fit", lw=1.5)
        _log_axes(ax)
        ax.set_xlabel("message size per rank (bytes)", fontsize=8)
        ax.set_ylabel("time per call (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_title(f"{v.op} ({v.fit.world_size} ranks)", fontsize=10)
        r2 = "" if row["r2"] is None else f"\nR² {row['r2']:.4f}"
        text = (f"α {fmt_time(row['latency_s'])}\nB {fmt_rate(row['bandwidth_Bps'])}"
                f"\nγ {row['reduction_s_per_B']:.3g} s/B\noverhead "
                f"{fmt_time(row['overhead_s'])}{r2}")
        ax.text(0.03, 0.97, text, transform=ax.transAxes, va="top", fontsize=7,
                family="monospace", bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
        if not pts:
            ax.text(0.97, 0.03, "no raw samples", transform=ax.transAxes, ha="right",
                    fontsize=7, color="#a50f15")
        ax.legend(fontsize=7, loc="lower right" if pts else "center right")
    return fig


def _si_bytes(n: float, _pos=None) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def _log_axes(ax) -> None:
    """Log-log with plain-text decade labels and no minor ticks (the default mathtext labels
    and minor ticks cost seconds per page to lay out)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.xaxis.set_major_formatter(FuncFormatter(_si_bytes))
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda t, _pos: fmt_time(t)))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_locator(NullLocator())   # hundreds of minor tick objects: slow


FIT_COLUMNS: tuple[Column, ...] = (
    ("collective", "op", str), ("ranks", "world_size", str), ("latency α", "latency_s", fmt_time),
    ("bandwidth B", "bandwidth_Bps", lambda v: fmt_rate(v)),
    ("B 95% low", "bandwidth_ci95_lo_Bps", lambda v: "" if v is None else fmt_rate(v)),
    ("γ (s/B)", "reduction_s_per_B", num(".3g")), ("overhead", "overhead_s", fmt_time),
    ("R²", "r2", num(".4f")), ("samples", "samples", str))


def compute_figure(table: Sequence[dict], curve: Sequence[dict], threads: int) -> Figure:
    fig = page("Compute time vs batch size",
               f"Measured forward, backward and optimizer seconds per batch on one rank with "
               f"{threads} thread(s) (dots with spread bars) and the piecewise-linear "
               f"interpolation the simulator uses (lines); right: the samples per second "
               f"that gives.")
    ax = fig.add_axes((0.07, 0.13, 0.42, 0.73))
    colors = dict(PHASE_COLORS, total="#000000")
    for phase in ("forward", "backward", "optimizer", "total"):
        ax.plot([r["batch_size"] for r in curve], [r[f"{phase}_s"] for r in curve],
                color=colors[phase], lw=1.2, label=phase)
        spread = [r.get(f"{phase}_spread_s") or 0.0 for r in table]
        ax.errorbar([r["batch_size"] for r in table], [r[f"{phase}_s"] for r in table],
                    yerr=spread, fmt="o", ms=4, color=colors[phase], capsize=2)
    ax.set_xlabel("batch size per rank (samples)")
    ax.set_ylabel("time per iteration (s)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9)
    ax2 = fig.add_axes((0.56, 0.13, 0.42, 0.73))
    ax2.plot([r["batch_size"] for r in curve],
             [r["batch_size"] / r["total_s"] for r in curve], color="#000000", lw=1.2)
    ax2.plot([r["batch_size"] for r in table], [r["samples_per_s"] for r in table], "o",
             color="#000000", ms=4)
    ax2.set_xlabel("batch size per rank (samples)")
    ax2.set_ylabel("throughput (samples/s)")
    ax2.set_xlim(left=0)
    ax2.set_ylim(bottom=0)
    ax2.grid(True, alpha=0.3)
    return fig


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------

def validation_figure(rows: Sequence[dict], summary: dict) -> Figure:
    fig = page("Predicted vs measured",
               f"Measured seconds per iteration (dots, bars = measured spread) against the "
               f"prediction (crosses and dashed line) per strategy and node count; mean "
               f"absolute error {summary['mean_abs_error_pct']:.1f}%, worst "
               f"{summary['max_abs_error_pct']:.1f}%.")
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    gs = fig.add_gridspec(1, len(strategies), left=0.07, right=0.98, top=0.86, bottom=0.13,
                          wspace=0.25)
    for j, strategy in enumerate(strategies):
        ax = fig.add_subplot(gs[0, j])
        mine = [r for r in rows if r["strategy"] == strategy]
        xs = [r["nodes"] for r in mine]
        ax.errorbar(xs, [r["measured_s"] for r in mine],
                    yerr=[r["measured_spread_s"] for r in mine], fmt="o", capsize=3,
                    color=_color(strategy), label="measured")
        ax.plot(xs, [r["predicted_s"] for r in mine], "x--", color="#000000", label="predicted")
        ax.set_xticks(sorted(set(xs)))
        ax.set_xlabel("nodes")
        if j == 0:
            ax.set_ylabel("time per iteration (s)")
        ax.set_ylim(bottom=0)
        ax.set_title(_label(strategy), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def validation_scatter_figure(rows: Sequence[dict], tolerance_pct: float) -> Figure:
    """Every validated cell as one point, measured against predicted, with the y = x line and
    the band where the error is within the tolerance."""
    errs = [abs(r["error_pct"]) for r in rows]
    inside = sum(e <= tolerance_pct for e in errs)
    fig = page("Predicted vs measured, every cell",
               f"Each dot is one validated cell (strategy, node count, link): measured seconds "
               f"per iteration across, predicted up, bars = measured spread.  On the solid "
               f"line the prediction is exact; inside the shaded band it is within "
               f"±{tolerance_pct:g}% of the measurement ({inside} of {len(rows)} cells).")
    ax = fig.add_axes((0.1, 0.13, 0.6, 0.72))
    top = 1.1 * max(max(r["measured_s"] + (r.get("measured_spread_s") or 0.0),
                        r["predicted_s"]) for r in rows)
    xs = [0.0, top]
    tol = tolerance_pct / 100.0
    ax.fill_between(xs, [x * (1 - tol) for x in xs], [x * (1 + tol) for x in xs],
                    color="#dddddd", label=f"within ±{tolerance_pct:g}%")
    ax.plot(xs, xs, "-", color="#555555", linewidth=1, label="predicted = measured")
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        ax.errorbar([r["measured_s"] for r in mine], [r["predicted_s"] for r in mine],
                    xerr=[r.get("measured_spread_s") or 0.0 for r in mine], fmt="o",
                    capsize=3, color=_color(strategy), label=_label(strategy))
        for r in mine:
            ax.annotate(f"{r['nodes']}", (r["measured_s"], r["predicted_s"]),
                        textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("measured time per iteration (s)")
    ax.set_ylabel("predicted time per iteration (s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.03, 1.0), frameon=False,
              title="numbers: nodes", title_fontsize=9)
    return fig


def timeline_pair_figure(strategy: str, predicted: Sequence[dict],
                         measured: Sequence[dict]) -> Figure:
    """One cell's predicted iteration above its measured one, on one time axis (ms since the
    first rank started), one colour per collective on both."""
    first = measured[0]
    n, p_it, m_it = first["nodes"], predicted[0]["iteration_s"], first["iteration_s"]
    rate = first.get("rate_Bps")
    link = f" at {fmt_rate(rate)}" if rate else ""
    wait = any(r["kind"] == "compute" and r["name"] == "wait" for r in measured)
    fig = page(f"Predicted and measured iteration: {_label(strategy)} on {n} nodes{link}",
               f"Top: the simulated iteration ({fmt_time(p_it)}); bottom: the last timed "
               f"iteration of the live run ({fmt_time(m_it)}), every rank on rank 0's clock "
               f"from the first rank's start"
               + ("; orange hatching: blocked in backward until its buckets are reduced"
                  if wait else "")
               + ".  Same colours for the same bucket or tensor, so a late bucket, a waiting "
                 "rank or a slower backward shows as a shift.")
    order = collective_order(list(predicted) + list(measured))
    span = max(p_it, m_it) * 1e3 * 1.01
    axes = []
    for k, (rows, what) in enumerate(((predicted, "predicted"), (measured, "measured"))):
        ax = fig.add_axes((0.15, 0.5 - 0.37 * k, 0.83, 0.33),
                          sharex=axes[0] if axes else None)
        _gantt(ax, rows, max(p_it, m_it), order)
        ax.set_title(what, fontsize=10, loc="left")
        ax.set_xlim(0, span)
        axes.append(ax)
    axes[0].tick_params(labelbottom=False)
    axes[1].set_xlabel("time since the first rank started the iteration (ms)")
    _gantt_legend(fig, wait=wait)
    return fig


VALIDATION_COLUMNS: tuple[Column, ...] = (
    ("strategy", "strategy", str), ("nodes", "nodes", str),
    ("predicted", "predicted_s", fmt_time), ("measured", "measured_s", fmt_time),
    ("spread", "measured_spread_s", fmt_time), ("error (%)", "error_pct", num("+.1f")))


def _setting(row: dict) -> str:
    if row.get("group_size"):
        return f"groups of {row['group_size']}"
    return "all-reduce" if row["sync_every"] == 1 else f"k={row['sync_every']}"


def traffic_figure(rows: Sequence[dict]) -> Figure:
    """The seed document's trade-off: traffic against accuracy, one panel per worker count."""
    fig = page("Network traffic vs accuracy",
               "Per worker count: bytes every interface counted over the run (all ranks, both "
               "directions) against test accuracy (mean over seeds, bars min-max) for "
               "all-reduce, local aggregation (k) and groups; filled: the document's epochs, "
               "hollow: longer runs.  Left and up is better.")
    workers = sorted({r["workers"] for r in rows})
    gs = fig.add_gridspec(1, len(workers), left=0.06, right=0.98, top=0.84, bottom=0.14,
                          wspace=0.3)
    for j, w in enumerate(workers):
        ax = fig.add_subplot(gs[0, j])
        mine = [r for r in rows if r["workers"] == w]
        for i, setting in enumerate(dict.fromkeys(_setting(r) for r in mine)):
            color = COMM_COLORS[i % len(COMM_COLORS)]
            for r in (r for r in mine if _setting(r) == setting):
                short = not r.get("long")
                mean = 100 * r["accuracy_mean"]
                ax.errorbar([r["measured_bytes"] / 2**20], [mean],
                            yerr=[[mean - 100 * r["accuracy_min"]],
                                  [100 * r["accuracy_max"] - mean]],
                            fmt="o", mfc=color if short else "none", mec=color, color=color,
                            capsize=2, label=setting if short else None)
        ax.set_title(f"{w} workers", fontsize=10)
        ax.set_xlabel("traffic (MiB)")
        if j == 0:
            ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    return fig


TRAFFIC_COLUMNS: tuple[Column, ...] = (
    ("workers", "workers", str), ("k", "sync_every", str),
    ("g", "group_size", lambda v: str(v) if v else "all"), ("epochs", "epochs", str),
    ("measured", "measured_bytes", fmt_bytes), ("predicted", "predicted_bytes", fmt_bytes),
    ("error (%)", "bytes_error_pct", num("+.2f")),
    ("accuracy", "accuracy_mean", lambda v: f"{100 * v:.1f}%"),
    ("min", "accuracy_min", lambda v: f"{100 * v:.1f}%"),
    ("max", "accuracy_max", lambda v: f"{100 * v:.1f}%"))
