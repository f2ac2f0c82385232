"""Exact event timelines on cases small enough to check by hand.

Toy: 2 ranks, 2 tensors (4000 B and 8000 B), link 1e6 B/s, latency 100 us, reduction 1 ns/B,
no call overheads; per rank at batch 32: forward 0.1 s, backward 0.2 s, optimizer 0.01 s.
"""
import pytest

from commsim.api import Scenario, predict
from commsim.sim.engine import ProcessorSharingCPU
from profiles import make_profile

import simpy

TOY = make_profile()
TWO_CORES = Scenario(global_batch=64, cores_per_host=2)


def spans(result, track, owner):
    return [(iv.name, round(iv.start, 12), round(iv.end, 12)) for iv in result.intervals
            if iv.track == track and iv.owner == owner]


def test_ring_two_ranks_two_tensors():
    r = predict(TOY, "ring", 2, TWO_CORES, timeline=True)
    # tensor 0: chunk 2000 B: step = 2000/1e6 + 1e-4 = 0.0021; reduce 2 us; gather step 0.0021;
    # divide 4 us.  0.3 -> 0.304206.  tensor 1: chunk 4000 B: 0.0041 + 4us + 0.0041 + 8us.
    assert spans(r, "comm", 0) == [("all_reduce p0", 0.3, 0.304206),
                                   ("all_reduce p1", 0.304206, 0.312418)]
    assert spans(r, "compute", 1) == [("forward", 0.0, 0.1), ("backward", 0.1, 0.3),
                                      ("optimizer", 0.312418, 0.322418)]
    assert r.iteration_s == pytest.approx(0.322418, abs=1e-12)
    assert r.bytes_sent_per_rank == 12000.0         # 2(p-1)/p x 12000 with p = 2
    # NIC: host 0 transmits four chunks (2000, 2000, 4000, 4000 bytes)
    assert [round(iv.end - iv.start, 12) for iv in r.intervals
            if iv.track == "tx" and iv.owner == 0] == [0.002, 0.002, 0.004, 0.004]


def test_ddp_one_bucket_waits_for_backward():
    r = predict(TOY, "ddp", 2, TWO_CORES, timeline=True)   # 12000 B < 1 MiB: one bucket
    assert spans(r, "comm", 0) == [("bucket 0", 0.3, 0.312218)]
    assert r.iteration_s == pytest.approx(0.322218, abs=1e-12)
    assert r.overlap_fraction == 0.0


def test_ddp_two_buckets_overlap_backward():
    """First bucket capped at 8000 B: tensor 1 (ready at half of backward) goes alone, early."""
    from commsim.spec import RunSpec, default_cluster
    from commsim.simulate import simulate
    spec = RunSpec(strategy="ddp", cluster=default_cluster(TOY, 2, cores_per_host=2),
                   global_batch=64, first_bucket_bytes=8000)
    r = simulate(spec, TOY, timeline=True)
    # bucket 0 ready at 0.1 + 0.5 x 0.2 = 0.2: 0.2 + 0.0041 + 4us + 0.0041 + 8us = 0.208212
    # bucket 1 ready at 0.3: 0.3 + 0.0021 + 2us + 0.0021 + 4us = 0.304206; optimizer +0.01
    assert spans(r, "comm", 1) == [("bucket 0", 0.2, 0.208212), ("bucket 1", 0.3, 0.304206)]
    assert r.iteration_s == pytest.approx(0.314206, abs=1e-12)
    assert r.exposed_comm_s == pytest.approx(0.004206, abs=1e-12)
    assert r.overlap_fraction == pytest.approx(1 - 0.004206 / (0.008212 + 0.004206), abs=1e-9)


def test_ps_two_ranks():
    r = predict(TOY, "ps", 2, TWO_CORES, timeline=True)
    # tensor 0 (4000 B): gather 0.004 + 1e-4; mean 2 x 4000 x 1ns = 8 us; scatter 0.004 + 1e-4
    # -> 0.3 + 0.008208 = 0.308208.  tensor 1 (8000 B): 0.0081 + 16 us + 0.0081 -> 0.324424.
    assert spans(r, "comm", 0) == [("gather+scatter p0", 0.3, 0.308208),
                                   ("gather+scatter p1", 0.308208, 0.324424)]
    assert r.iteration_s == pytest.approx(0.334424, abs=1e-12)


def test_processor_sharing_by_hand():
    env = simpy.Environment()
    cpu = ProcessorSharingCPU(env, cores=1)
    done = {}

    def job(name, start, work):
        yield env.timeout(start)
        yield cpu.run(work, 1)
        done[name] = env.now

    env.process(job("a", 0.0, 1.0))
    env.process(job("b", 0.25, 0.5))
    env.run()
    # a alone for 0.25 s; then both at half speed: b needs 1.0 s more, a has 0.25 left after.
    assert done == pytest.approx({"a": 1.5, "b": 1.25})


def test_co_located_ranks_share_cores():
    """Two ranks on one single-core host compute at half speed each."""
    one = predict(TOY, "ring", 1, Scenario(global_batch=32, cores_per_host=1))
    two = predict(TOY, "ring", 1, Scenario(global_batch=64, ranks_per_host=2, cores_per_host=1))
    assert two.compute_s == pytest.approx(2 * one.compute_s, rel=1e-12)
