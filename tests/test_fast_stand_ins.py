"""Doubling all-reduces beside one slow link replayed by class with stand-ins
(``commsim.sim.fast_stand_ins``): the followers of the event loop on a case checkable by hand
(Python loop and compiled loop alike), the classes and their models, and the replay by class
against the DES and against the replay of every rank."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commsim.api import Scenario, predict, run_spec
from commsim.costs import cost_inputs
from commsim.profile import load_default
from commsim.sim import fast, fast_queues as fq, fast_stand_ins
from commsim.sim.fast_collectives import Run, doubling_steps
from commsim.sim.fast_queues import EXCHANGE, GHOST, STAND_IN, NicState
from test_fast_engine import assert_same
from test_fast_whatifs import BIG_FIRST, DISTINCT


def centre_and_two_leaves(loop, busy_tx2: float = -np.inf):
    """Host 0 (the centre) exchanges with host 1 (the first leaf); host 2 (a second leaf)
    with a stand-in for the centre's host: its message to it follows 1 -> 0 (taking host 0's
    receive direction as that one does), the stand-in's to it follows 0 -> 1 (host 0's
    transmit direction).  Host 0's receive direction is busy until 3 from an earlier
    collective; ``busy_tx2``: host 2's transmit direction too.  Run on ``loop`` (None: the
    Python loop)."""
    messages = ([0, 1, 2, 0], [1, 0, 0, 2], [0.5] * 4, [2.0] * 4, [0, 1, 2, STAND_IN],
                [1, 0, STAND_IN, 2])
    lead = np.array([-1, -1, 1, 0])
    programs = [[(GHOST, (2, 3)), (EXCHANGE, 0, 1)], [(EXCHANGE, 1, 0)], [(EXCHANGE, 2, 3)]]
    nics = NicState(3)
    nics.free[1][0] = 3.0
    nics.free[0][2] = busy_tx2
    grants = tuple(np.full(4, np.nan) for _ in range(3))
    compiled = fq._replay
    fq._replay = loop
    try:
        finish, _ = fq.simulate([0.0] * 3, [0, 1, 2], [0, 1, 2], programs, messages, 1.0, nics,
                                lead=lead, grants=grants)
    finally:
        fq._replay = compiled
    return finish, grants, nics, lead


@pytest.mark.parametrize("loop", ["python", "compiled"])
def test_followers_take_their_leaders_grants(loop):
    """1 -> 0 holds host 1's transmit direction from 0 and waits for host 0's receive
    direction until 3 (transmits 3..5, delivered at 5.5); host 2's message to the stand-in
    has its own transmit direction at 0 and transmits when its leader does, 3..5, releasing
    host 2's direction at 5.  0 -> 1 goes 0..2; the stand-in's message to host 2 asks for
    host 2's receive direction as its leader is granted host 0's transmit direction, at 0,
    and goes 0..2.  Every follower acted as its leader; with host 2's transmit direction
    busy until 1, its message is granted it apart from its leader's grant (and still waits
    for the leader's receive direction), and the check says so."""
    if loop == "compiled":
        pytest.importorskip("commsim.sim._replay")
    finish, (started, tx, rx), nics, lead = centre_and_two_leaves(
        fq._replay if loop == "compiled" else None)
    np.testing.assert_array_equal(finish, [5.5, 5.5, 5.5])
    np.testing.assert_array_equal(started, [0, 0, 0, 0])
    np.testing.assert_array_equal(tx, [0, 0, 0, 0])
    np.testing.assert_array_equal(rx, [0, 3, 3, 0])
    np.testing.assert_array_equal(nics.free[0], [2.0, 5.0, 5.0])       # tx: own sides only
    np.testing.assert_array_equal(nics.free[1], [5.0, 2.0, 2.0])
    assert fast_stand_ins.parted((started, tx, rx), lead).size == 0
    _, grants, _, lead = centre_and_two_leaves(
        fq._replay if loop == "compiled" else None, busy_tx2=1.0)
    np.testing.assert_array_equal(grants[1], [0, 0, 1, 0])
    np.testing.assert_array_equal(grants[2], [0, 3, 3, 0])
    assert fast_stand_ins.parted(grants, lead).tolist() == [2]


def test_classes_by_the_highest_and_lowest_bit_apart_from_the_slow_host():
    """16 hosts beside host 5: z = h ^ 5; h0 alone, then by (highest, lowest) set bit of z.
    A refinement splits the hosts of a class that meet another class at a bit: of class
    (3, 0) (z = 9, 11, 13, 15), those meeting class (2, 0) at bit 3 (13 and 15)."""
    z = np.arange(16) ^ 5
    cls = fast_stand_ins.classes(16, 5)
    assert cls[5] == 0
    keys = {(int(v).bit_length() - 1, (int(v) & -int(v)).bit_length() - 1): c
            for v, c in zip(z, cls) if v}
    assert len(set(keys.values())) == len(keys) == 10 == cls.max()
    host = {int(v): h for h, v in enumerate(z)}
    finer = fast_stand_ins.refined(cls, np.array([[cls[host[9]]], [cls[host[5]]], [3]]))
    assert finer.max() == cls.max() + 1
    assert finer[host[13]] == finer[host[15]] != finer[host[9]] == finer[host[11]]


