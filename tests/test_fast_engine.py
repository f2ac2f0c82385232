"""The fast engine gives the discrete-event simulator's answers, rank by rank.

Toy profiles with 3-4 tensors keep the DES affordable up to 256 ranks.  Cases cover what makes a
cluster uneven: a straggler (compute), a slow link (network), ranks sharing a host and its NIC,
and DDP's Gloo thread competing with backward for cores (processor sharing), which exercises
every regime of ``fast._reduce``.  Tolerance 1e-9 (the target is 0.1%); they agree to ~1e-12.
"""
import pytest

from commsim.api import Scenario, predict
from commsim.errors import UserError
from profiles import make_profile

# Cores per rank = the profile's compute threads: no spare core for DDP's Gloo thread (the
# default cluster gives one), so its reductions compete with backward.
THREADS = 2

# Four tensors, ready at staggered points of backward, so that DDP has several buckets (the first
# capped at 1 MiB) and the early ones overlap backward; a
# reduction cost large enough that DDP's Gloo thread visibly slows backward on one core.
PROFILE = make_profile(param_bytes=(2_000_000, 1_500_000, 600_000, 400_000), latency_s=5e-5,
                       bandwidth_Bps=125e6, gamma_s_per_B=1e-8,
                       overheads={"all_reduce": 3e-4, "gather": 2e-4, "scatter": 1e-4},
                       ready=(1.0, 0.7, 0.4, 0.2), threads=THREADS)
SUMMARY = ("iteration_s", "compute_s", "comm_s", "exposed_comm_s", "speedup", "efficiency",
           "epoch_s", "bytes_sent_per_rank", "bytes_received_per_rank", "bytes_sent_max",
           "algbw_Bps", "busbw_Bps", "link_utilization")
PER_RANK = ("finish_s", "compute_s", "comm_s", "bytes_sent", "bytes_received")
TOL = 1e-9


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def assert_same(des, fast):
    assert fast.engine == "fast"
    for field in SUMMARY:
        if field == "exposed_comm_s":
            # iteration - compute: its rounding is the iteration's, however small the
            # difference (a rank that never communicates: 0.0 in one engine, 1e-16 in the
            # other where they sum its compute jobs in another order)
            assert abs(des.exposed_comm_s - fast.exposed_comm_s) < TOL * des.iteration_s, field
            continue
        assert rel(getattr(des, field), getattr(fast, field)) < TOL, field
    assert abs(des.overlap_fraction - fast.overlap_fraction) < TOL
    assert des.critical_rank == fast.critical_rank or rel(des.iteration_s, fast.iteration_s) < TOL
    assert len(des.per_rank) == len(fast.per_rank)
    for d, f in zip(des.per_rank, fast.per_rank):
        for field in PER_RANK:
            assert rel(d[field], f[field]) < TOL, (d["rank"], field)


def both(strategy, nodes, **kw):
    kw.setdefault("cores_per_host", THREADS * kw.get("ranks_per_host", 1))
    sc = Scenario(global_batch=64 * nodes * kw.get("ranks_per_host", 1), bucket_bytes=500_000,
                  **kw)
    return (predict(PROFILE, strategy, nodes, sc, engine="des"),
            predict(PROFILE, strategy, nodes, sc, engine="fast"))


STRATEGIES = ["ring", "ps", "ddp"]
SMALL = [2, 3, 4, 7, 16]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", SMALL)
def test_homogeneous(strategy, nodes):
    assert_same(*both(strategy, nodes))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", SMALL)
def test_one_straggler(strategy, nodes):
    assert_same(*both(strategy, nodes, stragglers={nodes // 2: 1.6}))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [2, 5, 16])
def test_straggling_root_and_spare_cores(strategy, nodes):
    """Rank 0 is the PS root; 4 cores take DDP's Gloo thread without slowing backward."""
    assert_same(*both(strategy, nodes, stragglers={0: 1.3}, cores_per_host=4))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [2, 3, 7, 16])
def test_slow_link(strategy, nodes):
    assert_same(*both(strategy, nodes, slow_links_Bps={nodes - 1: 20e6}))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [3, 7])
def test_slow_link_and_straggler(strategy, nodes):
    assert_same(*both(strategy, nodes, slow_links_Bps={1: 20e6}, stragglers={2: 2.5}))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_two_ranks_per_host_sharing_a_nic(strategy, nodes):
    assert_same(*both(strategy, nodes, ranks_per_host=2, cores_per_host=6))
    if nodes > 1:
        assert_same(*both(strategy, nodes, ranks_per_host=2, cores_per_host=6,
                          stragglers={3: 1.4}, slow_links_Bps={0: 30e6}))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_without_overlap_and_on_fractional_cores(strategy):
    assert_same(*both(strategy, 5, overlap=False, stragglers={1: 1.3}))
    assert_same(*both(strategy, 5, cores_per_host=1.5, stragglers={4: 1.1}))


# One tensor keeps the DES's O(p^2) messages affordable at 256 ranks (about a minute in all).
ONE_TENSOR = make_profile(param_bytes=(1_000_000,), latency_s=5e-5, bandwidth_Bps=125e6,
                          gamma_s_per_B=1e-8, overheads={"all_reduce": 3e-4})


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [64, 256])
def test_large(strategy, nodes):
    """64 ranks homogeneous and uneven, 256 ranks with one straggler."""
    prof = PROFILE if strategy == "ps" else ONE_TENSOR
    cases = [dict(stragglers={100: 1.5})] if nodes == 256 else [
        {}, dict(stragglers={10: 1.5}, slow_links_Bps={40: 40e6})]
    for kw in cases:
        sc = Scenario(global_batch=64 * nodes, cores_per_host=THREADS, **kw)
        assert_same(predict(prof, strategy, nodes, sc, engine="des"),
                    predict(prof, strategy, nodes, sc, engine="fast"))


