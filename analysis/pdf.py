"""Deterministic multi-page PDF assembly and atomic binary writes.

1. Pages are built by callables (``commsim.analysis.plots``) under fixed rcParams: Type 3
   fonts (their text extracts fine and, unlike Type 42, they need no slow font subsetting), a
   fixed ``svg.hashsalt``.
2. ``PdfPages`` writes into memory with fixed metadata: CreationDate from ``SOURCE_DATE_EPOCH``
   when set, else the Unix epoch; no ModDate; fixed Creator/Producer.  Same inputs, same bytes.
3. The bytes go to disk through a temporary file and a rename, never over an existing file
   without ``force``.
"""
from __future__ import annotations

import datetime as _dt
import io
import os
from typing import Callable, Iterable

FIXED_EPOCH = 0
RC = {"svg.hashsalt": "commsim", "pdf.fonttype": 3, "pdf.compression": 6,
      "font.family": "DejaVu Sans", "axes.titlesize": 11, "figure.dpi": 100}


def creation_date() -> _dt.datetime:
    """From ``SOURCE_DATE_EPOCH`` (reproducible builds) if set, else a fixed epoch."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    try:
        epoch = int(raw) if raw else FIXED_EPOCH
    except ValueError:
        epoch = FIXED_EPOCH
    return _dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc)


def render_pdf(pages: Iterable[Callable[[], object]], *, title: str) -> bytes:
    """Call each page builder (returns a Figure or a list of Figures), one PDF page each."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    buf = io.BytesIO()
    meta = {"Title": title, "Creator": "commsim report", "Producer": "commsim (matplotlib)",
            "CreationDate": creation_date(), "ModDate": None}
    with matplotlib.rc_context(RC), PdfPages(buf, metadata=meta) as pdf:
        for build in pages:
            figs = build()
            for fig in figs if isinstance(figs, list) else [figs]:
                pdf.savefig(fig)
                plt.close(fig)
    return buf.getvalue()


