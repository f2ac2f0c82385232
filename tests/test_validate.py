"""Validation: the comparison arithmetic, and a CI-sized live validate (2 ranks, tiny model)."""
import json
import math
import re

import pytest

from commsim.analysis.validate import ValidationGrid, compare, error_pct, summarize, validate
from profiles import make_profile


def test_error_is_signed_percent_of_measurement():
    assert error_pct(1.1, 1.0) == pytest.approx(10.0)
    assert error_pct(0.9, 1.0) == pytest.approx(-10.0)
    assert math.isnan(error_pct(1.0, 0.0))


def test_error_splits_into_compute_and_exposed_sync_points():
    predicted = {"iteration_s": 1.5, "compute_s": 1.0, "exposed_comm_s": 0.5}
    # Live's exposed sync is a max over ranks (here from another rank than its compute): the
    # split uses iteration - compute on both sides, so the parts add up to the error.
    measured = {"strategy": "ring", "nodes": 2, "iteration_s": 2.0, "compute_s": 1.2,
                "exposed_comm_s": 0.95}
    row = compare(predicted, measured)
    assert row["error_pct"] == pytest.approx(-25.0)
    # (1.0 - 1.2) / 2.0 and (0.5 - 0.8) / 2.0 of the measured iteration: -10 and -15 points.
    assert row["compute_error_pp"] == pytest.approx(-10.0)
    assert row["sync_error_pp"] == pytest.approx(-15.0)
    # A live run that could not split its iteration says so rather than guessing.
    partial = compare(predicted, {**measured, "compute_s": None})
    assert partial["compute_error_pp"] is None and partial["sync_error_pp"] is None


def test_ddp_split_compares_the_probe_with_communication_free_compute():
    """Live times DDP's compute on a communication-free copy; the row's predicted compute is
    the simulator's counterpart (ring's compute on the same cluster), not DDP's compute with
    backward slowed by the buckets in flight, which stays apart."""
    from commsim.analysis.validate import communication_free_compute_s
    from commsim.api import Scenario, predict
    prof = make_profile(gamma_s_per_B=1e-8)
    sc = Scenario(global_batch=64, cores_per_host=1, first_bucket_bytes=4000)
    ddp = predict(prof, "ddp", 2, sc)
    free = communication_free_compute_s(prof, 2, sc)
    assert free == predict(prof, "ring", 2, sc).compute_s
    assert ddp.compute_s > free * (1 + 1e-6)  # the Gloo thread's reductions slowed backward
    measured = {"strategy": "ddp", "nodes": 2, "iteration_s": ddp.iteration_s,
                "compute_s": free, "exposed_comm_s": ddp.iteration_s - free}
    row = compare(ddp.to_dict(), measured, probe_compute_s=free)
    assert row["predicted_compute_overlapped_s"] == ddp.compute_s
    assert row["compute_error_pp"] == 0.0 and row["sync_error_pp"] == pytest.approx(0.0)


def test_summary_median_p90_max_and_verdict():
    rows = [{"error_pct": e} for e in (-1.0, 2.0, -3.0, 4.0, 10.0)]
    s = summarize(rows, tolerance_pct=3.0)
    assert s["median_abs_error_pct"] == 3.0
    assert s["max_abs_error_pct"] == 10.0 and s["p90_abs_error_pct"] == 10.0
    assert s["passed"] is True
    assert summarize(rows, tolerance_pct=2.9)["passed"] is False


def test_validate_with_a_stand_in_live_run():
    """The grid loop predicts with the cluster the live run had and compares cell by cell."""
    profile = make_profile()
    seen = []

    def fake_live(strategy, nodes, emulate):
        seen.append((strategy, nodes, emulate))
        return {"strategy": strategy, "nodes": nodes, "batch_per_rank": 256 // nodes,
                "iteration_s": 1.0, "iteration_s_spread": 0.01, "threads_per_rank": 1}

    grid = ValidationGrid(strategies=("ring", "ps"), nodes=(2, 3))
    report = validate(grid, profile, run_live=fake_live)
    assert seen == [("ring", 2, None), ("ring", 3, None), ("ps", 2, None), ("ps", 3, None)]
    assert len(report.rows) == 4
    for row in report.rows:
        assert row["error_pct"] == pytest.approx(100 * (row["predicted_s"] - 1.0))
    json.dumps(report.to_dict())


