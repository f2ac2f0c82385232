"""calibrate --from-trace: a profile from a PyTorch profiler trace (CPU or GPU)."""
from __future__ import annotations

import json
import statistics
import time

import pytest

from commsim.calibrate.from_trace import profile_from_traces, read_trace
from commsim.errors import UserError


# ---------------------------------------------------------------- a GPU trace, checkable by hand

def _x(name, ts_ms, dur_ms, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts_ms * 1e3,
            "dur": dur_ms * 1e3, "args": args}


def _launch(ts_ms, corr, start_ms, end_ms):
    return [_x("cudaLaunchKernel", ts_ms, 0.01, cat="cuda_runtime", correlation=corr),
            _x(f"kernel{corr}", start_ms, end_ms - start_ms, cat="kernel", correlation=corr)]


def gpu_trace() -> dict:
    """Host: forward 1-3 ms, backward 3-4 ms, step 4.5-5 ms; the device runs behind it."""
    ev = [_x("Optimizer.step#SGD.step", 0, 1, cat="user_annotation"),
          _x("aten::conv2d", 2.0, 0.5, **{"Input Dims": [[4, 3, 8, 8], [6, 3, 3, 3]]}),
          _x("aten::nll_loss_nd", 2.6, 0.1, **{"Input Dims": [[4, 10], [4]]}),
          _x("autograd::engine::evaluate_function: AddmmBackward0", 3.0, 1.0),
          _x("torch::autograd::AccumulateGrad", 3.2, 0.1,
             **{"Input Dims": [[10]], "Input type": ["float"]}),
          _x("torch::autograd::AccumulateGrad", 3.8, 0.1,
             **{"Input Dims": [[10, 6]], "Input type": ["c10::Half"]}),
          _x("Optimizer.step#SGD.step", 4.5, 0.5, cat="user_annotation")]
    ev += _launch(2.1, 1, 5, 7) + _launch(2.5, 2, 7, 9)       # forward's kernels: 5-9 ms
    ev += _launch(3.1, 3, 9, 12) + _launch(3.5, 4, 12, 15)    # backward's: 9-15 ms
    ev += _launch(4.6, 5, 15, 16)                             # the step's: 15-16 ms
    return {"traceEvents": ev}


def test_gpu_trace_phases_are_the_kernels_their_host_events_launched(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_trace()))
    run = read_trace(path)
    assert run.device == "cuda" and run.batch_size == 4 and run.classes == 10
    assert run.input_shape == (3, 8, 8)
    assert run.grads == (((10,), 4), ((10, 6), 2))
    (step,) = run.steps
    assert step.forward_s == pytest.approx(4e-3)
    assert step.backward_s == pytest.approx(6e-3)
    assert step.optimizer_s == pytest.approx(1e-3)
    # the first gradient: everything launched by 3.3 ms ends at 12 ms, half of backward (9-15)
    assert step.ready_fraction == pytest.approx((0.5, 1.0))


def test_profile_from_a_trace_lists_gradients_in_registration_order(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_trace()))
    prof = profile_from_traces([path], bandwidth_Bps=1.25e9, latency_s=1e-5)
    assert [p.numel for p in prof.params] == [60, 10]     # readied last = registered first
    assert [p.bytes for p in prof.params] == [120, 40]
    assert prof.grad_ready_fraction == pytest.approx((1.0, 0.5))
    assert prof.compute.batch_sizes == (4,)
    assert prof.metadata["device"] == "cuda"


@pytest.mark.parametrize("mutate, words", [
    (lambda t: t["traceEvents"].pop(-11), "optimizer step"),
    (lambda t: [e["args"].pop("Input Dims", None) for e in t["traceEvents"]
                if e["name"] == "torch::autograd::AccumulateGrad"], "record_shapes"),
    (lambda t: t.update(traceEvents=[e for e in t["traceEvents"]
                                     if "nll_loss" not in e["name"]]), "loss op"),
])
def test_a_trace_that_cannot_be_read_is_one_line(tmp_path, mutate, words):
    trace = gpu_trace()
    mutate(trace)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(UserError, match=words) as info:
        read_trace(path)
    assert "\n" not in str(info.value)


