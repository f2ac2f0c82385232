"""Co-runners (calibration phase b2): how many each rank starts, and that one runs, switches
batch size, ends with its input, and that a broken one ends the rank's wait with its cause."""
import pytest

pytest.importorskip("torch")

from commsim.calibrate.corunner import CoRunner, helpers_per_rank  # noqa: E402
from commsim.errors import RunFailed  # noqa: E402

SMALL = "commsim.calibrate.live:small_cnn"


@pytest.mark.parametrize("colocated, cores, threads, want", [
    (2, 2, 1, [1, 1]),          # 2 ranks on 2 cores -> 4 busy threads
    (3, 2, 1, [1, 0, 0]),       # 3 ranks -> one co-runner makes 4
    (4, 2, 1, [0, 0, 0, 0]),    # already twice the cores
    (1, 2, 1, [3]),             # one rank: three beside it
    (2, 8, 4, [1, 1]),          # threads count: 2 ranks x 4 threads on 8 cores
    (1, 64, 1, [0]),            # a big host: 127 co-runners is not calibration
])
def test_helpers_fill_the_host_to_the_factor(colocated, cores, threads, want):
    got = [helpers_per_rank(i, colocated, cores, threads, 2.0, max_per_rank=3)
           for i in range(colocated)]
    assert got == want
    assert helpers_per_rank(0, 2, 2, 1, 0.0, max_per_rank=3) == 0   # factor 0: off


def test_a_corunner_runs_switches_batch_and_ends_with_its_input():
    runner = CoRunner(SMALL, (3, 32, 32), threads=1, timeout_s=120)
    try:
        runner.set_batch(2)
        runner.set_batch(4)
        assert runner.proc.poll() is None        # still looping at batch 4
    finally:
        runner.close()
    assert runner.proc.returncode == 0


def test_a_corunner_that_cannot_start_names_itself():
    runner = CoRunner("os:getcwd", (3, 32, 32), threads=1, timeout_s=120)  # not an nn.Module
    with pytest.raises(RunFailed, match=r"co-runner process \d+ exited with code 1"):
        runner.set_batch(2)
    runner.close()


def test_a_corunner_too_slow_to_answer_times_out():
    runner = CoRunner(SMALL, (3, 32, 32), threads=1, timeout_s=0.01)
    try:
        with pytest.raises(RunFailed, match=r"did not run batch 2 within 0 s"):
            runner.set_batch(2)
    finally:
        runner.close()