def test_ddp_contention_is_modelled():
    """On one core per rank DDP's reductions slow backward: the case must differ from 4 cores,
    or the regimes in fast._reduce are not exercised."""
    one = predict(PROFILE, "ddp", 4, Scenario(global_batch=256, bucket_bytes=500_000,
                                              cores_per_host=THREADS), engine="fast")
    four = predict(PROFILE, "ddp", 4, Scenario(global_batch=256, bucket_bytes=500_000,
                                               cores_per_host=8), engine="fast")
    assert one.compute_s > four.compute_s * (1 + 1e-6)


def test_single_rank():
    for strategy in ("single", "ddp", "ring"):
        assert_same(*both(strategy, 1))


def test_auto_falls_back_where_fast_is_not_exact(monkeypatch):
    """A run the fast engine finds on the way it cannot follow exactly (``NotExact``) goes to
    the DES, and a world ring of 2,048 ranks on one pool with a slow link (2p(p-1) messages a
    collective at as many instants, more than a replay holds) is refused up front."""
    import commsim.simulate
    from commsim.api import run_spec
    from commsim.costs import cost_inputs
    from commsim.sim.fast import NotExact, unsupported

    def not_exact(spec, costs, reach=None):
        raise NotExact("a reason found on the way")

    shared = Scenario(global_batch=128, ranks_per_host=2, shared_cpu_cores=2,
                      stragglers={0: 1.5}, algorithm="hierarchical")
    assert predict(PROFILE, "ring", 2, shared, engine="auto").engine == "fast"
    with monkeypatch.context() as patched:
        patched.setattr(commsim.simulate, "run_fast", not_exact)
        assert predict(PROFILE, "ring", 2, shared, engine="auto").engine == "des"
        with pytest.raises(UserError, match="a reason found on the way"):
            predict(PROFILE, "ring", 2, shared, engine="fast")
    spec = run_spec(PROFILE, "ddp", 2048, Scenario(global_batch=None, batch_per_rank=1,
                                                   shared_cpu_cores=2, slow_links_Bps={0: 1e6}))
    assert "CPU pool" in unsupported(spec, cost_inputs(spec, PROFILE))
    spec = run_spec(PROFILE, "ddp", 64, Scenario(global_batch=None, batch_per_rank=1,
                                                 shared_cpu_cores=2, slow_links_Bps={0: 1e6}))
    assert unsupported(spec, cost_inputs(spec, PROFILE)) is None
    assert predict(PROFILE, "ddp", 2, Scenario(global_batch=64), engine="auto").engine == "fast"
    with pytest.raises(UserError, match="timeline"):
        predict(PROFILE, "ring", 2, Scenario(global_batch=64), engine="fast", timeline=True)
    assert predict(PROFILE, "ring", 2, Scenario(global_batch=64), engine="auto",
                   timeline=True).engine == "des"


def test_fast_scales_without_the_des():
    """65,536 ranks: no O(p^2) anywhere (a wrong path would not finish within the test run)."""
    r = predict(PROFILE, "ring", 65536, Scenario(global_batch=65536), engine="fast")
    assert len(r.per_rank) == 65536 and r.per_rank[-1]["rank"] == 65535
    assert r.iteration_s > r.compute_s


@pytest.mark.parametrize("collecting", [True, False])
def test_the_collector_is_paused_for_the_engine_only(monkeypatch, collecting):
    """``run_fast`` pauses Python's cycle collector while an engine runs (its passes over the
    programs and runs alive cost a third of a long replay) and leaves it as it found it, when
    the engine answers and when it finds it cannot (``NotExact`` from inside)."""
    import gc

    from commsim.sim.fast import NotExact
    from commsim.strategies import get_strategy

    ring = type(get_strategy("ring"))
    seen = []

    def declining(self, spec, costs, reach):
        seen.append(gc.isenabled())
        raise NotExact("found on the way")

    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        assert predict(PROFILE, "ring", 4, Scenario(global_batch=64), engine="fast")
        assert gc.isenabled() is collecting
        monkeypatch.setattr(ring, "fast", declining)
        assert predict(PROFILE, "ring", 4, Scenario(global_batch=64), engine="auto").engine \
            == "des"
        assert seen == [False] and gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
