"""All-reduces on a lockstep world (every rank acting at the same instants) whose jobs share the
CPU beyond the fast engine's recurrences: one pool of cores, too few cores for DDP's Gloo thread
beside backward, an efficiency curve, calibrated contention.  ``fast_lockstep`` replays one
rank's events with its CPU's twins; against the DES (tolerance 1e-9 relative)."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataclasses import replace

from commsim.api import Scenario, predict, run_spec
from commsim.buckets import Bucket
from commsim.costs import CostInputs
from commsim.profile import load_default
from commsim.sim import fast_lockstep
from test_fast_engine import PROFILE, assert_same
from test_fast_sharing import EFFICIENCY, contended
from test_fast_whatifs import DISTINCT

PROFILES = {"plain": PROFILE, "distinct": DISTINCT, "contended": contended(PROFILE),
            "bundled": load_default()}

# Settings the recurrences of ``fast.ring_like`` decline, on every lockstep world.
CPU = {
    "one core": lambda local: dict(cores_per_host=1.0 * local),
    "pool": lambda local: dict(shared_cpu_cores=2),
    "pool+efficiency": lambda local: dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY),
    "pool, 1.5 cores": lambda local: dict(shared_cpu_cores=1.5),
}
OPTIONS = {
    "": {}, "sync-every 2": dict(sync_every=2), "fp16": dict(compression="fp16"),
    "no overlap": dict(overlap=False), "no buffers": dict(broadcast_buffers=False),
    "recursive doubling": dict(algorithm="recursive_doubling"),
    "rabenseifner": dict(algorithm="rabenseifner"), "groups of 2": dict(group_size=2),
    "tree": dict(algorithm="tree"),
}


def scenario(hosts, local, cpu, **kw):
    return Scenario(global_batch=64 * hosts * local, bucket_bytes=500_000, ranks_per_host=local,
                    **CPU[cpu](local), **kw)


def check(profile, strategy, hosts, local, cpu, **kw):
    sc = scenario(hosts, local, cpu, **kw)
    fast = predict(profile, strategy, hosts, sc, engine="auto")
    assert fast.engine == "fast"
    assert_same(predict(profile, strategy, hosts, sc, engine="des"), fast)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("cpu", CPU)
@pytest.mark.parametrize("hosts, local", [(2, 1), (4, 1), (1, 4), (3, 2)])
def test_ddp_on_lockstep_worlds(profile, cpu, hosts, local):
    for kw in OPTIONS.values():
        check(PROFILES[profile], "ddp", hosts, local, cpu, **kw)


@pytest.mark.parametrize("profile", ["distinct", "bundled"])
@pytest.mark.parametrize("cpu", CPU)
def test_ring_on_lockstep_worlds(profile, cpu):
    for kw in ({}, dict(algorithm="rabenseifner"), dict(group_size=2, sync_every=2)):
        check(PROFILES[profile], "ring", 4, 1, cpu, **kw)


def test_odd_worlds_and_more_ranks():
    """Rings of odd length, and more ranks, with the bundled profile's contention; two ranks
    per host, in groups inside hosts too."""
    for hosts in (3, 5, 16):
        check(load_default(), "ddp", hosts, 1, "one core")
        check(load_default(), "ddp", hosts, 1, "pool", compression="fp16")
        check(load_default(), "ddp", hosts, 2, "one core")
        check(load_default(), "ddp", hosts, 2, "one core", group_size=2)


def test_what_lockstep_does_not_cover():
    """Three ranks per host of several hosts (the middle one gets both its messages inside
    the host), doubling with two (both ranks of a host send to another at once), a world ring
    with a straggler or a slow link, a fold with two ranks per host, a tree with two on each
    host's cores (a host's CPU would carry two classes), the parameter server."""
    cases = [dict(strategy="ddp", ranks_per_host=3),
             dict(strategy="ddp", ranks_per_host=2, algorithm="recursive_doubling"),
             dict(strategy="ddp", stragglers={1: 1.5}),
             dict(strategy="ddp", slow_links_Bps={1: 1e6}),
             dict(strategy="ring", algorithm="recursive_doubling", nodes=3, ranks_per_host=2),
             dict(strategy="ps")]
    for case in cases:
        case = dict(case)
        strategy, nodes = case.pop("strategy"), case.pop("nodes", 4)
        assert not fast_lockstep.covers(run_spec(PROFILE, strategy, nodes,
                                                 Scenario(shared_cpu_cores=2, **case)))
    for case in (dict(), dict(stragglers={1: 1.5}), dict(slow_links_Bps={1: 1e6})):
        assert not fast_lockstep.covers(run_spec(PROFILE, "ddp", 4, Scenario(
            algorithm="tree", ranks_per_host=2, cores_per_host=2, **case)))


@pytest.mark.parametrize("profile", ["distinct", "bundled"])
@pytest.mark.parametrize("cpu", CPU)
@pytest.mark.parametrize("hosts, local", [(3, 1), (5, 1), (6, 1), (7, 1), (12, 1), (1, 3),
                                          (1, 6)])
def test_classes_over_any_number_of_ranks(profile, cpu, hosts, local, monkeypatch):
    """Trees, and doubling over a number of ranks that is not a power of two, by class,
    without a replay to fall back on: the classes' places act together to the last
    message."""
    from commsim.sim import fast
    monkeypatch.setattr(fast, "_replays_cpu", lambda *args: False)
    p = hosts * local
    for algorithm in ("tree", "recursive_doubling", "rabenseifner"):
        for strategy, kw in (("ddp", {}), ("ring", {}), ("ddp", dict(compression="fp16")),
                             ("ddp", dict(group_size=3)), ("ring", dict(group_size=p // 2))):
            if p % (kw.get("group_size") or p):
                continue
            check(PROFILES[profile], strategy, hosts, local, cpu, algorithm=algorithm, **kw)


@pytest.mark.parametrize("profile", ["distinct", "bundled"])
@pytest.mark.parametrize("cpu", CPU)
@pytest.mark.parametrize("hosts, local", [(4, 1), (5, 1), (8, 1), (1, 4), (1, 6)])
def test_stragglers_and_slow_links_by_class(profile, cpu, hosts, local, monkeypatch):
    """A straggler or a slow link on a tree or a doubling algorithm: it and the ranks its
    delay reaches are classes of their own, without a replay to fall back on.  (Not DDP's
    buffer broadcast after local steps: the classes reach it apart, and every rank is
    replayed.)"""
    from commsim.sim import fast
    monkeypatch.setattr(fast, "_replays_cpu", lambda *args: False)
    p = hosts * local
    for algorithm in ("tree", "recursive_doubling", "rabenseifner"):
        for strategy, kw in (("ddp", dict(stragglers={1: 1.5})),
                             ("ring", dict(stragglers={p - 1: 2.0})),
                             ("ring", dict(stragglers={0: 1.3, 2: 1.3}, sync_every=2)),
                             ("ddp", dict(stragglers={2: 1.3}, sync_every=2,
                                          broadcast_buffers=False)),
                             ("ddp", dict(stragglers={3: 1.7}, group_size=2)),
                             ("ring", dict(slow_links_Bps={min(1, hosts - 1): 2e6})),
                             ("ddp", dict(slow_links_Bps={hosts - 1: 5e6}, stragglers={0: 1.4})),
                             ("ddp", dict(slow_links_Bps={0: 1e7, 2 % hosts: 3e6}))):
            if p % kw.get("group_size", 1) == 0:
                check(PROFILES[profile], strategy, hosts, local, cpu, algorithm=algorithm, **kw)


@pytest.mark.parametrize("profile", ["distinct", "bundled"])
@pytest.mark.parametrize("cpu", CPU)
@pytest.mark.parametrize("hosts, local", [(6, 1), (8, 1), (12, 1), (1, 6)])
def test_rings_of_groups_on_uneven_hosts_by_class(profile, cpu, hosts, local, monkeypatch):
    """Rings of groups with a straggler or a slow link: the other groups are alike, the
    uneven one's ranks classes of their own, without a replay to fall back on."""
    from commsim.sim import fast
    monkeypatch.setattr(fast, "_replays_cpu", lambda *args: False)
    p = hosts * local
    for group in (2, 3, 4):
        if p % group:
            continue
        for strategy, kw in (("ring", dict(stragglers={1: 1.5})),
                             ("ddp", dict(stragglers={p - 1: 2.0})),
                             ("ddp", dict(slow_links_Bps={hosts - 1: 3e6})),
                             ("ring", dict(slow_links_Bps={0: 1e7}, stragglers={2: 1.3},
                                           sync_every=2))):
            check(PROFILES[profile], strategy, hosts, local, cpu, group_size=group, **kw)


