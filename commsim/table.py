"""Plain-text and CSV tables of results (shared by predict, sweep and the reports)."""
from __future__ import annotations

import csv
import io
from typing import Sequence

from commsim.units import fmt_bytes, fmt_rate, fmt_time

# (header, key, formatter) for the human table
COLUMNS = (
    ("strategy", "strategy", str),
    ("nodes", "nodes", str),
    ("batch/rank", "batch_per_rank", str),
    ("iteration", "iteration_s", fmt_time),
    ("compute", "compute_s", fmt_time),
    ("comm", "comm_s", fmt_time),
    ("exposed", "exposed_comm_s", fmt_time),
    ("overlap", "overlap_fraction", lambda v: f"{v:.0%}"),
    ("speedup", "speedup", lambda v: f"{v:.2f}"),
    ("effic.", "efficiency", lambda v: f"{v:.0%}"),
    ("epoch", "epoch_s", fmt_time),
    ("sent/rank", "bytes_sent_per_rank", fmt_bytes),
    ("busbw", "busbw_Bps", fmt_rate),
    ("link use", "link_utilization", lambda v: f"{v:.0%}"),
)


def text_table(rows: Sequence[dict], columns=COLUMNS) -> str:
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        cells.append([fmt(row[key]) for _, key, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def csv_text(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()
