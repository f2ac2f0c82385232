"""Ranks sharing too few cores, one pool of cores or a CPU efficiency curve: the fast engine
gives the DES's processor sharing where the ranks of a CPU keep their jobs in step.

On a uniform cluster the ranks of a CPU (a host's, or the one pool of ``shared_cpu_cores``)
compute at the same instants, and in a world ring of one or two ranks per host (or of one
host) they reduce at the same instants too: equal jobs sharing the cores run at cores / busy
threads together, times the efficiency curve at the busy threads.  The parameter server's
ranks reach their optimizer step at different times; ``fast.shared_ends`` shares each CPU's
cores among them.  Against the DES on the toy profiles of ``test_fast_engine`` (tolerance
1e-9 relative).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.api import Scenario, predict
from commsim.sim.fast import shared_ends
from test_fast_engine import ONE_TENSOR, PROFILE, assert_same
from test_fast_whatifs import DISTINCT


def check(profile, strategy, hosts, local, cores, **kw):
    sc = Scenario(global_batch=64 * hosts * local, bucket_bytes=500_000, ranks_per_host=local,
                  cores_per_host=cores, **kw)
    assert predict(profile, strategy, hosts, sc, engine="auto").engine == "fast"
    assert_same(predict(profile, strategy, hosts, sc, engine="des"),
                predict(profile, strategy, hosts, sc, engine="fast"))


@pytest.mark.parametrize("profile", [PROFILE, DISTINCT], ids=["plain", "distinct"])
@pytest.mark.parametrize("strategy", ["ring", "ps"])
@pytest.mark.parametrize("hosts, local, cores", [(1, 2, 1), (2, 2, 1), (3, 2, 1), (4, 2, 3),
                                                 (5, 2, 1.5), (1, 3, 2)])
def test_crowded_hosts(profile, strategy, hosts, local, cores):
    check(profile, strategy, hosts, local, cores)
    check(profile, strategy, hosts, local, cores, sync_every=2)


def test_crowded_hosts_at_scale():
    check(ONE_TENSOR, "ring", 128, 2, 1)
    check(PROFILE, "ps", 64, 2, 1)


def test_crowded_hosts_out_of_step_are_replayed():
    """A straggler, or three ranks per host in a ring across hosts, put a host's jobs out of
    step: its ranks interleave on the cores at event granularity, which the fast engine
    replays with the DES's processor sharing (``fast_queues.SharedCpus``)."""
    for strategy, local, kw in [("ring", 2, dict(stragglers={1: 1.5})),
                                ("ps", 2, dict(slow_links_Bps={1: 30e6})),
                                ("ring", 3, {}), ("ddp", 2, {}), ("dp", 2, {})]:
        check(PROFILE, strategy, 2, local, 1, **kw)


def test_shared_ends():
    """Two one-thread jobs on one core: the first runs alone for 1 s, then both at half
    speed; a host with room for both runs them at full speed."""
    start = np.array([[0.0, 1.0], [0.0, 1.0]])
    work = np.array([[2.0, 2.0], [2.0, 2.0]])
    np.testing.assert_allclose(shared_ends(start, work, 1, 1.0)[0], [3.0, 4.0])
    np.testing.assert_allclose(shared_ends(start, work, 1, 2.0)[1], [2.0, 3.0])
    np.testing.assert_allclose(shared_ends(np.zeros((1, 3)), np.array([[1.0, 2.0, 3.0]]), 2,
                                           2.0), [[3.0, 5.0, 6.0]])


def test_crowded_ring_with_calibrated_contention():
    """The bundled profile's contention binds only where compute runs beside a message: in a
    ring whose ranks of a host keep in step, none does."""
    from commsim.profile import load_default

    profile = load_default()
    assert profile.network.contention_load
    for hosts in (1, 3):
        sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2, cores_per_host=1,
                      sync_every=2)
        assert_same(predict(profile, "ring", hosts, sc, engine="des"),
                    predict(profile, "ring", hosts, sc, engine="fast"))


EFFICIENCY = ((1.0, 1.0), (2.0, 0.91), (4.0, 0.8))


@pytest.mark.parametrize("profile", [PROFILE, DISTINCT], ids=["plain", "distinct"])
@pytest.mark.parametrize("strategy", ["ring", "ps"])
@pytest.mark.parametrize("hosts, local", [(2, 1), (5, 1), (3, 2), (1, 3)])
@pytest.mark.parametrize("cpu", [dict(shared_cpu_cores=2),
                                 dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY),
                                 dict(cpu_efficiency=EFFICIENCY, sync_every=2)],
                         ids=["pool", "pool+efficiency", "efficiency"])
def test_one_pool_and_efficiency(profile, strategy, hosts, local, cpu):
    cpu = dict(cpu)
    check(profile, strategy, hosts, local, cpu.pop("cores_per_host", 1.0 * local), **cpu)


