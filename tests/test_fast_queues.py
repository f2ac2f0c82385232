"""Messages queueing on a shared NIC: the fast engine replays them as the DES queues them.

Recursive doubling and Rabenseifner with several ranks per host send every rank of a host to
another host at once; trees and folds meet on a NIC once a straggler or a slow link shifts the
ranks.  ``commsim.sim.fast_queues`` replays such a collective through FIFO NIC directions in
simpy's event order; on a uniform cluster two alike hosts stand for any power of two of them.
Each case against the DES on the toy profiles of ``test_fast_engine`` (tolerance 1e-9
relative; they agree to ~1e-12).  Where the order of simultaneous messages depends on event
history the fast engine does not track, it must decline with a NIC reason.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from commsim.api import Scenario, predict
from commsim.errors import UserError
from commsim.sim.fast_queues import (EXCHANGE, GLOO, MARK, RECV, SEND, WAIT, Messages, NicState,
                                     simulate)
from test_fast_engine import ONE_TENSOR, THREADS, assert_same
from test_fast_whatifs import DISTINCT

DOUBLING = ("recursive_doubling", "rabenseifner")


def scenario(strategy, hosts, local, **kw):
    kw.setdefault("cores_per_host", (THREADS + (strategy == "ddp")) * local)
    return Scenario(global_batch=64 * hosts * local, bucket_bytes=500_000, ranks_per_host=local,
                    **kw)


def exact_or_declined(profile, strategy, hosts, sc) -> bool:
    """The fast engine equals the DES, or declines for a NIC reason; True if it ran."""
    des = predict(profile, strategy, hosts, sc, engine="des")
    try:
        fast = predict(profile, strategy, hosts, sc, engine="fast")
    except UserError as why:
        assert "NIC" in str(why), str(why)
        return False
    assert_same(des, fast)
    return True


@pytest.mark.parametrize("algorithm", DOUBLING)
@pytest.mark.parametrize("strategy", ["ring", "ddp"])
@pytest.mark.parametrize("hosts, local", [(2, 2), (4, 2), (3, 2), (5, 2), (2, 4), (4, 4)])
def test_doubling_on_shared_hosts(algorithm, strategy, hosts, local):
    """Uniform hosts of 2 and 4 ranks, powers of two and folds: exact, never the DES.  (After
    DDP's buffer broadcast the ranks start in the order they got the buffers, which decides
    ties on a fold's NICs: exact or declined.)"""
    plain = dict(broadcast_buffers=False) if strategy == "ddp" else {}
    sc = scenario(strategy, hosts, local, algorithm=algorithm, **plain)
    assert exact_or_declined(DISTINCT, strategy, hosts, sc)
    if strategy == "ddp":
        exact_or_declined(DISTINCT, strategy, hosts, scenario(strategy, hosts, local,
                                                              algorithm=algorithm))


@pytest.mark.parametrize("algorithm", DOUBLING)
@pytest.mark.parametrize("strategy", ["ring", "ddp"])
def test_doubling_on_shared_hosts_of_an_uneven_cluster(algorithm, strategy):
    """A straggler and a slow link: the queues' order shifts, and stays the DES's."""
    sc = scenario(strategy, 4, 2, algorithm=algorithm, stragglers={1: 1.3},
                  slow_links_Bps={0: 25e6})
    assert exact_or_declined(DISTINCT, strategy, 4, sc)


@pytest.mark.parametrize("straggler", [3, 27, 87])
def test_four_ranks_a_host_beside_a_faster_straggler_keep_the_des_order(straggler):
    """32 hosts of 4 ranks, recursive doubling, a faster straggler on its host's last rank:
    the DES's event order at ties sends some hosts' ranks out of the first tensor in another
    order than the straggler's host's, which a replay by class cannot see (it was 8.3 ms
    off): four ranks a host are replayed whole."""
    sc = scenario("ring", 32, 4, algorithm="recursive_doubling", stragglers={straggler: 0.7})
    assert exact_or_declined(DISTINCT, "ring", 32, sc)


@pytest.mark.parametrize("algorithm", DOUBLING)
@pytest.mark.parametrize("strategy, hosts, local, group", [
    ("ring", 32, 2, None), ("ddp", 16, 4, None), ("ring", 128, 2, None), ("ddp", 8, 2, 8),
    ("ring", 16, 2, 4)])
def test_alike_hosts_stand_for_all(algorithm, strategy, hosts, local, group):
    """Two alike hosts stand for a power of two of them (and for host-aligned groups)."""
    sc = scenario(strategy, hosts, local, algorithm=algorithm, group_size=group)
    assert predict(ONE_TENSOR, strategy, hosts, sc, engine="auto").engine == "fast"
    assert exact_or_declined(ONE_TENSOR, strategy, hosts, sc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_shared_hosts(data):
    """Random clusters of shared hosts with the doubling algorithms and trees."""
    strategy = data.draw(st.sampled_from(["ring", "ddp"]))
    hosts, local = data.draw(st.integers(2, 6)), data.draw(st.integers(2, 4))
    world = hosts * local
    kw = dict(algorithm=data.draw(st.sampled_from(DOUBLING + ("tree",))),
              sync_every=data.draw(st.integers(1, 2)))
    if data.draw(st.booleans()):
        kw["group_size"] = data.draw(st.integers(1, world))
    if strategy == "ddp":
        kw.update(compression=data.draw(st.sampled_from([None, "fp16"])),
                  overlap=data.draw(st.booleans()))
    kw["stragglers"] = data.draw(st.dictionaries(st.integers(0, world - 1),
                                                 st.sampled_from([0.7, 1.3, 2.0]), max_size=2))
    kw["slow_links_Bps"] = data.draw(st.dictionaries(st.integers(0, hosts - 1),
                                                     st.sampled_from([20e6, 60e6]), max_size=1))
    exact_or_declined(DISTINCT, strategy, hosts, scenario(strategy, hosts, local, **kw))


def test_auto_runs_doubling_on_shared_hosts_fast_at_scale():
    """1,024 ranks, two a host: two hosts stand for all, no DES."""
    for algorithm in DOUBLING:
        sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2,
                      algorithm=algorithm)
        assert predict(ONE_TENSOR, "ddp", 512, sc).engine == "fast"


# -- the queues themselves --------------------------------------------------------------------

def test_two_senders_share_a_transmit_direction():
    """Ranks 0 and 1 (host 0) send to ranks 2 and 3 (host 1) at once: the second message waits
    for the first on host 0's transmit direction (FIFO in rank order), and a later message
    waits for both."""
    nics = NicState(2)
    messages = ([0, 1, 0], [2, 3, 2], [0.5, 0.5, 0.5], [2.0, 2.0, 1.0], [0, 0, 0], [1, 1, 1])
    programs = [[(SEND, 0), (MARK,), (SEND, 2)], [(SEND, 1)], [(RECV, 0), (RECV, 2)],
                [(RECV, 1)]]
    finish, marks = simulate([0.0, 0.0, 0.0, 0.0], [0, 1, 2, 3], [0, 0, 1, 1], programs,
                             messages, 1.0, nics)
    # Message 0 holds host 0's directions 0..2, message 1 2..4, message 2 (posted at 2.5) 4..5.
    np.testing.assert_allclose(finish, [5.5, 4.5, 5.5, 4.5])
    assert marks == [[2.5], [], [], []]
    np.testing.assert_allclose(nics.free[0], [5.0, -np.inf])
    np.testing.assert_allclose(nics.free[1], [-np.inf, 5.0])


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.floats(0.0, 10.0),
                          st.floats(0.0, 3.0)), max_size=8))
