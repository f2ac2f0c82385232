"""Analysis: the tables, timelines, plots, PDF report and Chrome trace built on the simulator.

Layers, each usable alone:

* ``tables``   — data only (lists of dicts): scaling, compute vs communication per rank, bandwidth
  utilisation, compute vs batch size; ``Runs`` memoises the predictions they share.
* ``timeline`` — one iteration per rank as compute / communication / idle segments (Gantt data).
* ``fits``     — calibration fits with their raw samples and fitted lines.
* ``compare``  — predicted vs measured rows read from a validation file.
* ``trace``    — the simulated iteration as a Chrome trace (Perfetto, chrome://tracing).
* ``plots``    — matplotlib figures (Agg) of the above; ``pdf`` assembles them deterministically.
* ``report``   — ``build_report`` (all data) and ``write_report`` (PDF, CSV, JSON).

matplotlib is imported only inside ``plots`` and ``pdf``, never by the data modules.
"""
