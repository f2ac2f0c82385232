"""A world ring of stragglers on one pool of cores (or one host), by runs of ranks alike
(``fast_runs``): against the DES (tolerance 1e-9 relative), and its events growing with the
ranks, not with their square."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.api import Scenario, predict, run_spec
from commsim.costs import cost_inputs
from commsim.profile import load_default
from commsim.sim import fast, fast_runs
from commsim.sim.fast_collectives import NotExact
from test_fast_engine import PROFILE, assert_same
from test_fast_sharing import EFFICIENCY, contended
from test_fast_whatifs import DISTINCT


@pytest.fixture(autouse=True)
def runs_alone(monkeypatch):
    """The runs, never the replay of every rank that follows their ``NotExact``: a run that
    went wrong (a rank left waiting, a budget spent) fails here rather than being replayed
    right."""
    monkeypatch.setattr(fast, "_replays_cpu", lambda *args: False)


PROFILES = {"plain": PROFILE, "distinct": DISTINCT, "contended": contended(PROFILE),
            "bundled": load_default()}
CPU = {
    "pool": dict(shared_cpu_cores=2),
    "pool+efficiency": dict(shared_cpu_cores=2, cpu_efficiency=EFFICIENCY),
    "pool, 1.5 cores": dict(shared_cpu_cores=1.5),
    "roomy pool": dict(shared_cpu_cores=8),
}
# Two ranks a host on each host's cores (a ring per tensor: ``_Ring.hosts_apart``).
HOSTS = {
    "a core a host": dict(cores_per_host=1),
    "1.5 cores a host+efficiency": dict(cores_per_host=1.5, cpu_efficiency=EFFICIENCY),
}
OPTIONS = {
    "": {}, "sync-every 2": dict(sync_every=2), "fp16": dict(compression="fp16"),
    "no overlap": dict(overlap=False), "no buffers": dict(broadcast_buffers=False),
    "hierarchical": dict(algorithm="hierarchical"),
}
RING_ONLY = ("compression", "overlap", "broadcast_buffers")


def check(profile, strategy, hosts, stragglers, cpu=None, local=1, **kw):
    extra = dict({**CPU, **HOSTS}[cpu]) if cpu else dict(cores_per_host=2)
    if strategy == "ring":
        kw = {k: v for k, v in kw.items() if k not in RING_ONLY}
    sc = Scenario(global_batch=64 * hosts * local, bucket_bytes=500_000, ranks_per_host=local,
                  stragglers=stragglers, **extra, **kw)
    assert fast_runs.covers(run_spec(profile, strategy, hosts, sc))
    fast = predict(profile, strategy, hosts, sc, engine="fast")
    assert_same(predict(profile, strategy, hosts, sc, engine="des"), fast)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("strategy", ["ddp", "ring"])
@pytest.mark.parametrize("stragglers", [{1: 1.5}, {0: 2.0, 3: 1.3}, {2: 0.7}])
def test_stragglers_on_a_pool(profile, strategy, stragglers):
    for hosts in (4, 7, 16):
        for kw in OPTIONS.values():
            check(PROFILES[profile], strategy, hosts, stragglers, "pool", **kw)


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
def test_stragglers_on_one_host(strategy):
    """Every rank on one host's cores: its messages stay inside the host."""
    for local in (2, 3, 8):
        check(load_default(), strategy, 1, {1: 1.5}, local=local)
        check(contended(PROFILE), strategy, 1, {0: 0.5, local - 1: 3.0}, local=local,
              sync_every=2)


def test_stragglers_two_ranks_a_host_on_a_pool():
    """Each rank's step has a message inside its host and one between hosts (a ring per
    tensor: DDP's buckets part such ranks at O(p^2) instants)."""
    for hosts in (2, 3, 8):
        check(load_default(), "ring", hosts, {1: 1.5}, "pool", local=2)
        check(contended(PROFILE), "ring", hosts, {0: 0.5, 3: 3.0}, "pool, 1.5 cores",
              local=2, sync_every=2)
        check(DISTINCT, "ring", hosts, {2: 1.2}, "pool+efficiency", local=2)