def test_classes_beside_several_slow_hosts_are_the_classes_beside_each_at_once():
    """Beside hosts 5 and 40 of 64, two hosts share a class exactly where they share one
    beside 5 and one beside 40; numbered densely from 0."""
    both = fast_stand_ins.classes(64, 5, 40)
    each = np.stack([fast_stand_ins.classes(64, 5), fast_stand_ins.classes(64, 40)], axis=1)
    same = both[:, None] == both[None, :]
    assert np.array_equal(same, (each[:, None] == each[None, :]).all(axis=2))
    assert set(both.tolist()) == set(range(both.max() + 1))


def test_a_host_acting_apart_alone_splits_its_subcube():
    """16 hosts beside host 5: the hosts of class (3, 2) (z = 12, 14) that meet class (3, 3)
    (z = 8 alone) at bit 2 act apart: z = 12 is split off, and so is every host of the
    subcube of bits 0-2 around z = 8 (z = 9 .. 15), each alone; the rest keep their classes."""
    z = np.arange(16) ^ 5
    host = {int(v): h for h, v in enumerate(z)}
    cls = fast_stand_ins.classes(16, 5)
    finer = fast_stand_ins.refined(cls, np.array([[cls[host[12]]], [cls[host[8]]], [2]]))
    for v in range(8, 16):
        assert np.count_nonzero(finer == finer[host[v]]) == 1, v
    for v in range(1, 8):                      # (untouched: as many classes as before)
        assert np.count_nonzero(finer == finer[host[v]]) == np.count_nonzero(
            cls == cls[host[v]]), v


def test_models_pair_off_mirror_and_stand_in():
    """A class meeting itself is its own model; two meeting only each other pair off; a
    centre pairs with its first leaf and the other leaves stand in for it."""
    model = fast_stand_ins._models({0: [1], 1: [0], 2: [2], 3: [4, 5, 6], 4: [3], 5: [3],
                                    6: [3]})
    assert model == {0: 1, 1: 0, 2: 2, 3: 4, 4: 3, 5: 3, 6: 3}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([8, 16, 32]), st.sampled_from([2, 4]), st.data())
def test_every_message_is_posted_twice_and_every_follower_has_a_real_leader(hosts, rph, data):
    """Over any refinement of the classes, the plan's programs post each message of a step
    exactly twice (its two sides, a stand-in's by its model's ranks); a follower stands in
    on one side only, and its leader is a message of the model's own host on that side."""
    h0 = data.draw(st.integers(0, hosts - 1))
    algorithm = data.draw(st.sampled_from(["rabenseifner", "recursive_doubling"]))
    spec = run_spec(load_default(), "ring", hosts, Scenario(
        global_batch=32 * hosts * rph, ranks_per_host=rph, algorithm=algorithm,
        slow_links_Bps={h0: 30e6}))
    costs = cost_inputs(spec, load_default())
    cls = fast_stand_ins.classes(hosts, h0)
    for _ in range(data.draw(st.integers(0, 3))):       # a few random refinements
        of, k = data.draw(st.integers(0, int(cls.max()))), data.draw(st.integers(0, 4))
        k %= hosts.bit_length() - 1
        own = cls[np.flatnonzero(cls == of)[0] ^ (1 << k)]
        cls = fast_stand_ins.refined(cls, np.array([[of], [own], [k]]))
    reps = np.unique(cls, return_index=True)[1]
    run = Run(spec, costs, (reps[:, None] * rph + np.arange(rph)).reshape(-1))
    plan = fast_stand_ins.plan(run, cls, doubling_steps(algorithm, hosts * rph, 1e-9))
    assert plan is not None
    kinds, a, b, _ = plan.rows
    posts = np.bincount(np.concatenate([a[kinds == GHOST], a[kinds == EXCHANGE],
                                        b[kinds == EXCHANGE]]))
    total = sum(cols[0].size for cols in plan.messages)
    assert posts.size == total and np.all(posts == 2)
    for cols in plan.messages:
        tx, rx, lead = cols[5], cols[6], cols[7]
        follows = lead >= 0
        assert np.array_equal(follows, (tx == STAND_IN) | (rx == STAND_IN))
        assert not np.any((tx == STAND_IN) & (rx == STAND_IN))
        leader = lead[follows]
        assert np.all(tx[leader][tx[follows] == STAND_IN] >= 0)
        assert np.all(rx[leader][rx[follows] == STAND_IN] >= 0)


