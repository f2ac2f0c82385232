"""Communication under CPU contention: the profile fields, the fit, and the simulator's use of
them (a transfer's bandwidth cap and the compute it slows), on cases checked by hand."""
import dataclasses

import pytest
import simpy

from commsim.api import Scenario, predict
from commsim.calibrate import fit as F
from commsim.costs import contended_bandwidth_Bps
from commsim.profile import NetworkFit, ProfileError, loads
from commsim.sim.engine import ProcessorSharingCPU
from profiles import make_profile

TOY = make_profile()


def with_points(profile, loads_, bws, speeds=()):
    net = dataclasses.replace(profile.network, contention_load=tuple(loads_),
                              contention_bandwidth_Bps=tuple(bws),
                              contention_compute_speed=tuple(speeds))
    return dataclasses.replace(profile, network=net)


def test_profile_round_trips_and_rejects_inconsistent_contention():
    prof = with_points(TOY, (0.0, 1.0), (1e6, 5e5), (1.0, 0.5))
    assert loads(prof.dumps()).network == prof.network
    with pytest.raises(ProfileError, match="same length"):
        NetworkFit(latency_s=0, bandwidth_Bps=1, contention_load=(0.0, 1.0),
                   contention_bandwidth_Bps=(1.0,))
    with pytest.raises(ProfileError, match="strictly increasing"):
        NetworkFit(latency_s=0, bandwidth_Bps=1, contention_load=(1.0, 0.0),
                   contention_bandwidth_Bps=(1.0, 1.0))
    with pytest.raises(ProfileError, match="compute_speed"):
        NetworkFit(latency_s=0, bandwidth_Bps=1, contention_load=(0.0, 1.0),
                   contention_bandwidth_Bps=(1.0, 1.0), contention_compute_speed=(1.0, 1.5))


def test_cap_is_none_alone_interpolated_between_points_and_flat_beyond():
    pts = ((0.0, 100.0), (1.0, 60.0), (2.0, 40.0))
    assert contended_bandwidth_Bps(pts, 0.0) == float("inf")
    assert contended_bandwidth_Bps(pts, 0.5) == pytest.approx(80.0)
    assert contended_bandwidth_Bps(pts, 1.5) == pytest.approx(50.0)
    assert contended_bandwidth_Bps(pts, 9.0) == 40.0
    assert contended_bandwidth_Bps((), 9.0) == float("inf")


def test_fit_scales_the_all_reduce_fit_by_the_measured_slowdown():
    rows = [{"burn_threads": k, "world_size": 4, "bytes": 8 << 20, "ranks_per_cpu": 4,
             "cores": 2, "threads": 1, "times_s": [t, t, t],
             "burn_rate_alone": 100.0, "burn_rate_during": during}
            for k, t, during in ((0, 0.1, 0.0), (1, 0.2, 80.0), (2, 0.15, 90.0),
                                 (3, 0.4, 50.0))]
    net = F.with_contention(NetworkFit(latency_s=1e-4, bandwidth_Bps=1e8), rows, 8e7)
    assert net.contention_load == (0.0, 2.0, 4.0, 6.0)       # 4 ranks x k threads / 2 cores
    # 8e7 x alone / at-load; k=2 measured faster than k=1: noise, held at k=1's value.
    assert net.contention_bandwidth_Bps == pytest.approx((8e7, 4e7, 4e7, 2e7))
    assert net.contention_compute_speed == pytest.approx((1.0, 0.8, 0.8, 0.5))
    assert F.with_contention(net, rows[:1], 8e7) is net  # one point: nothing to learn


def _transfer_time(load_threads: float) -> float:
    """One 1e6-byte message between two 1-core hosts while the sender computes with
    ``load_threads`` threads (with its communication thread, more than the core); link 1e6 B/s,
    cap 5e5 B/s at load >= 1 (none at 0)."""
    prof = with_points(TOY, (0.0, 1.0), (1e6, 5e5))
    from commsim.costs import cost_inputs
    from commsim.sim.context import SimContext
    from commsim.api import run_spec
    spec = run_spec(prof, "ring", 2, Scenario(global_batch=64, cores_per_host=1,
                                              bandwidth_Bps=1e6, latency_s=0.0))
    ctx = SimContext(spec, cost_inputs(spec, prof))
    ctx.cpu_of(0).communicating(+1)  # the sender is inside a collective
    if load_threads:
        ctx.cpu_of(0).run(10.0, load_threads, compute=True)
    ctx.recv(1, 0)
    done = ctx.send(0, 1, 1e6, collective="send_recv")
    ctx.env.run(done)
    return ctx.now


def test_a_message_sent_while_its_host_computes_is_capped():
    assert _transfer_time(0) == pytest.approx(1.0)       # the link: 1e6 B at 1e6 B/s
    assert _transfer_time(1) == pytest.approx(2.0)       # capped at 5e5 B/s
    assert _transfer_time(0.5) == pytest.approx(1e6 / 7.5e5)  # halfway between the points


def test_compute_slows_by_the_measured_speed_while_a_rank_communicates():
    env = simpy.Environment()
    cpu = ProcessorSharingCPU(env, 1, comm_speed=lambda load: 0.5)
    done = cpu.run(1.0, 1, compute=True)
    env.run(0.4)                      # 0.4 s alone at full speed: 0.6 s of work left
    cpu.communicating(+1)
    env.run(1.0)                      # 0.6 s at half speed: 0.3 s of work left
    cpu.communicating(-1)
    env.run(done)
    assert env.now == pytest.approx(1.3)


