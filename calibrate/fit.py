"""Fit the cost model to calibration samples (numpy/scipy only: no torch here).

Every fit is linear in its unknowns, t = X·θ with θ >= 0, solved by
``scipy.optimize.least_squares(loss="soft_l1")`` on residuals relative to the measurement
(model/measured - 1, or the log ratio), so microsecond and second timings weigh alike and an
outlier (a scheduler hiccup) is down-weighted.  A link or collective, t = constant + bytes·s, is
fitted in two steps (``slope_then_constant``): s from the largest sizes, the constant from the
latency-bound ones on log residuals (their median).  One line through every size had to follow
both ends and the middle, which is shaped by things the model does not have: a token-bucket
burst that lets 4-16 KB leave at memory speed (a 100 Mbit/s link fitted at 137-197 Mbit/s), a
gather's 5-8 ms bump at 1-16 KB (2 ranks), small all-reduces spread over a multiple of their
median on shared cores (1-10 ms at 4 ranks).  The fitted bandwidth is then what nccl-tests
reports, the bus bandwidth of the largest messages.
95% confidence intervals come from the Jacobian at the optimum (covariance s²(JᵀWJ)⁻¹ with the
soft-L1 weights W), as ±1.96 standard errors; a bandwidth's interval is the inverse of the
interval of its seconds-per-byte.

The forms are the closed forms of ``commsim.closed_form``, read as linear terms by its ``FORMS``
(t = o + latency_mult(p)·α + bytes_mult(p)·n/B + reduce_mult(p)·n·γ): send_recv is the link
(profile ``network``), all_reduce Gloo's ring, gather and scatter the root's NIC serialising p-1
messages, broadcast a binomial tree, barrier 2⌈lg p⌉·α with no payload.

A constant term cannot tell per-message latency from per-call overhead, so collectives take α
from the send/recv fit and report o = constant - (latency multiplier)·α (>= 0).  γ is not
identifiable from all-reduce timings alone either: it comes from timing a local ``a.add_(b)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
from scipy.optimize import least_squares

from commsim import closed_form as cf
from commsim.closed_form import FORMS
from commsim.profile import PHASES, CollectiveFit, NetworkFit

Z95 = 1.959963984540054
SOFT_L1_SCALE = 0.05  # relative residuals beyond ~5% count as outliers
TINY = 1e-300        # keeps log() finite while the solver tries θ = 0


@dataclass(frozen=True)
class LinearFit:
    """θ of t = X·θ, their 95% half-widths, and R² of the fit in absolute seconds."""
    params: tuple[float, ...]
    half_width95: tuple[float, ...]
    r2: float


def robust_linear_fit(X: np.ndarray, t: np.ndarray, *, log: bool = False) -> LinearFit:
    """Non-negative soft-L1 least squares, with 95% intervals.

    Residuals are relative (model/measured - 1), or with ``log`` the log ratio
    log(model) - log(measured).  The two agree for small, symmetric noise (compute
    repetitions, ±10%), but not for timings whose spread is a multiple of their value, as
    small collectives' are on shared cores (1 to 10 ms for the same call): a relative residual
    is bounded below (-1) and unbounded above, so the fit leans towards the fastest calls; a
    log ratio weighs "2x too slow" and "2x too fast" alike and follows their median.
    """
    X = np.asarray(X, dtype=float)
    t = np.asarray(t, dtype=float)
    if len(t) < X.shape[1]:
        raise ValueError(f"need at least {X.shape[1]} samples to fit {X.shape[1]} parameters, "
                         f"got {len(t)}")
    A = X / t[:, None]                       # relative residual r = A·θ - 1
    x0 = np.clip(np.linalg.lstsq(A, np.ones(len(t)), rcond=None)[0], 1e-15, None)
    scale = np.maximum(np.abs(x0), 1e-15)    # conditions the solver: θ spans 1e-9..1e-3
    if log:
        def residual(z):
            return np.log(np.maximum(A @ (z * scale), TINY))

        def jacobian(z):
            return A * scale / np.maximum(A @ (z * scale), TINY)[:, None]
    else:
        def residual(z):
            return A @ (z * scale) - 1.0

        def jacobian(z):
            return A * scale
    # (The relative case keeps scipy's finite-difference Jacobian: its solution is unchanged.)
    res = least_squares(residual, x0 / scale, jac=jacobian if log else "2-point",
                        bounds=(0, np.inf),
                        loss="soft_l1", f_scale=SOFT_L1_SCALE, x_scale="jac", method="trf")
    theta = res.x * scale
    r = residual(theta / scale)
    J = jacobian(theta / scale) / scale      # d r / d θ
    w = 1.0 / np.sqrt(1.0 + (r / SOFT_L1_SCALE) ** 2)   # soft-L1's IRLS weights
    dof = max(len(t) - X.shape[1], 1)
    s2 = float(np.sum(w * r**2) / dof)
    cov = s2 * np.linalg.pinv(J.T @ (w[:, None] * J))
    half = Z95 * np.sqrt(np.clip(np.diag(cov), 0.0, None))
    pred = X @ theta
    r2 = _r2(t, pred)
    return LinearFit(tuple(map(float, theta)), tuple(map(float, half)), r2)


def _r2(t: np.ndarray, pred: np.ndarray) -> float:
    """R² of a prediction in absolute seconds (1 when the times do not vary)."""
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    return 1.0 - float(np.sum((t - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0


def _bw_interval(s_per_B: float, half: float) -> list[float]:
    lo = 1.0 / (s_per_B + half)
    hi = 1.0 / (s_per_B - half) if s_per_B > half else math.inf
    return [lo, hi if math.isfinite(hi) else 1e30]


def _interval(value: float, half: float, floor: float = 0.0) -> list[float]:
    return [max(floor, value - half), value + half]


# nccl-tests' bus bandwidth factors (busbw = algbw * factor); gather/scatter count the bytes
# that cross the root's link, (p-1) messages of n bytes.
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": cf.allreduce_bus_factor,
    "gather": cf.ps_bus_factor,
    "scatter": cf.ps_bus_factor,
    "broadcast": lambda p: 1.0,
    "send_recv": lambda p: 1.0,
    "barrier": lambda p: 0.0,
}


def _points(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Every repetition is one point (the robust loss handles the noisy ones)."""
    n = [r["bytes"] for r in records for _ in r["times_s"]]
    t = [x for r in records for x in r["times_s"]]
    return np.asarray(n, dtype=float), np.asarray(t, dtype=float)


