"""Binomial ps's replays on one pool by classes of ranks (``commsim.sim.fast_classes``): the
first tensor with stragglers and the last scatter, one rank of each class replayed, the DES's
times for every rank; where the classes would part, every rank replayed instead."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.api import Scenario, predict
from commsim.sim import fast_classes
from test_fast_sharing import assert_same_times, profile_named


@pytest.fixture
def replays(monkeypatch):
    """Each class replay: (processes replayed, ranks), or "parted"."""
    calls = []
    replay = fast_classes.replay

    def spied(run, programs, messages, begin, cls):
        try:
            out = replay(run, programs, messages, begin, cls)
        except fast_classes.NotExact:
            calls.append("parted")
            raise
        calls.append((int(cls.max()) + 1, len(programs)))
        return out

    monkeypatch.setattr(fast_classes, "replay", spied)
    return calls


def same_as_des(profile, hosts, **kw):
    sc = Scenario(global_batch=64 * hosts, shared_cpu_cores=2, algorithm="binomial", **kw)
    assert_same_times(predict(profile, "ps", hosts, sc, engine="des"),
                      predict(profile, "ps", hosts, sc, engine="fast"))


def test_a_power_of_two_goes_by_trailing_zeros(replays):
    """32 ranks alike: the last scatter by 6 classes, the root and 5 by trailing zero bits."""
    same_as_des(profile_named("contended"), 32)
    assert replays == [(6, 32)]


def test_a_straggler_parts_the_ranks_its_delay_reaches(replays):
    """With a straggler the compute and the first tensor go by class too: the straggler, the
    ranks whose gather waits for it, the rest by their place in the tree."""
    same_as_des(profile_named("contended"), 64, stragglers={5: 1.5})
    (first, ranks), (last, _) = replays
    assert ranks == 64 and 6 < first < 32 and last <= first


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts", [3, 21, 37])
@pytest.mark.parametrize("uneven", [{}, dict(stragglers={2: 1.5}), dict(stragglers={0: 1.3}),
                                    dict(slow_links_Bps={2: 3e6}), dict(sync_every=2),
                                    dict(stragglers={1: 0.5, 2: 2.0}, slow_links_Bps={0: 9e6})],
                         ids=["alike", "straggler", "root", "slow link", "local steps", "mixed"])
def test_classes_act_as_the_des(replays, profile, hosts, uneven):
    same_as_des(profile_named(profile), hosts, **uneven)
    assert replays and "parted" not in replays
    assert all(ranks == hosts and (hosts < 21 or classes < hosts) for classes, ranks in replays)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(hosts=st.integers(3, 70), profile=st.sampled_from(["plain", "contended", "bundled"]),
       straggler=st.none() | st.tuples(st.integers(0, 69), st.floats(0.5, 2.5)),
       slow=st.none() | st.tuples(st.integers(0, 69), st.floats(2e6, 40e6)))
def test_random_pools_act_as_the_des(replays, hosts, profile, straggler, slow):
    kw = {}
    if straggler and straggler[0] < hosts:
        kw["stragglers"] = {straggler[0]: straggler[1]}
    if slow and slow[0] < hosts:
        kw["slow_links_Bps"] = {slow[0]: slow[1]}
    same_as_des(profile_named(profile), hosts, **kw)


@pytest.mark.parametrize("stragglers", [{}, {4: 1.5}])
def test_classes_that_part_are_replayed(replays, monkeypatch, stragglers):
    """A partition too coarse (every rank but the root one class) fails the check: the
    stretch is replayed rank by rank, with the DES's times."""
    classes = fast_classes.classes
    monkeypatch.setattr(fast_classes, "classes",
                        lambda *args: np.minimum(classes(*args), 1))
    same_as_des(profile_named("contended"), 21, stragglers=stragglers)
    assert replays == ["parted"] * (1 + bool(stragglers))


def test_receivers_merged_wrongly_are_caught(replays, monkeypatch):
    """The leaves (odd places) of 21 ranks with a straggler receive at several instants; a
    partition that merges them, every sender kept apart, fails the check on the receiving
    side."""
    classes = fast_classes.classes

    def leaves_merged(*args):
        cls = classes(*args)
        odd = np.arange(cls.size) % 2 == 1
        merged = np.where(odd, cls[1], cls)
        return np.unique(merged, return_inverse=True)[1].ravel()

    monkeypatch.setattr(fast_classes, "classes", leaves_merged)
    same_as_des(profile_named("contended"), 21, stragglers={4: 1.5})
    assert "parted" in replays