def test_ddp_overlap_costs_more_under_contention_and_fast_engine_follows_the_des():
    sc = Scenario(global_batch=64, cores_per_host=1, first_bucket_bytes=4000)
    base = predict(TOY, "ddp", 2, sc)
    slow = with_points(TOY, (0.0, 1.0), (1e6, 1e5), (1.0, 0.5))
    contended = predict(slow, "ddp", 2, sc)
    assert contended.iteration_s > base.iteration_s
    # Ring never overlaps compute with its own messages: unaffected, and still fast-engine exact.
    assert predict(slow, "ring", 2, sc).iteration_s == pytest.approx(
        predict(TOY, "ring", 2, sc).iteration_s, rel=1e-12)
    # Every rank alike: the fast engine replays one rank's events (``fast_lockstep``).
    assert predict(slow, "ddp", 2, sc, engine="fast").iteration_s == pytest.approx(
        contended.iteration_s, rel=1e-9)
    predict(slow, "ring", 2, sc, engine="fast")


def test_no_contention_while_compute_and_communication_fit_in_the_cores():
    """Two cores: one compute thread and one communicating rank fit, nothing is capped and the
    fast engine stays exact; one core: they contend."""
    slow = with_points(TOY, (0.0, 1.0), (1e6, 1e5), (1.0, 0.5))
    roomy = Scenario(global_batch=64, cores_per_host=2, first_bucket_bytes=4000)
    assert predict(slow, "ddp", 2, roomy, engine="fast").iteration_s == pytest.approx(
        predict(TOY, "ddp", 2, roomy, engine="des").iteration_s, rel=1e-12)
    tight = Scenario(global_batch=64, cores_per_host=1, first_bucket_bytes=4000)
    assert predict(slow, "ddp", 2, tight).iteration_s > predict(TOY, "ddp", 2, tight).iteration_s
    # The default cluster gives each rank a core for its Gloo thread: roomy, on the fast engine.
    default = predict(slow, "ddp", 2, Scenario(global_batch=64, first_bucket_bytes=4000))
    assert default.engine == "fast"
    assert default.iteration_s == predict(slow, "ddp", 2, roomy, engine="fast").iteration_s


def test_compute_loses_its_speed_once_compute_fills_the_cores():
    """Points measured at loads 0 and 2 (4 ranks on 2 cores): the knee at load 1 takes load 2's
    compute speed and the bandwidth on the line between the two points."""
    from commsim.costs import clamped_piecewise, contention_points
    net = NetworkFit(latency_s=0, bandwidth_Bps=1e8, contention_load=(0.0, 2.0, 4.0),
                     contention_bandwidth_Bps=(1e8, 4e7, 2e7),
                     contention_compute_speed=(1.0, 0.7, 0.6))
    pts = contention_points(net)
    assert [v for p in pts for v in p] == pytest.approx([0.0, 1e8, 1.0, 1.0, 7e7, 0.7,
                                                         2.0, 4e7, 0.7, 4.0, 2e7, 0.6])
    speed = tuple((x, s) for x, _, s in pts)
    assert clamped_piecewise(speed, 0.5) == pytest.approx(0.85)   # a core still idle
    assert clamped_piecewise(speed, 1.5) == pytest.approx(0.7)
    # A calibration that measured load 1 itself keeps its own points.
    at_one = dataclasses.replace(net, contention_load=(0.0, 1.0, 2.0))
    assert contention_points(at_one) == tuple(zip((0.0, 1.0, 2.0), (1e8, 4e7, 2e7),
                                                  (1.0, 0.7, 0.6)))


def test_a_faster_link_raises_the_contention_caps_up_to_the_hosts_rate_a_slower_keeps_them():
    """The contention points are bandwidths measured at the calibrated link: on a faster
    what-if link they scale with what the all-reduce reaches there (the link, up to the hosts'
    rate); on the calibrated or a slower link they are what was measured."""
    from commsim.api import run_spec
    from commsim.costs import contention_link_scale, cost_inputs

    link = 1e6
    prof = with_points(TOY, (0.0, 2.0), (link, 0.5 * link), (1.0, 0.7))
    hosted = dataclasses.replace(prof, collectives={**prof.collectives, "all_reduce":
                                 dataclasses.replace(prof.collectives["all_reduce"],
                                                     host_bandwidth_Bps=4 * link)})

    def caps(profile, rate):
        spec = run_spec(profile, "ddp", 2, Scenario(global_batch=64, bandwidth_Bps=rate))
        return [bw for _, bw, _ in cost_inputs(spec, profile).contention]

    assert contention_link_scale(hosted, link) == 1.0
    assert caps(hosted, link) == [link, 0.75 * link, 0.5 * link]        # the knee at load 1
    assert caps(hosted, link / 10) == caps(hosted, link)                 # slower: as measured
    assert caps(hosted, 10 * link) == pytest.approx([4 * link, 3 * link, 2 * link])  # hosts' rate
    assert caps(prof, 10 * link) == pytest.approx([10 * link, 7.5 * link, 5 * link])  # no host rate
    # What the simulator does with it: a 1 Gbit/s-style what-if's DDP is no longer held at the
    # calibrated link's rate by the caps.
    sc = Scenario(global_batch=64, bandwidth_Bps=10 * link)
    capped = with_points(TOY, (0.0, 2.0), (link, link), (1.0, 0.7))
    assert predict(capped, "ddp", 2, sc).iteration_s == pytest.approx(
        predict(with_points(TOY, (0.0, 2.0), (10 * link, 10 * link), (1.0, 0.7)), "ddp", 2,
                dataclasses.replace(sc, bandwidth_Bps=10 * link)).iteration_s)
