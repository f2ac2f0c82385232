"""``fast_queues.simulate``'s event loop compiled (``_replay.c``) against its Python loop.

The compiled loop takes the replays at fixed CPU rates without the order note; the Python loop
stays the reference (and runs where no compiler built the extension).  Every call below runs
both ways on copies of its arguments: the same finish times and marks, the same order of
processes passing marks, the same NIC state left for the next collective, the same releases,
and the same refusals, to the bit.
"""
import collections
import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from commsim.api import Scenario, predict
from commsim.errors import UserError
from commsim.sim import fast_queues as fq
from commsim.sim.fast_queues import (ALL, COMPUTE, ENTER, EXCHANGE, EXIT, GHOST, GLOO, MARK,
                                     RECV, ROWS, SEND, WAIT, NicState)
from test_fast_engine import PROFILE, THREADS
from test_fast_sharing import EFFICIENCY, profile_named
from test_fast_whatifs import DISTINCT

pytest.importorskip("commsim.sim._replay")


def both_ways(simulate, seen, start, order, host, programs, messages, gloo, nics, **kw):
    """``simulate`` in Python and compiled; raises unless they agree; the compiled answer."""
    compiled = fq._replay
    assert kw.get("ordered") is None
    table = np.concatenate(kw["rows"]) if kw.get("rows") else None
    for program in programs:
        for action in program:
            seen[action[0]] += 1
            if action[0] == ROWS:            # (and the actions of its rows)
                seen.update(table["kind"][action[1]:action[2]].tolist())
    copies = copy.deepcopy((start, order, host, programs, messages, gloo, nics, kw))
    answers = []
    for loop, args in ((None, copies), (compiled, (start, order, host, programs, messages,
                                                   gloo, nics, kw))):
        fq._replay = loop
        try:
            answers.append((simulate(*args[:7], **args[7]), None))
        except UserError as why:       # (NotExact)
            answers.append((None, why))
        finally:
            fq._replay = compiled
    (want, refused), (got, why) = answers
    if refused or why:
        assert (type(refused), str(refused)) == (type(why), str(why))
        seen["refused"] += 1
        raise why
    assert [float(x) for x in want[0]] == [float(x) for x in got[0]]
    assert want[1] == got[1]
    for key in ("sequence", "released"):
        assert copies[7].get(key) == kw.get(key)
    if kw.get("grants") is not None:        # (followers: when each started and was granted)
        for theirs, mine in zip(copies[7]["grants"], kw["grants"]):
            np.testing.assert_array_equal(theirs, mine)
        seen["followers"] += 1
    for theirs, mine in zip(copies[6].free + copies[6].requested, nics.free + nics.requested):
        np.testing.assert_array_equal(theirs, mine)
    if kw.get("cpus") is not None:          # the CPUs as the Python loop leaves them
        theirs, mine = copies[7]["cpus"], kw["cpus"]
        for name in ("done", "last", "busy", "computing", "talking", "started", "compute_s",
                     "comm_s", "_order"):
            assert getattr(theirs, name) == getattr(mine, name), name
        assert [sorted(map(tuple, jobs)) for jobs in theirs.jobs] \
            == [sorted(map(tuple, jobs)) for jobs in mine.jobs]
        seen["shared"] += 1
    seen["calls"] += 1
    return got


@pytest.fixture
def seen(monkeypatch):
    """Every call the fast engine makes that the compiled loop takes, run both ways; the
    actions seen (and refusals, calls) counted."""
    counts = collections.Counter()
    simulate = fq.simulate

    def checked(*args, **kw):
        if kw.get("ordered") is not None or (kw.get("cpus") and not kw["cpus"].unused()):
            return simulate(*args, **kw)
        return both_ways(simulate, counts, *args, **kw)

    monkeypatch.setattr(fq, "simulate", checked)
    return counts


def scenario(strategy, hosts, local, **kw):
    kw.setdefault("cores_per_host", (THREADS + (strategy == "ddp")) * local)
    return Scenario(global_batch=64 * hosts * local, bucket_bytes=500_000,
                    ranks_per_host=local, **kw)


