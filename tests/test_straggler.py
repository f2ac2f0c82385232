"""The wait for each iteration's slowest rank, by hand."""
import pytest

from commsim.analysis.straggler import straggler_wait


def rank(compute):
    return {"per_iteration": {"forward_s": [0.0] * len(compute), "backward_s": list(compute),
                              "step_s": [0.0] * len(compute)}}


def test_ranks_slow_in_turn_wait_twice_their_medians():
    """Rank 0 computes 1, 2, 1 s and rank 1 2, 1, 1 s: each has median 1 s, but the slowest
    of each iteration took 2, 2, 1 s (median 2)."""
    assert straggler_wait({"per_rank": [rank([1, 2, 1]), rank([2, 1, 1])]}) == pytest.approx(2.0)


def test_the_same_slow_rank_every_iteration_adds_nothing():
    assert straggler_wait({"per_rank": [rank([1, 1, 1]), rank([2, 2, 2])]}) == pytest.approx(1.0)


def test_one_rank_or_no_phases_is_none():
    assert straggler_wait({"per_rank": [rank([1, 2])]}) is None
    assert straggler_wait({"per_rank": [rank([1]), {"phases": {}}]}) is None
