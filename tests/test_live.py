"""Live training correctness: ps/ring/ddp keep ranks identical and equal single-process training."""
from __future__ import annotations

import io
import tempfile

import pytest

torch = pytest.importorskip("torch")

from commsim.errors import RunFailed, UserError  # noqa: E402
from commsim.calibrate import live  # noqa: E402
from commsim.calibrate.models import sgd  # noqa: E402

pytestmark = pytest.mark.torch

TINY = dict(synthetic_size=64, iterations=3, threads_per_rank=1, return_params=True, seed=3,
            augment=False)


def _spawn(config: dict, world: int) -> list[dict]:
    """Run ``world`` ranks of live_worker over loopback with the shared launcher."""
    from commsim.calibrate.launch import launch

    with tempfile.TemporaryDirectory() as out:
        return launch(live.WORKER, config, nodes=world, timeout_s=120, out_dir=out,
                      progress=io.StringIO())


def _params(result):
    return [torch.tensor(p) for p in result["params"]]


def _assert_close(a, b, atol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=atol, rtol=1e-4)


def _cfg(**kw) -> dict:
    return live.LiveConfig(**{**TINY, **kw}).to_dict()


def _reference_ghost_batches(cfg: live.LiveConfig, world: int, shares=None) -> list:
    """Single-process training on the same global batches, where the loss is the mean of the
    losses of each rank's share (rank r's samples are global_batch[r::world]).  With batch norm
    that keeps no running statistics this is what data parallel computes: each rank normalises
    with its own share's batch statistics.  ``shares`` (default: every rank) are the ranks a
    group averages over; with ``cfg.sync_every`` k, k batches' gradients (each loss / k) are
    accumulated before every step, at the rate of ``live.lr_schedule``."""
    shares = list(range(world)) if shares is None else list(shares)
    k = cfg.sync_every
    schedule = live.lr_schedule(cfg, world)
    torch.manual_seed(cfg.seed)
    model = live.live_model(cfg)
    opt = sgd(model.parameters())
    crit = torch.nn.CrossEntropyLoss()
    stream = live.batches(live.load_data(cfg, train=True), 0, 1, cfg.rank_batch(world) * world,
                          cfg.seed)
    for update in range(cfg.iterations // k + 1):
        opt.zero_grad()
        for group in opt.param_groups:
            group["lr"] = schedule.lr(update)
        for _ in range(k):
            data, target = next(stream)
            loss = sum(crit(model(data[r::world]), target[r::world]) for r in shares) / len(shares)
            (loss / k).backward()
        opt.step()
    return [p.detach().flatten() for p in model.parameters()]


@pytest.mark.parametrize("strategy", ["ps", "ring", "ddp"])
def test_data_parallel_equals_single_process_without_batch_norm(strategy):
    single = live.live_worker(0, 1, _cfg(strategy="single", model="commsim.calibrate.live:small_mlp",
                                         global_batch=16))
    ranks = _spawn(_cfg(strategy=strategy, model="commsim.calibrate.live:small_mlp",
                        global_batch=16), 2)
    assert [r["batch_per_rank"] for r in ranks] == [8, 8]
    _assert_close(_params(ranks[0]), _params(ranks[1]), atol=0)
    _assert_close(_params(ranks[0]), _params(single))
    # The global-batch loss is the mean of the ranks' shares' losses.
    agg = live.aggregate(ranks, live.LiveConfig(**TINY, strategy=strategy))
    assert agg["loss"] == pytest.approx(single["loss"], rel=1e-4)
    assert agg["global_batch"] == 16 and agg["nodes"] == 2


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_batch_norm_without_running_stats_matches_single_process_per_share(strategy):
    cfg = live.LiveConfig(**TINY, strategy=strategy, model="commsim.calibrate.live:small_cnn",
                          track_running_stats=False, global_batch=16)
    ranks = _spawn(cfg.to_dict(), 2)
    _assert_close(_params(ranks[0]), _params(ranks[1]), atol=0)
    _assert_close(_params(ranks[0]), _reference_ghost_batches(cfg, 2))


def test_ddp_ranks_stay_identical_with_batch_norm_statistics():
    ranks = _spawn(_cfg(strategy="ddp", model="commsim.calibrate.live:small_cnn",
                        global_batch=16, bucket_mb=0.001), 2)
    _assert_close(_params(ranks[0]), _params(ranks[1]), atol=0)
    for r in ranks:
        assert r["comm_s"] > 0 and r["compute_s"] > 0
        assert r["exposed_comm_s"] >= 0


def test_training_actually_changes_parameters():
    """Guards the equality tests: they would pass trivially if no step happened."""
    cfg = live.LiveConfig(**TINY, strategy="single", model="commsim.calibrate.live:small_mlp",
                          global_batch=16)
    torch.manual_seed(cfg.seed)
    before = [p.detach().flatten().clone() for p in live.live_model(cfg).parameters()]
    after = _params(live.live_worker(0, 1, cfg.to_dict()))
    assert any(not torch.allclose(a, b) for a, b in zip(before, after))


def test_single_result_fields_and_timing():
    r = live.live_worker(0, 1, _cfg(strategy="single", model="commsim.calibrate.live:small_cnn",
                                    global_batch=8))
    assert len(r["loss"]) == 4 and len(r["iterations_s"]) == 3  # first iteration discarded
    per = r["per_iteration"]
    assert per["iteration_s"] == r["iterations_s"] and len(per["backward_s"]) == 3
    assert r["phases"]["forward_s"]["max"] == max(per["forward_s"])
    assert r["comm_s"] == 0 or r["comm_s"] < 1e-3
    assert r["iteration_s"] >= r["compute_s"] > 0
    assert r["bytes_sent_per_rank"] is None and "loopback" in r["bytes_note"]
    assert r["test_loss"] is None


def test_aggregate_takes_slowest_rank_and_predict_field_names():
    base = dict(batch_per_rank=4, threads=1, loss=[1.0, 2.0], test_loss=None,
                test_accuracy=None, iteration_s_mean=1.0, iteration_s_spread=0.1,
                bytes_sent_per_rank=None, bytes_received_per_rank=None)
    ranks = [dict(base, rank=1, iteration_s=2.0, compute_s=1.0, comm_s=1.0, exposed_comm_s=1.0,
                  loss=[3.0, 4.0]),
             dict(base, rank=0, iteration_s=1.0, compute_s=0.5, comm_s=0.5, exposed_comm_s=0.5)]
    agg = live.aggregate(ranks, live.LiveConfig(strategy="ring", global_batch=9))
    for key in ("strategy", "nodes", "global_batch", "batch_per_rank", "iteration_s",
                "compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank",
                "bytes_received_per_rank", "iteration_s_mean", "iteration_s_spread",
                "per_rank", "loss", "test_loss", "test_accuracy"):
        assert key in agg
    assert agg["iteration_s"] == 2.0 and agg["rank_mean"]["iteration_s"] == 1.5
    assert agg["loss"] == [2.0, 3.0]
    assert agg["global_batch"] == 8 and agg["requested_global_batch"] == 9
    assert [r["rank"] for r in agg["per_rank"]] == [0, 1]


def test_union_of_overlapping_intervals():
    assert live.union_s([]) == 0
    assert live.union_s([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == pytest.approx(3.0)


@pytest.mark.parametrize("kw, field", [
    (dict(strategy="nope"), "--strategy"),
    (dict(strategy="single"), "--nodes"),
    (dict(iterations=0), "--iterations"),
    (dict(bucket_mb=0), "--bucket-mb"),
    (dict(batch_per_rank=0), "--batch-per-rank"),
    (dict(global_batch=1), "--global-batch"),
])
def test_config_errors_name_the_argument(kw, field):
    with pytest.raises(UserError, match=field):
        live.LiveConfig(**kw).validate(2)


def test_unknown_config_field_is_a_user_error():
    with pytest.raises(UserError, match="bogus"):
        live.LiveConfig.from_dict({"bogus": 1})


def test_killed_rank_fails_the_run():
    cfg = live.LiveConfig(**{**TINY, "return_params": False}, strategy="ring",
                          model="commsim.calibrate.live:small_cnn", global_batch=8,
                          exit_rank=1, exit_iteration=2)
    with pytest.raises(RunFailed, match="rank 1"):
        live.run_live(cfg, nodes=2, timeout_s=60, progress=io.StringIO())


def _fake_cifar(root, per_file: int = 8, test: int = 11):
    """A CIFAR-10 binary directory with a few random records per file."""
    import numpy as np

    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        n = test if name.startswith("test") else per_file
        records = rng.integers(0, 256, size=(n, 3073), dtype=np.uint8)
        records[:, 0] = rng.integers(0, 10, size=n)
        (root / name).write_bytes(records.tobytes())
    return root


def test_cli_live_json_uses_predict_field_names_and_refuses_to_overwrite(tmp_path, capsys):
    import json

    from commsim.cli import main

    out = tmp_path / "live.json"
    argv = ["live", "--strategy", "ring", "--nodes", "2", "--model",
            "commsim.calibrate.live:small_cnn", "--iterations", "2", "--global-batch", "8",
            "--data", str(_fake_cifar(tmp_path)), "--json", "--out", str(out)]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    for key in ("strategy", "nodes", "global_batch", "batch_per_rank", "iteration_s",
                "compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank",
                "bytes_received_per_rank"):
        assert key in printed
    assert printed["strategy"] == "ring" and printed["nodes"] == 2
    assert printed["batch_per_rank"] == 4 and len(printed["per_rank"]) == 2
    # 11 test images split 6/5 over the ranks and summed: one figure, the same on every rank.
    assert printed["test_loss"] > 0 and 0 <= printed["test_accuracy"] <= 1
    assert round(printed["test_accuracy"] * 11, 6) == int(round(printed["test_accuracy"] * 11))
    assert {r["test_loss"] for r in printed["per_rank"]} == {printed["test_loss"]}
    assert main(argv) == 2  # --out exists, no --force
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("argv, field", [
    (["--strategy", "star", "--nodes", "2"], "--strategy"),
    (["--strategy", "single", "--nodes", "2"], "--nodes"),
    (["--strategy", "ring", "--nodes", "2", "--global-batch", "8", "--batch-per-rank", "4"],
     "--batch-per-rank"),
    (["--strategy", "ring", "--nodes", "2", "--data", "/nonexistent/cifar"], "--data"),
])
def test_cli_live_user_errors_exit_2_with_one_line(argv, field, capsys):
    from commsim.cli import main

    assert main(["live", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err


def _root_with_iproute2() -> bool:
    import os
    import shutil

    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


@pytest.mark.cluster
@pytest.mark.skipif(not _root_with_iproute2(), reason="needs root, ip and tc")
def test_emulated_run_counts_the_bytes_each_rank_puts_on_its_link():
    from commsim.calibrate import cluster

    info = cluster.up(2, 125e6, prefix="livetest")  # own prefix: never touch others' cluster
    try:
        cfg = live.LiveConfig(**{**TINY, "return_params": False}, strategy="ring",
                              model="commsim.calibrate.live:small_mlp", global_batch=8)
        r = live.run_live(cfg, nodes=2, emulate=info, timeout_s=120, progress=io.StringIO())
    finally:
        cluster.down("livetest")
    torch.manual_seed(0)
    model_bytes = sum(p.numel() * 4 for p in live.small_mlp().parameters())
    # A 2-rank all-reduce moves 2(p-1)/p = 1 model's worth each way, plus TCP/IP headers.
    for rank in r["per_rank"]:
        for key in ("bytes_sent_per_rank", "bytes_received_per_rank"):
            assert model_bytes <= rank[key] <= 1.5 * model_bytes, (key, rank[key], model_bytes)
