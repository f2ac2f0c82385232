"""The contention measurement takes the burn rate alone beside every window with the
collective (their median), not from the threads' first window (a 1-rank Gloo group, the burn
rates stood in for by a known sequence)."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from commsim.calibrate import collectives as C  # noqa: E402


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1),
                            rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_rate_alone_is_the_median_of_windows_beside_the_collective(one_rank, monkeypatch):
    windows = iter([10.0, 100.0, 90.0, 120.0])     # the first: threads still allocating
    monkeypatch.setattr(C._Burn, "rate", lambda self, seconds: next(windows))
    rec = C.measure_contention(4096, 1, C.CollectiveSpec(sizes_bytes=(4096,), slow_reps=3),
                               window_s=0.01)
    assert rec["burn_rate_alone"] == 100.0 and len(rec["times_s"]) == 3


def test_without_burn_threads_nothing_is_counted(one_rank):
    rec = C.measure_contention(4096, 0, C.CollectiveSpec(sizes_bytes=(4096,), slow_reps=2),
                               window_s=0.01)
    assert rec["burn_rate_alone"] == 0.0 and rec["burn_rate_during"] == 0.0