def test_emulated_cluster_ring_with_calibrated_contention():
    """``commsim validate``'s case: every rank on one machine's cores, its efficiency curve and
    the bundled profile's contention (which no message meets in step)."""
    from commsim.profile import load_default

    sc = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                  cpu_efficiency=EFFICIENCY)
    assert_same(predict(load_default(), "ring", 4, sc, engine="des"),
                predict(load_default(), "ring", 4, sc, engine="fast"))


def test_pool_and_efficiency_out_of_step_are_replayed():
    from commsim.profile import load_default

    for profile, strategy, kw in [
            (PROFILE, "ring", dict(shared_cpu_cores=2, stragglers={1: 1.5})),
            (PROFILE, "ddp", dict(cpu_efficiency=EFFICIENCY, ranks_per_host=2, cores_per_host=2)),
            (load_default(), "ps", dict(shared_cpu_cores=2, algorithm="binomial")),
            (load_default(), "dp", dict(shared_cpu_cores=2)),
            (contended(PROFILE), "ps", dict(ranks_per_host=3, cores_per_host=1))]:
        kw = dict(kw)
        local = kw.pop("ranks_per_host", 1)
        check(profile, strategy, 2, local, kw.pop("cores_per_host", 1.0 * local), **kw)


def contended(profile):
    """``profile`` with calibrated contention that binds at one compute thread per core."""
    from dataclasses import replace

    return replace(profile, network=replace(
        profile.network, contention_load=(0.0, 2.0, 4.0),
        contention_bandwidth_Bps=(130e6, 40e6, 30e6), contention_compute_speed=(1.0, 0.7, 0.6)))


def profile_named(name):
    """The toy profile, it with contention that binds, or the bundled (calibrated) one."""
    from commsim.profile import load_default

    return {"plain": lambda: PROFILE, "contended": lambda: contended(PROFILE),
            "bundled": load_default}[name]()


@pytest.mark.parametrize("profile", [PROFILE, DISTINCT], ids=["plain", "distinct"])
@pytest.mark.parametrize("hosts", [1, 2, 3, 6])
@pytest.mark.parametrize("cpu", [dict(cores_per_host=1), dict(cores_per_host=1.5, sync_every=2),
                                 dict(cores_per_host=2)], ids=["1", "1.5", "2"])
def test_parameter_server_beside_its_root_with_contention(profile, hosts, cpu):
    """Rank 1 steps while the root, beside it, still scatters: the root's messages are held
    to the contended rate and rank 1's step to the contended speed, as the DES has them."""
    cpu = dict(cpu)
    check(contended(profile), "ps", hosts, 2, cpu.pop("cores_per_host"), **cpu)


def test_parameter_server_crowded_with_the_bundled_profile():
    from commsim.profile import load_default

    sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2, cores_per_host=1)
    assert_same(predict(load_default(), "ps", 5, sc, engine="des"),
                predict(load_default(), "ps", 5, sc, engine="fast"))


@pytest.mark.parametrize("profile", [PROFILE, contended(PROFILE)], ids=["plain", "contended"])
@pytest.mark.parametrize("hosts, local", [(2, 1), (5, 1), (3, 2), (1, 3), (4, 3)])
@pytest.mark.parametrize("cpu", [dict(shared_cpu_cores=1), dict(shared_cpu_cores=2, sync_every=2),
                                 dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY),
                                 dict(shared_cpu_cores=8)], ids=["1", "2", "2+efficiency", "8"])
def test_parameter_server_in_one_pool(profile, hosts, local, cpu):
    """Every rank on one pool: each steps as soon as it has its share of the last scatter,
    loading the pool under the root's later messages (``fast._last_scatter_by_events``)."""
    check(profile, "ps", hosts, local, 1.0 * local, **cpu)


def test_parameter_server_in_one_pool_with_the_bundled_profile():
    from commsim.profile import load_default

    sc = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2)
    assert_same(predict(load_default(), "ps", 6, sc, engine="des"),
                predict(load_default(), "ps", 6, sc, engine="fast"))


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts, local", [(2, 1), (5, 1), (24, 1), (3, 2), (2, 3)])
@pytest.mark.parametrize("uneven", [dict(stragglers={1: 1.5}), dict(stragglers={0: 1.3, 1: 2.0}),
                                    dict(slow_links_Bps={1: 3e6}),
                                    dict(stragglers={1: 1.2}, sync_every=2)],
                         ids=["straggler", "root and another", "slow link", "local steps"])
def test_parameter_server_in_one_pool_out_of_step(profile, hosts, local, uneven):
    """Uneven ranks on one pool: only the first tensor's gather meets a late rank's backward;
    the fast engine takes the compute and that gather by classes of ranks and message by
    message, and from its mean on (the root's mean the one job until the last scatter) the
    recurrences, as the DES times them."""
    chosen = profile_named(profile)
    sc = Scenario(global_batch=64 * hosts * local, ranks_per_host=local, shared_cpu_cores=2,
                  **uneven)
    assert len(chosen.params) > 2
    assert_same_times(predict(chosen, "ps", hosts, sc, engine="des"),
                      predict(chosen, "ps", hosts, sc, engine="fast"))


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts, local", [(2, 1), (5, 1), (16, 1), (3, 2), (2, 3)])
@pytest.mark.parametrize("uneven", [{}, dict(stragglers={1: 1.5}), dict(stragglers={0: 1.3}),
                                    dict(slow_links_Bps={1: 3e6}), dict(sync_every=2)])
