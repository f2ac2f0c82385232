"""What a profile holds, and how two profiles differ, without reading 50 KB of JSON.

1. ``summary(profile)``: a nested dict of what a user asks first: the model (parameters,
   gradient bytes, tensors, buffers), compute per calibrated batch size (forward, backward,
   optimizer, per sample), the link and every collective fit, and where and how it was measured
   (the metadata).  Plain data: ``--json`` prints it as is.
2. ``format_summary``: the same as a short text.
3. ``diff(a, b)``: every leaf of the two summaries that differs, one row each with both values
   and, for numbers, the change b/a - 1.  ``format_diff``: those rows as a table.
"""
from __future__ import annotations

from typing import Any, Iterator

from commsim.profile import PHASES, Profile
from commsim.table import text_table
from commsim.units import fmt_bytes, fmt_rate, fmt_time

# Metadata keys worth a line, in the order a reader wants them.
MEASURED = ("source", "command", "created", "launch", "nodes", "ranks_per_host",
            "threads_per_rank", "cores", "cpu", "host", "torch_version", "backend",
            "interface", "emulated_rate_Bps", "quick", "device", "traces", "iterations",
            "network_from")


def summary(profile: Profile) -> dict[str, Any]:
    comp = profile.compute
    compute = {}
    for i, batch in enumerate(comp.batch_sizes):
        row = {f"{ph}_s": comp.time_s(ph, batch) for ph in PHASES}
        row["total_s"] = sum(row.values())
        row["per_sample_s"] = row["total_s"] / batch
        compute[str(batch)] = row
    net = profile.network
    return {
        "schema_version": profile.schema_version,
        "model": {"name": profile.model_name, "input_shape": list(profile.input_shape),
                  "parameters": profile.model_numel, "gradient_bytes": profile.model_bytes,
                  "tensors": len(profile.params), "buffer_bytes": profile.buffer_bytes},
        "compute": {"threads_per_rank": comp.threads_per_rank,
                    "batch_sizes": list(comp.batch_sizes), "per_batch": compute,
                    "contended": bool(comp.contended), "oversubscribed": bool(comp.oversubscribed)},
        "network": {"latency_s": net.latency_s, "bandwidth_Bps": net.bandwidth_Bps,
                    "intra_host_latency_s": net.intra_host_latency_s,
                    "intra_host_bandwidth_Bps": net.intra_host_bandwidth_Bps,
                    "contention_points": len(net.contention_load)},
        "collectives": {name: {"bandwidth_Bps": fit.bandwidth_Bps, "overhead_s": fit.overhead_s,
                               "reduction_s_per_B": fit.reduction_s_per_B,
                               "world_size": fit.world_size, "r2": fit.r2}
                        for name, fit in sorted(profile.collectives.items())},
        "measured": {k: profile.metadata[k] for k in MEASURED if k in profile.metadata},
    }


def format_summary(s: dict[str, Any], label: str = "") -> str:
    m, comp, net = s["model"], s["compute"], s["network"]
    lines = [f"profile {label}".rstrip() + f" (schema v{s['schema_version']})", "",
             f"model     {m['name']}: {m['parameters']:,} parameters, "
             f"{fmt_bytes(m['gradient_bytes'])} of gradients in {m['tensors']} tensors, "
             f"buffers {fmt_bytes(m['buffer_bytes'])}, input {tuple(m['input_shape'])}",
             f"link      latency {fmt_time(net['latency_s'])}, bandwidth "
             f"{fmt_rate(net['bandwidth_Bps'])}"
             + (f"; within a host {fmt_time(net['intra_host_latency_s'])}, "
                f"{fmt_rate(net['intra_host_bandwidth_Bps'])}"
                if net["intra_host_bandwidth_Bps"] else "")
             + (f"; {net['contention_points']} contention points" if net["contention_points"]
                else ""),
             "", f"compute ({comp['threads_per_rank']} thread(s) a rank"
             + (", with all ranks at once" if comp["contended"] else "")
             + (", with co-runners" if comp["oversubscribed"] else "") + "):"]
    rows = [{"batch": b, **{k: fmt_time(v) for k, v in r.items() if k != "per_sample_s"},
             "per sample": fmt_time(r["per_sample_s"])} for b, r in comp["per_batch"].items()]
    lines.append(text_table(rows, columns=[
        ("batch", "batch", str), ("forward", "forward_s", str), ("backward", "backward_s", str),
        ("optimizer", "optimizer_s", str), ("total", "total_s", str),
        ("per sample", "per sample", str)]))
    lines += ["", "collectives:"]
    rows = [{"op": op, "ranks": str(f["world_size"]), "bandwidth": fmt_rate(f["bandwidth_Bps"]),
             "overhead": fmt_time(f["overhead_s"]), "gamma": f"{f['reduction_s_per_B']:.3g} s/B",
             "r2": "-" if f["r2"] is None else f"{f['r2']:.3f}"}
            for op, f in s["collectives"].items()]
    lines.append(text_table(rows, columns=[(k, k, str) for k in
                                           ("op", "ranks", "bandwidth", "overhead", "gamma",
                                            "r2")]))
    lines += ["", "measured:"]
    width = max((len(k) for k in s["measured"]), default=0)
    lines += [f"  {k:{width}s}  {v}" for k, v in s["measured"].items()]
    return "\n".join(lines)


def _leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    else:
        yield path, obj


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def diff(a: Profile, b: Profile) -> list[dict[str, Any]]:
    """Every summary leaf that differs: {field, a, b, change} (change = b/a - 1 for numbers)."""
    left, right = dict(_leaves(summary(a))), dict(_leaves(summary(b)))
    rows = []
    for key in list(left) + [k for k in right if k not in left]:
        x, y = left.get(key), right.get(key)
        if x == y:
            continue
        change = (y / x - 1.0) if _is_number(x) and _is_number(y) and x else None
        rows.append({"field": key, "a": x, "b": y, "change": change})
    return rows


def _show(field: str, value: Any, width: int = 48) -> str:
    """A value as the table shows it: units for rates and times, long text cut (--json has it
    whole)."""
    if value is None:
        return "-"
    if not _is_number(value) or isinstance(value, int):
        text = str(value)
        return text if len(text) <= width else text[:width - 3] + "..."
    if field.endswith("_Bps"):
        return fmt_rate(value)
    if field.endswith("_s"):
        return fmt_time(value)
    return f"{value:.4g}"


def format_diff(rows: list[dict[str, Any]], a_label: str = "a", b_label: str = "b") -> str:
    if not rows:
        return "the profiles hold the same model, compute, link, fits and provenance"
    shown = [{"field": r["field"], "a": _show(r["field"], r["a"]),
              "b": _show(r["field"], r["b"]),
              "change": "" if r["change"] is None else f"{r['change']:+.1%}"} for r in rows]
    return (f"{len(rows)} difference(s), a = {a_label}, b = {b_label}:\n"
            + text_table(shown, columns=[("field", "field", str), ("a", "a", str),
                                         ("b", "b", str), ("change", "change", str)]))