# Each replays on shared NICs: DDP's two processes a rank (spawn, signals, joins) with and
# without the buffer broadcast's latch, folds beside a straggler and a slow link (the second
# declines: a message would ask before an earlier collective's last request), and dp's
# phases (messages awaited all at once).
CASES = [("ddp", 3, 2, dict(algorithm="recursive_doubling")),
         ("ddp", 3, 2, dict(algorithm="rabenseifner", broadcast_buffers=False)),
         ("ring", 5, 2, dict(algorithm="recursive_doubling", stragglers={1: 1.5})),
         ("ring", 4, 2, dict(algorithm="rabenseifner", slow_links_Bps={1: 30e6})),
         ("dp", 2, 2, {})]


def test_the_fast_engine_s_replays_are_the_same_both_ways(seen, monkeypatch):
    from commsim.sim import fast
    for strategy, hosts, local, kw in CASES:
        try:
            predict(DISTINCT, strategy, hosts, scenario(strategy, hosts, local, **kw),
                    engine="fast")
        except UserError:
            pass
    # and a replay by class with stand-ins beside a slow link (at 16 hosts only with its
    # budget of rounds lifted: a replay of every rank costs no more there)
    monkeypatch.setattr(fast, "_REFINED_SHARE", 10.0)
    predict(DISTINCT, "ring", 16, scenario("ring", 16, 2, algorithm="rabenseifner",
                                           slow_links_Bps={5: 5e6}), engine="fast")
    # every action (GHOST: the stand-ins' sides beside a slow link, as rows), rows of a
    # table, followers, and a refusal
    assert set(seen) >= set(range(GHOST + 1)) | {ROWS, "refused", "calls", "followers"}, seen


# The DES's processor sharing (``SharedCpus``): crowded hosts out of step (each host's jobs
# apart), one pool of cores (a heap of jobs), an efficiency curve, calibrated contention, the
# binomial parameter server's replay by class (GHOST).
SHARED = [(PROFILE, "ddp", 2, dict(ranks_per_host=2, cores_per_host=1, stragglers={1: 1.5})),
          (PROFILE, "ps", 4, dict(ranks_per_host=3, cores_per_host=1, stragglers={1: 1.5})),
          (profile_named("contended"), "ddp", 3, dict(
              ranks_per_host=4, shared_cpu_cores=2, algorithm="hierarchical",
              stragglers={1: 1.5})),
          (PROFILE, "ring", 3, dict(ranks_per_host=4, cores_per_host=2,
                                    cpu_efficiency=EFFICIENCY, stragglers={1: 1.5})),
          (profile_named("contended"), "ps", 21, dict(shared_cpu_cores=2, algorithm="binomial",
                                                      stragglers={2: 1.5}))]


def test_processor_sharing_is_the_same_both_ways(seen):
    for profile, strategy, hosts, kw in SHARED:
        before = seen["shared"]
        sc = Scenario(global_batch=64 * hosts * kw.get("ranks_per_host", 1), **kw)
        predict(profile, strategy, hosts, sc, engine="fast")
        assert seen["shared"] > before, (strategy, kw)
    assert seen[GHOST], seen