def test_binomial_parameter_server_in_one_pool(profile, hosts, local, uneven):
    """Binomial ps on one pool: the compute (and with stragglers the first tensor) replayed,
    the middle tensors by the schedules with the root's mean alone on the pool, the last
    tensor and the steps replayed from when each rank begins it; the DES's times."""
    chosen = profile_named(profile)
    sc = Scenario(global_batch=64 * hosts * local, ranks_per_host=local, shared_cpu_cores=2,
                  algorithm="binomial", **uneven)
    assert_same_times(predict(chosen, "ps", hosts, sc, engine="des"),
                      predict(chosen, "ps", hosts, sc, engine="fast"))


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts", [2, 5, 9])
@pytest.mark.parametrize("uneven", [{}, dict(stragglers={1: 1.5}),
                                    dict(stragglers={0: 1.3, 1: 2.0, 3: 0.5}),
                                    dict(slow_links_Bps={1: 3e6}),
                                    dict(cpu_efficiency=EFFICIENCY, stragglers={1: 1.2})],
                         ids=["alike", "straggler", "root and others", "slow link",
                              "efficiency"])
def test_data_parallel_in_one_pool(profile, hosts, uneven):
    """Every device on one pool: device 0's phases are serial, and the devices' forward and
    backward share the pool with each other and with device 0's sends and sum, event by
    event (``fast._data_parallel_in_pool``), as the DES times them."""
    chosen = profile_named(profile)
    uneven = dict(uneven, stragglers={k: v for k, v in uneven.get("stragglers", {}).items()
                                      if k < hosts})
    sc = Scenario(global_batch=64 * hosts, shared_cpu_cores=2, **uneven)
    assert_same_times(predict(chosen, "dp", hosts, sc, engine="des"),
                      predict(chosen, "dp", hosts, sc, engine="fast"))


@pytest.mark.parametrize("strategy, hosts, cpu", [
    ("ps", 3, dict(shared_cpu_cores=2)), ("ps", 5, dict(shared_cpu_cores=2, ranks_per_host=2)),
    ("ps", 4, dict(cores_per_host=1, ranks_per_host=2)),
    ("ps", 5, dict(cores_per_host=1, ranks_per_host=2, sync_every=2)),
    ("dp", 8, dict(shared_cpu_cores=8, stragglers={6: 1.5}, bandwidth_Bps=1.25e9,
                   compute_scale=0.5))],
                         ids=["ps pool", "ps pool 2 a host", "ps 2 on a core",
                              "ps 2 on a core local steps", "dp pool"])
def test_no_latency_keeps_the_des_order_at_a_delivery(strategy, hosts, cpu):
    """With no latency a message is delivered at the instant the next one on its direction
    starts.  The root's scatter: the rank resumes and steps first, under that message
    (``_last_scatter_by_events``, on a pool and, where the in-step recurrences do not hold,
    with ranks beside it on its host: ``_steps_meet_the_last_scatter``).  A gather: the next
    message, waiting on the receive direction alone, starts first (``_data_parallel_in_pool``).
    Contention makes the order matter: 1e-3 apart where a tie went the other way."""
    local = cpu.get("ranks_per_host", 1)
    sc = Scenario(global_batch=64 * hosts * local, latency_s=0.0, **cpu)
    chosen = contended(PROFILE)
    assert_same(predict(chosen, strategy, hosts, sc, engine="des"),
                predict(chosen, strategy, hosts, sc, engine="fast"))


@pytest.mark.parametrize("uneven, bulk, gathered", [
    ({}, 32, [31]), (dict(stragglers={20: 30.0}), 21, []),
    (dict(stragglers={0: 2.0, 7: 0.3}), 32, [31]), (dict(slow_links_Bps={5: 3e6}), 32, [31])],
                         ids=["alike", "long forward", "root and a short one", "slow link"])
def test_data_parallel_jobs_alone_go_in_bulk(monkeypatch, uneven, bulk, gathered):
    """The parameter broadcast's messages and the forwards they start go in bulk while each
    forward runs alone on the pool (``fast._forward_alone``), up to the device whose job
    would meet the next one (a straggler 30 times slower), as does the gradient gather once
    nothing computes (``fast._gathered_alone``: all but the last message, none where the
    slow straggler's backward outlasts the others' messages); both give the DES's times."""
    from commsim.profile import load_default
    from commsim.sim import fast

    taken = {"_forward_alone": [], "_gathered_alone": []}
    for name, log in taken.items():
        monkeypatch.setattr(fast, name, lambda *a, f=getattr(fast, name), log=log:
                            log.append(f(*a)) or log[-1])
    sc = Scenario(global_batch=64 * 33, shared_cpu_cores=2, **uneven)
    fast_result = predict(load_default(), "dp", 33, sc, engine="fast")
    assert [t[1] for t in taken["_forward_alone"]] == [bulk]
    assert [t[0] for t in taken["_gathered_alone"]] == gathered
    assert_same_times(predict(load_default(), "dp", 33, sc, engine="des"), fast_result)


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts, local, cores", [(3, 2, 1.0), (5, 1, 1.0), (4, 3, 1.5),
                                                 (2, 2, 3.0)])
