"""The discrete-event simulator reproduces the closed forms exactly on homogeneous clusters."""
import pytest

from commsim import closed_form as cf
from commsim.api import Scenario, predict
from profiles import make_profile

PROFILE = make_profile(param_bytes=(4000, 8000, 1_000_000), latency_s=5e-5, bandwidth_Bps=125e6,
                       gamma_s_per_B=2e-10,
                       overheads={"all_reduce": 3e-4, "gather": 2e-4, "scatter": 1e-4})
# Enough cores that Gloo's reduction thread never competes with compute: the closed forms
# assume exactly that.
SCENARIO = Scenario(cores_per_host=4)


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


@pytest.mark.parametrize("strategy", ["ring", "ps", "ddp"])
@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8, 13, 16, 32, 64])
def test_des_equals_closed_form(strategy, nodes):
    sc = Scenario(cores_per_host=4, global_batch=64 * nodes)
    des = predict(PROFILE, strategy, nodes, sc, engine="des")
    ana = predict(PROFILE, strategy, nodes, sc, engine="analytic")
    for field in ("iteration_s", "compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank",
                  "bytes_received_per_rank", "link_utilization", "speedup", "busbw_Bps"):
        assert rel(getattr(des, field), getattr(ana, field)) < 1e-9, field


def test_single_equals_compute_sum():
    r = predict(PROFILE, "single", 1, SCENARIO)
    c = PROFILE.compute
    assert rel(r.iteration_s, sum(c.time_s(ph, 256) for ph in
                                  ("forward", "backward", "optimizer"))) < 1e-12
    assert r.speedup == 1.0 and r.comm_s == 0.0


@pytest.mark.parametrize("nodes", [2, 4, 64])
def test_ring_comm_is_sum_of_textbook_formula(nodes):
    """Independently of the strategy code: Σ over tensors of the Patarasuk-Yuan cost + divide."""
    r = predict(PROFILE, "ring", nodes, Scenario(cores_per_host=4, global_batch=64 * nodes))
    alpha, beta, gamma, o = 5e-5, 1 / 125e6, 2e-10, 3e-4
    p = nodes
    expected = sum(o + 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
                   + n * gamma for n in (4000, 8000, 1_000_000))
    assert rel(r.comm_s, expected) < 1e-9


@pytest.mark.parametrize("nodes", [2, 5, 64])
def test_ps_comm_is_linear_gather_scatter(nodes):
    r = predict(PROFILE, "ps", nodes, Scenario(cores_per_host=4, global_batch=64 * nodes))
    alpha, beta, gamma = 5e-5, 1 / 125e6, 2e-10
    p = nodes
    expected = sum(2e-4 + 1e-4 + 2 * alpha + 2 * (p - 1) * n * beta + p * n * gamma
                   for n in (4000, 8000, 1_000_000))
    assert rel(r.comm_s, expected) < 1e-9


def test_bus_factors_follow_nccl_tests():
    assert cf.allreduce_bus_factor(4) == 1.5
    assert cf.allreduce_bus_factor(1) == 0.0
    assert cf.ring_bytes_per_rank(100.0, 4) == 150.0
