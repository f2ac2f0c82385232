"""The rank launcher: results in rank order, and no hang when a rank dies or rendezvous fails."""
import socket
import time

import pytest

pytest.importorskip("torch")

from commsim.calibrate import launch as L  # noqa: E402
from commsim.errors import RunFailed, UserError  # noqa: E402

SELFTEST = "commsim.calibrate.launch.worker:selftest"


def test_launch_returns_each_ranks_dict_in_rank_order(tmp_path):
    results = L.launch(SELFTEST, {"rounds": 2}, nodes=2, timeout_s=60, out_dir=tmp_path,
                       threads_per_rank=1)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["sum"] == 1.0 and r["torch_threads"] == 1 for r in results)
    assert (tmp_path / "rank1.json").exists()


@pytest.mark.parametrize("codes, cause", [
    # Gloo aborts rank 0 (std::terminate) when rank 1 is killed: rank 1 is the cause.
    ({0: -6, 1: -9}, r"^rank 1 was killed by SIGKILL: rank 1 wrote this$"),
    ({0: 1, 1: -11}, r"^rank 1 was killed by SIGSEGV"),     # a crash before an error exit
    ({0: 1, 1: 1}, r"^rank 0 exited with code 1: rank 0 wrote this$"),
    ({0: -6, 1: -15, 2: -9}, r"^rank 1 was killed by SIGTERM"),  # the first one sent
    # A rank that exits on an error of its own, and the peer Gloo aborts for it.
    ({0: -6, 1: 3}, r"^rank 1 exited with code 3"),
    # Seen failed first (before the settle): the cause, whatever the later ones did.
    ({0: -11, 1: 1, "first": {1}}, r"^rank 1 exited with code 1"),
])
def test_the_failure_named_is_a_rank_killed_from_outside_before_ranks_that_crashed(
        tmp_path, codes, cause):
    class Proc:
        def __init__(self, rc):
            self.returncode = rc

    codes = dict(codes)
    first = codes.pop("first", frozenset())
    children = []
    for rank, rc in codes.items():
        log = tmp_path / f"rank{rank}.log"
        log.write_text(f"rank {rank} wrote this\n")
        children.append(L._Child(rank, Proc(rc), log, None))
    with pytest.raises(RunFailed, match=cause):
        raise L._failure(children, first)


def test_a_rank_killed_mid_run_ends_every_rank_quickly_naming_it(tmp_path):
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"rank 1 was killed by SIGKILL"):
        L.launch(SELFTEST, {"rounds": 400, "sleep_s": 0.05, "die_rank": 1, "die_after": 3},
                 nodes=2, timeout_s=60, out_dir=tmp_path)
    assert time.monotonic() - start < 20


def test_a_master_port_in_use_is_a_user_error_naming_the_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"127.0.0.1:{port}.*in use"):
            L.launch(SELFTEST, {}, nodes=2, timeout_s=60, out_dir=tmp_path, master_port=port,
                     collective_timeout_s=10)


def test_the_whole_run_times_out_and_names_the_ranks_left(tmp_path):
    with pytest.raises(RunFailed, match=r"timed out after 6 s; rank\(s\) 0, 1"):
        L.launch(SELFTEST, {"rounds": 1000, "sleep_s": 0.1}, nodes=2, timeout_s=6,
                 out_dir=tmp_path)


def test_from_env_reads_torchrun_variables():
    env = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
           "LOCAL_WORLD_SIZE": "1"}
    assert L.from_env(env) == L.EnvRank(1, 4, "10.0.0.1", 29500, 1)
    assert L.from_env({"RANK": "0"}) is None
    with pytest.raises(UserError, match="RANK=4"):
        L.from_env({**env, "RANK": "4"})


def test_threads_share_the_cores_between_co_located_ranks():
    assert L.default_threads(1) == L.cpu_cores()
    assert L.default_threads(10**6) == 1
