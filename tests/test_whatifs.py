"""What-ifs from the seed documents: local aggregation, group averaging, fp16 compression and
DDP's buffer broadcast, each against its closed form and (where it runs) the fast engine."""
from dataclasses import replace

import pytest

from commsim import closed_form as cf
from commsim.profile import ParamSpec
from commsim.spec import RunSpec, default_cluster
from commsim.simulate import simulate
from profiles import make_profile

ALPHA, BW, GAMMA = 5e-5, 125e6, 2e-10
PROFILE = make_profile(param_bytes=(4000, 1_000_000), latency_s=ALPHA, bandwidth_Bps=BW,
                       gamma_s_per_B=GAMMA, overheads={"all_reduce": 3e-4, "broadcast": 2e-4})
WITH_BUFFERS = replace(PROFILE, buffers=(ParamSpec("bn.running_mean", 512, 2048),
                                         ParamSpec("bn.running_var", 512, 2048)))


def spec(strategy, nodes, profile=PROFILE, cores=4, **kw):
    cluster_kw = {k: kw.pop(k) for k in ("slow_links_Bps", "ranks_per_host") if k in kw}
    cluster = default_cluster(profile, nodes, cores_per_host=cores, **cluster_kw)
    return RunSpec(strategy=strategy, cluster=cluster,
                   global_batch=64 * cluster.world_size, **kw)


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


@pytest.mark.parametrize("strategy", ["ring", "ps", "ddp"])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("nodes", [2, 4])
def test_local_aggregation_equals_closed_form_and_cuts_bytes(strategy, k, nodes):
    s = spec(strategy, nodes, sync_every=k, broadcast_buffers=False)
    des = simulate(s, PROFILE, engine="des")
    ana = simulate(s, PROFILE, engine="analytic")
    assert rel(des.iteration_s, ana.iteration_s) < 1e-9
    assert rel(des.bytes_sent_per_rank, ana.bytes_sent_per_rank) < 1e-9
    once = simulate(spec(strategy, nodes, broadcast_buffers=False), PROFILE, engine="des")
    assert des.bytes_sent_per_rank == pytest.approx(once.bytes_sent_per_rank / k, rel=1e-12)
    if k > 1:
        assert des.iteration_s < once.iteration_s      # sync amortised over k iterations


@pytest.mark.parametrize("strategy", ["ring", "ddp"])
@pytest.mark.parametrize("nodes, g", [(4, 2), (8, 2), (8, 4), (6, 3)])
def test_group_averaging_is_an_allreduce_of_g_ranks(strategy, nodes, g):
    s = spec(strategy, nodes, group_size=g, broadcast_buffers=False)
    des = simulate(s, PROFILE, engine="des")
    assert rel(des.iteration_s, simulate(s, PROFILE, engine="analytic").iteration_s) < 1e-9
    assert des.bytes_sent_per_rank == pytest.approx(
        sum(cf.ring_bytes_per_rank(n, g) for n in (4000, 1_000_000)), rel=1e-12)
    everyone = simulate(spec(strategy, nodes, broadcast_buffers=False), PROFILE)
    assert des.bytes_sent_per_rank < everyone.bytes_sent_per_rank


@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_fp16_halves_the_wire_and_matches_closed_form(nodes):
    s = spec("ddp", nodes, compression="fp16", broadcast_buffers=False)
    des = simulate(s, PROFILE, engine="des")
    ana = simulate(s, PROFILE, engine="analytic")
    assert rel(des.iteration_s, ana.iteration_s) < 1e-9
    assert rel(des.comm_s, ana.comm_s) < 1e-9
    full = simulate(spec("ddp", nodes, broadcast_buffers=False), PROFILE, engine="des")
    assert des.bytes_sent_per_rank == pytest.approx(full.bytes_sent_per_rank / 2, rel=1e-12)