# ``slope_then_constant`` (why: the module docstring): s from the sizes within LINK_SLOPE_SPAN
# of the largest; c from those whose bytes take at most LATENCY_BOUND of their time at that s.
LINK_SLOPE_SPAN = 16.0
LATENCY_BOUND = 0.25


@dataclass(frozen=True)
class TwoStepFit:
    """t = const_s + bytes·s_per_B, their 95% half-widths, and R² in absolute seconds."""
    const_s: float
    s_per_B: float
    half_const_s: float
    half_s_per_B: float
    r2: float


def slope_then_constant(x: np.ndarray, t: np.ndarray, *, what: str) -> TwoStepFit:
    """t = c + x·s, s >= 0 from the largest sizes, c >= 0 from the latency-bound ones (see
    above); ``x`` is the bytes term per point (message bytes times the form's multiplier)."""
    sizes = np.unique(x)
    if len(sizes) < 2:
        raise ValueError(f"{what}: need at least two message sizes to fit a bandwidth")
    big = x >= x.max() / LINK_SLOPE_SPAN
    if len(np.unique(x[big])) < 2:
        big = x >= sizes[-2]
    slope = robust_linear_fit(np.column_stack([np.ones(int(big.sum())), x[big]]), t[big])
    s_per_B, h_s = slope.params[1], slope.half_width95[1]
    if s_per_B <= 0:
        raise ValueError(f"{what} times do not grow with size: cannot fit a bandwidth "
                         "(measure larger sizes)")
    rest = t - x * s_per_B
    keep = (x * s_per_B <= LATENCY_BOUND * t) & (rest > 0)
    if not np.any(keep):
        keep = rest > 0
    if np.any(keep):
        const = robust_linear_fit(np.ones((int(keep.sum()), 1)), rest[keep], log=True)
        c, h_c = const.params[0], const.half_width95[0]
    else:  # every size bandwidth-bound and faster than the line: no constant to see
        c, h_c = 0.0, 0.0
    pred = c + x * s_per_B
    r2 = _r2(t, pred)
    return TwoStepFit(c, s_per_B, h_c, h_s, r2)


def fit_network(records: list[dict]) -> tuple[NetworkFit, CollectiveFit]:
    """send/recv records -> the link (α, B) and its CollectiveFit (``slope_then_constant``)."""
    n, t = _points(records)
    fit = slope_then_constant(n, t, what="send/recv")
    alpha = fit.const_s
    net = NetworkFit(latency_s=alpha, bandwidth_Bps=1.0 / fit.s_per_B)
    ci = {"latency_s": _interval(alpha, fit.half_const_s),
          "bandwidth_Bps": _bw_interval(fit.s_per_B, fit.half_s_per_B)}
    world = records[0].get("world_size", 2)
    return net, CollectiveFit(latency_s=alpha, bandwidth_Bps=1.0 / fit.s_per_B, world_size=world,
                              r2=fit.r2, ci95=ci)