def test_each_cell_is_predicted_with_the_threads_its_ranks_ran_and_the_cores_they_shared():
    """A profile calibrated on 2 emulated nodes of a 16-core machine (8 compute threads a rank)
    against a live run of 4 nodes there (4 threads a rank, as the launcher gives them): the
    prediction is the one for 4 threads a rank on 16 shared cores, which a re-prediction on
    another machine gets by naming the 16 cores; a record without the threads is predicted as
    calibrated (DDP's Gloo threads then share the cores with 32 compute threads, not 16)."""
    from commsim.api import predict
    from commsim.analysis.validate import live_scenario

    # (reductions long enough to overlap backward, on a link fast enough to leave it exposed)
    profile = make_profile(threads=8, gamma_s_per_B=1e-8, param_bytes=(4_000_000,) * 3,
                           bandwidth_Bps=1e9)
    grid = ValidationGrid(strategies=("ddp",), nodes=(4,), bucket_mb=4)

    def live(threads):
        def run(strategy, nodes, emulate):
            return {"strategy": strategy, "nodes": nodes, "batch_per_rank": 64,
                    "iteration_s": 1.0, "threads_per_rank": threads}
        return run

    row = validate(grid, profile, run_live=live(4), cores=16.0).rows[0]
    asked = live_scenario(profile, grid, 4, None, 4, 16.0)
    assert asked.threads_per_rank == 4 and asked.shared_cpu_cores == 16.0
    assert row["predicted_s"] == predict(profile, "ddp", 4, asked).iteration_s
    as_calibrated = validate(grid, profile, run_live=live(None), cores=16.0).rows[0]
    assert as_calibrated["predicted_s"] == predict(
        profile, "ddp", 4, live_scenario(profile, grid, 4, None, None, 16.0)).iteration_s
    assert as_calibrated["predicted_s"] != row["predicted_s"]


def test_what_if_cells_predict_and_run_the_same_what_if():
    """A grid with k=2 runs live with k=2 (whole cycles) and predicts k=2: the prediction is the
    simulator's for that what-if, not the plain one's."""
    profile = make_profile()
    grid = ValidationGrid(strategies=("ring",), nodes=(2,), iterations=3, sync_every=2)
    kw = grid.live_kwargs("ring")
    assert kw["sync_every"] == 2 and kw["iterations"] == 4 and kw["compression"] is None
    assert grid.variant == "k=2"
    assert ValidationGrid(group_size=2, compression="fp16").variant == "g=2 fp16"

    def fake_live(strategy, nodes, emulate):
        return {"strategy": strategy, "nodes": nodes, "iteration_s": 1.0}

    row = validate(grid, profile, run_live=fake_live).rows[0]
    plain = validate(ValidationGrid(strategies=("ring",), nodes=(2,)), profile,
                     run_live=fake_live).rows[0]
    assert row["variant"] == "k=2" and plain["variant"] == ""
    assert row["predicted_s"] < plain["predicted_s"]   # one sync per two passes