@pytest.mark.parametrize("algorithm", [None, "binomial"])
@pytest.mark.parametrize("uneven", [dict(stragglers={1: 1.5}),
                                    dict(stragglers={0: 1.3}, slow_links_Bps={1: 3e6}),
                                    dict(stragglers={2: 2.0}, sync_every=2)],
                         ids=["straggler", "root, slow link", "local steps"])
def test_parameter_server_on_crowded_hosts_out_of_step(profile, hosts, local, cores, algorithm,
                                                       uneven):
    """Uneven ranks on hosts short of cores: past the first tensor's mean only the root's
    mean runs until the last scatter, as on a pool (``_quiet_after_first_tensor``); the
    compute and the first gather taken CPU by CPU and message by message (binomial: the
    first tensor replayed), the rest by the recurrences (binomial: the schedules, the last
    tensor replayed; three ranks a host: every tensor replayed), as the DES times them."""
    chosen = profile_named(profile)
    kw = dict(uneven) if algorithm is None else dict(uneven, algorithm=algorithm)
    sc = Scenario(global_batch=64 * hosts * local, ranks_per_host=local,
                  cores_per_host=cores * local, **kw)
    assert_same_times(predict(chosen, "ps", hosts, sc, engine="des"),
                      predict(chosen, "ps", hosts, sc, engine="fast"))


# (what each case shows: a change to ``fast._first_gather_shared`` that it caught)
FIRST_GATHERS = [
    ("hosts queue", 4, 3, dict(shared_cpu_cores=2),
     dict(stragglers={6: 1.1, 7: 1.2}, slow_links_Bps={2: 10e6})),
    ("root's host busy", 5, 2, dict(cores_per_host=1.0),
     dict(stragglers={1: 1.03}, slow_links_Bps={2: 60e6})),
    ("sender's host busy", 4, 2, dict(cores_per_host=2.0),
     dict(stragglers={2: 1.03, 3: 1.2, 0: 1.2})),
    ("next asks when its host is free", 4, 2, dict(shared_cpu_cores=2),
     dict(stragglers={4: 1.04, 5: 1.04, 1: 1.3}, slow_links_Bps={2: 10e6})),
    ("early before late", 6, 3, dict(shared_cpu_cores=2),
     dict(stragglers={10: 0.95, 12: 0.95, 3: 1.03}, slow_links_Bps={2: 20e6})),
    ("kinds of hosts tie", 6, 2, dict(cores_per_host=1.5), dict(stragglers={2: 1.03, 10: 0.9})),
    ("kinds of hosts tie, slow link", 3, 2, dict(cores_per_host=2.0),
     dict(stragglers={2: 1.07}, slow_links_Bps={2: 20e6})),
    ("another kind ties with the root", 4, 2, dict(cores_per_host=1.0),
     dict(stragglers={1: 1.2, 6: 0.97}, slow_links_Bps={3: 10e6})),
]


def _first_gathers(monkeypatch, fail: bool = False) -> list:
    """Whether each call of ``fast._first_gather_shared`` went through (``fail``: each is
    made to decline, as where ranks of two classes of one CPU post at one instant)."""
    from commsim.sim import fast as engine

    took = []
    first_gather = engine._first_gather_shared

    def recorded(*args):
        if fail:
            took.append(False)
            raise engine.NotExact("ranks of different classes post to the root at one instant")
        took.append(True)
        return first_gather(*args)

    monkeypatch.setattr(engine, "_first_gather_shared", recorded)
    return took


@pytest.mark.parametrize("name, hosts, local, cpu, uneven", FIRST_GATHERS,
                         ids=[case[0] for case in FIRST_GATHERS])