@st.composite
def programs(draw):
    """A few processes on a few hosts, messages between them posted in random orders with CPU
    jobs, waits and marks between; dyadic times so that instants tie.  Some never complete
    (a receive whose send comes after the sender's own receive): both loops must stop alike."""
    hosts = draw(st.integers(1, 3))
    n = draw(st.integers(1, 6))
    host = [draw(st.integers(0, hosts - 1)) for _ in range(n)]
    times = st.sampled_from([0.0, 0.25, 0.5, 1.0])
    count = draw(st.integers(0, 8)) if n > 1 else 0
    columns = [[], [], [], [], [], []]
    sides = [[] for _ in range(n)]
    for m in range(count):
        a, b = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        across = host[a] != host[b]
        for column, value in zip(columns, (a, b, draw(times), draw(times),
                                           host[a] if across else -1,
                                           host[b] if across else -1)):
            column.append(value)
        sides[a].append((SEND, m))
        sides[b].append((RECV, m))
    progs = []
    for k in range(n):
        mine = draw(st.permutations(sides[k]))
        program = []
        i = 0
        while i < len(mine):
            how = draw(st.sampled_from(["one", "pair", "all", "ghost"]))
            if how == "pair" and i + 1 < len(mine) and mine[i][0] == SEND \
                    and mine[i + 1][0] == RECV:
                program.append((EXCHANGE, mine[i][1], mine[i + 1][1]))
                i += 2
            elif how == "all":
                group = mine[i:i + 3]
                program.append((ALL, tuple(m for kind, m in group if kind == SEND),
                                [m for kind, m in group if kind == RECV]))
                i += len(group)
            elif how == "ghost":
                program.append((GHOST, (mine[i][1],)))
                i += 1
            else:
                program.append(mine[i])
                i += 1
            filler = draw(st.sampled_from([None, GLOO, COMPUTE, WAIT, MARK, ENTER, EXIT]))
            if filler in (GLOO, COMPUTE, WAIT):
                # (a tenth: work left that float rounding leaves a residue of)
                program.append((filler, draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.5]))))
            elif filler is not None:
                program.append((filler,))
        if draw(st.booleans()):
            program.append((GLOO, draw(st.sampled_from([0.5, 1.0]))))
        progs.append(program)
    start = [draw(times) for _ in range(n)]
    order = draw(st.permutations(range(n)))
    nics = NicState(hosts)
    for column in nics.free + nics.requested:
        column[:] = [draw(st.sampled_from([-np.inf, 0.0, 0.25, 0.75])) for _ in range(hosts)]
    left = draw(st.one_of(st.none(), st.lists(times, min_size=n, max_size=n)))
    kw = dict(compute_rate=draw(st.sampled_from([1.0, 0.5])), left=left,
              after_release=draw(st.booleans()), sequence=[], released={})
    if draw(st.booleans()):
        kw["cpus"] = draw(shared_cpus(host, columns))
    if draw(st.booleans()):
        progs, kw["rows"] = _tabled(draw, progs)
    return start, list(order), host, progs, columns, draw(st.sampled_from([1.0, 2.0])), nics, kw


def _tabled(draw, progs):
    """The programs with random runs of their actions (none with a list of messages) moved
    to an actions' table, each run one ROWS action (an empty one now and then); the table."""
    table = fq.Messages()
    out = []
    for program in progs:
        mine, i = [], 0
        while i < len(program):
            run = program[i:i + draw(st.integers(0, 4))]
            if any(action[0] in (ALL, GHOST) for action in run):
                run = []
            if not run and draw(st.booleans()):
                mine.append(program[i])
                i += 1
                continue
            kinds = [action[0] for action in run]
            first = table.add_rows(fq.action_table(
                kinds, [action[1] if kind in (SEND, RECV, EXCHANGE) else 0
                        for kind, action in zip(kinds, run)],
                [action[2] if kind == EXCHANGE else 0 for kind, action in zip(kinds, run)],
                [action[1] if kind in (GLOO, COMPUTE, WAIT) else 0.0
                 for kind, action in zip(kinds, run)]))
            mine.append((ROWS, first, first + len(run)))
            i += len(run)
        out.append(mine)
    return out, table.rows()


@st.composite
def shared_cpus(draw, host, columns):
    """The DES's processor sharing: a pool (a heap of jobs, or each job's work left: the
    compiled loop's groups of equal jobs) or each host's cores (its jobs in a list),
    multiplicities, an efficiency curve, a contention curve; the messages' bytes."""
    columns.append([draw(st.sampled_from([1.0, 4.0, 16.0])) for _ in columns[0]])
    pool = draw(st.booleans())
    return fq.SharedCpus(
        [0] * len(host) if pool else host, draw(st.sampled_from([0.5, 1.0, 2.0])),
        draw(st.sampled_from([1.0, 2.0])), draw(st.sampled_from([(), EFFICIENCY])),
        draw(st.sampled_from([None, _Contention()])),
        multiplicity=[draw(st.sampled_from([1.0, 2.0, 3.0])) for _ in host],
        per_job=not pool or draw(st.booleans()))


class _Contention:
    """A contention curve (``CostInputs``'s two methods): compute slows, and messages too,
    with the compute threads per core."""
    contention = True

    @staticmethod
    def compute_speed(load: float) -> float:
        return 1.0 / (1.0 + load)

    @staticmethod
    def contended_Bps(load: float) -> float:
        return 8.0 / (1.0 + load)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_are_the_same_both_ways(case):
    start, order, host, progs, columns, gloo, nics, kw = case
    try:
        both_ways(fq.simulate, collections.Counter(), start, order, host, progs, columns, gloo,
                  nics, **kw)
    except UserError:
        pass


