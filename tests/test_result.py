"""The metrics ``result.derive`` takes from an engine's Timing: the critical rank, the link's
use host by host, and each rank's row, made when asked for."""
import pytest

from commsim.result import derive
from commsim.spec import ClusterSpec, RunSpec
from commsim.strategies import get_strategy
from commsim.strategies.base import Timing


def spec_for(hosts: int, slow: dict, sync_every: int = 1) -> RunSpec:
    cluster = ClusterSpec(hosts=hosts, nic_bandwidth_Bps=1e8, nic_latency_s=1e-4,
                          cores_per_host=4, slow_links_Bps=slow)
    return RunSpec(strategy="ring", cluster=cluster, global_batch=8 * hosts,
                   sync_every=sync_every)


def timing(finish, tx, rx) -> Timing:
    p = len(finish)
    return Timing(finish_s=tuple(finish), compute_s=tuple(0.5 * f for f in finish),
                  comm_s=tuple(0.25 * f for f in finish), sent_bytes=tuple(range(p)),
                  received_bytes=tuple(2.0 * r for r in range(p)), nic_tx_bytes=tuple(tx),
                  nic_rx_bytes=tuple(rx))


def result(spec, t):
    return derive(get_strategy("ring"), spec, t, engine="fast", baseline_iteration_s=None,
                  model_bytes=1000)


@pytest.mark.parametrize("slow", [{}, {1: 2e7}, {0: 5e7, 3: 1e7},
                                  {0: 2e7, 1: 2e7, 2: 3e7, 3: 1e7}])
def test_link_use_is_the_busiest_direction_host_by_host(slow):
    spec = spec_for(4, slow, sync_every=2)
    tx, rx = [5e6, 9e6, 1e6, 2e6], [7e6, 3e6, 8e6, 1.5e6]
    r = result(spec, timing([1.0, 3.0, 3.0, 2.0], tx, rx))
    by_host = max(max(a, b) / 2 / (slow.get(h, 1e8) * r.iteration_s)
                  for h, (a, b) in enumerate(zip(tx, rx)))
    assert r.link_utilization == by_host


def test_the_critical_rank_is_the_lowest_of_those_last_to_finish():
    r = result(spec_for(4, {}), timing([1.0, 3.0, 3.0, 2.0], [0] * 4, [0] * 4))
    assert r.critical_rank == 1 and r.iteration_s == 3.0


def test_ranks_ending_a_last_bit_apart_end_together():
    """Two engines' sums of one rank's spans can differ in their last bits: the rank whose
    breakdown is reported must not follow them (a random scan: ps with two stragglers a
    host, the DES's rank 3 a bit later than rank 1, the fast engine's the same; compute and
    communication seconds 1 % apart)."""
    late = 3.0 + 4.4e-16
    r = result(spec_for(4, {}), timing([1.0, 3.0, late, 2.0], [0] * 4, [0] * 4))
    assert r.critical_rank == 1 and r.iteration_s == late
    assert r.compute_s == 0.5 * 3.0
    apart = result(spec_for(4, {}), timing([1.0, 3.0, 3.0 + 1e-9, 2.0], [0] * 4, [0] * 4))
    assert apart.critical_rank == 2


def test_rows_are_made_when_asked_for_and_read_like_a_tuple():
    spec = spec_for(5, {}, sync_every=2)
    t = timing([1.0, 3.0, 3.0, 2.0, 4.0], [0] * 5, [0] * 5)
    rows = result(spec, t).per_rank
    assert len(rows) == 5 and repr(rows) == "PerRank(5 ranks)"
    assert rows[-1] == rows[4] == {"rank": 4, "finish_s": 2.0, "compute_s": 1.0,
                                   "comm_s": 0.5, "bytes_sent": 2.0, "bytes_received": 4.0}
    assert [row["rank"] for row in rows] == list(range(5))
    assert rows[1:3] == (rows[1], rows[2])
    with pytest.raises(IndexError):
        rows[5]
