"""bench/fidelity's pooling of passes: a cell's measurement and the noise floor it reports."""
import importlib.util
from pathlib import Path

import pytest

from commsim.analysis.validate import compare

_spec = importlib.util.spec_from_file_location(
    "fidelity_bench", Path(__file__).resolve().parents[1] / "bench" / "fidelity.py")
fidelity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fidelity)


def run(iteration_s, spread, compute_s=1.0, strategy="ring"):
    return {"strategy": strategy, "nodes": 4, "batch_per_rank": 64, "iteration_s": iteration_s,
            "iteration_s_spread": spread, "compute_s": compute_s, "comm_s": 0.5,
            "exposed_comm_s": 0.5, "bytes_sent_per_rank": 1000.0}


def test_a_cell_is_the_mean_of_its_passes_medians_with_the_largest_spread():
    cell = fidelity.combine([run(2.0, 0.1, 1.5), run(2.4, 0.3, 1.7)])
    assert cell["iteration_s"] == pytest.approx(2.2)
    assert cell["compute_s"] == pytest.approx(1.6)
    assert cell["iteration_s_spread"] == 0.3
    assert cell["pass_iteration_s"] == [2.0, 2.4]


def test_noise_floor_is_the_passes_range_over_their_mean_and_skips_single_passes():
    measured = {("ring", 4, 125e6, ""): fidelity.combine([run(2.0, 0.1), run(2.4, 0.1)]),
                ("ddp", 2, 125e6, "k=2"): fidelity.combine([run(3.0, 0.1)])}
    rows = fidelity.noise_floor(measured)
    assert len(rows) == 1 and rows[0]["strategy"] == "ring"
    assert rows[0]["range_pct"] == pytest.approx(100 * 0.4 / 2.2)


def test_a_reports_rows_give_back_the_measurements_they_were_made_from():
    measured = {("ring", 4, 125e6, ""): fidelity.combine([run(2.0, 0.1), run(2.4, 0.2)]),
                ("ddp", 4, 125e6, "fp16"): fidelity.combine([run(3.0, 0.1, strategy="ddp"),
                                                              run(3.2, 0.1, strategy="ddp")])}
    rows = [{**compare({"iteration_s": 1.0}, rec, rate_Bps=key[2]), "variant": key[3]}
            for key, rec in measured.items()]
    data = {"main": {"rows": rows[:1]}, "whatifs": {"rows": rows[1:]},
            "noise_floor": {"rows": fidelity.noise_floor(measured)}}
    again = fidelity.measured_from_rows(data)
    assert set(again) == set(measured)
    for key, rec in measured.items():
        for field in ("iteration_s", "iteration_s_spread", "compute_s", "exposed_comm_s",
                      "bytes_sent_per_rank", "pass_iteration_s", "batch_per_rank"):
            assert again[key][field] == rec[field]


def test_a_re_prediction_takes_each_cell_s_threads_from_the_run_s_live_records():
    measured = {("ring", 4, 125e6, ""): fidelity.combine([run(2.0, 0.1)]),
                ("ddp", 4, 125e6, "fp16"): fidelity.combine([run(3.0, 0.1, strategy="ddp")])}
    rows = [{**compare({"iteration_s": 1.0}, rec, rate_Bps=key[2]), "variant": key[3]}
            for key, rec in measured.items()]
    data = {"main": {"rows": rows[:1]}, "whatifs": {"rows": rows[1:]}}
    live = [{"strategy": "ring", "nodes": 4, "rate_Bps": 125e6, "variant": "",
             "threads_per_rank": 4},
            {"strategy": "ddp", "nodes": 4, "rate_Bps": 125e6, "variant": "fp16",
             "threads_per_rank": 2}]
    again = fidelity.measured_from_rows(data, live)
    assert again[("ring", 4, 125e6, "")]["threads_per_rank"] == 4
    assert again[("ddp", 4, 125e6, "fp16")]["threads_per_rank"] == 2
    assert all("threads_per_rank" not in rec
               for rec in fidelity.measured_from_rows(data).values())


def test_a_run_knows_how_steady_its_machine_was():
    steady = fidelity.machine_spread([{"t_s": t, "ms_per_sample": v, "before": "cell"}
                                      for t, v in enumerate((10.0, 10.2, 10.1))])
    assert steady["judged"] and steady["spread"] == pytest.approx(0.02)
    noisy = fidelity.machine_spread([{"t_s": 0, "ms_per_sample": 10.0, "before": "a"},
                                     {"t_s": 1, "ms_per_sample": 11.0, "before": "b"}])
    assert not noisy["judged"]
    assert "cannot be judged on this machine" in fidelity.machine_verdict(noisy)
    assert "not recorded" in fidelity.machine_verdict(fidelity.machine_spread([]))