def test_parameter_server_first_gather_on_shared_cpus(monkeypatch, name, hosts, local, cpu,
                                                      uneven):
    """Linear ps out of step on shared CPUs, several ranks a host: the first gather's
    messages queue on their hosts' transmit directions and the root's receive direction,
    held to the contended bandwidth at either end's load when each starts, ranks that post
    at one instant in the order their CPUs' timers were set (``fast._first_gather_shared``).
    The DES's times, and the replay of the first tensor where that declines."""
    sc = Scenario(global_batch=64 * hosts * local, ranks_per_host=local, **cpu, **uneven)
    chosen = profile_named("contended")
    des = predict(chosen, "ps", hosts, sc, engine="des")
    took = _first_gathers(monkeypatch)
    assert_same_times(des, predict(chosen, "ps", hosts, sc, engine="fast"))
    assert took == [True]
    took = _first_gathers(monkeypatch, fail=True)
    assert_same_times(des, predict(chosen, "ps", hosts, sc, engine="fast"))
    assert took == [False]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(["plain", "contended", "bundled"]),
       hosts=st.integers(2, 6), local=st.integers(1, 3),
       cpu=st.sampled_from([dict(shared_cpu_cores=1), dict(shared_cpu_cores=2),
                            dict(cores_per_host=1.0), dict(cores_per_host=1.5),
                            dict(cores_per_host=2.0)]),
       factors=st.lists(st.tuples(st.integers(0, 17), st.sampled_from(
           [0.9, 0.95, 1.03, 1.05, 1.1, 1.2, 1.5, 2.0])), min_size=1, max_size=3),
       links=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(
           [10e6, 20e6, 60e6, 100e6])), max_size=2),
       local_steps=st.booleans())
def test_parameter_server_out_of_step_on_shared_cpus_matches_the_des(
        profile, hosts, local, cpu, factors, links, local_steps):
    """Random stragglers and slow links, linear ps on one pool or on hosts short of cores:
    the DES's times, whichever way the fast engine takes (``_first_gather_shared``, or the
    replay)."""
    p = hosts * local
    if "cores_per_host" in cpu and local > 2:       # (every tensor replayed there: not this)
        cpu = dict(shared_cpu_cores=2)
    sc = Scenario(global_batch=64 * p, ranks_per_host=local, **cpu,
                  stragglers={r % p: f for r, f in factors},
                  slow_links_Bps={h % hosts: bw for h, bw in links},
                  sync_every=2 if local_steps else 1)
    chosen = profile_named(profile)
    assert_same_times(predict(chosen, "ps", hosts, sc, engine="des"),
                      predict(chosen, "ps", hosts, sc, engine="fast"))


def assert_same_times(des, fast):
    """``assert_same`` without the summary's critical-rank fields, which an exact tie between
    ranks' ends (trees of alike ranks) may take from either tied rank."""
    from test_fast_engine import PER_RANK, TOL, rel

    assert fast.engine == "fast"
    assert rel(des.iteration_s, fast.iteration_s) < TOL
    for d, f in zip(des.per_rank, fast.per_rank, strict=True):
        for field in PER_RANK:
            assert rel(d[field], f[field]) < TOL, (d["rank"], field)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=st.sampled_from(["ddp", "ring", "ps", "dp"]),
       profile=st.sampled_from(["plain", "contended", "bundled"]),
       cpu=st.sampled_from(["one core", "pool", "pool+efficiency", "1.5 cores"]),
       shape=st.sampled_from([(2, 1), (3, 1), (5, 1), (2, 2), (3, 2), (1, 3), (2, 3)]),
       uneven=st.sampled_from([{}, dict(stragglers={1: 1.5}), dict(stragglers={0: 1.3}),
                               dict(slow_links_Bps={1: 3e6})]),
       algorithm=st.sampled_from([None, "tree", "recursive_doubling", "rabenseifner",
                                  "hierarchical", "binomial"]),
       extra=st.sampled_from([{}, dict(sync_every=2), dict(compression="fp16"),
                              dict(overlap=False), dict(group_size=2)]))
def test_jobs_sharing_a_cpu_out_of_step_match_the_des(strategy, profile, cpu, shape, uneven,
                                                      algorithm, extra):
    """Any strategy, CPU setting, unevenness and option together: the replay with the DES's
    processor sharing (or a closed path) gives the DES's times."""
    hosts, local = shape
    cpu_kw = {"one core": dict(cores_per_host=1.0 * local), "pool": dict(shared_cpu_cores=2),
              "pool+efficiency": dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY),
              "1.5 cores": dict(cores_per_host=1.5 * local)}[cpu]
    sc = applicable(strategy, hosts, local, algorithm, dict(uneven, **extra, **cpu_kw))
    chosen = profile_named(profile)
    assert_same_times(predict(chosen, strategy, hosts, sc, engine="des"),
                      predict(chosen, strategy, hosts, sc, engine="fast"))


