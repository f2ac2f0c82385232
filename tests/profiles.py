"""Small hand-checkable profiles for tests (built in code, never typed into the product)."""
from __future__ import annotations

from commsim.profile import CollectiveFit, ComputeTable, NetworkFit, ParamSpec, Profile


def make_profile(param_bytes=(4000, 8000), *, latency_s=1e-4, bandwidth_Bps=1e6,
                 gamma_s_per_B=1e-9, overheads=None, forward_s=(0.1, 0.2), backward_s=(0.2, 0.4),
                 optimizer_s=(0.01, 0.01), batch_sizes=(32, 64), ready=None, threads=1):
    overheads = overheads or {}
    params = tuple(ParamSpec(name=f"p{i}", numel=b // 4, bytes=b)
                   for i, b in enumerate(param_bytes))
    n = len(params)
    if ready is None:  # reverse registration order, evenly spread over backward
        ready = tuple((n - i) / n for i in range(n))
    colls = {name: CollectiveFit(latency_s=latency_s, bandwidth_Bps=bandwidth_Bps,
                                 reduction_s_per_B=gamma_s_per_B if name == "all_reduce" else 0.0,
                                 overhead_s=overheads.get(name, 0.0))
             for name in ("all_reduce", "gather", "scatter", "broadcast")}
    return Profile(
        schema_version=1, metadata={"source": "tests"}, model_name="toy", input_shape=(3, 32, 32),
        params=params,
        compute=ComputeTable(threads_per_rank=threads, batch_sizes=tuple(batch_sizes),
                             forward_s=tuple(forward_s), backward_s=tuple(backward_s),
                             optimizer_s=tuple(optimizer_s)),
        grad_ready_fraction=tuple(ready), grad_ready_batch_size=batch_sizes[0],
        network=NetworkFit(latency_s=latency_s, bandwidth_Bps=bandwidth_Bps),
        collectives=colls)