@pytest.mark.parametrize("profile", ["distinct", "bundled"])
@pytest.mark.parametrize("cpu", ["pool", "pool+efficiency", "pool, 1.5 cores"])
@pytest.mark.parametrize("hosts", [2, 3, 4, 5])
def test_trees_over_pairs_of_ranks_a_host_on_a_pool(profile, cpu, hosts, monkeypatch):
    """A tree with two ranks a host on one pool, by class: the pair meet inside the host at
    mask 1 (no NIC), beyond only the first of a host sends or receives; with a straggler or
    a slow link too, in groups too; no replay to fall back on."""
    from commsim.sim import fast
    monkeypatch.setattr(fast, "_replays_cpu", lambda *args: False)
    for strategy, kw in (("ddp", {}), ("ring", {}), ("ddp", dict(stragglers={1: 1.5})),
                         ("ring", dict(slow_links_Bps={hosts - 1: 3e6})),
                         ("ddp", dict(group_size=4, stragglers={2: 2.0}))):
        if 2 * hosts % kw.get("group_size", 2) == 0:
            check(PROFILES[profile], strategy, hosts, 2, cpu, algorithm="tree", **kw)


def test_steps_of_each_algorithm():
    """Bytes and reduction work per step, checkable by hand: 8 bytes over 4 ranks, γ = 1."""
    assert fast_lockstep.steps_of("ring", 8.0, 4, 1.0) == [(3, 2.0, 2.0), (3, 2.0, 0.0)]
    assert fast_lockstep.steps_of("recursive_doubling", 8.0, 4, 1.0) == [(2, 8.0, 8.0)]
    assert fast_lockstep.steps_of("rabenseifner", 8.0, 4, 1.0) == [
        (1, 4.0, 4.0), (1, 2.0, 2.0), (1, 2.0, 0.0), (1, 4.0, 0.0)]
    assert fast_lockstep.steps_of("ring", 8.0, 1, 1.0) == []