@settings(max_examples=200, deadline=None)
def test_messages_that_meet_on_a_direction_are_not_accepted(messages):
    """``NicState.meet`` (a step's check in ``Schedule.run``, which then replays at once) and
    ``accept`` agree: messages that hold one direction at once (beyond the clock's touch) meet
    and are not accepted, and on fresh NICs messages that do not meet are; touching ends
    (one message starting as another ends) do not meet."""
    hs, hd, begin, busy = (np.array([m[i] for m in messages], dtype=float if i > 1 else int)
                           for i in range(4))
    end = begin + busy
    met = NicState.meet(hs, hd, begin, end)
    assert met != NicState(3).accept(hs, hd, begin, end)
    touch = 1e-12 * max([1.0, *end])                  # (``fast_queues.TOUCH_RTOL``)
    assert met == any(a != b and x == y and begin[a] <= begin[b] < end[a] - touch
                      for a in range(len(messages)) for b in range(len(messages))
                      for x, y in ((hs[a], hs[b]), (hd[a], hd[b])))
    assert not NicState.meet(np.array([0, 0]), np.array([1, 2]), np.array([0.0, 2.0]),
                             np.array([2.0, 3.0]))


def test_a_replay_s_columns_are_joined_as_read():
    """``Messages.columns``: seven columns, each one array of every chunk added, joined only
    when read (the compiled loop reads four unless the CPUs are shared: a replay of every rank
    at 65,536 ranks joined 150 MB it never read)."""
    messages = Messages()
    messages.add([[0, 1], [2, 3], [0.5, 0.5], [1.0, 2.0], [0, 0], [1, 1], [8.0, 9.0]])
    messages.add([[4], [5], [0.25], [3.0], [-1], [-1], [10.0]])
    columns = messages.columns()
    assert len(columns) == 7
    np.testing.assert_array_equal(columns[3], [1.0, 2.0, 3.0])
    assert [len(x) for x in columns[2:6]] == [3, 3, 3, 3]
    assert len(messages._chunks[0]) == 2 and len(messages._chunks[6]) == 2   # (not read)
    np.testing.assert_array_equal(columns[-1], [8.0, 9.0, 10.0])
    assert columns[0] is columns[0] and list(columns[0]) == [0, 1, 4]
    with pytest.raises(IndexError):
        columns[7]


