"""Binomial ps's last scatter on one pool, by classes of ranks (``commsim.sim.fast_scatter``):
one rank of each class and its ancestors replayed, the DES's times for every rank; where the
classes would part, every rank replayed instead."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.api import Scenario, predict
from commsim.sim import fast_scatter
from test_fast_sharing import assert_same_times, profile_named


@pytest.fixture
def replays(monkeypatch):
    """Each ``last_scatter`` call: how many processes it replayed of how many ranks, or
    "parted"."""
    calls = []
    simulate = fast_scatter.fast_queues.simulate
    last_scatter = fast_scatter.last_scatter

    def counting(start, *args, **kw):
        calls.append(len(start))
        return simulate(start, *args, **kw)

    def spied(run, *args, **kw):
        try:
            out = last_scatter(run, *args, **kw)
        except fast_scatter.NotExact:
            calls.append("parted")
            raise
        calls[-1] = (calls[-1], run.ranks.size)
        return out

    monkeypatch.setattr(fast_scatter.fast_queues, "simulate", counting)
    monkeypatch.setattr(fast_scatter, "last_scatter", spied)
    return calls


def same_as_des(profile, hosts, **kw):
    sc = Scenario(global_batch=64 * hosts, shared_cpu_cores=2, algorithm="binomial", **kw)
    assert_same_times(predict(profile, "ps", hosts, sc, engine="des"),
                      predict(profile, "ps", hosts, sc, engine="fast"))


def test_a_power_of_two_goes_by_trailing_zeros(replays):
    """32 ranks: 6 classes (the root, and 5 by trailing zero bits), the first of each (1, 2,
    4, 8, 16: the root's children) and the 10 children they send to but which others stand
    for."""
    same_as_des(profile_named("contended"), 32)
    assert replays[-1] == (6 + 10, 32)


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts", [3, 21, 37])
@pytest.mark.parametrize("uneven", [{}, dict(stragglers={2: 1.5}), dict(stragglers={0: 1.3}),
                                    dict(slow_links_Bps={2: 3e6}), dict(sync_every=2)],
                         ids=["alike", "straggler", "root", "slow link", "local steps"])
def test_classes_act_as_the_des(replays, profile, hosts, uneven):
    same_as_des(profile_named(profile), hosts, **uneven)
    assert replays and replays[-1] != "parted"
    replayed, ranks = replays[-1]
    assert ranks == hosts and (hosts < 21 or replayed < hosts)


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


def test_classes_that_part_are_replayed(replays, monkeypatch):
    """A partition too coarse (every rank but the root one class) fails the check: the
    scatter is replayed rank by rank, with the DES's times."""
    classes = fast_scatter.classes

    def coarse(messages, factor):
        cls, parent, level = classes(messages, factor)
        return np.minimum(cls, 1), parent, level

    monkeypatch.setattr(fast_scatter, "classes", coarse)
    same_as_des(profile_named("contended"), 21)
    assert replays == ["parted", 21] or replays[-2:] == ["parted", 21]