def test_one_rank_on_one_core_by_hand():
    """Two hosts of one core, one thread per rank, no latency, overhead or buffers; one bucket
    of 2 MB ready half-way through backward (3 s alone), γ = 1e-7 s/B, 1 MB/s links:
    forward 0-1; backward 1-2.5, the bucket ready; its first ring step's message 2.5-3.5 while
    backward runs alone (1 s of its 1.5 left done); the reduction (0.1 s) shares the core with
    backward, both at half speed, 3.5-3.7; the second message 3.7-4.7, backward done at 4.1;
    the divide (0.2 s) 4.7-4.9; the optimizer (0.5 s) 4.9-5.4."""
    spec = run_spec(PROFILE, "ddp", 2, Scenario(global_batch=2, cores_per_host=1,
                                                broadcast_buffers=False))
    spec = replace(spec, cluster=replace(spec.cluster, nic_latency_s=0.0, nic_bandwidth_Bps=1e6))
    costs = CostInputs(alpha_s=0.0, beta_s_per_B=1e-6, gamma_s_per_B=1e-7, mean_s_per_B=1e-7,
                       overhead_s={}, forward_s=1.0, backward_s=3.0, optimizer_s=0.5,
                       threads_per_rank=1, param_bytes=(2_000_000,), grad_ready_fraction=(0.5,),
                       buckets=(Bucket(index=0, param_indices=(0,), bytes=2_000_000,
                                       ready_fraction=0.5),))
    classes, finish, compute, comm, sent, received, *_ = fast_lockstep.iteration(
        spec, costs, buckets=True, broadcast_end=lambda begin: None)
    assert classes == [0, 0]
    assert finish == pytest.approx([5.4])
    assert compute == pytest.approx([1.0 + 1.5 + 1.6 + 0.5])
    assert comm == pytest.approx([4.9 - 2.5])
    assert sent == received == pytest.approx([2_000_000])


