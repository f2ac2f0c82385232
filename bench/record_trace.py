"""Record PyTorch profiler traces of VGG-11 training, the input ``calibrate --from-trace`` takes.

How a user records their own (the part to copy): ``torch.profiler.profile`` with
``record_shapes=True`` around a few training iterations that end in ``optimizer.step()``, then
``export_chrome_trace``.  This script does that for VGG-11 on random CIFAR-shaped data, one trace
per batch size, on the CPU (``--threads`` threads) or a GPU (``--device cuda``), and prints
each phase as timed directly (perf_counter, with a device synchronisation on a GPU) next to what
``calibrate.from_trace`` reads back, for the iterations the profiler recorded and for as many
unprofiled ones (the profiler's own overhead).

Usage:  python bench/record_trace.py [--device cpu|cuda] [--batch-sizes 16,64] [--iterations 6]
                                     [--out DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def record(batch: int, out: Path, *, iterations: int = 6, threads: int = 1,
           device: str = "cpu") -> tuple[Path, dict]:
    """One VGG-11 trace at ``batch`` into ``out`` (the file's path) and each phase's median as
    timed directly: ``{"plain": (forward, backward, optimizer), "profiled": (...)}`` over
    ``iterations`` unprofiled and as many profiled iterations (the first of each dropped)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from commsim.calibrate.models import sgd, vgg11_cifar

    torch.set_num_threads(threads)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    torch.manual_seed(0)
    model = vgg11_cifar().to(dev)
    opt, loss_fn = sgd(model.parameters()), torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step(times):
        opt.zero_grad()
        sync()
        a = time.perf_counter()
        loss = loss_fn(model(x), y)
        sync()
        b = time.perf_counter()
        loss.backward()
        sync()
        c = time.perf_counter()
        opt.step()
        sync()
        times.append((b - a, c - b, time.perf_counter() - c))

    for _ in range(3):   # warm-up: allocator, cuDNN's algorithm choice
        step([])
    plain, profiled = [], []
    for _ in range(iterations):
        step(plain)
    with profile(activities=acts, record_shapes=True) as prof:
        for _ in range(iterations):
            step(profiled)
    out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out))

    def med(times):
        return tuple(statistics.median(t[i] for t in times[1:]) for i in range(3))
    return out, {"plain": med(plain), "profiled": med(profiled)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-sizes", default="16,64")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)

    from commsim.calibrate.from_trace import read_trace

    for batch in (int(b) for b in args.batch_sizes.split(",")):
        kind = "cuda" if args.device.startswith("cuda") else "cpu"
        path, direct = record(batch, Path(args.out) / f"vgg11_{kind}_b{batch}.json",
                              iterations=args.iterations, threads=args.threads,
                              device=args.device)
        run = read_trace(path)
        print(f"batch {batch} on {args.device} ({run.device} trace, {len(run.steps)} iterations "
              f"read, {path.stat().st_size / 1e6:.1f} MB):")
        for i, phase in enumerate(("forward_s", "backward_s", "optimizer_s")):
            print(f"  {phase[:-2]:9s}  unprofiled {1e3 * direct['plain'][i]:8.2f} ms  profiled "
                  f"{1e3 * direct['profiled'][i]:8.2f} ms  read from the trace "
                  f"{1e3 * run.median(phase):8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