@st.composite
def crowds(draw):
    """Processes on a few hosts that post all their sends at once (GHOST) and then await their
    receives, with CPU jobs between: nothing deadlocks, and many messages meet on each NIC
    direction at tied instants, released and requested within one instant."""
    hosts = draw(st.integers(2, 3))
    n = draw(st.integers(2, 7))
    host = [draw(st.integers(0, hosts - 1)) for _ in range(n)]
    columns = [[], [], [], [], [], []]
    sends = [[] for _ in range(n)]
    receives = [[] for _ in range(n)]
    for m in range(draw(st.integers(1, 12))):
        a, b = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        across = host[a] != host[b]
        for column, value in zip(columns, (a, b, draw(st.sampled_from([0.0, 0.25])),
                                           draw(st.sampled_from([0.25, 0.5])),
                                           host[a] if across else -1,
                                           host[b] if across else -1)):
            column.append(value)
        sends[a].append(m)
        receives[b].append(m)
    # (tenths: ends that tie but for float rounding, which the residue rules settle)
    jobs = st.sampled_from([(GLOO, 0.25), (GLOO, 0.1), (GLOO, 0.2), (COMPUTE, 0.5),
                            (COMPUTE, 0.1), (COMPUTE, 0.3), (ENTER,), (EXIT,)])
    progs = []
    for k in range(n):
        program = [(GHOST, tuple(sends[k]))]
        for m in draw(st.permutations(receives[k])):
            program += [(RECV, m), *draw(st.lists(jobs, max_size=2))]
        progs.append(program)
    start = [draw(st.sampled_from([0.0, 0.1, 0.25])) for _ in range(n)]
    kw = dict(sequence=[])
    if draw(st.booleans()):
        kw["cpus"] = draw(shared_cpus(host, columns))
    return start, list(range(n)), host, progs, columns, 1.0, NicState(hosts), kw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowds())
def test_crowded_nic_directions_are_the_same_both_ways(case):
    start, order, host, progs, columns, gloo, nics, kw = case
    both_ways(fq.simulate, collections.Counter(), start, order, host, progs, columns, gloo,
              nics, **kw)


def test_an_actions_table_gives_back_each_action():
    """A ROW keeps an action's second integer and its seconds in one place (no kind has
    both): a table made from actions gives each back, an exchange's message back beside a
    reduction's seconds."""
    actions = [(EXCHANGE, 3, 7), (GLOO, 0.25), (SEND, 5), (RECV, 6), (WAIT, 1.5),
               (COMPUTE, 2.0), (fq.SIGNAL, 1), (fq.READY, 2), (MARK,), (EXCHANGE, 9, 2)]
    kinds = [action[0] for action in actions]
    timed = (GLOO, COMPUTE, WAIT)
    table = fq.action_table(
        kinds, [action[1] if len(action) > 1 and kind not in timed else 0
                for kind, action in zip(kinds, actions)],
        [action[2] if kind == EXCHANGE else 0 for kind, action in zip(kinds, actions)],
        [action[1] if kind in timed else 0.0 for kind, action in zip(kinds, actions)])
    assert fq.split_actions(table, [0, 4, len(actions)]) == [actions[:4], actions[4:]]


def test_the_build_runs_these_actions_and_refuses_a_message_past_the_table():
    """The compiled loop is used only where it knows fast_queues' actions (a build older than
    ROWS is left for the Python loop), and an action naming a message that is not there is a
    ValueError, not a read past the arrays."""
    from commsim.sim import _replay
    assert fq._replay is _replay and _replay.ROWS == ROWS
    assert _replay.ROW_BYTES == fq.ROW.itemsize == 16
    columns = [[0], [1], [0.5], [0.5], [-1], [-1]]
    table = fq.Messages()
    for bad in (1, -1):
        first = table.add_rows(fq.action_table([SEND], [bad], [0], [0.0]))
        with pytest.raises(ValueError, match="past the messages"):
            fq.simulate([0.0, 0.0], [0, 1], [0, 0], [[(ROWS, first, first + 1)], [(RECV, 0)]],
                        columns, 1.0, NicState(1), rows=table.rows())
