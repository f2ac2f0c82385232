"""bench/scale's table: a row for every option predict takes that changes what is simulated."""
import importlib.util
import inspect
from pathlib import Path

from commsim import api

_spec = importlib.util.spec_from_file_location(
    "scale_bench", Path(__file__).resolve().parents[1] / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)

# The batch is the bench's own (weak scaling, ``scale.BATCH`` a rank).
NOT_OPTIONS = {"global_batch", "batch_per_rank"}


def test_every_scenario_option_has_rows():
    taken = set(inspect.signature(api.scenario).parameters) - NOT_OPTIONS
    rowed = {key for options, _ in scale.OPTIONS.values() for key in options}
    assert taken - rowed == set()
    assert rowed <= taken


def test_only_keeps_the_rows_with_an_option():
    rows = [label for label, _, _ in scale.cases(True)]
    assert all(scale.wanted(label, None) for label in rows)
    kept = [label for label in rows if scale.wanted(label, ["latency 50us", "tree"])]
    assert "latency 50us" in kept and "tree + latency 50us" in kept and "tree" in kept
    assert "latency" not in kept and "defaults" not in kept and "straggler 1:1.5" not in kept
    assert all("latency 50us" in label or "tree" in label for label in kept)


def test_the_fast_engine_by_name_is_not_declined_up_front():
    """A world ring on one pool beside a slow link at 1,024 ranks: within auto's seconds the
    fast engine declines it up front; by name (``--engine fast``) not (its replay of every
    rank checks its memory as it starts)."""
    options = {"shared_cpu_cores": 2, "slow_link": ["3:10mbit"]}
    assert "CPU pool" in scale.declined(scale.bench_profile(None), "ring", 1024, options)
    assert scale.declined(scale.bench_profile(None), "ring", 1024, options, "fast") is None