def test_stragglers_two_ranks_a_host_on_cores_of_their_own():
    """Each host its cores (``_Ring.hosts_apart``): a run's end rank whose host's other rank
    is in another run runs its jobs on that host's CPU beside that rank's; with calibrated
    contention its messages slow while that rank computes beside a collective."""
    for hosts in (2, 3, 8):
        check(load_default(), "ring", hosts, {1: 1.5}, "a core a host", local=2)
        check(contended(PROFILE), "ring", hosts, {0: 0.5, 3: 3.0}, "a core a host", local=2,
              sync_every=2)
        check(DISTINCT, "ring", hosts, {2: 1.2}, "1.5 cores a host+efficiency", local=2)
        check(contended(PROFILE), "ring", hosts, {1: 0.6}, "1.5 cores a host+efficiency",
              local=2)


def test_what_runs_do_not_cover():
    """Groups, a slow link, trees and doubling, three ranks a host, two ranks a host on cores
    of their own, no straggler (the lockstep's), the parameter server."""
    cases = [dict(group_size=2), dict(slow_links_Bps={1: 1e6}), dict(algorithm="tree"),
             dict(algorithm="recursive_doubling"), dict(ranks_per_host=3),
             dict(ranks_per_host=2, shared_cpu_cores=None, cores_per_host=1),
             dict(ranks_per_host=2, strategy="ddp"),
             dict(stragglers={}), dict(strategy="ps")]
    for case in cases:
        case = dict(case)
        strategy = case.pop("strategy", "ddp")
        case.setdefault("stragglers", {1: 1.5})
        case.setdefault("shared_cpu_cores", 2)
        assert not fast_runs.covers(run_spec(PROFILE, strategy, 4, Scenario(**case)))


def events(strategy, ranks):
    """Processes resumed in one iteration of ``ranks`` with a straggler on a pool."""
    count = []
    original = fast_runs._Ring.run

    def run(self):
        original(self)
        count.append(self.events)

    fast_runs._Ring.run = run
    try:
        predict(load_default(), strategy, ranks,
                Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                         stragglers={1: 1.5}), engine="fast")
    finally:
        fast_runs._Ring.run = original
    return count[0]


def test_a_run_that_keeps_parting_is_refused():
    """Past its budget of events the engine says so (``NotExact``): the caller replays
    every rank where that is small enough, and ``--engine auto`` otherwise counts the DES's
    messages (``BeyondReach`` at scale)."""
    spec = run_spec(load_default(), "ring", 4, Scenario(shared_cpu_cores=2,
                                                        stragglers={1: 1.5}))
    costs = cost_inputs(spec, load_default())
    ring = fast_runs._Ring(spec, costs, fast_runs._programs(spec, costs, False, False),
                           lambda start: None)
    ring.budget = 10
    with pytest.raises(NotExact, match="parting"):
        ring.run()


def test_each_straggler_brings_its_own_staircases():
    """DDP with small buckets beside eight stragglers takes some 55 events a rank: O(p), but
    past the budget one straggler needs (32p), which would refuse it as runs that keep
    parting.  The budget grows with the stragglers."""
    ranks = 8192
    stragglers = {i * 7919 % ranks: 1.2 + 0.1 * i for i in range(8)}
    result, events = counted("run", "ddp", ranks,
                             Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                                      bucket_bytes=1_000_000, stragglers=stragglers))
    assert result.engine == "fast"
    assert events > 32 * ranks + 100_000, events


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
def test_events_grow_with_the_ranks(strategy):
    """The DES moves 2p(p-1) messages an all-reduce; the runs take O(p) events an iteration:
    the delay crosses the ring one rank a step, and ranks in step are one run whose equal
    steps are one addition."""
    small, large = events(strategy, 64), events(strategy, 256)
    assert large < 5 * small, (small, large)
    assert large < 40 * 256


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(sorted(PROFILES)), cpu=st.sampled_from(sorted({**CPU, **HOSTS})),
       strategy=st.sampled_from(["ddp", "ring"]), hosts=st.sampled_from([2, 3, 5, 8, 13]),
       options=st.lists(st.sampled_from(sorted(OPTIONS)), max_size=3, unique=True),
       slow=st.dictionaries(st.integers(0, 12), st.sampled_from([0.5, 0.8, 1.2, 1.5, 3.0]),
                            min_size=1, max_size=3),
       bucket_bytes=st.sampled_from([300_000, 500_000, 5_000_000]),
       local=st.sampled_from([1, 2]))
