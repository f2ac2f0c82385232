"""Invariants of the model, over generated profiles and clusters (hypothesis)."""
from hypothesis import HealthCheck, given, settings, strategies as st

from commsim.api import Scenario, predict
from commsim.spec import RunSpec, default_cluster
from commsim.simulate import simulate
from profiles import make_profile

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

profiles = st.builds(
    lambda sizes, lat, bw, gamma, o: make_profile(
        param_bytes=tuple(sizes), latency_s=lat, bandwidth_Bps=bw, gamma_s_per_B=gamma,
        overheads={"all_reduce": o, "gather": o, "scatter": o}),
    st.lists(st.integers(4, 4_000_000), min_size=1, max_size=6),
    st.floats(0, 1e-3), st.floats(1e6, 1e10), st.floats(0, 1e-8), st.floats(0, 1e-3))
strategy_names = st.sampled_from(["ps", "ring", "ddp"])


@SETTINGS
@given(profiles, strategy_names, st.integers(1, 8), st.floats(1.01, 100),
       st.sampled_from([1, 2]))
def test_more_bandwidth_never_slows(profile, strategy, nodes, factor, cores):
    base = Scenario(global_batch=64 * nodes, cores_per_host=cores)
    slow = predict(profile, strategy, nodes, base)
    fast_link = profile.network.bandwidth_Bps * factor
    fast = predict(profile, strategy, nodes,
                   Scenario(global_batch=64 * nodes, cores_per_host=cores,
                            bandwidth_Bps=fast_link))
    assert fast.iteration_s <= slow.iteration_s * (1 + 1e-12)


@SETTINGS
@given(profiles, st.integers(1, 8), st.integers(1, 64), st.sampled_from([1, 2, 4]))
def test_ddp_never_slower_than_the_same_buckets_without_overlap(profile, nodes, bucket_kib,
                                                                 cores):
    def run(overlap):
        spec = RunSpec(strategy="ddp", cluster=default_cluster(profile, nodes,
                                                               cores_per_host=cores),
                       global_batch=64 * nodes, bucket_bytes=bucket_kib * 1024,
                       first_bucket_bytes=bucket_kib * 256, overlap=overlap)
        return simulate(spec, profile).iteration_s
    assert run(True) <= run(False) * (1 + 1e-12)


@SETTINGS
@given(profiles, st.integers(2, 12))
def test_ps_comm_grows_at_least_linearly(profile, nodes):
    """Each extra rank adds at least one more gradient through the root's link in each phase:
    comm(p+1) - comm(p) >= 2·n·β, so comm grows at least linearly in p."""
    sc = Scenario(batch_per_rank=32, cores_per_host=2)
    a = predict(profile, "ps", nodes, sc)
    b = predict(profile, "ps", nodes + 1, sc)
    step = 2 * profile.model_bytes / profile.network.bandwidth_Bps
    # comm_s is a difference of absolute event times (~0.3 s here): allow their float residue.
    assert b.comm_s - a.comm_s >= step * (1 - 1e-9) - 1e-12


@SETTINGS
@given(profiles, strategy_names, st.integers(1, 512))
def test_speedup_of_one_node_is_one(profile, strategy, batch):
    r = predict(profile, strategy, 1, Scenario(global_batch=batch))
    assert r.speedup == 1.0 or abs(r.speedup - 1.0) < 1e-12
    assert r.comm_s == 0.0 and r.bytes_sent_per_rank == 0.0


@SETTINGS
@given(profiles, strategy_names, st.integers(1, 6), st.integers(1, 3))
def test_deterministic_and_bytes_conserved(profile, strategy, nodes, rph):
    sc = Scenario(batch_per_rank=16, ranks_per_host=rph, cores_per_host=rph)
    a = predict(profile, strategy, nodes, sc)
    b = predict(profile, strategy, nodes, sc)
    assert a == b
    assert abs(a.bytes_sent_per_rank - a.bytes_received_per_rank) <= 1e-9 * max(
        1.0, a.bytes_sent_per_rank)
    assert a.iteration_s >= a.compute_s - 1e-12
    assert 0.0 <= a.overlap_fraction <= 1.0 and 0.0 <= a.link_utilization <= 1.0 + 1e-9


@SETTINGS
@given(profiles, strategy_names, st.integers(2, 6), st.floats(1.0, 4.0))
def test_a_straggler_never_speeds_things_up(profile, strategy, nodes, factor):
    sc = Scenario(global_batch=64 * nodes, cores_per_host=2)
    base = predict(profile, strategy, nodes, sc)
    slow = predict(profile, strategy, nodes,
                   Scenario(global_batch=64 * nodes, cores_per_host=2,
                            stragglers={nodes - 1: factor}))
    assert slow.iteration_s >= base.iteration_s * (1 - 1e-12)


@SETTINGS
@given(st.integers(1, 4), st.sampled_from([0.5, 1, 2, 3, 8]),
       st.sampled_from([None, 0.5, 1.5, 2]),
       st.sampled_from([(), ((1.0, 1.0), (2.0, 0.91), (4.0, 0.8))]), st.integers(3, 4096),
       st.booleans())
def test_the_speedup_reference_is_the_des_one(threads, cores, pool, efficiency, batch, ps):
    """The one-rank reference run is timed by the fast engine where it can; it must be the
    DES's to 1e-12, on any cores, pool and efficiency curve."""
    from commsim.simulate import _baseline_s, run_engine

    profile = make_profile(threads=threads)
    spec = RunSpec(strategy="ps" if ps else "ring",
                   cluster=default_cluster(profile, 3, cores_per_host=cores,
                                           shared_cpu_cores=pool, cpu_efficiency=efficiency),
                   global_batch=batch)
    single = spec.single_baseline()
    des = run_engine(single, profile, engine="des", timeline=False).finish_s[0]
    assert abs(_baseline_s(single, profile) - des) <= 1e-12 * des