def applicable(strategy: str, hosts: int, local: int, algorithm, kw) -> Scenario:
    """The scenario of ``kw`` (and ``algorithm``) on ``hosts`` of ``local`` ranks, less what
    ``strategy`` does not take or the run cannot have (a straggler or slow link beyond it,
    groups that do not divide it), 64 samples a rank."""
    kw = dict(kw)
    p = hosts * local
    if "stragglers" in kw:
        kw["stragglers"] = {r: f for r, f in kw["stragglers"].items() if r < p}
    if "slow_links_Bps" in kw:
        kw["slow_links_Bps"] = {h: b for h, b in kw["slow_links_Bps"].items() if h < hosts}
        if hosts < 2:
            kw.pop("slow_links_Bps")
    if strategy != "ddp":
        for name in ("compression", "overlap", "broadcast_buffers"):
            kw.pop(name, None)
    if strategy in ("ps", "dp"):
        kw.pop("group_size", None)
    if strategy == "dp":
        kw.pop("sync_every", None)
    if kw.get("group_size") and p % kw["group_size"]:
        kw.pop("group_size")
    if algorithm == "binomial":
        algorithm = "binomial" if strategy == "ps" else None
    elif algorithm is not None and strategy not in ("ddp", "ring"):
        algorithm = None
    if algorithm == "hierarchical":
        kw.pop("group_size", None)             # (refused together)
    if algorithm is not None:
        kw["algorithm"] = algorithm
    return Scenario(global_batch=64 * p, bucket_bytes=500_000, ranks_per_host=local, **kw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=st.sampled_from(["ddp", "ring", "ps", "dp"]),
       profile=st.sampled_from(["plain", "contended", "bundled"]),
       hosts=st.integers(1, 9), local=st.integers(1, 4),
       cpu=st.sampled_from([{}, dict(cores_per_host=1), dict(cores_per_host=1.5),
                            dict(shared_cpu_cores=2),
                            dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY)]),
       uneven=st.sampled_from([{}, dict(stragglers={1: 1.5}), dict(stragglers={0: 1.3}),
                               dict(slow_links_Bps={0: 3e6}),
                               dict(stragglers={1: 2.0}, slow_links_Bps={1: 30e6})]),
       algorithm=st.sampled_from([None, "tree", "recursive_doubling", "rabenseifner",
                                  "hierarchical", "binomial"]),
       extra=st.sampled_from([{}, dict(sync_every=2), dict(compression="fp16"),
                              dict(overlap=False), dict(group_size=2),
                              dict(broadcast_buffers=False)]))
def test_auto_gives_no_small_run_to_the_des(strategy, profile, hosts, local, cpu, uneven,
                                            algorithm, extra):
    """Up to 36 ranks, every strategy, algorithm and option in any combination has an exact
    fast path (the tests above hold them to the DES): ``--engine auto`` needs the DES there
    only to record a timeline."""
    sc = applicable(strategy, hosts, local, algorithm, dict(uneven, **extra, **cpu))
    assert predict(profile_named(profile), strategy, hosts, sc, engine="fast").engine == "fast"


@pytest.mark.parametrize("strategy", ["ddp", "ring", "ps", "dp"])
@pytest.mark.parametrize("cpu", [dict(cores_per_host=1), dict(shared_cpu_cores=2),
                                 dict(cores_per_host=0.5, cpu_efficiency=EFFICIENCY)])
def test_one_slow_rank_on_shared_cores(strategy, cpu):
    """One rank, slowed (a straggler's factor), its jobs on cores it shares with nothing: no
    collective at all, and the fast engine's replay of its compute (it crashed on having no
    collective to replay) gives the DES's times."""
    sc = Scenario(global_batch=64, stragglers={0: 1.3}, **cpu)
    assert_same_times(predict(PROFILE, strategy, 1, sc, engine="des"),
                      predict(PROFILE, strategy, 1, sc, engine="fast"))


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
@pytest.mark.parametrize("hosts, local", [(1, 3), (2, 2), (3, 4), (5, 2)])
@pytest.mark.parametrize("cpu, uneven", [
    (dict(shared_cpu_cores=2), dict(stragglers={1: 1.5})),
    (dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY), dict(slow_links_Bps={1: 3e6})),
    (dict(cores_per_host=1), dict(stragglers={0: 1.3}, compression="fp16")),
    (dict(cores_per_host=1.5), dict(stragglers={2: 0.7}, sync_every=2))],
    ids=["pool+straggler", "efficiency+slow link", "one core+fp16", "1.5 cores+k=2"])
def test_hierarchical_out_of_step_on_shared_cores_is_replayed(strategy, hosts, local, cpu,
                                                              uneven):
    """Reduce inside each host, ring of the hosts' first ranks, broadcast inside each host
    (``fast_collectives.hierarchical_schedule``): replayed with the DES's processor sharing
    where a host's ranks interleave on its cores (or a pool's), as the DES has it."""
    kw = dict(uneven)
    if strategy == "ring":
        kw.pop("compression", None)
    if hosts < 2:
        kw.pop("slow_links_Bps", None)
    p = hosts * local
    sc = Scenario(global_batch=64 * p, bucket_bytes=500_000, ranks_per_host=local,
                  algorithm="hierarchical", **cpu, **kw)
    fast = predict(PROFILE, strategy, hosts, sc, engine="fast")
    assert_same_times(predict(PROFILE, strategy, hosts, sc, engine="des"), fast)


@pytest.mark.parametrize("profile", ["contended", "bundled"])
@pytest.mark.parametrize("hosts", [2, 3, 8])
@pytest.mark.parametrize("uneven", [dict(stragglers={1: 1.5}),
                                    dict(stragglers={0: 1.3}, slow_links_Bps={1: 30e6}),
                                    dict(slow_links_Bps={1: 3e6}, compression="fp16"),
                                    dict(stragglers={1: 1.5}, sync_every=2, group_size=2)],
                         ids=["straggler", "both", "slow link+fp16", "k=2, groups"])