SLOW = [("ddp", 32, 2, 5, "rabenseifner", dict(broadcast_buffers=False), "vgg"),
        ("ddp", 32, 2, 13, "rabenseifner", dict(sync_every=2), DISTINCT),
        ("ring", 32, 2, 30, "rabenseifner", {}, "vgg"),
        ("ring", 64, 2, 58, "rabenseifner", dict(broadcast_buffers=False), DISTINCT),
        ("ddp", 16, 2, 15, "rabenseifner", dict(sync_every=2, bucket_bytes=25_000_000), "vgg"),
        ("ddp", 32, 2, 9, "rabenseifner", dict(compression="fp16"), BIG_FIRST),   # 3 rounds
        ("ddp", 128, 2, 77, "rabenseifner", {}, "vgg"),
        ("ring", 128, 2, 100, "rabenseifner", dict(broadcast_buffers=False), BIG_FIRST),
        # (two and three slow links: classes beside each at once)
        ("ddp", 32, 2, {10: 1.25e7, 19: 1.25e6}, "rabenseifner", {}, "vgg"),
        ("ring", 64, 2, {22: 1.25e6, 59: 1.25e5}, "rabenseifner", {}, "vgg"),
        ("ddp", 64, 2, {26: 1.25e5, 55: 1.25e5, 54: 6.25e7}, "rabenseifner",
         dict(broadcast_buffers=False), DISTINCT)]


@pytest.mark.parametrize("strategy, hosts, rph, h0, algorithm, kw, profile", SLOW,
                         ids=lambda x: {id(DISTINCT): "distinct",
                                        id(BIG_FIRST): "big"}.get(id(x), str(x)))
def test_a_replay_by_class_beside_a_slow_link_is_the_des(monkeypatch, strategy, hosts, rph,
                                                        h0, algorithm, kw, profile):
    """One host a class (and stand-ins for the hosts they meet) replays every tensor or DDP
    bucket beside one slow link or several: the DES's times, and the replay by class is what answered (at these sizes a
    replay of every rank costs no more, so the budget of rounds is lifted)."""
    monkeypatch.setattr(fast, "_REFINED_SHARE", 10.0)
    taken = []
    replayed = fast._slow_link_stand_ins
    monkeypatch.setattr(fast, "_slow_link_stand_ins",
                        lambda *a: taken.append(replayed(*a)) or taken[-1])
    profile = load_default() if profile == "vgg" else profile
    sc = Scenario(global_batch=32 * rph * hosts, algorithm=algorithm, ranks_per_host=rph,
                  slow_links_Bps=h0 if isinstance(h0, dict) else {h0: 5e6}, cores_per_host=8,
                  **{"bucket_bytes": 4_000_000, **kw})
    assert_same(predict(profile, strategy, hosts, sc, engine="des"),
                predict(profile, strategy, hosts, sc, engine="fast"))
    assert len(taken) == 1 and taken[0] is not None


def test_classes_that_act_apart_are_split_and_replayed_again(monkeypatch):
    """Beside a slow link at 8,192 hosts a ring of VGG-11's tensors parts the classes by the
    highest and lowest bit of z once (hosts that met the first host the slow host delayed act
    apart from their class): the check finds it, the class is split, and the second replay
    by class gives the replay of every rank's times."""
    sc = Scenario(global_batch=64 * 8192, ranks_per_host=2, algorithm="rabenseifner",
                  slow_links_Bps={3: 1.25e6})
    rounds = []
    plan = fast_stand_ins.plan
    monkeypatch.setattr(fast_stand_ins, "plan", lambda *a: rounds.append(1) or plan(*a))
    by_class = predict(load_default(), "ring", 8192, sc, engine="fast")
    assert len(rounds) == 2
    monkeypatch.setattr(fast, "_slow_link_stand_ins", lambda *a: None)
    assert_same(predict(load_default(), "ring", 8192, sc, engine="fast"), by_class)


def test_classes_that_keep_acting_apart_are_left_to_a_replay_of_every_rank(monkeypatch):
    """Four ranks a host, DDP without overlap (or the buffers' broadcast, whose tree leaves
    four ranks a host out of rank order) beside a slow link on 64 hosts: the classes part,
    and split (with the subcubes around hosts that act apart alone) a class is a host, so
    every rank is replayed (the budget of rounds lifted, as at this size it would replay
    every rank at once): the DES's times.  Without the check, the replay by class's answer
    is not."""
    monkeypatch.setattr(fast, "_REFINED_SHARE", 10.0)
    sc = Scenario(global_batch=128 * 64, algorithm="rabenseifner", ranks_per_host=4,
                  slow_links_Bps={40: 5e6}, cores_per_host=8, bucket_bytes=4_000_000,
                  overlap=False, broadcast_buffers=False)
    taken, rounds = [], []
    replayed, plan = fast._slow_link_stand_ins, fast_stand_ins.plan
    monkeypatch.setattr(fast, "_slow_link_stand_ins",
                        lambda *a: taken.append(replayed(*a)) or taken[-1])
    monkeypatch.setattr(fast_stand_ins, "plan", lambda *a: rounds.append(1) or plan(*a))
    des = predict(load_default(), "ddp", 64, sc, engine="des")
    assert_same(des, predict(load_default(), "ddp", 64, sc, engine="fast"))
    assert taken == [None] and len(rounds) == 1
    monkeypatch.setattr(fast_stand_ins, "parted", lambda *a: np.zeros(0, dtype=np.int64))
    with pytest.raises(AssertionError):
        assert_same(des, predict(load_default(), "ddp", 64, sc, engine="fast"))
