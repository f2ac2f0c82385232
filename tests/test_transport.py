"""The transport's two sides: what a byte costs on the wire (as calibrated, scaling with the link)
and on the hosts (a collective's rate with the link out of the way).  A link what-if changes
the wire side only; the host side caps a collective however fast the link."""
from __future__ import annotations

from dataclasses import replace

import pytest

from commsim import closed_form as cf
from commsim.api import Scenario, predict
from commsim.costs import wire_factors
from commsim.profile import loads
from profiles import make_profile

ALPHA, LINK, GAMMA, O = 5e-5, 125e6, 2e-10, 3e-4
FITTED, HOST = 0.9 * LINK, 2.0 * LINK          # all-reduce: 90% of the link; hosts: 2x it
SIZES = (4000, 1_000_000)


def profiles():
    base = make_profile(param_bytes=SIZES, latency_s=ALPHA, bandwidth_Bps=LINK,
                        gamma_s_per_B=GAMMA, overheads={"all_reduce": O})
    fitted = replace(base, collectives={**base.collectives, "all_reduce": replace(
        base.collectives["all_reduce"], bandwidth_Bps=FITTED)})
    hosted = replace(fitted, collectives={**fitted.collectives, "all_reduce": replace(
        fitted.collectives["all_reduce"], host_bandwidth_Bps=HOST)})
    return fitted, hosted


def ring_comm_s(p: int, per_byte_s: float) -> float:
    return sum(cf.allreduce_s("ring", n, p, ALPHA, per_byte_s, GAMMA, O) + cf.scale_s(n, p, GAMMA)
               for n in SIZES)


def test_wire_factor_takes_the_larger_side():
    fitted, hosted = profiles()
    assert wire_factors(fitted)["all_reduce"] == pytest.approx(1 / 0.9)
    assert wire_factors(hosted)["all_reduce"] == pytest.approx(1 / 0.9)      # calibrated link
    assert wire_factors(hosted, 10 * LINK)["all_reduce"] == pytest.approx(5.0)  # host-bound
    assert wire_factors(fitted, 10 * LINK)["all_reduce"] == pytest.approx(1 / 0.9)


@pytest.mark.parametrize("engine", ["des", "fast", "analytic"])
@pytest.mark.parametrize("strategy", ["ring", "ddp", "ps"])
def test_the_calibrated_link_predicts_the_same_with_or_without_the_host_side(engine, strategy):
    fitted, hosted = profiles()
    sc = Scenario(global_batch=64, cores_per_host=4)
    a, b = predict(fitted, strategy, 4, sc, engine=engine), predict(hosted, strategy, 4, sc,
                                                                      engine=engine)
    assert a.iteration_s == b.iteration_s and a.comm_s == b.comm_s


@pytest.mark.parametrize("engine", ["des", "fast", "analytic"])
@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_a_faster_link_leaves_the_collective_at_the_hosts_rate(engine, p):
    """Ring all-reduce on a link 10x the calibrated one: per byte 1/HOST, not 0.9 x 10 x link."""
    fitted, hosted = profiles()
    sc = Scenario(global_batch=64 * p, cores_per_host=4, bandwidth_Bps=10 * LINK)
    host_bound = predict(hosted, "ring", p, sc, engine=engine)
    wire_bound = predict(fitted, "ring", p, sc, engine=engine)
    assert host_bound.comm_s == pytest.approx(ring_comm_s(p, 1 / HOST), rel=1e-9)
    assert wire_bound.comm_s == pytest.approx(ring_comm_s(p, 1 / (0.9 * 10 * LINK)), rel=1e-9)


def test_a_slower_link_is_wire_bound_as_calibrated():
    fitted, hosted = profiles()
    sc = Scenario(global_batch=128, cores_per_host=4, bandwidth_Bps=LINK / 10)
    assert predict(hosted, "ring", 2, sc).comm_s == predict(fitted, "ring", 2, sc).comm_s


def test_the_host_side_round_trips_through_json():
    _, hosted = profiles()
    back = loads(hosted.dumps())
    assert back.collectives["all_reduce"].host_bandwidth_Bps == HOST
    assert "host_bandwidth_Bps" not in replace(hosted, collectives=profiles()[0].collectives
                                               ).dumps()


def test_host_rate_is_the_bytes_term_over_the_time_left():
    """An unshaped all-reduce of n bytes on p ranks took t: its bytes term 2(p-1)/p n over t
    less the fitted overhead, the latency terms and the reductions."""
    pytest.importorskip("torch")
    from commsim.calibrate.phases.base import ProfileParts
    from commsim.calibrate.phases.host_side import host_rate
    from commsim.profile import CollectiveFit, NetworkFit
    p, n, t = 4, 16 << 20, 0.05
    parts = ProfileParts(world_size=p, network=NetworkFit(latency_s=1e-4, bandwidth_Bps=LINK),
                         collectives={"all_reduce": CollectiveFit(
                             latency_s=1e-4, bandwidth_Bps=FITTED, reduction_s_per_B=GAMMA,
                             overhead_s=O)})
    record = {"op": "all_reduce", "bytes": n, "world_size": p, "times_s": [t, t * 1.1, t * 0.9]}
    left = t - O - 2 * (p - 1) * 1e-4 - (p - 1) / p * n * GAMMA
    assert host_rate(record, parts) == pytest.approx(2 * (p - 1) / p * n / left)
    assert host_rate({**record, "times_s": [1e-6]}, parts) is None    # nothing left to time


def test_host_side_is_measured_only_on_an_emulated_cluster():
    pytest.importorskip("torch")
    from commsim.calibrate.phases.host_side import HostSide
    from commsim.calibrate.phases.keys import HostSideKey

    class Ctx:
        config, world_size, taken, rank = {"cluster": None}, 4, {}, 0
    assert list(HostSide().plan(Ctx())) == []
    assert HostSide().key({"kind": "host_side", "op": "gather", "bytes": 4}) == \
        HostSideKey("gather", 4)
    assert HostSide().key({"kind": "collective", "op": "gather", "bytes": 4}) is None