def test_random_combinations_match_the_des(profile, cpu, strategy, hosts, options, slow,
                                           bucket_bytes, local):
    kw = {}
    for name in options:
        kw.update(OPTIONS[name])
    if cpu in HOSTS:
        local = 2                         # (one rank a host on its cores: the recurrences)
    stragglers = {rank % (hosts * local): factor for rank, factor in slow.items()}
    if local > 1:
        kw.pop("algorithm", None)         # hierarchical's trees inside hosts: not a world ring
        strategy = "ring"                 # DDP's buckets with two ranks a host: not covered
    if strategy == "ring":
        kw = {k: v for k, v in kw.items() if k not in RING_ONLY}
    sc = Scenario(global_batch=64 * hosts * local, bucket_bytes=bucket_bytes,
                  ranks_per_host=local, stragglers=stragglers, **{**CPU, **HOSTS}[cpu], **kw)
    assert_same(predict(PROFILES[profile], strategy, hosts, sc, engine="des"),
                predict(PROFILES[profile], strategy, hosts, sc, engine="fast"))


def counted(method, strategy, hosts, sc, skip=False):
    """(the fast engine's result, the events ``_Ring``'s ``method`` took) for one prediction;
    with ``skip``, the method is not run and hands back what it was given (``_stride``: the
    glide then takes every step)."""
    count = [0]
    original = getattr(fast_runs._Ring, method)

    def wrapped(self, *args):
        before = self.events
        out = args[0] if skip else original(self, *args)
        count[0] += self.events - before
        return out

    setattr(fast_runs._Ring, method, wrapped)
    try:
        result = predict(load_default(), strategy, hosts, sc, engine="fast")
    finally:
        setattr(fast_runs._Ring, method, original)
    return result, count[0]


