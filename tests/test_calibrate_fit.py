"""Fits recover known latency, bandwidth and reduction cost from noisy synthetic timings."""
import math

import numpy as np
import pytest

from commsim.calibrate import fit as F
from commsim.profile import NetworkFit

SIZES = [4 * 4**k for k in range(13)]  # 4 B .. 64 MiB


def records(op, times_fn, p=4, noise=0.02, outlier=True, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in SIZES:
        t = [times_fn(n) * (1 + noise * rng.standard_normal()) for _ in range(5)]
        out.append({"op": op, "bytes": n, "count": max(1, n // 4), "world_size": p,
                    "times_s": t, "wrong": 0})
    if outlier:
        out[6]["times_s"][0] *= 8  # a scheduler hiccup
    return out


ALPHA, BW, GAMMA, OVER = 80e-6, 125e6, 2e-9, 30e-6


def test_send_recv_fit_recovers_latency_and_bandwidth_with_noise_and_an_outlier():
    net, coll = F.fit_network(records("send_recv", lambda n: ALPHA + n / BW, p=2))
    assert net.latency_s == pytest.approx(ALPHA, rel=0.1)
    assert net.bandwidth_Bps == pytest.approx(BW, rel=0.03)
    lo, hi = coll.ci95["bandwidth_Bps"]
    assert lo < BW < hi and hi / lo < 1.2


def test_all_reduce_fit_separates_bandwidth_from_the_measured_reduction_cost():
    p = 4
    truth = lambda n: OVER + 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * n / BW + (p - 1) / p * n * GAMMA  # noqa: E731
    fit = F.fit_collective("all_reduce", records("all_reduce", truth, p=p), world_size=p,
                           network=NetworkFit(ALPHA, BW), reduction_s_per_B=GAMMA)
    assert fit.bandwidth_Bps == pytest.approx(BW, rel=0.03)
    assert fit.overhead_s == pytest.approx(OVER, abs=20e-6)
    assert fit.reduction_s_per_B == GAMMA and fit.world_size == p
    assert F.predict("all_reduce", fit, 1 << 20) == pytest.approx(truth(1 << 20), rel=0.03)
    # Ignoring γ would bias the bandwidth low: the test can tell the two apart.
    naive = F.fit_collective("all_reduce", records("all_reduce", truth, p=p), world_size=p,
                             network=NetworkFit(ALPHA, BW))
    assert naive.bandwidth_Bps < 0.9 * BW


@pytest.mark.parametrize("op", ["gather", "scatter", "broadcast"])
def test_rooted_collectives_recover_the_link_bandwidth(op):
    p = 4
    form = F.FORMS[op]
    truth = lambda n: OVER + form.latency_mult(p) * ALPHA + form.bytes_mult(p) * n / BW  # noqa: E731
    fit = F.fit_collective(op, records(op, truth, p=p), world_size=p,
                           network=NetworkFit(ALPHA, BW))
    assert fit.bandwidth_Bps == pytest.approx(BW, rel=0.03)
    assert F.predict(op, fit, 4 << 20) == pytest.approx(truth(4 << 20), rel=0.03)


def test_barrier_fit_is_its_overhead_beyond_the_latency_rounds():
    recs = [{"op": "barrier", "bytes": 0, "count": 1, "world_size": 4,
             "times_s": [OVER + 4 * ALPHA] * 5, "wrong": 0}]
    fit = F.fit_collective("barrier", recs, world_size=4, network=NetworkFit(ALPHA, BW))
    assert fit.overhead_s == pytest.approx(OVER)


def test_reduction_cost_is_the_slope_of_local_add_times():
    sizes = [1 << 16, 1 << 20, 1 << 22, 1 << 24]
    gamma, (lo, hi) = F.fit_reduction(sizes, [5e-6 + GAMMA * n for n in sizes])
    assert gamma == pytest.approx(GAMMA, rel=1e-3) and lo <= gamma <= hi


def test_nccl_table_bus_bandwidth_for_all_reduce():
    recs = [{"op": "all_reduce", "bytes": 1 << 20, "count": 1 << 18, "world_size": 4,
             "times_s": [0.01, 0.01, 0.03], "wrong": 1}]
    (row,) = F.nccl_table(recs)
    assert row["algbw_Bps"] == pytest.approx((1 << 20) / 0.01)
    assert row["busbw_Bps"] == pytest.approx(row["algbw_Bps"] * 1.5)
    assert row["wrong"] == 1 and "#wrong" in F.format_nccl_table([row])


def test_sweep_stop_rule_does_not_mistake_latency_for_bandwidth():
    """A latency-bound 1.5 ms at 4 B must not predict 6 s at 16 kB (the old proportional rule
    stopped loaded sweeps after one size); a bandwidth-bound curve extrapolates its slope."""
    from commsim.calibrate.collectives import _next_call_s
    flat = [{"bytes": 4, "times_s": [1.5e-3]}, {"bytes": 16, "times_s": [1.5e-3]}]
    assert _next_call_s(flat, 16384, "all_reduce") == pytest.approx(1.5e-3)
    steep = [{"bytes": 1 << 20, "times_s": [0.01]}, {"bytes": 4 << 20, "times_s": [0.04]}]
    assert _next_call_s(steep, 16 << 20, "all_reduce") == pytest.approx(0.16)
    assert _next_call_s(steep, 16 << 20, "send_recv") == pytest.approx(0.32)


BATCHES = (16, 32, 64, 128, 256, 512)


def compute_records(fn, noise=0.08, reps=3, seed=1):
    rng = np.random.default_rng(seed)
    return [{"batch_size": b, "forward_s": [fn(b) * (1 + noise * rng.standard_normal())
                                            for _ in range(reps)]} for b in BATCHES]


def test_compute_fit_pools_noisy_repetitions_and_replaces_the_medians():
    truth = lambda b: 0.01 + 0.016 * b  # noqa: E731  VGG-11 on this CPU: ~16 ms per sample
    fit_errs, median_errs = [], []
    for seed in range(20):
        recs = compute_records(truth, seed=seed)
        recs[seed % 6]["forward_s"][0] *= 3  # one descheduled repetition
        fits = F.fit_compute(recs, ("forward",))
        f = fits["forward"]
        assert f["used"]
        table = {"batch_sizes": list(BATCHES), "forward_s": f["median_s"]}
        smoothed = F.smooth_compute(table, fits)
        fit_errs.append(max(abs(s / truth(b) - 1) for b, s in zip(BATCHES, smoothed["forward_s"])))
        median_errs.append(max(abs(m / truth(b) - 1) for b, m in zip(BATCHES, f["median_s"])))
    # Pooling 18 repetitions beats each size's median of 3 (worst size, on average over seeds).
    assert np.mean(fit_errs) < 0.6 * np.mean(median_errs)


def test_a_per_sample_cost_growing_with_the_batch_is_fitted_by_the_quadratic_term():
    truth = lambda b: 0.004 * b + 4e-6 * b * b  # noqa: E731  4 -> 6 ms per sample, 16 -> 512
    f = F.fit_compute(compute_records(truth, noise=0.0), ("forward",))["forward"]
    assert f["used"] and max(abs(r) for r in f["residual_pct"]) < 1e-3
    assert f["coefficients_s"][2] == pytest.approx(4e-6, rel=1e-3)


def test_compute_that_is_not_smooth_keeps_its_medians():
    # A device that is not saturated below batch 128: flat, then linear.
    fn = lambda b: 0.05 * max(1.0, b / 128)  # noqa: E731
    recs = compute_records(fn, noise=0.01)
    assert not F.fit_compute(recs, ("forward",))["forward"]["used"]
    # Or a cache cliff: per-sample cost doubles from batch 128 on.
    fn = lambda b: 0.001 * b * (1 if b < 128 else 2)  # noqa: E731
    recs = compute_records(fn, noise=0.01)
    fits = F.fit_compute(recs, ("forward",))
    assert not fits["forward"]["used"]
    table = {"batch_sizes": list(BATCHES), "forward_s": fits["forward"]["median_s"]}
    assert F.smooth_compute(table, fits) == table


def test_two_batch_sizes_are_not_fitted():
    recs = compute_records(lambda b: 0.01 * b)[:2]
    assert F.fit_compute(recs, ("forward",)) == {}


def test_log_residuals_follow_the_median_of_skewed_small_message_times():
    # Small calls on shared cores: a per-call cost whose spread is a multiple of itself
    # (log-normal, median 2 ms), on top of a clean 100 MB/s transfer term.
    n = np.repeat(np.asarray(SIZES, dtype=float), 5)
    X = np.column_stack([np.ones_like(n), n])
    log_fits, rel_fits = [], []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        t = (2e-3 * np.exp(0.5 * rng.standard_normal(len(n)))
             + n / 100e6 * (1 + 0.02 * rng.standard_normal(len(n))))
        log_fits.append(F.robust_linear_fit(X, t, log=True).params)
        rel_fits.append(F.robust_linear_fit(X, t).params)
    for const, s_per_B in log_fits:
        assert const == pytest.approx(2e-3, rel=0.1)
        assert 1 / s_per_B == pytest.approx(100e6, rel=0.03)
    # Relative residuals lean towards the fastest calls: the constant comes out low.
    assert np.mean([c for c, _ in rel_fits]) < 0.9 * 2e-3


def test_gather_bandwidth_comes_from_large_sizes_despite_a_mid_size_bump():
    # 2 ranks at 100 Mbit/s as measured (bench/fidelity): 0.4-0.9 ms up to 256 B,
    # 5-8 ms at 1-16 KB (TCP acknowledgement timing), then the link's 11.3 MB/s.
    medians_ms = {4: 0.39, 16: 0.41, 64: 0.93, 256: 0.72, 1024: 7.28, 4096: 5.39,
                  16384: 7.67, 65536: 16.33, 262144: 30.14, 1048576: 97.03, 4194304: 370.67}
    recs = [{"op": "gather", "bytes": n, "count": n // 4, "world_size": 2,
             "times_s": [t / 1e3] * 5, "wrong": 0} for n, t in medians_ms.items()]
    fit = F.fit_collective("gather", recs, world_size=2, network=NetworkFit(3e-4, 11.8e6))
    assert fit.bandwidth_Bps == pytest.approx(4194304 / 0.37067, rel=0.1)


def test_link_bandwidth_is_not_fooled_by_a_token_bucket_burst():
    # send/recv at 100 Mbit/s through tbf with a 12 KB burst, as measured (4 ranks):
    # 4-16 KB leave inside the burst at ~190 Mbit/s.  One relative fit over every size put the
    # link at 197 Mbit/s; the large sizes say 96.
    medians_ms = {4: 0.19, 16: 0.10, 64: 0.11, 256: 0.11, 1024: 0.09, 4096: 0.17, 16384: 0.71,
                  65536: 4.79, 262144: 21.51, 1048576: 87.36, 4194304: 350.25}
    recs = [{"op": "send_recv", "bytes": n, "count": n // 4, "world_size": 2,
             "times_s": [t / 1e3] * 5, "wrong": 0} for n, t in medians_ms.items()]
    net, _ = F.fit_network(recs)
    assert net.bandwidth_Bps == pytest.approx(4194304 / 0.35025, rel=0.02)
    # α: the latency-bound sizes' median (4 B-1 KB: 0.09-0.19 ms)
    assert 0.09e-3 <= net.latency_s <= 0.19e-3


def test_all_reduce_constant_is_the_median_of_skewed_small_calls():
    # Small calls spread log-normally around 5 ms (4 ranks on 2 cores), large ones at 12 MB/s.
    rng = np.random.default_rng(0)
    recs = []
    for n in SIZES:
        t = 5e-3 * np.exp(0.5 * rng.standard_normal(5)) + 1.5 * n / 12e6
        recs.append({"op": "all_reduce", "bytes": n, "count": n // 4, "world_size": 4,
                     "times_s": list(t), "wrong": 0})
    fit = F.fit_collective("all_reduce", recs, world_size=4, network=NetworkFit(1e-4, 12e6))
    assert fit.bandwidth_Bps == pytest.approx(12e6, rel=0.03)
    assert fit.overhead_s + 6 * 1e-4 == pytest.approx(5e-3, rel=0.25)


def _recs():
    # Batch 32: totals 2.0, 3.0, 2.5 (median 2.5); batch 16: totals 1.0 and 1.0.
    return [{"batch_size": 32, "forward_s": [1.0, 2.0, 1.5], "backward_s": [1.0, 1.0, 1.0],
             "optimizer_s": [0.0, 0.0, 0.0]},
            {"batch_size": 16, "forward_s": [0.5, 0.5], "backward_s": [0.4, 0.4],
             "optimizer_s": [0.1, 0.1]}]


def test_compute_reproduction_compares_the_table_with_each_size_s_median_of_totals():
    rows = F.compute_reproduction(_recs(), {16: 1.1, 32: 2.5}.get)
    assert [r["batch_size"] for r in rows] == [16, 32] and [r["reps"] for r in rows] == [2, 3]
    assert rows[0]["median_s"] == pytest.approx(1.0) and rows[0]["error"] == pytest.approx(0.1)
    assert rows[0]["spread"] == 0.0
    assert rows[1]["median_s"] == pytest.approx(2.5) and rows[1]["error"] == pytest.approx(0.0)
    spread = math.sqrt((math.log(0.8) ** 2 + math.log(1.2) ** 2) / 3)
    assert rows[1]["spread"] == pytest.approx(spread)
    # Pooled: squared deviations over 1 + 2 degrees of freedom.
    assert F.repetition_noise(rows) == pytest.approx(math.sqrt(3 * spread**2 / 3))
    assert F.median_error(0.1, 2) == pytest.approx(0.1 / math.sqrt(2))
    assert F.median_error(0.1, 4) == pytest.approx(0.1 / 2 * 1.2533)


def test_calibrate_says_when_the_table_misses_a_median_by_more_than_the_target():
    class Table:
        def __init__(self, seconds):
            self.seconds = seconds

        def time_s(self, phase, batch):
            return self.seconds[batch] if phase == "forward" else 0.0

    class Prof:
        def __init__(self, seconds, samples=None):
            self.compute = Table(seconds)
            self.samples = {"compute": _recs()} if samples is None else samples

    close = F.format_compute_reproduction(Prof({16: 1.04, 32: 2.5}))
    assert close.splitlines()[-1].startswith("compute table vs the measured medians: max 4.0% "
                                             "(batch 16)")
    assert "more than 5%" not in close
    far = F.format_compute_reproduction(Prof({16: 1.06, 32: 2.5})).splitlines()
    assert len(far) == 3 and "batch   32: median 2.5000 s of 3" in far[1]
    assert "max 6.0% (batch 16)" in far[-1] and "more than 5%" in far[-1]
    assert "no repetitions" in F.format_compute_reproduction(Prof({}, samples={}))
