"""Effects calibration measures beyond the link: collectives that cannot drive the link at full
rate (wire factors) and co-located ranks slowing each other beyond processor sharing."""
from dataclasses import replace

import pytest
import simpy

from commsim.profile import CollectiveFit, load_default
from commsim.sim.engine import ProcessorSharingCPU
from commsim.spec import RunSpec, default_cluster, measured_cpu_efficiency
from commsim.simulate import simulate
from profiles import make_profile

BW = 125e6
BASE = make_profile(param_bytes=(4000, 1_000_000), latency_s=5e-5, bandwidth_Bps=BW,
                    gamma_s_per_B=2e-10, overheads={"all_reduce": 3e-4})
SLOW = replace(BASE, collectives={
    **BASE.collectives,
    "all_reduce": replace(BASE.collectives["all_reduce"], bandwidth_Bps=BW / 2),
    "gather": CollectiveFit(latency_s=5e-5, bandwidth_Bps=BW * 0.8),
    "scatter": CollectiveFit(latency_s=5e-5, bandwidth_Bps=BW * 0.9),
})


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


@pytest.mark.parametrize("strategy", ["ring", "ps", "ddp"])
@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_wire_factors_agree_across_engines(strategy, nodes):
    spec = RunSpec(strategy=strategy, cluster=default_cluster(SLOW, nodes, cores_per_host=4),
                   global_batch=64 * nodes)
    des = simulate(spec, SLOW, engine="des")
    for engine in ("analytic", "fast"):
        other = simulate(spec, SLOW, engine=engine)
        assert rel(des.iteration_s, other.iteration_s) < 1e-9, engine
        assert rel(des.comm_s, other.comm_s) < 1e-9, engine
    plain = simulate(replace(spec), BASE, engine="des")
    assert des.comm_s > plain.comm_s                       # slower collectives cost more
    assert des.bytes_sent_per_rank == pytest.approx(plain.bytes_sent_per_rank)  # same bytes


def test_ring_allreduce_at_half_the_link_by_hand():
    """2 ranks, one 1 MB tensor, all-reduce fit at half the link: each of the two steps moves
    500 kB at 62.5 MB/s: 2 x (8 ms + 50 us) + 300 us overhead + reduce + divide."""
    prof = replace(SLOW, params=SLOW.params[1:], grad_ready_fraction=(1.0,))
    spec = RunSpec(strategy="ring", cluster=default_cluster(prof, 2, cores_per_host=4),
                   global_batch=64)
    r = simulate(spec, prof, engine="des")
    expected = 3e-4 + 2 * (5e-5 + 500_000 / (BW / 2)) + 500_000 * 2e-10 + 1_000_000 * 2e-10
    assert r.comm_s == pytest.approx(expected, rel=1e-12)


def test_cpu_efficiency_by_hand():
    env = simpy.Environment()
    cpu = ProcessorSharingCPU(env, cores=2, efficiency=((1, 1.0), (4, 0.7)))
    done = []

    def job():
        yield cpu.run(1.0, 1)
        done.append(env.now)

    for _ in range(4):
        env.process(job())
    env.run()
    # 4 threads on 2 cores: half speed from sharing, 0.7 from contention: 1 / 0.35 s each.
    assert done == pytest.approx([1 / 0.35] * 4)


def test_bundled_profile_measures_contention_beyond_sharing():
    prof = load_default()
    points = measured_cpu_efficiency(prof)
    assert points and points[0] == (1.0, 1.0)
    busy, eff = points[-1]
    assert busy == prof.compute.contended["ranks"] * prof.compute.threads_per_rank
    assert 0 < eff <= 1


def test_cpu_efficiency_is_lost_once_the_threads_fill_the_cores():
    """4 ranks x 1 thread on 2 cores, contended 2.5x alone: beyond the 2x of sharing the cores,
    efficiency 0.8, already at 2 busy threads (every core busy), not only at 4."""
    import dataclasses
    prof = load_default()
    comp = prof.compute
    sizes = comp.batch_sizes
    cont = {"ranks": 4, "batch_sizes": list(sizes),
            **{f"{ph}_s": [2.5 * comp.time_s(ph, b) for b in sizes]
               for ph in ("forward", "backward", "optimizer")}}
    prof = dataclasses.replace(prof, compute=dataclasses.replace(comp, threads_per_rank=1,
                                                                 contended=cont),
                               metadata={**prof.metadata, "cores": 2, "shared_cpu_cores": 2})
    points = measured_cpu_efficiency(prof)
    assert [v for p in points for v in p] == pytest.approx([1.0, 1.0, 2.0, 0.8, 4.0, 0.8])


def test_co_runners_measure_what_more_threads_than_cores_cost(tmp_path):
    """2 ranks x 1 thread on 2 cores, contended 1.1x alone (efficiency 1/1.1 at 2 busy
    threads); co-runners to 4 busy threads, 2.5x alone (0.8 beyond the 2x of sharing): both
    points, and the profile keeps the measurement through a save and load."""
    import dataclasses

    from commsim import profile as P
    prof = load_default()
    comp = prof.compute
    sizes = comp.batch_sizes

    def scaled(factor):
        return {f"{ph}_s": [factor * comp.time_s(ph, b) for b in sizes]
                for ph in ("forward", "backward", "optimizer")}

    comp = dataclasses.replace(
        comp, threads_per_rank=1,
        contended={"ranks": 2, "batch_sizes": list(sizes), **scaled(1.1)},
        oversubscribed={"ranks": 2, "busy_threads": 4, "batch_sizes": list(sizes),
                        **scaled(2.5)})
    prof = dataclasses.replace(prof, compute=comp,
                               metadata={**prof.metadata, "cores": 2, "shared_cpu_cores": 2})
    points = measured_cpu_efficiency(prof)
    assert [v for p in points for v in p] == pytest.approx([1.0, 1.0, 2.0, 1 / 1.1, 4.0, 0.8])
    P.save(prof, tmp_path / "p.json")
    assert P.load(tmp_path / "p.json").compute.oversubscribed == comp.oversubscribed
    # Without the co-runners' point the 4-thread cost would be the 2-thread one held.
    alone = dataclasses.replace(prof, compute=dataclasses.replace(comp, oversubscribed=None))
    assert measured_cpu_efficiency(alone)[-1] == pytest.approx((2.0, 1 / 1.1))
