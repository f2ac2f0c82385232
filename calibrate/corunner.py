"""Co-runners: helper processes that run the model's training loop beside a rank being timed.

Why: a calibration on 2 ranks of a 2-core machine times compute with the cores just full; the
cluster it is asked to predict may put 4 ranks on those 2 cores, and more processes than cores
cost more than processor sharing says (caches and memory bandwidth shared by more working
sets, the scheduler switching between them: 4 VGG-11 ranks on 2 cores ran 2.1-2.5x slower
than one alone in the fidelity benchmark's 4-node calibrations, not 2x).  With co-runners the
calibration measures that instead of assuming it (``phases.oversubscribed``, ``spec.
measured_cpu_efficiency``).

A co-runner, once started (``CoRunner``):
1. builds the model from its factory (``module:function``), with the rank's torch threads;
2. waits for ``batch N`` on stdin, runs one untimed iteration at that batch size (allocator,
   first touch) and answers ``ready N`` on stdout;
3. then runs forward, backward and SGD step at that size in a loop, reading the next command
   between iterations; ``batch M`` switches size (2), end of input ends it: the rank closing
   the pipe or dying takes its co-runners with it.
"""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

from commsim.errors import RunFailed

ENTRY = "from commsim.calibrate.corunner import main; main()"


class CoRunner:
    """One helper process (see the module docstring); ``set_batch`` blocks until it runs."""

    def __init__(self, model: str, input_shape: tuple[int, ...], threads: int,
                 timeout_s: float = 300.0):
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, model, json.dumps(list(input_shape)), str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lines: queue.Queue = queue.Queue()
        # A thread reads its answers so that waiting for one can time out.
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def set_batch(self, batch_size: int) -> None:
        """Switch the loop to ``batch_size`` and wait until it has run one iteration of it."""
        try:
            self.proc.stdin.write(f"batch {batch_size}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise RunFailed(self._died()) from None
        want = f"ready {batch_size}"
        while True:
            try:
                line = self._lines.get(timeout=self.timeout_s)
            except queue.Empty:
                raise RunFailed(f"co-runner process {self.proc.pid} did not run batch "
                                f"{batch_size} within {self.timeout_s:.0f} s") from None
            if line is None:
                raise RunFailed(self._died())
            if line == want:
                return

    def _died(self) -> str:
        return (f"co-runner process {self.proc.pid} exited with code {self.proc.wait()} "
                f"(its error is in this rank's log)")

    def close(self) -> None:
        """End the loop (end of input) and reap the process; kill it if it does not stop."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def helpers_per_rank(local_index: int, colocated: int, cores: int, threads: int,
                     factor: float, max_per_rank: int) -> int:
    """How many co-runners this rank starts so that its host runs ``factor`` x ``cores`` busy
    threads (ranks and co-runners of ``threads`` each), spread over the co-located ranks; 0
    when the ranks alone already reach that, or when it would take more than ``max_per_rank``
    each (a big host: predicting oversubscription there is not what calibration is for)."""
    want = int(-(-factor * cores // threads))            # processes, rounded up
    total = want - colocated
    if total <= 0 or total > max_per_rank * colocated:
        return 0
    return total // colocated + (1 if local_index < total % colocated else 0)


def main() -> None:
    """The co-runner process (argv: model factory, input shape as JSON, torch threads)."""
    import torch

    from commsim.calibrate.compute import ComputeBench
    from commsim.calibrate.models import build_model

    model, shape, threads = sys.argv[1], tuple(json.loads(sys.argv[2])), int(sys.argv[3])
    torch.set_num_threads(threads)
    bench = ComputeBench(lambda: build_model(model), shape)
    commands: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            commands.put(line.split())
        commands.put(None)

    threading.Thread(target=read, daemon=True).start()
    batch = None
    while True:
        try:
            # Idle (blocking) until the first size; between iterations afterwards.
            cmd = commands.get(block=batch is None)
        except queue.Empty:
            cmd = []
        if cmd is None:
            return
        if len(cmd) == 2 and cmd[0] == "batch":
            batch = bench.batch(int(cmd[1]))
            bench.iteration(*batch)
            print(f"ready {cmd[1]}", flush=True)
        elif batch is not None:
            bench.iteration(*batch)