def with_contention(network: NetworkFit, records: list[dict],
                    allreduce_bandwidth_Bps: float) -> NetworkFit:
    """The link plus what the contention records measured (see ``NetworkFit``).

    Per record (k compute threads per rank): load = compute threads per core = ranks on the CPU
    x k x threads per rank / cores; bandwidth = the all-reduce fit's bandwidth x (median time
    alone / median time at this load), so that the per-call latency in one size's time does not
    pass for bandwidth and load 0 is exactly the fit; compute speed = burn rate during the
    all-reduce / burn rate alone.  More load cannot make
    either faster, so both are made non-increasing (a later point that measured faster is noise)
    by a running minimum.
    """
    rows = sorted(records, key=lambda r: r["burn_threads"])
    if len(rows) < 2 or rows[0]["burn_threads"] != 0:
        return network
    loads, bws, speeds = [], [], []
    alone_s = float(np.median(rows[0]["times_s"]))
    for r in rows:
        load = r["ranks_per_cpu"] * r["burn_threads"] * r["threads"] / r["cores"]
        # alone / at-load first: exactly 1 at load 0, so that point is the fit itself
        bw = allreduce_bandwidth_Bps * (alone_s / float(np.median(r["times_s"])))
        speed = (min(1.0, r["burn_rate_during"] / r["burn_rate_alone"])
                 if r["burn_threads"] and r["burn_rate_alone"] > 0 else 1.0)
        loads.append(load)
        bws.append(min(bw, bws[-1]) if bws else bw)
        speeds.append(max(1e-3, min(speed, speeds[-1]) if speeds else speed))
    return replace(network, contention_load=tuple(loads), contention_bandwidth_Bps=tuple(bws),
                   contention_compute_speed=tuple(speeds))


def fit_collective(op: str, records: list[dict], *, world_size: int, network: NetworkFit,
                   reduction_s_per_B: float = 0.0) -> CollectiveFit:
    """Fit ``op``'s form (table above) at ``world_size``; α comes from ``network``."""
    form, p = FORMS[op], world_size
    n, t = _points(records)
    gamma = reduction_s_per_B if form.reduce_mult(p) else 0.0
    known = form.reduce_mult(p) * n * gamma
    y = t - known
    alpha_part = form.latency_mult(p) * network.latency_s
    if form.bytes_mult(p) == 0.0 or np.ptp(n) == 0:
        # No payload: only the constant is measured.
        const = float(np.median(y))
        half = Z95 * float(np.std(y, ddof=1)) / math.sqrt(len(y)) if len(y) > 1 else 0.0
        overhead = max(0.0, const - alpha_part)
        return CollectiveFit(latency_s=network.latency_s, bandwidth_Bps=network.bandwidth_Bps,
                             overhead_s=overhead, world_size=p, r2=None,
                             ci95={"overhead_s": _interval(overhead, half)})
    if np.any(y <= 0):
        y = np.maximum(y, 0.5 * t)  # γ larger than measured: never let a time go negative
    fit = slope_then_constant(form.bytes_mult(p) * n, y, what=op)
    const, s_per_B, h_const, h_s = fit.const_s, fit.s_per_B, fit.half_const_s, fit.half_s_per_B
    overhead = max(0.0, const - alpha_part)
    return CollectiveFit(latency_s=network.latency_s, bandwidth_Bps=1.0 / s_per_B,
                         reduction_s_per_B=gamma, overhead_s=overhead, world_size=p,
                         r2=fit.r2, ci95={"overhead_s": _interval(overhead, h_const),
                                          "bandwidth_Bps": _bw_interval(s_per_B, h_s)})


def fit_reduction(sizes_bytes: list[int], times_s: list[float]) -> tuple[float, list[float]]:
    """γ (seconds per byte) of a local ``a.add_(b)`` and its 95% interval: t = c + γ·n."""
    n = np.asarray(sizes_bytes, dtype=float)
    fit = robust_linear_fit(np.column_stack([np.ones_like(n), n]), np.asarray(times_s))
    return fit.params[1], _interval(fit.params[1], fit.half_width95[1])