def test_events_at_one_instant_run_in_the_order_scheduled():
    """Rank 1 starts at t = 1 and rank 0's wait ends then: rank 1's start was scheduled
    first (before anything ran), so its message takes host 0's transmit direction first,
    whatever the ranks' order; rank 0's waits for it, as in simpy's (time, scheduling order)
    queue."""
    nics = NicState(2)
    messages = ([0, 1], [2, 3], [0.5, 0.5], [2.0, 2.0], [0, 0], [1, 1])
    programs = [[(WAIT, 1.0), (SEND, 0)], [(SEND, 1)], [(RECV, 0)], [(RECV, 1)]]
    finish, _ = simulate([0.0, 1.0, 0.0, 0.0], [0, 1, 2, 3], [0, 0, 1, 1], programs,
                         messages, 1.0, nics)
    np.testing.assert_allclose(finish, [5.5, 3.5, 5.5, 3.5])


def test_an_exchange_waits_for_both_messages_and_reduces():
    """Ranks 0 and 2 exchange across hosts while host 1's receive direction is still busy
    from an earlier collective: 0 -> 2 waits for it (holding host 0's transmit side), 2 -> 0
    does not; each rank then reduces."""
    nics = NicState(2)
    nics.free[1][1] = 3.0
    messages = ([0, 1], [1, 0], [0.5, 0.5], [1.0, 1.0], [0, 1], [1, 0])
    programs = [[(EXCHANGE, 0, 1), (GLOO, 0.25)], [(EXCHANGE, 1, 0), (GLOO, 0.25)]]
    finish, _ = simulate([0.0, 1.0], [0, 2], [0, 1], programs, messages,
                         1.0, nics)
    np.testing.assert_allclose(finish, [4.75, 4.75])


def test_a_direction_freed_before_the_first_start_is_free_and_after_it_is_waited_for():
    """Host 1's receive direction, busy from an earlier collective until 0.5: a message
    posted just before that waits for it, one posted at 0.5 or later finds it free (a
    release at or before the first start would come first among that instant's events,
    with nothing to grant, so ``simulate`` does not schedule it).  Delivered at the later of
    the post and 0.5, plus 1 s on the wire and 0.5 s of latency."""
    messages = ([0], [1], [0.5], [1.0], [0], [1])
    programs = [[(SEND, 0)], [(RECV, 0)]]
    for begin in (0.25, 0.4999, 0.5, 0.75):
        nics = NicState(2)
        nics.free[1][1] = 0.5
        finish, _ = simulate([begin, begin], [0, 1], [0, 1], programs, messages, 1.0, nics)
        assert finish == [max(begin, 0.5) + 1.5] * 2, (begin, finish)