def test_ddp_ring_with_contention_on_uneven_hosts(profile, hosts, uneven):
    """One rank per host on one core: DDP's buckets slowed by backward beside them (the
    calibrated contention) on a ring that a straggler or a slow link makes uneven, in the
    vectorised recurrences (``Run.contended``), as the DES has it."""
    from commsim.profile import load_default

    chosen = contended(PROFILE) if profile == "contended" else load_default()
    sc = Scenario(global_batch=64 * hosts, bucket_bytes=500_000, cores_per_host=1, **uneven)
    fast = predict(chosen, "ddp", hosts, sc, engine="auto")
    assert fast.engine == "fast"
    assert_same_times(predict(chosen, "ddp", hosts, sc, engine="des"), fast)


@pytest.mark.parametrize("profile", ["plain", "contended", "bundled"])
@pytest.mark.parametrize("hosts", [16, 64])
def test_ring_steps_inside_every_backward_are_jumped(profile, hosts):
    """A straggler on one core: while every rank's backward outlasts the next steps' posts,
    the ring's steps all reduce beside backward over computing ends and are jumped as plain
    max-plus (``_ring_phase``); the DES's times all the same."""
    chosen = profile_named(profile)
    sc = Scenario(global_batch=None, batch_per_rank=64, bucket_bytes=500_000, cores_per_host=1,
                  stragglers={1: 1.5})
    assert_same_times(predict(chosen, "ddp", hosts, sc, engine="des"),
                      predict(chosen, "ddp", hosts, sc, engine="fast"))


def test_a_pool_keeps_each_jobs_work_left_as_the_des_does():
    """A replay of every rank on one pool takes each job's work left as the DES's successive
    progress leaves it.  As the pool's work done since it was last idle less each job's
    share when it came, the last bits differed, and with 102 ranks on two cores two ends that
    near-tie went the other way: 2e-6 off (found by a random scan at 40-256 ranks)."""
    from commsim.api import scenario
    from commsim.profile import load_default

    sc = scenario(batch_per_rank=4, ranks_per_host=3, bandwidth="10gbit", latency="0",
                  shared_cpu_cores=2, compress="fp16", no_overlap=True, slow_link=["0:200mbit"])
    profile = load_default()
    des = predict(profile, "ddp", 34, sc, engine="des")
    fast = predict(profile, "ddp", 34, sc, engine="fast")
    assert_same(des, fast)
    assert fast.iteration_s == des.iteration_s


def test_a_contended_message_takes_the_des_s_seconds_to_the_bit():
    """A message held to the contended bandwidth takes bytes x (1 / cap), as the DES has it,
    not bytes / cap: three ranks a host on one core, DDP's recursive doubling at 10 Gbit/s,
    whose caps bind; a last bit apart, one reduction came an instant apart and the hosts' ends
    reordered, 1.7e-3 off at 132 ranks (found by ``test_random_vgg_combinations_at_scale``)."""
    from commsim.api import scenario
    from commsim.profile import load_default

    sc = scenario(batch_per_rank=32, ranks_per_host=3, bandwidth="10gbit", cores_per_host=1,
                  algorithm="recursive_doubling")
    profile = load_default()
    des = predict(profile, "ddp", 44, sc, engine="des")
    fast = predict(profile, "ddp", 44, sc, engine="fast")
    assert_same(des, fast)
    assert fast.iteration_s == des.iteration_s


@pytest.mark.parametrize("algorithm, cpu", [("ring", dict(cores_per_host=1)),
                                            ("hierarchical", dict(shared_cpu_cores=2))])
def test_a_replayed_ring_step_takes_the_des_s_chunk_to_the_bit(algorithm, cpu):
    """A ring step's chunk is n / p bytes and its reduction (n / p) x gamma seconds, as the DES
    computes them (a schedule's step of n / div: ``Schedule.shift``); (1 / p) x n was a last
    bit apart for p not a power of two, the seeds of a reordering on crowded CPUs (DDP over
    six hosts of two ranks beside a slow link, replayed: every rank 1 ulp off)."""
    from commsim.api import scenario
    from commsim.profile import load_default

    sc = scenario(batch_per_rank=8, ranks_per_host=2, bandwidth="10gbit", algorithm=algorithm,
                  slow_link=["1:200mbit"], **cpu)
    profile = load_default()
    des = predict(profile, "ddp", 6, sc, engine="des")
    fast = predict(profile, "ddp", 6, sc, engine="fast")
    assert [r["finish_s"] for r in fast.per_rank] == [r["finish_s"] for r in des.per_rank]


@pytest.mark.parametrize("extra", [dict(), dict(straggler=["1:1.5"], no_overlap=True),
                                   dict(ranks_per_host=2, compress="fp16")])