@pytest.mark.torch
@pytest.mark.slow
def test_ci_sized_live_validate(tmp_path, capsys):
    """Calibrate a tiny model on 2 local ranks, validate ring on 2 ranks: the error is finite and
    reported (the bound belongs to bench/fidelity, not to a unit test)."""
    pytest.importorskip("torch")
    from commsim.cli import main
    prof = tmp_path / "p.json"
    code = main(["calibrate", "--quick", "--nodes", "2", "--model",
                 "commsim.calibrate.live:small_cnn", "--out", str(prof)])
    assert code == 0
    # Progress without a terminal: plain lines relayed from rank 0, counting every key measured
    # up to the total, which the lazy sweeps only estimate until they have run.
    counts = [tuple(map(int, m.groups())) for m in
              re.finditer(r"^\[calibrate +\d+s\] (\d+)/(\d+) ", capsys.readouterr().err, re.M)]
    assert counts[0][0] == 0 and len(counts) > 10
    assert [d for d, _ in counts] == list(range(len(counts)))
    assert counts[-1][0] == counts[-1][1]
    out = tmp_path / "v.json"
    code = main(["validate", "--profile", str(prof), "--strategies", "ring", "--nodes", "2",
                 "--iterations", "3", "--global-batch", "16", "--tolerance", "1000",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    row = report["rows"][0]
    assert row["strategy"] == "ring" and row["nodes"] == 2
    assert math.isfinite(row["error_pct"]) and row["measured_s"] > 0 and row["predicted_s"] > 0
    assert math.isfinite(report["summary"]["median_abs_error_pct"])


def test_what_if_rate_asks_the_predictions_for_the_rate_the_cells_ran_at():
    """A profile calibrated at one rate, live cells on a real cluster whose link was changed:
    --what-if-rate makes every prediction ask that rate (as predict --bandwidth does)."""
    from commsim.api import predict
    prof = make_profile(bandwidth_Bps=1e6)   # calibrated: 8 Mbit/s, no emulated rate recorded

    def live(strategy, nodes, emulate):
        assert emulate is None                  # a real cluster: nothing emulated
        return {"strategy": strategy, "nodes": nodes, "iteration_s": 1.0, "compute_s": 0.5,
                "exposed_comm_s": 0.5}

    same = validate(ValidationGrid(strategies=("ring",), nodes=(2,), global_batch=64), prof,
                    run_live=live)
    faster = validate(ValidationGrid(strategies=("ring",), nodes=(2,), global_batch=64,
                                     what_if_rate_Bps=1e8), prof, run_live=live)
    asked = faster.rows[0]["predicted_s"]
    assert asked < same.rows[0]["predicted_s"]
    from commsim.api import Scenario
    cores = float(__import__("os").cpu_count() or 1)
    direct = predict(prof, "ring", 2, Scenario(global_batch=64, bandwidth_Bps=1e8,
                                               shared_cpu_cores=cores,
                                               bucket_bytes=25 * 1024 * 1024,
                                               first_bucket_bytes=25 * 1024 * 1024))
    assert asked == pytest.approx(direct.iteration_s)


def test_what_if_rate_and_emulate_are_one_or_the_other(capsys):
    from commsim.cli import main
    assert main(["validate", "--emulate", "1gbit", "--what-if-rate", "10gbit"]) == 2
    assert "--what-if-rate" in capsys.readouterr().err


def test_validate_builds_its_emulated_cluster_under_the_prefix_it_is_given(monkeypatch, tmp_path,
                                                                            capsys):
    """Two users of one machine keep apart by --cluster-prefix: validate's cells run on the
    cluster of that prefix (another one, rebuilt at another rate, is left alone)."""
    import commsim.analysis.validate as V
    import commsim.calibrate.cluster as cluster
    from commsim.cli import main
    built = []
    monkeypatch.setattr(cluster, "up", lambda n, rate, prefix="csim", **kw:
                        built.append((n, rate, prefix)) or object())

    def fake_validate(grid, profile, *, cluster_for_rate, **kw):
        cluster_for_rate(grid.rates_Bps[0], max(grid.nodes))
        return V.ValidationReport(rows=[], summary={"passed": True, "cells": 0,
                                                    "median_abs_error_pct": 0.0,
                                                    "p90_abs_error_pct": 0.0,
                                                    "max_abs_error_pct": 0.0})
    monkeypatch.setattr(V, "validate", fake_validate)
    prof = tmp_path / "p.json"
    prof.write_text(make_profile().dumps())
    main(["validate", "--profile", str(prof), "--emulate", "100mbit", "--nodes", "2",
          "--strategies", "ring", "--cluster-prefix", "mine"])
    assert built == [(2, 12.5e6, "mine")]
