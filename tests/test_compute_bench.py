"""Compute timing: how many repetitions one batch size gets (by hand: iteration times are set
by a stand-in bench, so the rule is checked exactly)."""
import pytest

pytest.importorskip("torch")

from commsim.calibrate import compute as K  # noqa: E402


class FakeBench:
    """Every iteration takes ``seconds`` (forward only; per batch size when a dict), and logs
    which size it ran."""
    input_shape = (1,)

    def __init__(self, seconds):
        self.seconds, self.calls, self.log = seconds, 0, []

    def batch(self, batch_size):
        return batch_size, None

    def iteration(self, x, y):
        self.calls += 1
        self.log.append(x)
        s = self.seconds[x] if isinstance(self.seconds, dict) else self.seconds
        return s, 0.0, 0.0, [0.0]


def spec(sizes=(16,), **kw):
    return K.ComputeSpec(model="", input_shape=(1,), batch_sizes=sizes, **{
        "warmup": 1, "reps": 3, "slow_iteration_s": 2.0, "min_reps": 2, "min_measure_s": 2.0,
        "max_reps": 8, **kw})


@pytest.mark.parametrize("seconds, want", [
    (0.25, 8),     # 3 x 0.25 s < 2 s: ceil(2 / 0.25) = 8 repetitions
    (0.5, 4),      # ceil(2 / 0.5)
    (0.1, 8),      # 20 would fill 2 s: capped at max_reps
    (0.8, 3),      # 3 x 0.8 s already fills 2 s
    (2.5, 2),      # slower than slow_iteration_s: min_reps
])
def test_fast_sizes_get_repetitions_until_they_fill_the_time(seconds, want):
    bench = FakeBench(seconds)
    rec, = K.merge_rounds(list(K.interleaved(bench, spec())))
    assert rec["reps"] == len(rec["forward_s"]) == want and bench.calls == want + 1


def test_without_a_time_to_fill_the_repetitions_are_as_asked():
    rec = K.measure_batch(FakeBench(0.01), 16, warmup=1, reps=3)
    assert rec["reps"] == 3 and rec["forward_s"] == [0.01] * 3
    assert K.measure_batch(FakeBench(5.0), 16, warmup=1, reps=3)["reps"] == 3


@pytest.mark.parametrize("reps, seconds, want", [
    (6, 2.5, 6),   # slow sizes too (by default 2)
    (6, 0.5, 6),   # 2 s would take only 4
    (6, 0.1, 8),   # fast sizes still fill 2 s, up to max_reps
    (12, 0.1, 12),  # ... raised to N when N is more
    (12, 0.01, 12),
])
def test_compute_reps_sets_the_fewest_repetitions_of_every_size(reps, seconds, want):
    from pathlib import Path

    from commsim.calibrate.runner import CalibrateOptions

    opts = CalibrateOptions(out=Path("p.json"), compute_reps=reps)
    bench = FakeBench(seconds)
    rec, = K.merge_rounds(list(K.interleaved(bench, K.ComputeSpec(
        model="", input_shape=(1,), batch_sizes=(16,), **opts.compute))))
    assert rec["reps"] == want and bench.calls == want + 1


def test_compute_reps_joins_the_resume_fingerprint_only_when_given():
    from pathlib import Path

    from commsim.calibrate.runner import CalibrateOptions
    from commsim.calibrate.samples import _fingerprint

    plain = _fingerprint(CalibrateOptions(out=Path("p.json")), 2)
    assert "compute_reps" not in plain  # logs from before the option still resume
    assert _fingerprint(CalibrateOptions(out=Path("p.json"), compute_reps=8), 2) == {
        **plain, "compute_reps": 8}
    assert CalibrateOptions(out=Path("p.json"), quick=True).compute == {"reps": 2}


def test_sizes_are_timed_in_interleaved_rounds():
    """Sizes of 0.25 s (8 repetitions), 0.5 s (4) and 2.5 s (2): warm-ups first, then 8 rounds;
    each size's repetitions spread evenly over them (4: rounds 0, 2, 4, 6; 2: rounds 0, 4)."""
    bench = FakeBench({16: 0.25, 32: 0.5, 64: 2.5})
    recs = list(K.interleaved(bench, spec((16, 32, 64))))
    assert bench.log == [16, 32, 64,  16, 32, 64,  16,  16, 32,  16,  16, 32, 64,  16,  16, 32,
                         16]
    assert [r["round"] for r in recs if r["batch_size"] == 32] == [0, 2, 4, 6]
    merged = {r["batch_size"]: r for r in K.merge_rounds(recs)}
    assert {b: r["reps"] for b, r in merged.items()} == {16: 8, 32: 4, 64: 2}
    assert merged[64]["rounds"] == [0, 4] and merged[32]["forward_s"] == [0.5] * 4