def classes(algorithm, g):
    return fast_lockstep.place_classes(g, fast_lockstep.schedule_rounds(algorithm, g))


def test_tree_classes():
    """Over a power of two a tree place's class is its trailing zero bits (numbered by first
    place: the root 0); five places part the last one, whose parent's round has no child
    beyond it; steps and partners by hand for three."""
    assert classes("tree", 8)[0] == [0, 1, 2, 1, 3, 1, 2, 1]
    assert classes("tree", 2)[0] == [0, 1]
    assert classes("tree", 5)[0] == [0, 1, 2, 1, 3]
    places, steps = classes("tree", 3)
    assert places == [0, 1, 2]
    assert steps == [
        [("recv", ("up", 0), 1.0, True, (1,)), ("recv", ("up", 1), 1.0, True, (2,)),
         ("send", ("down", 1), 1.0, False, (2,)), ("send", ("down", 0), 1.0, False, (1,))],
        [("send", ("up", 0), 1.0, False, (0,)), ("recv", ("down", 0), 1.0, False, (0,))],
        [("send", ("up", 1), 1.0, False, (0,)), ("recv", ("down", 1), 1.0, False, (0,))]]
    # Leaves send up to parents of two classes (0 and 2) at one instant: one class.
    assert classes("tree", 4)[1][1] == [("send", ("up", 0), 1.0, False, (0, 2)),
                                        ("recv", ("down", 0), 1.0, False, (0, 2))]


def test_doubling_classes_by_hand():
    """Six places, Rabenseifner: places 0 and 2 hand their buffers to 1 and 3 and sit out;
    the four survivors (1, 3, 4, 5) halve and double back, 1 with 4 and 3 with 5 at distance
    2 (half the bytes, added), then 1 with 3 and 4 with 5 (a quarter), back at a quarter and
    at half; the result goes back to 0 and 2.  Over a power of two, one class."""
    places, steps = classes("rabenseifner", 6)
    assert places == [0, 1, 0, 1, 2, 2]
    assert steps[0] == [("send", ("fold", 0), 1.0, False, (1,)),
                        ("recv", ("out", 0), 1.0, False, (1,))]
    assert steps[1] == [("recv", ("fold", 0), 1.0, True, (0,)),
                        ("both", ("x", 0), 0.5, True, (2,)), ("both", ("x", 1), 0.25, True, (1,)),
                        ("both", ("x", 2), 0.25, False, (1,)), ("both", ("x", 3), 0.5, False, (2,)),
                        ("send", ("out", 0), 1.0, False, (0,))]
    assert classes("recursive_doubling", 8)[0] == [0] * 8


@pytest.mark.parametrize("g", [1000, 999, 768, 50_000])
def test_tree_classes_are_few(g):
    """Places beside a missing child and their subtrees part, a few dozen classes at most;
    each class's places take the same steps as the DES's loops give them."""
    places, steps = classes("tree", g)
    assert len(steps) <= 4 * g.bit_length()
    first = {}
    for i, c in enumerate(places):
        first.setdefault(c, i)
    for c, i in first.items():
        kinds = []
        for kind, key, _, reduce, _ in steps[c]:
            kinds += [(kind, key)] + ([("cpu",)] if reduce else [])
        assert kinds == _des_steps(i, g)


def _des_steps(i, g):
    """``collectives.binomial_reduce`` then ``binomial_broadcast``'s steps for place i."""
    out, mask = [], 1
    while mask < g:
        level = mask.bit_length() - 1
        if i & mask:
            out.append(("send", ("up", level)))
            break
        if i + mask < g:
            out += [("recv", ("up", level)), ("cpu",)]
        mask <<= 1
    mask = 1 << max(0, (g - 1).bit_length() - 1)
    if i:
        low = i & -i
        out.append(("recv", ("down", low.bit_length() - 1)))
        mask = low >> 1
    while mask >= 1:
        if i + mask < g:
            out.append(("send", ("down", mask.bit_length() - 1)))
        mask >>= 1
    return out