# Accept the compute model when the median of its relative residuals at the measured batch sizes
# is within COMPUTE_FIT_MEDIAN and every one within COMPUTE_FIT_MAX; otherwise the table keeps each
# size's own median.  Not tighter: a size's median of 2-3 back-to-back repetitions is ~5-13% off
# the curve here (the machine's speed drifts between sizes, which the fit is there to average);
# a curve of another shape (flat, then linear) misses by more at its knee.
COMPUTE_FIT_MEDIAN = 0.10
COMPUTE_FIT_MAX = 0.15
MIN_FIT_SIZES = 3
QUADRATIC_FIT_SIZES = 5


def fit_compute(records: list[dict], phases: tuple[str, ...]) -> dict:
    """Per phase, a robust polynomial fit t = c0 + c1·batch (+ c2·batch², from
    ``QUADRATIC_FIT_SIZES`` batch sizes on), all cᵢ >= 0, over every repetition of every batch
    size (``{phase}_s`` lists of compute records).

    Why: on this kind of machine one repetition varies by ±25% and a batch size's median of 2-3
    repetitions by ~10%, while a rank's compute is a smooth function of its batch size: close to
    affine (VGG-11 backward ~10 ms per sample), with a per-sample cost that grows where the
    activations outgrow the caches (VGG-11 forward 4.4 → 6.0 ms per sample from 16 to 512: the
    quadratic term).  Pooling all sizes' repetitions in one fit cuts the noise of each entry.
    Where the sweep has another shape the residuals exceed ``COMPUTE_FIT_MEDIAN`` or
    ``COMPUTE_FIT_MAX`` and ``used`` is False.  Returns {phase: {"coefficients_s",
    "batch_sizes", "median_s", "fitted_s", "residual_pct", "used"}}; nothing with fewer than
    ``MIN_FIT_SIZES`` sizes."""
    sizes = sorted({r["batch_size"] for r in records})
    out: dict = {}
    if len(sizes) < MIN_FIT_SIZES:
        return out
    degree = 2 if len(sizes) >= QUADRATIC_FIT_SIZES else 1
    for phase in phases:
        b = np.asarray([r["batch_size"] for r in records for _ in r[f"{phase}_s"]], dtype=float)
        t = np.asarray([x for r in records for x in r[f"{phase}_s"]], dtype=float)
        if not np.all(t > 0):
            continue
        coefficients = robust_linear_fit(np.column_stack([b**i for i in range(degree + 1)]),
                                         t).params
        medians = [float(np.median(t[b == size])) for size in sizes]
        fitted = [_polyval(coefficients, size) for size in sizes]
        resid = [100.0 * (f / m - 1.0) for f, m in zip(fitted, medians)]
        out[phase] = {"coefficients_s": list(coefficients), "batch_sizes": sizes,
                      "median_s": medians, "fitted_s": fitted, "residual_pct": resid,
                      "used": bool(np.median(np.abs(resid)) <= 100.0 * COMPUTE_FIT_MEDIAN
                                   and max(map(abs, resid)) <= 100.0 * COMPUTE_FIT_MAX)}
    return out


COMPUTE_REPRODUCTION_TARGET = 0.05


def table_total_s(profile, batch: float) -> float:
    """The profile's compute table for one iteration at ``batch``: forward+backward+step."""
    return sum(profile.compute.time_s(ph, batch) for ph in PHASES)


def compute_reproduction(records: list[dict], table_s: Callable[[float], float],
                         phases: tuple[str, ...] = PHASES) -> list[dict]:
    """How the compute table reproduces what was measured: per batch size of ``records``
    (compute records, ``{phase}_s`` lists of repetitions), the median over repetitions of the
    phases' sum against ``table_s(batch)``, and how much the repetitions varied (rms of
    log(repetition / median)), which bounds how well any table can match a median of a few."""
    rows = []
    for rec in sorted(records, key=lambda r: r["batch_size"]):
        totals = np.sum([rec[f"{ph}_s"] for ph in phases], axis=0)
        median = float(np.median(totals))
        table = float(table_s(rec["batch_size"]))
        rows.append({"batch_size": rec["batch_size"], "reps": len(totals), "median_s": median,
                     "table_s": table, "error": table / median - 1.0,
                     "spread": float(np.sqrt(np.mean(np.log(totals / median) ** 2)))})
    return rows


def repetition_noise(rows: list[dict]) -> float:
    """The repetitions' rms deviation from their size's median, pooled over ``rows``
    (``compute_reproduction``), with n-1 degrees of freedom a size."""
    dof = sum(r["reps"] - 1 for r in rows)
    return math.sqrt(sum(r["spread"] ** 2 * r["reps"] for r in rows) / dof) if dof > 0 else 0.0