def test_resume_skips_the_rounds_already_saved():
    bench = FakeBench({16: 0.25, 64: 2.5})
    recs = list(K.interleaved(bench, spec((16, 64)), done=frozenset({(16, 0), (64, 0)})))
    assert [(r["batch_size"], r["round"]) for r in recs] == [
        (16, 1), (16, 2), (16, 3), (16, 4), (64, 4), (16, 5), (16, 6), (16, 7)]


def test_merge_keeps_back_to_back_records_and_adds_the_data_phase():
    bench = FakeBench(0.25)
    recs = [{"kind": "compute", "mode": "alone", "threads": 1, **r}
            for r in K.interleaved(bench, spec())]
    old = {"kind": "compute", "mode": "alone", "batch_size": 8, "reps": 1, "forward_s": [1.0]}
    data = {"kind": "compute", "mode": "data", "batch_size": 16, "data_s": [0.1, 0.2, 0.3]}
    merged = K.merge_rounds([*recs, old, data])
    assert merged[0] is old and merged[1]["data_s"] == [0.1, 0.2, 0.3]
    assert merged[1]["mode"] == "alone" and "round" not in merged[1]
    assert K.merge_rounds(merged) == merged          # a saved profile's samples re-fit as they are


def test_a_rank_done_first_keeps_computing_until_every_rank_is_done():
    """measure_together: 1 warm-up and 3 timed iterations, then untimed ones until the
    heartbeat says every rank has finished (here: after 5 more)."""
    import threading

    from commsim.calibrate.launch.heartbeat import Beat
    from commsim.calibrate.phases.contended import measure_together

    finished, everyone = threading.Event(), threading.Event()
    bench = FakeBench(0.01)
    real = bench.iteration

    def iteration(x, y):
        if finished.is_set() and bench.calls == 1 + 3 + 4:
            everyone.set()          # the slowest rank finishes during the 5th extra iteration
        return real(x, y)

    bench.iteration = iteration
    rec = measure_together(bench, 16, 3, Beat(finished, everyone))
    assert rec["reps"] == 3 and finished.is_set() and bench.calls == 1 + 3 + 5


def test_the_contended_table_is_the_slowest_ranks():
    """Rank 1 is slower by median (1.2 s vs 1.0 s an iteration) though rank 0 has the slowest
    single repetition: rank 1's repetitions stand for the record; without per-rank data the
    pooled ones do."""
    from commsim.calibrate.phases.contended import slowest_rank

    per_rank = {"forward_s": [[0.5, 0.5, 1.5], [0.6, 0.6, 0.6]],
                "backward_s": [[0.4, 0.4, 0.4], [0.5, 0.5, 0.5]],
                "optimizer_s": [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]}
    pooled = {k: [x for r in v for x in r] for k, v in per_rank.items()}
    rec = {"kind": "compute", "mode": "contended", "batch_size": 16, **pooled,
           "per_rank": per_rank}
    slow = slowest_rank(rec)
    assert slow["forward_s"] == [0.6, 0.6, 0.6] and slow["backward_s"] == [0.5, 0.5, 0.5]
    assert slow["per_rank"] is per_rank and rec["forward_s"] == pooled["forward_s"]
    bare = {k: v for k, v in rec.items() if k != "per_rank"}
    assert slowest_rank(bare) == bare


def test_a_resumed_sweep_keeps_the_plan_its_saved_rounds_were_taken_in():
    """A size's repetitions come from its last warm-up (``planned_reps``), so a resumed run on
    a machine whose speed has drifted would plan other rounds; given the saved plan
    (``planned``, each record's "of"), its slots are the first run's."""
    from commsim.calibrate.compute import ComputeSpec, RoundSweep

    class Bench:
        def __init__(self, seconds):
            self.seconds = seconds

        def batch(self, b):
            return (b,)

        def iteration(self, b):
            return self.seconds * b, 0.0, 0.0, []

    spec = ComputeSpec(model="m:f", input_shape=(1,), batch_sizes=(2, 4), min_measure_s=2.0)
    first = RoundSweep(Bench(0.1), spec)
    drifted = RoundSweep(Bench(0.3), spec)
    assert drifted.planned != first.planned          # (the plan follows the warm-up's speed)
    resumed = RoundSweep(Bench(0.3), spec, planned=first.planned)
    assert resumed.planned == first.planned and resumed.slots == first.slots