def test_a_pools_equal_jobs_go_together_to_the_bit(monkeypatch, extra):
    """The compiled loop holds a pool's jobs of one work left as one group (the ranks' compute
    jobs that start together: hundreds while DDP's buckets are reduced beside a slow link,
    one subtraction an event), each job still ending as the DES's own: every rank's times
    equal the Python loop's, which keeps a list of jobs, to the bit, and the DES's."""
    from commsim.api import scenario
    from commsim.profile import load_default
    from commsim.sim import fast_queues

    sc = scenario(batch_per_rank=32, shared_cpu_cores=2, slow_link=["3:10mbit"], **extra)
    profile = load_default()
    hosts = 24 // sc.ranks_per_host
    compiled = predict(profile, "ddp", hosts, sc, engine="fast")
    monkeypatch.setattr(fast_queues, "_replay", None)
    listed = predict(profile, "ddp", hosts, sc, engine="fast")
    assert list(compiled.per_rank) == list(listed.per_rank)
    des = predict(profile, "ddp", hosts, sc, engine="des")
    assert_same(des, compiled)
    assert compiled.iteration_s == des.iteration_s


def noting(answered: list):
    """``fast._first_tensor_then_in_step`` that appends to ``answered`` the ranks of each run
    it answers."""
    from commsim.sim import fast

    settled = fast._first_tensor_then_in_step

    def first_tensor_then_in_step(spec, costs, *reach):
        timing = settled(spec, costs, *reach)
        answered.append(spec.world_size)
        return timing

    return first_tensor_then_in_step


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(["plain", "bundled"]), hosts=st.integers(3, 12),
       local=st.sampled_from([1, 2]),
       cpu=st.sampled_from([dict(cores_per_host=1), dict(cores_per_host=1.5),
                            dict(cores_per_host=2), dict(shared_cpu_cores=1),
                            dict(shared_cpu_cores=3)]),
       stragglers=st.dictionaries(st.integers(0, 23), st.sampled_from([1.2, 1.5, 2.0]),
                                  min_size=1, max_size=2),
       extra=st.sampled_from([{}, dict(sync_every=2), dict(bandwidth_Bps=1.25e9),
                              dict(threads_per_rank=2)]))
def test_a_ring_per_tensor_after_its_first_tensor_matches_the_des(profile, hosts, local, cpu,
                                                                   stragglers, extra):
    """Stragglers beside a ring per tensor on crowded CPUs, the runs engine set aside: where
    the first all-reduce leaves the ranks at one instant the rest goes on in step
    (``fast._first_tensor_then_in_step``), else every rank is replayed; either way the DES's
    times."""
    from unittest import mock

    from hypothesis import event

    from commsim.sim import fast

    p = hosts * local
    cpu = {k: v * local if k == "cores_per_host" else v for k, v in cpu.items()}
    sc = Scenario(global_batch=None, batch_per_rank=16, ranks_per_host=local,
                  stragglers={r: f for r, f in stragglers.items() if r < p} or {0: 1.5},
                  **cpu, **extra)
    chosen = profile_named(profile)
    answered = []
    with mock.patch.object(fast.fast_runs, "covers", lambda spec: False), \
            mock.patch.object(fast, "_first_tensor_then_in_step", noting(answered)):
        fast_answer = predict(chosen, "ring", hosts, sc, engine="fast")
    event("settled after the first tensor" if answered else "every rank replayed")
    assert_same_times(predict(chosen, "ring", hosts, sc, engine="des"), fast_answer)


@pytest.mark.parametrize("hosts, cpu, settles", [(10, dict(cores_per_host=1), True),
                                                 (12, dict(shared_cpu_cores=2), True),
                                                 (16, dict(cores_per_host=1), False),
                                                 (20, dict(cores_per_host=1.5), False)])
def test_a_ring_per_tensor_goes_on_in_step_after_the_first_tensor(monkeypatch, hosts, cpu,
                                                                  settles):
    """Beside a straggler a ring per tensor's first all-reduce makes every rank wait for every
    other; where it leaves every rank at one instant (to the bit), the rest is the cluster
    without the straggler's, one period standing for all, and the optimizer steps share each
    CPU from there (``fast._first_tensor_then_in_step``): the DES's answer within its
    tolerance, the runs engine set aside.  Where it leaves them a rounding apart (16 hosts
    of two ranks on one core each: 8 instants within 1.7e-15; 20 on one and a half cores: 10),
    every rank is replayed instead (going on from the last of such instants was 3.1e-9 off
    the DES at 672 ranks on a pool: docs/model.md)."""
    from commsim.api import scenario
    from commsim.profile import load_default
    from commsim.sim import fast

    monkeypatch.setattr(fast.fast_runs, "covers", lambda spec: False)
    answered = []
    monkeypatch.setattr(fast, "_first_tensor_then_in_step", noting(answered))
    sc = scenario(batch_per_rank=32, ranks_per_host=2, straggler=["1:1.5"], **cpu)
    profile = load_default()
    fast_answer = predict(profile, "ring", hosts, sc, engine="fast")
    assert bool(answered) == settles
    assert_same(predict(profile, "ring", hosts, sc, engine="des"), fast_answer)