def test_the_network_must_be_given(tmp_path, capsys):
    from commsim.cli import main
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_trace()))
    assert main(["calibrate", "--from-trace", str(path), "--out", str(tmp_path / "p.json")]) == 2
    assert "--network" in capsys.readouterr().err
    assert main(["calibrate", "--from-trace", str(path), "--bandwidth", "10gbit",
                 "--out", str(tmp_path / "p.json")]) == 0
    from commsim.profile import load
    assert load(tmp_path / "p.json").network.bandwidth_Bps == 1.25e9


# ---------------------------------------------------------------- a real CPU trace

@pytest.mark.torch
def test_cpu_trace_times_match_direct_timing_of_the_same_iterations(tmp_path):
    """Record VGG-11 with torch.profiler while timing each phase with perf_counter: what the
    trace yields is what the profiled iterations took."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from commsim.calibrate.models import sgd, vgg11_cifar
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loss_fn = vgg11_cifar(), torch.nn.CrossEntropyLoss()
    opt = sgd(model.parameters())
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    direct = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(5):
            opt.zero_grad()
            a = time.perf_counter()
            loss = loss_fn(model(x), y)
            b = time.perf_counter()
            loss.backward()
            c = time.perf_counter()
            opt.step()
            direct.append((b - a, c - b, time.perf_counter() - c))
    path = tmp_path / "vgg.json"
    prof.export_chrome_trace(str(path))
    run = read_trace(path)
    assert run.device == "cpu" and run.batch_size == 4 and run.input_shape == (3, 32, 32)
    assert len(run.steps) == 4 and len(run.grads) == len(list(model.parameters()))
    assert sorted(math_prod(s) for s, _ in run.grads) == sorted(
        p.numel() for p in model.parameters())
    for i, field in enumerate(("forward_s", "backward_s", "optimizer_s")):
        want = statistics.median(d[i] for d in direct[1:])
        assert run.median(field) == pytest.approx(want, rel=0.15), field
    ready = run.ready_fraction()
    assert ready[0] < 0.2 and ready[-1] > 0.8      # the classifier first, the first conv last
    assert list(ready) == sorted(ready)


def math_prod(shape):
    import math
    return math.prod(shape)


def test_a_cpu_trace_takes_the_hosts_sharing_cost_from_the_network_calibration():
    """Co-located ranks slowed the calibrated model by 1.5x (forward) and 2x (backward): the
    traced compute gets the same ratios at its own batch sizes, so the efficiency the simulator
    derives is the calibration's; where the network was measured comes along too."""
    import dataclasses

    from commsim.calibrate.from_trace import host_sharing
    from commsim.profile import ComputeTable
    from commsim.spec import measured_cpu_efficiency
    from profiles import make_profile

    net = make_profile(batch_sizes=(32, 64), forward_s=(0.1, 0.2), backward_s=(0.2, 0.4),
                       optimizer_s=(0.01, 0.02))
    net = dataclasses.replace(
        net, metadata={**net.metadata, "cores": 2, "emulated_rate_Bps": 1.25e8},
        compute=dataclasses.replace(net.compute, contended={
            "ranks": 4, "batch_sizes": [32, 64], "forward_s": [0.15, 0.3],
            "backward_s": [0.4, 0.8], "optimizer_s": [0.01, 0.02]}))
    traced = ComputeTable(threads_per_rank=1, batch_sizes=(16, 48), forward_s=(0.5, 1.5),
                          backward_s=(1.0, 3.0), optimizer_s=(0.1, 0.1))
    shared = host_sharing(net, traced)["contended"]
    assert shared["ranks"] == 4 and shared["batch_sizes"] == [16, 48]
    assert shared["forward_s"] == pytest.approx([0.75, 2.25])
    assert shared["backward_s"] == pytest.approx([2.0, 6.0])
    assert shared["optimizer_s"] == pytest.approx([0.1, 0.1])
    traced_prof = dataclasses.replace(net, compute=dataclasses.replace(traced, contended=shared))
    assert measured_cpu_efficiency(traced_prof, 32) != ()
    assert host_sharing(make_profile(), traced) == {}     # nothing measured: nothing carried
