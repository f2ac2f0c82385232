"""``--engine auto`` runs the DES only where it ends in reasonable time.

Where the fast engine has no exact path (a world ring on one pool of cores with a slow link
interleaves every rank's every step, O(p^2) events an all-reduce), the DES's work is
counted before it starts (``fast.des_messages``); beyond ``AUTO_DES_MESSAGES`` auto says so
(``BeyondReach``, one line, exit 2) instead of running for hours, a sweep leaves those cells out
naming why, and ``--engine des`` still runs them.
"""
import time

import pytest

from commsim.api import Scenario, predict, run_spec, sweep
from commsim.cli import main
from commsim.costs import cost_inputs
from commsim.errors import BeyondReach, UserError
from commsim.profile import load_default
from commsim.sim import engine
from commsim.sim.fast import des_messages
from commsim.simulate import AUTO_DES_MESSAGES
from test_fast_engine import PROFILE, assert_same

# A slow link parts a world ring on one pool at every step: its ranks' every step is an
# instant of its own.
OUT_OF_STEP = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                       slow_links_Bps={3: 1.25e6})


def counted_messages(profile, strategy, nodes, scenario):
    """Messages the DES moves in one iteration (``Network.send`` calls) and its answer."""
    sends = []
    original = engine.Network.send

    def send(self, *args, **kw):
        sends.append(args)
        return original(self, *args, **kw)

    engine.Network.send = send
    try:
        result = predict(profile, strategy, nodes, scenario, engine="des")
    finally:
        engine.Network.send = original
    return len(sends), result


@pytest.mark.parametrize("strategy, algorithm", [
    ("ps", None), ("ps", "binomial"), ("dp", None), ("ring", None), ("ring", "tree"),
    ("ring", "recursive_doubling"), ("ring", "rabenseifner"), ("ddp", None),
    ("ddp", "hierarchical")])
@pytest.mark.parametrize("nodes, local", [(5, 1), (8, 1), (3, 2)])
def test_des_messages_bounds_what_the_des_moves(strategy, algorithm, nodes, local):
    """The count is what the DES moves, or (trees, doubling) a bound within a few times it."""
    kw = {} if algorithm is None else {"algorithm": algorithm}
    sc = Scenario(global_batch=64 * nodes * local, ranks_per_host=local, **kw)
    moved, _ = counted_messages(PROFILE, strategy, nodes, sc)
    spec = run_spec(PROFILE, strategy, nodes, sc)
    estimate = des_messages(spec, cost_inputs(spec, PROFILE))
    assert moved <= estimate <= 4 * moved + 8 * spec.world_size, (moved, estimate)


def test_auto_declines_before_any_work_and_names_why():
    spec = run_spec(load_default(), "ring", 1024, OUT_OF_STEP)
    assert des_messages(spec, cost_inputs(spec, load_default())) > AUTO_DES_MESSAGES
    t0 = time.perf_counter()
    with pytest.raises(BeyondReach, match=r"ring on 1024 ranks: .*CPU pool.*--engine des"):
        predict(load_default(), "ring", 1024, OUT_OF_STEP, engine="auto")
    assert time.perf_counter() - t0 < 5.0     # it counted, it did not simulate


def test_auto_still_runs_the_des_where_it_ends_soon():
    r = predict(load_default(), "ring", 8, OUT_OF_STEP, engine="auto")
    assert r.engine in ("fast", "des") and r.iteration_s > 0