def test_a_tree_on_a_pool_by_hand():
    """Four ranks on a pool of two cores, one thread each, one tensor of 2 MB after backward
    (ring's way), a tree, 1 MB/s links without latency, γ = 1e-7 s/B: forward and backward
    (1 s and 3 s of work) at half speed, 0-8; the reduce's round 0 (1 -> 0, 3 -> 2) 8-10, its
    two reductions on two cores 10-10.2, round 1 (2 -> 0) 10.2-12.2, the root's reduction
    12.2-12.4; the broadcast 0 -> 2 12.4-14.4, then 0 -> 1 and 2 -> 3 14.4-16.4; the four
    divides (0.2 s of work) at half speed 16.4-16.8; the optimizer (0.5 s) 16.8-17.8."""
    spec = run_spec(PROFILE, "ring", 4, Scenario(global_batch=4, shared_cpu_cores=2,
                                                 algorithm="tree"))
    spec = replace(spec, cluster=replace(spec.cluster, nic_latency_s=0.0, nic_bandwidth_Bps=1e6))
    costs = CostInputs(alpha_s=0.0, beta_s_per_B=1e-6, gamma_s_per_B=1e-7, mean_s_per_B=1e-7,
                       overhead_s={}, forward_s=1.0, backward_s=3.0, optimizer_s=0.5,
                       threads_per_rank=1, param_bytes=(2_000_000,), grad_ready_fraction=(0.5,),
                       buckets=())
    classes, finish, compute, comm, sent, received, *_ = fast_lockstep.iteration(
        spec, costs, buckets=False, broadcast_end=lambda begin: None)
    assert classes == [0, 1, 2, 1]
    assert finish == pytest.approx([17.8] * 3)
    assert compute == pytest.approx([2.0 + 6.0 + 1.0] * 3)
    assert comm == pytest.approx([16.8 - 8.0] * 3)
    # Per rank of each class: the root receives from 1 and 2 and sends to both; a leaf sends
    # up and receives the sum; rank 2 also receives from 3 and sends to it.
    assert sent == pytest.approx([4e6, 2e6, 4e6])
    assert received == pytest.approx([4e6, 2e6, 4e6])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(sorted(PROFILES)), cpu=st.sampled_from(sorted(CPU)),
       hosts=st.sampled_from([(2, 1), (3, 1), (8, 1), (1, 2), (1, 3), (2, 2), (3, 2)]),
       options=st.lists(st.sampled_from(sorted(OPTIONS)), max_size=3, unique=True),
       bucket_bytes=st.sampled_from([300_000, 500_000, 5_000_000]),
       straggler=st.sampled_from([None, 1.4, 3.0]), slow_link=st.sampled_from([None, 3e6]))
def test_random_combinations_match_the_des(profile, cpu, hosts, options, bucket_bytes,
                                           straggler, slow_link):
    kw = {}
    for name in options:
        kw.update(OPTIONS[name])
    hosts, local = hosts
    p = hosts * local
    if straggler:
        kw["stragglers"] = {p - 1: straggler}
    if slow_link:
        kw["slow_links_Bps"] = {0: slow_link}
    if kw.get("group_size") and p % kw["group_size"]:
        kw.pop("group_size")
    sc = Scenario(global_batch=64 * p, bucket_bytes=bucket_bytes, ranks_per_host=local,
                  **CPU[cpu](local), **kw)
    assert_same(predict(PROFILES[profile], "ddp", hosts, sc, engine="des"),
                predict(PROFILES[profile], "ddp", hosts, sc, engine="fast"))


def test_runs_of_equal_steps_are_one_addition(monkeypatch):
    """The jumps over equal steps give what stepping every one gives."""
    sc = Scenario(global_batch=None, batch_per_rank=32, cores_per_host=1)
    jumped = predict(load_default(), "ddp", 64, sc, engine="fast")
    monkeypatch.setattr(fast_lockstep._Lockstep, "_jumpable", lambda *args: 0)
    stepped = predict(load_default(), "ddp", 64, sc, engine="fast")
    assert_same(stepped, jumped)
