"""Live what-ifs with the simulator's semantics: local aggregation, group averaging, fp16
compression, the large-batch learning-rate schedule, learnable synthetic data, bytes' names."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from commsim.calibrate import live  # noqa: E402
from commsim.errors import UserError  # noqa: E402
from test_live import TINY, _assert_close, _params, _reference_ghost_batches, _spawn  # noqa: E402

pytestmark = pytest.mark.torch

CNN = "commsim.calibrate.live:small_cnn"
MLP = "commsim.calibrate.live:small_mlp"


@pytest.mark.parametrize("strategy, world, group", [("ps", 2, None), ("ring", 4, 2),
                                                    ("ddp", 4, 2)])
def test_aggregation_and_groups_equal_single_process_per_group(strategy, world, group):
    """Sync every 2 iterations (and, for ring and ddp, average in groups of 2 of 4 ranks): every
    group's ranks stay identical and train like one process accumulating its shares' gradients;
    the groups drift apart."""
    cfg = live.LiveConfig(**{**TINY, "iterations": 4}, strategy=strategy, model=CNN,
                          track_running_stats=False, global_batch=4 * world, sync_every=2,
                          group_size=group)
    ranks = _spawn(cfg.to_dict(), world)
    g = group or world
    for start in range(0, world, g):
        shares = range(start, start + g)
        for r in shares:
            _assert_close(_params(ranks[r]), _params(ranks[start]), atol=0)
        _assert_close(_params(ranks[start]), _reference_ghost_batches(cfg, world, shares))
    if g < world:
        assert any(not torch.equal(a, b) for a, b in zip(_params(ranks[0]), _params(ranks[g])))
    # 3 cycles of 2 iterations, the first discarded: per-iteration figures, one per cycle.
    assert len(ranks[0]["loss"]) == 6 and len(ranks[0]["iterations_s"]) == 2
    assert {(r["sync_every"], r["group_size"]) for r in ranks} == {(2, g)}


def test_accumulation_is_not_the_plain_step():
    """Guards the equality above: k=2 must train differently from k=1 on the same batches."""
    cfg = live.LiveConfig(**{**TINY, "iterations": 4}, strategy="ring", model=CNN,
                          track_running_stats=False, global_batch=16, sync_every=2)
    plain = _reference_ghost_batches(replace(cfg, sync_every=1, iterations=5), 2)
    accumulated = _reference_ghost_batches(cfg, 2)
    assert any(not torch.allclose(a, b) for a, b in zip(plain, accumulated))


def test_ddp_fp16_compression_is_close_to_fp32_but_not_equal():
    cfg = live.LiveConfig(**TINY, strategy="ddp", model=MLP, global_batch=16,
                          compression="fp16")
    ranks = _spawn(cfg.to_dict(), 2)
    _assert_close(_params(ranks[0]), _params(ranks[1]), atol=0)
    fp32 = _reference_ghost_batches(cfg, 2)
    _assert_close(_params(ranks[0]), fp32, atol=1e-3)
    assert any(not torch.allclose(a, b, atol=1e-7, rtol=0)
               for a, b in zip(_params(ranks[0]), fp32))


def test_linear_scaling_and_warmup_schedule():
    # 128 per rank x 4 ranks = 512 samples a step: peak 0.1 x 512 / 256 = 0.2, reached at 4.
    s = live.lr_schedule(live.LiveConfig(global_batch=512, lr_scaling="linear",
                                         warmup_iters=4), 4)
    assert (s.base, s.peak, s.update_batch) == (0.1, pytest.approx(0.2), 512)
    assert [s.lr(u) for u in range(6)] == pytest.approx([0.1, 0.125, 0.15, 0.175, 0.2, 0.2])
    # k = 2: a step averages 1024 samples; warm-up counts iterations, 2 a step.
    s = live.lr_schedule(live.LiveConfig(global_batch=512, lr_scaling="linear", warmup_iters=4,
                                         sync_every=2), 4)
    assert [s.lr(u) for u in range(4)] == pytest.approx([0.1, 0.25, 0.4, 0.4])
    # Groups of 2 average 256 samples: the base rate.  No rule: the base rate throughout.
    assert live.lr_schedule(live.LiveConfig(global_batch=512, lr_scaling="linear",
                                            group_size=2), 4).peak == pytest.approx(0.1)
    s = live.lr_schedule(live.LiveConfig(global_batch=512), 4)
    assert s.rule == "constant" and {s.lr(u) for u in range(5)} == {0.1}


def test_live_run_trains_with_the_reported_schedule():
    cfg = live.LiveConfig(**TINY, strategy="single", model=MLP, global_batch=16,
                          lr_scaling="linear", warmup_iters=2)
    r = live.live_worker(0, 1, cfg.to_dict())
    # 16 samples a step: peak 0.1 x 16 / 256, reached after 2 iterations (one step each).
    assert r["lr_schedule"]["lrs"] == pytest.approx([0.1, 0.053125, 0.00625, 0.00625])
    _assert_close(_params(r), _reference_ghost_batches(cfg, 1))


def test_learnable_synthetic_data_is_learnt_and_evaluated():
    cfg = live.LiveConfig(strategy="single", model=MLP, global_batch=32, iterations=40,
                          synthetic="learnable", synthetic_size=1280, test_samples=500,
                          threads_per_rank=1, augment=False)
    r = live.live_worker(0, 1, cfg.to_dict())
    assert r["test_accuracy"] > 0.5 and r["test_loss"] > 0  # chance is 0.1
    agg = live.aggregate([r], cfg)
    assert agg["iterations_per_epoch"] == 40 and agg["epoch_s"] == pytest.approx(
        40 * agg["iteration_s"])
    assert agg["synthetic"] == "learnable"


def test_aggregate_bytes_have_predict_names_and_definitions():
    from commsim.result import Result

    base = dict(batch_per_rank=4, threads=1, loss=[1.0], test_loss=None, test_accuracy=None,
                iteration_s=1.0, iteration_s_mean=1.0, iteration_s_spread=0.0, compute_s=0.5,
                comm_s=0.5, exposed_comm_s=0.5, train_samples=80)
    ranks = [dict(base, rank=0, bytes_sent_per_rank=300.0, bytes_received_per_rank=200.0),
             dict(base, rank=1, bytes_sent_per_rank=100.0, bytes_received_per_rank=200.0)]
    agg = live.aggregate(ranks, live.LiveConfig(strategy="ps", global_batch=8, sync_every=2,
                                                iterations=2))
    byte_fields = {f for f in Result.__dataclass_fields__ if f.startswith("bytes_")}
    assert byte_fields <= set(agg)
    # predict: mean over ranks, and the busiest rank in *_max.
    assert agg["bytes_sent_per_rank"] == 200.0 and agg["bytes_sent_max"] == 300.0
    assert agg["bytes_received_per_rank"] == agg["bytes_received_max"] == 200.0
    assert agg["iterations_per_epoch"] == 10 and agg["epoch_s"] == 10.0
    assert agg["sync_every"] == 2


@pytest.mark.parametrize("kw, field", [
    (dict(strategy="ring", compression="fp16"), "--compress"),
    (dict(strategy="ps", compression="fp16"), "--compress"),
    (dict(strategy="ps", group_size=2), "--group-size"),
    (dict(strategy="ddp", compression="bf16"), "--compress"),
    (dict(strategy="ring", group_size=3), "--group-size"),
    (dict(strategy="ring", sync_every=0), "--sync-every"),
    (dict(strategy="ring", sync_every=3), "--iterations"),
    (dict(strategy="ring", warmup_iters=5), "--lr-scaling"),
    (dict(strategy="ring", lr_scaling="sqrt"), "--lr-scaling"),
    (dict(strategy="ring", synthetic="cifar"), "--synthetic"),
])
def test_what_if_config_errors_name_the_argument(kw, field):
    with pytest.raises(UserError, match=field):
        live.LiveConfig(iterations=20, **kw).validate(2)


@pytest.mark.parametrize("argv, field", [
    (["--strategy", "ring", "--compress", "fp16"], "--compress"),
    (["--strategy", "ps", "--group-size", "2"], "--group-size"),
    (["--strategy", "ring", "--group-size", "3"], "--group-size"),
    (["--strategy", "ring", "--sync-every", "0"], "--sync-every"),
    (["--strategy", "ring", "--sync-every", "3"], "--sync-every"),
    (["--strategy", "ring", "--warmup-iters", "10"], "--warmup-iters"),
    (["--strategy", "ring", "--synthetic", "cifar"], "--synthetic"),
])
def test_cli_live_what_if_errors_exit_2_with_one_line(argv, field, capsys):
    from commsim.cli import main

    assert main(["live", "--nodes", "2", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