def test_a_start_order_that_could_matter_is_noted():
    """Ranks 0 (host 0) and 1 (host 1) send to ranks 2 and 3 (host 2) over its one receive
    direction.  All four start at once: each message is completed by whichever side posts
    second, so the hosts' order decides which takes the direction first (the two orders
    differ), and the replay notes that it could matter.  With host 2's ranks starting a
    little later, they complete both messages in their own order: every order of hosts 0
    and 1 agrees, and the replay says so."""
    messages = ([0, 1], [2, 3], [0.5, 0.5], [2.0, 2.0], [0, 1], [2, 2])
    programs = [[(SEND, 0)], [(SEND, 1)], [(RECV, 0)], [(RECV, 1)]]
    hosts = [0, 1, 2, 2]

    def run(start, order):
        ordered = []
        finish, _ = simulate(start, order, hosts, programs, messages, 1.0, NicState(3),
                             owners=hosts, ordered=ordered)
        return finish, ordered[0]

    together = [0.0] * 4
    first, free = run(together, [2, 3, 0, 1])        # (per rank, its place: host 2's first)
    second, _ = run(together, [3, 2, 0, 1])
    assert not free and first != second
    later = [0.0, 0.0, 0.1, 0.1]
    first, free = run(later, [0, 1, 2, 3])
    second, _ = run(later, [1, 0, 2, 3])
    assert free and first == second
    np.testing.assert_allclose(first, [2.6, 4.6, 2.6, 4.6])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_an_order_free_replay_is_the_same_in_every_order(data):
    """One all-reduce over hosts of several ranks, the ranks starting at a few instants (so
    many start together): where the replay finds that no two events at one instant whose
    starts may swap touch one resource (``fast_queues._ties``), every order of the hosts (a
    host's ranks keeping theirs) gives the same times, to the bit."""
    from commsim.api import run_spec
    from commsim.costs import cost_inputs
    from commsim.sim.fast_collectives import SCHEDULES, Block, Run

    hosts, local = data.draw(st.integers(2, 6)), data.draw(st.integers(1, 3))
    algorithm = data.draw(st.sampled_from([*DOUBLING, "tree"]))
    p = hosts * local
    spec = run_spec(DISTINCT, "ring", hosts, scenario("ring", hosts, local, algorithm=algorithm))
    run = Run(spec, cost_inputs(spec, DISTINCT), np.arange(p))
    table = Messages()
    programs = SCHEDULES[algorithm](run, Block(np.arange(p)[None], p)).added(
        float(data.draw(st.sampled_from([1e3, 4e5]))), table, rows=False)
    messages = table.columns()
    start = data.draw(st.lists(st.sampled_from([0.0, 1e-3, 2e-3]), min_size=p, max_size=p))
    owner = (np.arange(p) // local).tolist()

    def replay(rank_of_host):
        order = [rank_of_host[h] * local + k % local for k, h in enumerate(owner)]
        ordered = []
        finish, marks = simulate(start, order, owner, [list(x) for x in programs], messages,
                                 run.b, NicState(hosts), compute_rate=run.a, owners=owner,
                                 ordered=ordered)
        return finish, ordered[0]

    finish, free = replay(list(range(hosts)))
    if free:
        for _ in range(3):
            shuffled = data.draw(st.permutations(range(hosts)))
            assert replay(list(shuffled))[0] == finish


@pytest.mark.parametrize("asks", [1.0, 5.0])
def test_a_request_ahead_of_or_with_an_earlier_collective_s_is_declined(asks):
    """A message that asks for a direction before an earlier collective's last one there, or
    at the same instant (which the DES orders by its event history, which a collective
    replayed alone does not hold), is declined; one after it waits for its release."""
    nics = NicState(2)
    nics.requested[0][0] = 5.0
    nics.free[0][0] = 6.0
    with pytest.raises(UserError, match="NIC"):
        simulate([asks, asks], [0, 2], [0, 1], [[(SEND, 0)], [(RECV, 0)]],
                 ([0], [1], [0.1], [1.0], [0], [1]), 1.0, nics)
    nics = NicState(2)
    nics.requested[0][0], nics.free[0][0] = 5.0, 6.0
    finish, _ = simulate([5.5, 5.5], [0, 2], [0, 1], [[(SEND, 0)], [(RECV, 0)]],
                         ([0], [1], [0.1], [1.0], [0], [1]), 1.0, nics)
    np.testing.assert_allclose(finish, [7.1, 7.1])


def test_a_host_still_in_the_last_tensor_keeps_its_cores_and_nic():
    """A ring per tensor split a tensor at a time, four ranks a host, MPICH's fold over 24
    ranks: a host's first ranks leave a tensor 42 ms before its others, and folding, then
    reducing, on the host's cores while the others' last events are there, which a tensor
    replayed apart does not hold, queued two hosts' messages the other way (a random draw of
    ``test_random_shared_hosts``: 4.2 ms off).  A message on a host's NIC or a job on its
    cores before its last rank has left the last tensor declines the split; the whole
    replay gives the DES's times."""
    sc = scenario("ring", 6, 4, algorithm="recursive_doubling")
    assert exact_or_declined(DISTINCT, "ring", 6, sc)
    declined = NicState(1)
    with pytest.raises(UserError, match="still in the earlier collective"):
        simulate([1.0, 2.0], [0, 1], [0, 0], [[(GLOO, 0.5)], []], ([], [], [], [], [], []),
                 1.0, declined, left=[0.5, 1.5])
    finish, _ = simulate([2.0, 2.0], [0, 1], [0, 0], [[(GLOO, 0.5)], []],
                         ([], [], [], [], [], []), 1.0, NicState(1), left=[0.5, 1.5])
    np.testing.assert_allclose(finish, [2.5, 2.0])


@pytest.mark.parametrize("strategy, hosts, local, kw", [
    ("ring", 32, 2, dict(algorithm="recursive_doubling", stragglers={5: 1.5})),
    ("ddp", 16, 4, dict(algorithm="rabenseifner", slow_links_Bps={3: 30e6})),
    ("ddp", 24, 2, dict(algorithm="recursive_doubling", stragglers={0: 0.7}, sync_every=2)),
    ("ring", 20, 3, dict(algorithm="tree", slow_links_Bps={7: 30e6}, stragglers={30: 1.4}))])
def test_uneven_shared_hosts_at_scale(strategy, hosts, local, kw):
    """Up to 64 ranks, each rank's process replayed from the start of the iteration: the order
    in which the DES's ranks reach their collectives comes out of it, nothing is declined."""
    sc = scenario(strategy, hosts, local, **kw)
    assert predict(ONE_TENSOR, strategy, hosts, sc, engine="auto").engine == "fast"
    assert exact_or_declined(ONE_TENSOR, strategy, hosts, sc)


@pytest.mark.parametrize("hosts, local", [(1, 2), (3, 2), (2, 3)])
@pytest.mark.parametrize("kw", [{}, dict(stragglers={1: 1.5}), dict(slow_links_Bps={0: 30e6})])
def test_dp_devices_sharing_a_host(hosts, local, kw):
    """DataParallel's devices on shared hosts: device 0's messages to all queue on its NIC,
    and the others' on theirs."""
    assert exact_or_declined(DISTINCT, "dp", hosts, scenario("dp", hosts, local, **kw))


@pytest.mark.parametrize("strategy, hosts, local, kw", [
    ("ring", 3, 2, dict(group_size=3)),
    ("ddp", 4, 2, dict(group_size=3, compression="fp16")),
    ("ring", 5, 3, dict(group_size=4, stragglers={8: 0.7}, slow_links_Bps={4: 60e6})),
    ("ddp", 5, 3, dict(group_size=4, stragglers={2: 1.3}, sync_every=2))])
def test_rings_of_groups_across_hosts(strategy, hosts, local, kw):
    """Groups cutting across hosts give a host several ring edges on one NIC direction: the
    ring's steps are replayed as a schedule of shifts."""
    sc = scenario(strategy, hosts, local, **kw)
    assert predict(DISTINCT, strategy, hosts, sc, engine="auto").engine == "fast"
    assert exact_or_declined(DISTINCT, strategy, hosts, sc)


def test_deliveries_due_at_one_instant_keep_the_des_order():
    """Ranks that reach the buffer broadcast's latch at one instant, one by a message between
    hosts and two by messages inside hosts, leave it in the DES's order only if both engines
    add a message's latency and busy time alike (a last-bit difference once put the fast
    engine 1.1 % ahead, the order carried into the all-reduce's NIC queues)."""
    sc = scenario("ddp", 4, 3, algorithm="rabenseifner", overlap=False,
                  slow_links_Bps={1: 20e6})
    assert exact_or_declined(DISTINCT, "ddp", 4, sc)