@pytest.mark.parametrize("nodes", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("variant", ["plain", "straggler", "slow_link", "two_per_host"])
def test_buffer_broadcast_fast_equals_des(nodes, variant):
    kw = {}
    if variant == "straggler":
        kw["stragglers"] = {nodes - 1: 1.7}
    elif variant == "slow_link":
        kw["slow_links_Bps"] = {nodes // 2: BW / 5}
    elif variant == "two_per_host":
        kw["ranks_per_host"] = 2
    s = spec("ddp", nodes, WITH_BUFFERS, cores=8, **kw)
    des = simulate(s, WITH_BUFFERS, engine="des")
    fast = simulate(s, WITH_BUFFERS, engine="fast")
    for field in ("iteration_s", "comm_s", "compute_s", "bytes_sent_per_rank", "bytes_sent_max",
                  "bytes_received_per_rank", "link_utilization"):
        assert rel(getattr(des, field), getattr(fast, field)) < 1e-9, field


def test_buffer_broadcast_costs_a_tree_and_its_bytes_are_counted():
    s = spec("ddp", 8, WITH_BUFFERS)
    with_b = simulate(s, WITH_BUFFERS, engine="des")
    without = simulate(replace(s, broadcast_buffers=False), WITH_BUFFERS, engine="des")
    tree = 2e-4 + cf.binomial_broadcast_s(4096, 8, ALPHA, 1 / BW)
    assert with_b.iteration_s - without.iteration_s == pytest.approx(tree, rel=1e-9)
    # every rank but the root receives the buffers once
    assert with_b.bytes_received_per_rank - without.bytes_received_per_rank == \
        pytest.approx(4096 * 7 / 8, rel=1e-12)
    assert with_b.buffer_bytes_sent_per_rank == pytest.approx(4096 * 7 / 8, rel=1e-12)
    assert with_b.startup_bytes_received_per_rank == pytest.approx(
        (WITH_BUFFERS.model_bytes + 4096) * 7 / 8, rel=1e-12)


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 8])
def test_dataparallel_equals_its_closed_form(nodes):
    s = spec("dp", nodes)
    des = simulate(s, PROFILE, engine="des")
    ana = simulate(s, PROFILE, engine="analytic")
    assert rel(des.iteration_s, ana.iteration_s) < 1e-9
    assert rel(des.bytes_sent_max, ana.bytes_sent_max) < 1e-9
    assert simulate(s, PROFILE, engine="auto").engine == "fast"   # equal: test_fast_whatifs


def test_dataparallel_device0_carries_the_model_twice_per_other_device():
    r = simulate(spec("dp", 4), PROFILE, engine="des")
    model = PROFILE.model_bytes
    inputs = 64 * 3 * 32 * 32 * 4
    outputs = 64 * PROFILE.params[-1].numel * 4
    assert r.bytes_sent_max == pytest.approx(3 * (inputs + model + outputs), rel=1e-12)
    assert r.critical_rank == 0


def test_tune_finds_the_bucket_that_minimises_iteration_time():
    from commsim.api import Scenario, tune_buckets
    rows = tune_buckets(PROFILE, 4, Scenario(cores_per_host=4), candidates_mb=(0.001, 0.01, 25))
    assert [r["iteration_s"] for r in rows] == sorted(r["iteration_s"] for r in rows)
    best = rows[0]
    again = simulate(spec("ddp", 4, bucket_bytes=max(1, round(best["bucket_mb"] * 1024 * 1024)),
                          first_bucket_bytes=1024 * 1024 if best["mode"] == "ddp" else
                          max(1, round(best["bucket_mb"] * 1024 * 1024))), PROFILE)
    assert again.iteration_s == pytest.approx(best["iteration_s"], rel=1e-12)
    assert {r["mode"] for r in rows} == {"ddp", "fusion"}


def test_fewer_threads_a_rank_keep_the_calibrated_compute_s_thread_seconds():
    """A profile calibrated with 8 compute threads a rank (2 emulated nodes on 16 cores) asked
    for 4 nodes on the same 16 cores, where each rank runs 4: its compute alone takes twice the
    calibrated time, and the pool carries 4 threads a rank, 16 in all (the cores, so no rank
    slows another); left as calibrated, 4 ranks of 8 threads would share the 16 cores and take
    as long as the doubled work alone, plus the efficiency curve's toll for 32 busy threads.
    The same count as calibrated changes nothing."""
    from commsim.api import Scenario, predict, run_spec
    from commsim.costs import cost_inputs
    from commsim.errors import UserError

    eight = make_profile(threads=8)
    pool = dict(shared_cpu_cores=16.0, batch_per_rank=64)
    calibrated = cost_inputs(run_spec(eight, "ring", 4, Scenario(**pool)), eight)
    four = cost_inputs(run_spec(eight, "ring", 4, Scenario(**pool, threads_per_rank=4)), eight)
    assert four.threads_per_rank == 4 and calibrated.threads_per_rank == 8
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        assert getattr(four, phase) == pytest.approx(2 * getattr(calibrated, phase), rel=1e-12)
    same = Scenario(**pool, threads_per_rank=8)
    assert predict(eight, "ddp", 4, same).to_dict() == predict(eight, "ddp", 4,
                                                                Scenario(**pool)).to_dict()
    # On the 16-core pool: 4 ranks x 4 threads fit, so compute is the doubled work alone;
    # 4 x 8 share the cores at half speed, the same time before any efficiency curve.
    curve = ((8.0, 1.0), (16.0, 0.8), (32.0, 0.25))
    fit = predict(eight, "ring", 4, Scenario(**pool, threads_per_rank=4, cpu_efficiency=curve))
    crowded = predict(eight, "ring", 4, Scenario(**pool, cpu_efficiency=curve))
    assert fit.compute_s == pytest.approx(2 * calibrated.forward_s / 0.8 + 2 * (
        calibrated.backward_s + calibrated.optimizer_s) / 0.8, rel=1e-9)
    assert crowded.compute_s > 2.5 * fit.compute_s
    with pytest.raises(UserError, match="threads-per-rank"):
        run_spec(eight, "ring", 4, Scenario(**pool, threads_per_rank=0))