# Stragglers whose staircases glide (48 ranks, 2 MB buckets, a pool of 2 cores unless said).
STAIRCASES = [
    dict(stragglers={1: 1.5}),
    dict(stragglers={1: 1.5, 40: 1.2}, sync_every=2),
    dict(stragglers={5: 3.0}, shared_cpu_cores=1.5, cpu_efficiency=EFFICIENCY),
    dict(stragglers={0: 1.3}, compression="fp16", overlap=False),
]


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
@pytest.mark.parametrize("case", [*STAIRCASES, dict(stragglers={9: 1.5}, ranks_per_host=2)])
def test_staircases_glide_as_the_des_steps(strategy, case):
    """A straggler's staircase (runs parting from their end ranks, or taking them in, a step
    at a time) taken outside the loop's batches (``_Ring._glide``): the DES's times, and a
    staircase's steps glided."""
    case = dict(case)
    if case.get("ranks_per_host"):
        strategy = "ring"                 # DDP's buckets with two ranks a host: not covered
    if strategy == "ring":
        case = {k: v for k, v in case.items() if k not in RING_ONLY}
    case.setdefault("shared_cpu_cores", 2)
    hosts = 48 // case.get("ranks_per_host", 1)
    sc = Scenario(global_batch=32 * 48, bucket_bytes=2_000_000, **case)
    result, steps = counted("_glide", strategy, hosts, sc)
    assert_same(predict(load_default(), strategy, hosts, sc, engine="des"), result)
    if case.get("ranks_per_host", 1) == 1:
        assert steps > 24, steps          # (two ranks a host: two kinds of message, no glide)


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
@pytest.mark.parametrize("case", [
    *STAIRCASES, dict(stragglers={20: 2.0}, broadcast_buffers=False),
    dict(stragglers={47: 1.2, 3: 1.5}, algorithm="hierarchical", shared_cpu_cores=3),
])
def test_runs_in_step_stride_as_the_glide_steps(strategy, case):
    """Whole ring steps of the runs in step (``_Ring._stride``: a staircase built, or taken
    in by three runs at once): the glide's answer to the last bit without them, the DES's,
    and most of the glide's events theirs."""
    case = dict(case)
    if strategy == "ring":
        case = {k: v for k, v in case.items() if k not in RING_ONLY}
    case.setdefault("shared_cpu_cores", 2)
    sc = Scenario(global_batch=32 * 48, bucket_bytes=2_000_000, **case)
    result, steps = counted("_stride", strategy, 48, sc)
    glide, none = counted("_stride", strategy, 48, sc, skip=True)
    assert none == 0
    assert result.iteration_s == glide.iteration_s
    assert [r["finish_s"] for r in result.per_rank] == [r["finish_s"] for r in glide.per_rank]
    assert_same(predict(load_default(), strategy, 48, sc, engine="des"), result)
    _, glided_events = counted("_glide", strategy, 48, sc)
    assert steps > glided_events / 2, (steps, glided_events)


@pytest.mark.parametrize("strategy, hosts, options", [
    ("ddp", 92, dict(overlap=False, compute_scale=0.01)),
    ("ring", 65536, {}),
])
def test_runs_steps_apart_stride_together(strategy, hosts, options):
    """A straggler's staircase unwinding beside the next one building, whole steps behind
    it, their timers due at one instant (DDP without overlap; here 92 ranks computing a
    hundred times faster than calibrated, as calibrated at 65,536 ranks; a ring per tensor
    at 65,536 ranks, the DES out of reach there): ``_Ring._stride`` takes both, each posting
    its own step, with the glide's answer to the last bit, and the DES's where it runs."""
    sc = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2, stragglers={5: 1.5},
                  **options)
    apart = [0]                            # events of strides whose runs were steps apart
    original = fast_runs._Ring._stride

    def stride(self, batch, mine):
        reps = {run.procs[j][1] for run, j in batch if j == self.talker}
        before = self.events
        out = original(self, batch, mine)
        if len(reps) > 1:
            apart[0] += self.events - before
        return out

    fast_runs._Ring._stride = stride
    try:
        result = predict(load_default(), strategy, hosts, sc, engine="fast")
    finally:
        fast_runs._Ring._stride = original
    glide, _ = counted("_stride", strategy, hosts, sc, skip=True)
    assert result.iteration_s == glide.iteration_s
    assert [r["finish_s"] for r in result.per_rank] == [r["finish_s"] for r in glide.per_rank]
    assert [r["comm_s"] for r in result.per_rank] == [r["comm_s"] for r in glide.per_rank]
    if hosts <= 256:
        assert_same(predict(load_default(), strategy, hosts, sc, engine="des"), result)
    assert apart[0] > 32, apart[0]