def test_the_cli_says_it_in_one_line(capsys):
    code = main(["predict", "--strategy", "ring", "--nodes", "1024", "--batch-per-rank", "32",
                 "--shared-cpu-cores", "2", "--slow-link", "3:10mbit"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--engine des" in err


@pytest.mark.parametrize("nodes, advice", [(1024, "--engine des to wait"),
                                           (4, "--engine auto or des")])
def test_engine_fast_advises_auto_only_where_auto_would_run(capsys, monkeypatch, nodes,
                                                            advice):
    """A world ring on one pool beside a slow link: past a replay's reach at 1,024 ranks
    where its 71 million messages do not fit in memory (asked for by name, the fast engine
    replays every rank as long as they do); at 4 the fast engine replays it, so a reason found
    on the way stands in for one."""
    import commsim.simulate
    from commsim.sim import fast
    from commsim.sim.fast import NotExact

    run_fast = commsim.simulate.run_fast

    def small_not_exact(spec, costs, reach):
        if spec.world_size <= 4 and spec.strategy == "ring":
            raise NotExact("a reason found on the way")
        return run_fast(spec, costs, reach)

    monkeypatch.setattr(commsim.simulate, "run_fast", small_not_exact)
    monkeypatch.setattr(fast, "_available_memory", lambda: 2**30)
    code = main(["predict", "--strategy", "ring", "--nodes", str(nodes), "--batch-per-rank",
                 "32", "--shared-cpu-cores", "2", "--slow-link", "3:10mbit", "--engine", "fast"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "cannot model this run exactly" in err and advice in err
    assert ("times the 500,000 --engine auto starts" in err) == (nodes == 1024)


def test_a_sweep_leaves_those_cells_out_naming_why(capsys):
    # Three ranks a host on one pool: the middle one of each host gets both its messages
    # inside the host, and the world ring goes out of step.
    code = main(["sweep", "--strategies", "ring", "--nodes", "1,2,400",
                 "--batch-per-rank", "32", "--shared-cpu-cores", "2", "--ranks-per-host", "3",
                 "--csv"])
    out, err = capsys.readouterr()
    assert code == 0
    rows = out.strip().splitlines()
    assert len(rows) == 1 + 2                  # ring at 1 and 2
    assert "left out 1 cell(s) (ring at [400] nodes)" in err and "CPU pool" in err
    skipped = []
    cells = sweep(load_default(), ["ring"], [1024], OUT_OF_STEP, skipped=skipped)
    assert cells == [] and skipped[0][:2] == ("ring", 1024)
    with pytest.raises(BeyondReach):          # asked for every cell: no silent gap
        sweep(load_default(), ["ring"], [1024], OUT_OF_STEP)


def test_a_replay_past_the_free_memory_is_declined_before_it_starts(capsys, monkeypatch):
    """Every rank's replay holds its messages (0.15-0.26 KiB each; DDP's buckets all at once):
    where they would not fit in the memory this machine has free, the fast engine says so
    before it builds them (the kernel would kill it later), and ``--engine auto`` runs the
    DES where it ends soon."""
    from commsim.sim import fast
    from commsim.sim.fast import NotExact

    # Two ranks a host, recursive doubling over 24 ranks (not a power of two): every rank's
    # process is replayed through its host's NIC queues.
    sc = Scenario(ranks_per_host=2, algorithm="recursive_doubling")
    monkeypatch.setattr(fast, "_available_memory", lambda: None)       # (not known: run it)
    answer = predict(load_default(), "ddp", 12, sc, engine="fast")
    monkeypatch.setattr(fast, "_available_memory", lambda: 2**16)
    with pytest.raises(NotExact, match="messages .* more than the 64.00 KiB of memory"):
        predict(load_default(), "ddp", 12, sc, engine="fast")
    des = predict(load_default(), "ddp", 12, sc)
    assert des.engine == "des" and des.iteration_s == pytest.approx(answer.iteration_s, rel=1e-9)
    code = main(["predict", "--strategy", "ddp", "--nodes", "12", "--ranks-per-host", "2",
                 "--algorithm", "recursive_doubling", "--engine", "fast"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "memory" in err


def test_a_refusal_says_how_many_ranks_auto_answers(capsys, monkeypatch):
    """Where the fast engine's checks refuse up front, the refusal names the most ranks auto
    answers with the same options (a ring per tensor on one pool beside a slow link, its
    replay held here to a million messages: 121 ranks of VGG-11's 34 tensors): auto answers
    there, and one host more is refused; and ``--engine fast``, which replays every rank as
    long as its messages fit in memory (not named where they would not).  A straggler whose
    rank no smaller run holds gets no such number."""
    import re

    from commsim.sim import fast

    monkeypatch.setattr(fast, "_REPLAY_MESSAGES_COMPILED", fast._REPLAY_MESSAGES)
    monkeypatch.setattr(fast, "_available_memory", lambda: None)     # (not known: it may fit)

    code = main(["predict", "--strategy", "ring", "--nodes", "1024", "--batch-per-rank", "32",
                 "--shared-cpu-cores", "2", "--slow-link", "3:10mbit"])
    err = capsys.readouterr().err
    assert code == 2
    fewer = int(re.search(r"up to about ([\d,]+) with these options", err)[1].replace(",", ""))
    assert 8 < fewer < 1024
    assert predict(load_default(), "ring", fewer, OUT_OF_STEP, engine="auto").engine == "fast"
    with pytest.raises(BeyondReach, match="up to about"):
        predict(load_default(), "ring", fewer + 1, OUT_OF_STEP, engine="auto")
    # (how long that would take: 71 million messages at about a microsecond each)
    about = re.search(r"--engine fast to replay them all, exactly \(about (\d+) (s|minutes) here",
                      err)
    assert about and 30 <= int(about[1]) * (60 if about[2] == "minutes" else 1) <= 20 * 60, err
    monkeypatch.setattr(fast, "_available_memory", lambda: 2**30)     # (its 71 million: 20 GB)
    with pytest.raises(BeyondReach) as refused:
        predict(load_default(), "ring", 1024, OUT_OF_STEP, engine="auto")
    assert "--engine fast" not in str(refused.value)
    with pytest.raises(UserError, match="memory.*up to about"):
        predict(load_default(), "ring", 1024, OUT_OF_STEP, engine="fast")
    far = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                   slow_links_Bps={3: 1.25e6}, stragglers={1000: 1.5})
    with pytest.raises(BeyondReach) as refused:
        predict(load_default(), "ring", 1024, far, engine="auto")
    assert "up to about" not in str(refused.value)


def test_the_compiled_loop_replays_eight_times_the_python_loops_messages(monkeypatch):
    """A replay costs about a microsecond a message in the compiled loop, on hosts' own cores
    and on one pool (whose compute jobs that start together go as one there): DDP beside a
    straggler, two ranks a host, over 800 ranks (4 million messages) is the fast engine's on
    either, the DES's reach's in the Python loop.  On a pool, whose events cost up to a step a
    rank where its jobs part, the Python loop holds messages x ranks within
    ``_REPLAY_POOL_STEPS``, and the compiled loop counts its visits as it goes (below):
    recursive doubling beside a slow link at 65,536 ranks is replayed on hosts' cores and on
    one pool in the compiled loop, on neither in the Python loop."""
    from commsim.sim import fast, fast_queues

    profile = load_default()
    cpus = (dict(cores_per_host=1), dict(shared_cpu_cores=2))
    for cpu in cpus:
        sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2,
                      stragglers={1: 1.5}, **cpu)
        spec = run_spec(profile, "ddp", 400, sc)
        costs = cost_inputs(spec, profile)
        assert 1_000_000 < des_messages(spec, costs) < 8_000_000
        if fast_queues._replay is not None:
            assert fast._replays_cpu(spec, costs), cpu
    doubling = []
    for cpu in cpus:
        sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2,
                      slow_links_Bps={3: 1.25e6}, algorithm="recursive_doubling", **cpu)
        spec = run_spec(profile, "ddp", 32768, sc)
        costs = cost_inputs(spec, profile)
        assert 1_000_000 < des_messages(spec, costs) < 8_000_000
        doubling.append((spec, costs))
        if fast_queues._replay is not None:
            assert fast._replays_cpu(spec, costs), cpu
    monkeypatch.setattr(fast_queues, "_replay", None)
    for cpu in cpus:
        spec = run_spec(profile, "ddp", 400, Scenario(global_batch=None, batch_per_rank=32,
                                                      ranks_per_host=2, stragglers={1: 1.5},
                                                      **cpu))
        assert not fast._replays_cpu(spec, cost_inputs(spec, profile))
    assert not any(fast._replays_cpu(*x) for x in doubling)     # (over its million)


def test_a_pool_s_replay_stops_past_its_visits_within_auto_s_seconds(monkeypatch):
    """The compiled loop counts the groups of jobs its pool's events visit (a pass at each
    event, up to one a rank where the jobs part) and, within --engine auto's seconds, stops
    past ``fast._REPLAY_POOL_VISITS`` (``NotExact``: auto then runs the DES where that is
    small, as here); asked for by name it goes on.  Held to 1,000 visits here (DDP beside a
    slow link, 64 ranks on one pool: some hundred thousand)."""
    from commsim.sim import fast, fast_queues
    from commsim.sim.fast_collectives import NotExact

    if fast_queues._replay is None:
        pytest.skip("no C compiler built the compiled loop")
    sc = Scenario(global_batch=None, batch_per_rank=32, shared_cpu_cores=2,
                  slow_links_Bps={3: 1.25e6})
    assert predict(load_default(), "ddp", 64, sc, engine="auto").engine == "fast"
    monkeypatch.setattr(fast, "_REPLAY_POOL_VISITS", 1000)
    spec = run_spec(load_default(), "ddp", 64, sc)
    with pytest.raises(NotExact, match="longer than --engine auto's seconds"):
        fast.run_fast(spec, cost_inputs(spec, load_default()))
    auto = predict(load_default(), "ddp", 64, sc, engine="auto")
    assert auto.engine == "des"
    assert_same(auto, predict(load_default(), "ddp", 64, sc, engine="fast"))


def test_a_ring_per_tensor_beside_a_straggler_settles_after_its_first_tensor():
    """Two ranks a host on one core each beside a straggler, a ring per tensor, 1,024 ranks:
    past the runs engine's reach (O(p^2) events, to about 230 ranks) and every rank's replay's
    (2p(p-1) messages a tensor: 71 million), answered by the first tensor's replay alone (2.1
    million messages), which leaves every rank at one instant, and the rest in step."""
    from commsim.sim import fast, fast_queues

    profile = load_default()
    sc = Scenario(global_batch=None, batch_per_rank=32, ranks_per_host=2, cores_per_host=1,
                  stragglers={1: 1.5})
    spec = run_spec(profile, "ring", 512, sc)
    costs = cost_inputs(spec, profile)
    assert not fast.fast_runs.covers(spec) and not fast._replays_cpu(spec, costs)
    if fast_queues._replay is None:
        return
    assert fast.unsupported(spec, costs) is None
    answer = predict(profile, "ring", 512, sc, engine="auto")
    assert answer.engine == "fast" and answer.critical_rank == 1


@pytest.mark.parametrize("strategy, nodes, kw", [
    ("ring", 8, dict(shared_cpu_cores=2, slow_link=["3:10mbit"])),
    ("ddp", 6, dict(ranks_per_host=2, cores_per_host=1, slow_link=["1:10mbit"],
                    bucket_mb=4))])
def test_the_fast_engine_asked_by_name_replays_past_auto_s_seconds(monkeypatch, strategy,
                                                                   nodes, kw):
    """Every rank's replay is held to seconds within ``--engine auto`` (here to 100
    messages), which then runs the DES; asked for by name (``fast.MEMORY``) the fast engine
    replays past that, with the DES's answer."""
    from commsim.api import scenario
    from commsim.sim import fast

    for name in ("_REPLAY_MESSAGES", "_REPLAY_MESSAGES_COMPILED"):
        monkeypatch.setattr(fast, name, 100)
    sc = scenario(batch_per_rank=32, **kw)
    spec = run_spec(load_default(), strategy, nodes, sc)
    costs = cost_inputs(spec, load_default())
    assert fast.unsupported(spec, costs) is not None
    assert fast.unsupported(spec, costs, reach=fast.MEMORY) is None
    auto = predict(load_default(), strategy, nodes, sc, engine="auto")
    assert auto.engine == "des"
    assert_same(auto, predict(load_default(), strategy, nodes, sc, engine="fast"))


@pytest.mark.parametrize("seconds, words", [(0.2, "1 s"), (71.4, "71 s"), (600, "10 minutes"),
                                            (7200, "2 hours"), (3 * 86400, "3 days")])
def test_an_estimate_is_told_at_a_user_s_scale(seconds, words):
    from commsim.units import fmt_roughly

    assert fmt_roughly(seconds) == words
