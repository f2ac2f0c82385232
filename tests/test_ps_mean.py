"""The parameter server's mean on the root costs what calibration measured per byte gathered
(zeros, stack, mean as the seeds' listing does), the same in the DES, the closed form and the
fast engine."""
import dataclasses

import pytest

from commsim.api import Scenario, predict
from profiles import make_profile


def with_mean(profile, s_per_B):
    colls = dict(profile.collectives)
    colls["gather"] = dataclasses.replace(colls["gather"], reduction_s_per_B=s_per_B)
    return dataclasses.replace(profile, collectives=colls)


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_mean_cost_adds_p_n_per_byte_on_the_root_in_every_engine(nodes):
    base = make_profile(param_bytes=(4000, 8000, 40000))
    slow = with_mean(base, 1e-6)
    sc = Scenario(global_batch=64 * nodes)
    times = {eng: predict(slow, "ps", nodes, sc, engine=eng).iteration_s
             for eng in ("des", "analytic", "fast")}
    assert times["des"] == pytest.approx(times["analytic"], rel=1e-9)
    assert times["des"] == pytest.approx(times["fast"], rel=1e-9)
    # Every tensor's mean replaces p·n·γ by p·n·1e-6 on the root, which everyone waits for.
    gamma = base.collectives["all_reduce"].reduction_s_per_B
    extra = nodes * sum(p.bytes for p in base.params) * (1e-6 - gamma)
    assert times["des"] - predict(base, "ps", nodes, sc, engine="des").iteration_s == \
        pytest.approx(extra, rel=1e-9)