@pytest.mark.parametrize("strategy", ["ddp", "ring"])
def test_a_staircase_waits_as_one_run(strategy):
    """The ranks a staircase leaves waiting, each on its own ring step, are held as one run
    a side (``_Stair``) until a neighbour looks at one of them: the runs stay few (every
    rank one at 1,024 ranks without), and the answer is the DES's."""
    sc = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                  bucket_bytes=4_000_000, stragglers={1: 1.5})
    most = [0]
    original = fast_runs._Ring._end_jobs

    def end_jobs(self, *args):
        most[0] = max(most[0], len(self.first))
        return original(self, *args)

    fast_runs._Ring._end_jobs = end_jobs
    try:
        result = predict(load_default(), strategy, 1024, sc, engine="fast")
    finally:
        fast_runs._Ring._end_jobs = original
    assert result.engine == "fast"
    assert most[0] < 32, most[0]
    assert_same(predict(load_default(), strategy, 64, sc, engine="des"),
                predict(load_default(), strategy, 64, sc, engine="fast"))


def test_a_faster_rank_strides_with_its_neighbours():
    """A rank faster than the rest is a run of its own inside the ring (its backward ahead of
    theirs); at each ring step it posts before its neighbours, so they pair with it as they
    post instead of leaving an end rank to wait for it and joining it again at the next
    step, and the runs' steps stride (most of the events): the DES's times."""
    sc = Scenario(global_batch=32 * 48, bucket_bytes=2_000_000, shared_cpu_cores=2,
                  stragglers={1: 1.5, 24: 0.7})
    result, strode = counted("_stride", "ddp", 48, sc)
    _, events = counted("run", "ddp", 48, sc)
    assert_same(predict(load_default(), "ddp", 48, sc, engine="des"), result)
    assert strode > events / 2, (strode, events)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(sorted(PROFILES)), cpu=st.sampled_from(sorted(CPU)),
       strategy=st.sampled_from(["ddp", "ring"]), hosts=st.sampled_from([17, 24, 31]),
       options=st.lists(st.sampled_from(sorted(OPTIONS)), max_size=2, unique=True),
       slow=st.dictionaries(st.integers(0, 30), st.sampled_from([0.8, 1.2, 1.5, 3.0]),
                            min_size=1, max_size=2))
def test_random_staircases_match_the_des(profile, cpu, strategy, hosts, options, slow):
    """Rings long enough for the glide (a run of at least four ranks beside four others),
    random stragglers, cores and options: the DES's times."""
    kw = {}
    for name in options:
        kw.update(OPTIONS[name])
    if strategy == "ring":
        kw = {k: v for k, v in kw.items() if k not in RING_ONLY}
    sc = Scenario(global_batch=32 * hosts, bucket_bytes=2_000_000,
                  stragglers={rank % hosts: factor for rank, factor in slow.items()},
                  **CPU[cpu], **kw)
    assert_same(predict(PROFILES[profile], strategy, hosts, sc, engine="des"),
                predict(PROFILES[profile], strategy, hosts, sc, engine="fast"))


def test_runs_meet_the_lockstep_without_a_straggler_factor():
    """A 'straggler' of factor 1 is no straggler: the runs give the lockstep's answer."""
    sc = Scenario(global_batch=64 * 8, shared_cpu_cores=2, stragglers={3: 1.0})
    spec = run_spec(load_default(), "ddp", 8, sc)
    costs = cost_inputs(spec, load_default())
    finish = fast_runs.iteration(spec, costs, buckets=True, broadcast=False,
                                 broadcast_end=lambda start: None)[0]
    lockstep = predict(load_default(), "ddp", 8,
                       Scenario(global_batch=64 * 8, shared_cpu_cores=2,
                                broadcast_buffers=False), engine="fast")
    assert finish.max() == pytest.approx(lockstep.iteration_s, rel=1e-9)


def test_a_jump_stops_short_of_the_first_compute_job_to_end():
    """Found by random checks: equal steps were counted from the compute jobs' work left at
    the pool's last event, not now, and ran past the end of one (4.5e-4 off the DES)."""
    sc = Scenario(global_batch=64 * 32, bucket_bytes=300_000, shared_cpu_cores=8,
                  stragglers={17: 1.5, 2: 0.8})
    assert_same(predict(load_default(), "ddp", 32, sc, engine="des"),
                predict(load_default(), "ddp", 32, sc, engine="fast"))