def median_error(rms: float, n: int) -> float:
    """The standard error of a median of ``n`` repetitions with rms deviation ``rms`` (normal
    noise): the mean's rms / sqrt(n) up to 2 repetitions, ~1.25 times that from 3 on."""
    return rms / math.sqrt(n) * (1.0 if n <= 2 else 1.2533)


def profile_reproduction(profile) -> list[dict]:
    """``compute_reproduction`` of a profile's alone table (forward+backward+step) against the
    repetitions in its samples; empty when it has none."""
    records = [r for r in (profile.samples or {}).get("compute", [])
               if all(r.get(f"{ph}_s") for ph in PHASES)]
    return compute_reproduction(records, lambda b: table_total_s(profile, b))


def format_compute_reproduction(profile) -> str:
    """``profile_reproduction``, a line a batch size, and a summary line that says when the
    table misses a median by more than the target, and why it may."""
    rows = profile_reproduction(profile)
    if not rows:
        return "compute: no repetitions in the profile's samples"
    lines = [f"compute alone, batch {r['batch_size']:4d}: median {r['median_s']:.4f} s of "
             f"{r['reps']} (±{r['spread']:.1%} rms), table {r['table_s']:.4f} s "
             f"({r['error']:+.1%})" for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    noise = repetition_noise(rows)
    fewest = min(r["reps"] for r in rows)
    line = (f"compute table vs the measured medians: max {abs(worst['error']):.1%} (batch "
            f"{worst['batch_size']}); repetitions varied {noise:.1%} rms")
    if abs(worst["error"]) > COMPUTE_REPRODUCTION_TARGET:
        line += (f": the table misses a median by more than {COMPUTE_REPRODUCTION_TARGET:.0%}, "
                 f"and a median of {fewest} such repetitions is itself ±"
                 f"{median_error(noise, fewest):.1%}; more repetitions (--compute-reps) or a "
                 f"quieter host make the table steadier")
    return "\n".join([*lines, line])


def _polyval(coefficients, x: float) -> float:
    return float(sum(c * x**i for i, c in enumerate(coefficients)))


def smooth_compute(table: dict, fits: dict) -> dict:
    """``table`` (``compute.summarize``'s medians) with each phase whose fit was accepted
    replaced by the fit's values at the table's batch sizes (spreads stay as measured)."""
    out = dict(table)
    for phase, f in fits.items():
        if f["used"]:
            out[f"{phase}_s"] = [_polyval(f["coefficients_s"], b) for b in table["batch_sizes"]]
    return out


def predict(op: str, fit: CollectiveFit, nbytes: float) -> float:
    """The fitted time of one ``op`` call of ``nbytes`` per rank."""
    form, p = FORMS[op], fit.world_size
    if op == "send_recv":
        return fit.latency_s + nbytes / fit.bandwidth_Bps
    return (fit.overhead_s + form.latency_mult(p) * fit.latency_s
            + form.bytes_mult(p) * nbytes / fit.bandwidth_Bps
            + form.reduce_mult(p) * nbytes * fit.reduction_s_per_B)


def nccl_table(records: list[dict]) -> list[dict]:
    """nccl-tests-style rows: size, count, time (median), algbw, busbw, #wrong."""
    rows = []
    for r in sorted(records, key=lambda r: (r["op"], r["bytes"])):
        t = float(np.median(r["times_s"]))
        algbw = r["bytes"] / t if t > 0 else 0.0
        rows.append({"op": r["op"], "size_bytes": r["bytes"], "count": r["count"],
                     "type": "float", "time_s": t, "algbw_Bps": algbw,
                     "busbw_Bps": algbw * BUSBW_FACTOR[r["op"]](r["world_size"]),
                     "wrong": r["wrong"]})
    return rows


def format_nccl_table(rows: list[dict]) -> str:
    """The rows as text, one block per op, like nccl-tests' output (GB/s = 1e9 B/s)."""
    lines = []
    for op in dict.fromkeys(r["op"] for r in rows):
        lines.append(f"# {op}")
        lines.append(f"#{'size':>12} {'count':>10} {'type':>6} {'time(us)':>11} "
                     f"{'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6}")
        for r in (r for r in rows if r["op"] == op):
            lines.append(f" {r['size_bytes']:>12} {r['count']:>10} {r['type']:>6} "
                         f"{r['time_s'] * 1e6:>11.1f} {r['algbw_Bps'] / 1e9:>11.4f} "
                         f"{r['busbw_Bps'] / 1e9:>11.4f} {r['wrong']:>6}")
    return "\n".join(lines)
