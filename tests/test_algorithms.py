"""Every collective algorithm in the simulator equals its closed form on homogeneous clusters."""
import pytest

from commsim import closed_form as cf
from commsim.api import Scenario, predict
from commsim.spec import RunSpec, default_cluster
from commsim.simulate import simulate
from profiles import make_profile

ALPHA, BW, GAMMA, O = 5e-5, 125e6, 2e-10, 3e-4
PROFILE = make_profile(param_bytes=(4000, 1_000_000), latency_s=ALPHA, bandwidth_Bps=BW,
                       gamma_s_per_B=GAMMA,
                       overheads={"all_reduce": O, "gather": 2e-4, "scatter": 1e-4})


def run(strategy, nodes, algorithm, **kw):
    cluster = default_cluster(PROFILE, nodes, cores_per_host=4, **kw)
    spec = RunSpec(strategy=strategy, cluster=cluster, global_batch=64 * cluster.world_size,
                   algorithm=algorithm)
    return simulate(spec, PROFILE, engine="des")


@pytest.mark.parametrize("algorithm", cf.ALLREDUCE_ALGORITHMS)
@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 6, 8, 13, 16])
def test_allreduce_algorithms_equal_their_closed_forms(algorithm, nodes):
    r = run("ring", nodes, algorithm)
    expected = sum(cf.allreduce_s(algorithm, n, nodes, ALPHA, 1 / BW, GAMMA, O)
                   + cf.scale_s(n, nodes, GAMMA) for n in (4000, 1_000_000))
    assert abs(r.comm_s - expected) / expected < 1e-9


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "rabenseifner"])
@pytest.mark.parametrize("nodes", [2, 4, 8, 16])
def test_doubling_algorithms_bytes_at_powers_of_two(algorithm, nodes):
    r = run("ring", nodes, algorithm)
    expected = sum(cf.allreduce_bytes_per_rank(algorithm, n, nodes) for n in (4000, 1_000_000))
    assert r.bytes_sent_max == pytest.approx(expected, rel=1e-12)
    assert r.bytes_sent_per_rank == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 7, 8, 16])
def test_binomial_ps_equals_closed_form(nodes):
    r = run("ps", nodes, "binomial")
    expected = sum(cf.binomial_gather_s(n, nodes, ALPHA, 1 / BW, 2e-4)
                   + cf.mean_on_root_s(n, nodes, GAMMA)
                   + cf.binomial_scatter_s(n, nodes, ALPHA, 1 / BW, 1e-4)
                   for n in (4000, 1_000_000))
    assert abs(r.comm_s - expected) / expected < 1e-9


@pytest.mark.parametrize("hosts, local", [(2, 2), (3, 2), (2, 4), (4, 3)])
def test_hierarchical_on_shared_hosts(hosts, local):
    intra_bw, intra_lat = 2e9, 5e-6
    from dataclasses import replace
    prof = replace(PROFILE, network=replace(PROFILE.network, intra_host_bandwidth_Bps=intra_bw,
                                            intra_host_latency_s=intra_lat))
    cluster = default_cluster(prof, hosts, ranks_per_host=local, cores_per_host=4 * local)
    spec = RunSpec(strategy="ring", cluster=cluster, global_batch=64 * hosts * local,
                   algorithm="hierarchical")
    r = simulate(spec, prof)
    p = hosts * local
    expected = sum(cf.hierarchical_allreduce_s(n, hosts, local, ALPHA, 1 / BW, GAMMA, intra_lat,
                                               1 / intra_bw, O) + cf.scale_s(n, p, GAMMA)
                   for n in (4000, 1_000_000))
    assert abs(r.comm_s - expected) / expected < 1e-9


@pytest.mark.parametrize("hosts, local, group", [(4, 2, 4), (6, 2, 6), (4, 3, 6), (4, 2, 2),
                                                  (3, 2, 6)])
def test_hierarchical_within_groups_of_whole_hosts(hosts, local, group):
    """``--group-size`` with the hierarchical algorithm: each group reduces inside its hosts,
    rings among its hosts' first ranks and broadcasts back, as a cluster of its own hosts
    would (the closed form over group // local hosts; one host: no ring)."""
    intra_bw, intra_lat = 2e9, 5e-6
    from dataclasses import replace
    prof = replace(PROFILE, network=replace(PROFILE.network, intra_host_bandwidth_Bps=intra_bw,
                                            intra_host_latency_s=intra_lat))
    cluster = default_cluster(prof, hosts, ranks_per_host=local, cores_per_host=4 * local)
    spec = RunSpec(strategy="ring", cluster=cluster, global_batch=64 * hosts * local,
                   algorithm="hierarchical", group_size=group)
    r = simulate(spec, prof)
    expected = sum(cf.hierarchical_allreduce_s(n, group // local, local, ALPHA, 1 / BW, GAMMA,
                                               intra_lat, 1 / intra_bw, O)
                   + cf.scale_s(n, group, GAMMA) for n in (4000, 1_000_000))
    assert abs(r.comm_s - expected) / expected < 1e-9


def test_hierarchical_within_groups_on_one_rank_a_host_is_the_groups_ring():
    """One rank a host: every rank is its host's first, and a group's hierarchical all-reduce
    is the ring among its ranks, which the fast engine computes as the DES does."""
    for nodes, group in ((4, 2), (6, 4), (8, 3)):
        sc = Scenario(global_batch=64 * nodes, group_size=group, algorithm="hierarchical")
        des = predict(PROFILE, "ddp", nodes, sc, engine="des")
        ring = predict(PROFILE, "ddp", nodes, Scenario(global_batch=64 * nodes, group_size=group),
                       engine="des")
        fast = predict(PROFILE, "ddp", nodes, sc, engine="fast")
        assert des.iteration_s == ring.iteration_s
        assert fast.iteration_s == pytest.approx(des.iteration_s, rel=1e-9)


def test_hierarchical_groups_on_shared_hosts_run_on_the_des(capsys):
    from commsim.cli import main
    args = ["predict", "--strategy", "ddp", "--nodes", "4", "--ranks-per-host", "2",
            "--group-size", "4", "--algorithm", "hierarchical"]
    assert main(args) == 0 and "engine des" in capsys.readouterr().out
    assert main(args + ["--engine", "fast"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "within groups" in err


def test_latency_bound_small_tensors_prefer_doubling_bandwidth_bound_prefer_ring():
    small = {a: cf.allreduce_s(a, 1000, 16, ALPHA, 1 / BW, GAMMA) for a in cf.ALLREDUCE_ALGORITHMS}
    big = {a: cf.allreduce_s(a, 1e8, 16, ALPHA, 1 / BW, GAMMA) for a in cf.ALLREDUCE_ALGORITHMS}
    assert min(small, key=small.get) == "recursive_doubling"
    assert min(big, key=big.get) in ("ring", "rabenseifner", "hierarchical")


def test_an_algorithm_the_strategy_lacks_is_refused():
    from commsim.errors import UserError
    with pytest.raises(UserError, match="no algorithm 'ring'"):
        run("ps", 2, "ring")
    with pytest.raises(UserError, match="no algorithm"):
        predict(PROFILE, "ddp", 2, Scenario(algorithm="binomial"))


def test_auto_engine_runs_other_algorithms_on_the_fast_engine():
    """tests/test_fast_whatifs.py holds the fast engine to the DES for every algorithm."""
    cluster = default_cluster(PROFILE, 4, cores_per_host=4)
    spec = RunSpec(strategy="ddp", cluster=cluster, global_batch=256, algorithm="tree")
    assert simulate(spec, PROFILE, engine="auto").engine == "fast"
