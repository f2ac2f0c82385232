"""How ``predict``, ``sweep`` and ``tune`` scale with ranks: every option and pair of options.

Usage:  python bench/scale.py [--profile FILE] [--ranks 1024,65536] [--no-pairs] [--no-fresh]
                              [--no-commands] [--timeout S] [--combos] [--against-des S]

``--combos`` looks for the slow corners the default run leaves out: node counts that are not
a power of two (1,000 ranks beside 1,024) and triples of options (a straggler or a slow link,
which make hosts uneven, with ranks-per-host 2 or shared-cpu-cores 2, which share a NIC or
cores, and any third option), in-process only (no fresh processes, no sweep or tune).

Steps:
1. load the profile (``--profile``, else the bundled one, else VGG-11's real parameter shapes from
   ``commsim.calibrate.models`` with nominal compute times: the shapes, not the times, set the cost
   of a prediction);
2. for every ``predict`` option, and every pair of options, on every strategy it applies to,
   at each rank count with 32 samples per rank: one
   prediction in a child forked from this process (commsim imported, profile loaded: the
   prediction alone), its wall time (``time.perf_counter``), CPU time (``time.process_time``)
   and the child's peak RSS (``os.wait4``), with ``--engine auto`` as ``commsim predict``
   runs it (the fast engine within seconds: asked for by name it would replay every rank
   for as long as memory holds); options the fast engine declines are named with its reason
   and the messages the DES would move (``--engine auto`` runs the DES up to
   ``AUTO_DES_MESSAGES`` and declines beyond), not run;
3. for every option alone, three fresh ``python -m commsim predict ...`` processes
   (commsim's modules compiled to bytecode first, as ``pip install`` leaves them): the
   median one's wall and CPU time including start-up, and its peak RSS;
4. ``commsim sweep --nodes pow2:65536 --batch-per-rank 32`` for every strategy and algorithm (one
   command per algorithm, as ``--algorithm`` applies to every strategy of a sweep) and
   ``commsim tune --nodes 65536 --batch-per-rank 32``, fresh processes;
5. the targets beside every row (``ok`` / ``MISSED``): predict at 1,024 ranks < 0.5 s and at
   65,536 < 2 s (a fresh process, start-up included; the in-process time is held to the same),
   peak RSS < 1 GiB; each sweep command < 10 s; tune < 30 s.  A summary names what missed;
6. with ``--against-des S``, every row whose prediction took ``REPLAYED_S`` or more (an event
   replay, where the fast engine's exactness rests on mirroring the DES's event order) again
   with both engines in a forked child: the largest relative difference of any rank's figures
   (finish, compute, communication, bytes sent and received; each against max(1, the DES's)),
   held to ``DES_TOLERANCE`` as the tests hold smaller runs, and the DES's time (at most S).
The targets are wall times; CPU time (user + system) is printed and judged beside them, as on
a machine shared with other work the wall time also counts the waits for a core.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

from commsim import api
from commsim.costs import cost_inputs
from commsim.errors import UserError
from commsim.profile import (CollectiveFit, ComputeTable, NetworkFit, Profile, ProfileError, load,
                             load_default)
from commsim.sim import fast_queues
from commsim.sim.fast import MEMORY, SECONDS, des_messages, unsupported
from commsim.simulate import AUTO_DES_MESSAGES

GiB = 1024 ** 3
BATCH = 32                              # samples per rank: weak scaling to any rank count
PREDICT_TARGET_S = {1024: 0.5, 65536: 2.0}
MEMORY_TARGET = 1 * GiB
SWEEP_TARGET_S = 10.0
TUNE_TARGET_S = 30.0
STRATEGIES = ("ddp", "ring", "ps", "dp")
FRESH_RUNS = 3                          # fresh predict processes per option: the median shown
REPLAYED_S = 0.04                       # a prediction at least this long replays events
DES_TOLERANCE = 1e-9                    # fast == DES, relative, as tests/test_fast_*.py hold it

# Every option of ``predict`` that changes what is simulated, as ``commsim.api.scenario`` (and,
# with dashes, the CLI) names it, with the strategies it applies to.
OPTIONS = {
    "sync-every 4": ({"sync_every": 4}, ("ddp", "ring", "ps")),
    "group-size 4": ({"group_size": 4}, ("ddp", "ring")),
    "compress fp16": ({"compress": "fp16"}, ("ddp",)),
    "recursive_doubling": ({"algorithm": "recursive_doubling"}, ("ddp", "ring")),
    "rabenseifner": ({"algorithm": "rabenseifner"}, ("ddp", "ring")),
    "tree": ({"algorithm": "tree"}, ("ddp", "ring")),
    "hierarchical": ({"algorithm": "hierarchical"}, ("ddp", "ring")),
    "binomial": ({"algorithm": "binomial"}, ("ps",)),
    "straggler 1:1.5": ({"straggler": ["1:1.5"]}, STRATEGIES),
    "slow-link 3:10mbit": ({"slow_link": ["3:10mbit"]}, STRATEGIES),
    "ranks-per-host 2": ({"ranks_per_host": 2}, ("ddp", "ring", "ps")),
    "bucket-mb 4": ({"bucket_mb": 4}, ("ddp",)),
    "no-overlap": ({"no_overlap": True}, ("ddp",)),
    "no-buffer-broadcast": ({"no_buffer_broadcast": True}, ("ddp",)),
    "cores-per-host 1": ({"cores_per_host": 1}, ("ddp", "ring", "ps")),
    "shared-cpu-cores 2": ({"shared_cpu_cores": 2}, STRATEGIES),
    "threads-per-rank 2": ({"threads_per_rank": 2}, STRATEGIES),
    "compute-scale 0.5": ({"compute_scale": 0.5}, STRATEGIES),
    "bandwidth 10gbit": ({"bandwidth": "10gbit"}, STRATEGIES),
    "latency 50us": ({"latency": "50us"}, STRATEGIES),
    "latency 0": ({"latency": "0"}, STRATEGIES),       # (deliveries tie with the next start)
}
# Pairs of options the strategies refuse together (none left: hierarchical within groups is
# modelled).
EXCLUSIVE: set = set()


def bench_profile(path: str | None) -> Profile:
    if path:
        return load(path)
    try:
        return load_default()
    except ProfileError:
        return vgg11_nominal()


def vgg11_nominal() -> Profile:
    """VGG-11's parameters (torch builds them) with nominal CPU times and a 1 Gbit/s link."""
    from commsim.calibrate.models import param_specs, vgg11_cifar
    params = param_specs(vgg11_cifar())
    n = len(params)
    link = dict(latency_s=1e-4, bandwidth_Bps=125e6)
    colls = {name: CollectiveFit(**link, reduction_s_per_B=2e-10 if name == "all_reduce" else 0.0,
                                 overhead_s=2e-4)
             for name in ("all_reduce", "gather", "scatter")}
    return Profile(
        schema_version=1, metadata={"source": "bench/scale.py nominal VGG-11"},
        model_name="vgg11", input_shape=(3, 32, 32), params=params,
        compute=ComputeTable(threads_per_rank=1, batch_sizes=(1, 256), forward_s=(0.01, 1.2),
                             backward_s=(0.02, 2.4), optimizer_s=(0.05, 0.05)),
        grad_ready_fraction=tuple((n - i) / n for i in range(n)), grad_ready_batch_size=64,
        network=NetworkFit(**link), collectives=colls)


# ``--combos``: the options that make hosts uneven, with those that share a NIC or cores, and
# any third.
UNEVEN = ("straggler 1:1.5", "slow-link 3:10mbit")
SHARING = ("ranks-per-host 2", "shared-cpu-cores 2")


def combined(names) -> list:
    """(label, strategy, options) of options ``names`` together, on every strategy that takes
    them all; none where two set the same option or the strategies refuse the mix."""
    chosen = [OPTIONS[name] for name in names]
    keys = [key for options, _ in chosen for key in options]
    if len(set(keys)) < len(keys) or any(
            pair in EXCLUSIVE or pair[::-1] in EXCLUSIVE
            for pair in itertools.combinations(names, 2)):
        return []
    options = {k: v for o, _ in chosen for k, v in o.items()}
    return [(" + ".join(names), s, options) for s in STRATEGIES
            if all(s in strategies for _, strategies in chosen)]


def cases(pairs: bool, triples: bool = False):
    """(label, strategy, options): the defaults, every option on every strategy it applies to,
    (``pairs``) every pair of options on every strategy that takes both, and (``triples``)
    each uneven option (``UNEVEN``) with each sharing one (``SHARING``) and any third option."""
    out = [("defaults", s, {}) for s in STRATEGIES]
    for name, (options, strategies) in OPTIONS.items():
        out += [(name, s, options) for s in strategies]
    if pairs:
        for names in itertools.combinations(OPTIONS, 2):
            out += combined(names)
    if triples:
        for uneven in UNEVEN:
            for i, shared in enumerate(SHARING):
                for third in OPTIONS:
                    if third not in (*SHARING[:i + 1], *UNEVEN[:UNEVEN.index(uneven) + 1]):
                        out += combined((uneven, shared, third))
    return out


def wanted(label: str, only) -> bool:
    """Whether a row of options ``label`` (names joined by " + ") is run under ``--only``: every
    row without it, else those holding any of its options."""
    return not only or bool(set(only) & set(label.split(" + ")))


def nodes_for(ranks: int, options: dict) -> int:
    return ranks // options.get("ranks_per_host", 1)


def cli_flags(options: dict) -> list[str]:
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, list):
            for item in value:
                flags += [flag, str(item)]
        else:
            flags += [flag, str(value)]
    return flags


def declined(prof: Profile, strategy: str, ranks: int, options: dict,
             engine: str = "auto") -> str | None:
    """Why the fast engine leaves this case to the DES, as far as the spec tells (within
    auto's seconds, or with ``engine`` "fast" as long as memory holds), and how many messages
    the DES would move (``--engine auto`` runs it up to ``AUTO_DES_MESSAGES``, and beyond
    says so instead)."""
    sc = api.scenario(batch_per_rank=BATCH, **options)
    spec = api.run_spec(prof, strategy, nodes_for(ranks, options), sc)
    costs = cost_inputs(spec, prof)
    reason = unsupported(spec, costs, reach=MEMORY if engine == "fast" else SECONDS)
    if reason is None:
        return None
    messages = des_messages(spec, costs)
    auto = "auto runs it" if messages <= AUTO_DES_MESSAGES else "auto declines: BeyondReach"
    return f"{reason}; the DES would move {messages:.2g} messages ({auto})"


def in_child(prof: Profile, strategy: str, ranks: int, options: dict, timeout: int,
             engine: str = "auto") -> dict:
    """One prediction (``--engine auto`` as ``commsim predict`` makes it, or ``engine``) in a
    forked child: wall time, engine, peak RSS."""
    def predict() -> dict:
        sc = api.scenario(batch_per_rank=BATCH, **options)
        t0, c0 = time.perf_counter(), time.process_time()
        r = api.predict(prof, strategy, nodes_for(ranks, options), sc, engine=engine)
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "engine": r.engine, "iteration_s": r.iteration_s}
    return forked(predict, timeout)


def against_des(prof: Profile, strategy: str, ranks: int, options: dict, timeout: int) -> dict:
    """Both engines on one case in a forked child: the largest relative difference of any
    rank's figures (each against max(1, the DES's)) and the DES's wall time."""
    def compare() -> dict:
        sc = api.scenario(batch_per_rank=BATCH, **options)
        nodes = nodes_for(ranks, options)
        fast = api.predict(prof, strategy, nodes, sc, engine="fast").per_rank
        t0 = time.perf_counter()
        des = api.predict(prof, strategy, nodes, sc, engine="des").per_rank
        des_s = time.perf_counter() - t0
        worst = max((abs(f[key] - d[key]) / max(1.0, abs(d[key]))
                     for f, d in zip(fast, des, strict=True) for key in d if key != "rank"),
                    default=0.0)
        return {"diff": worst, "des_s": des_s}
    return forked(compare, timeout)


def forked(work, timeout: int) -> dict:
    """``work()`` (a dict) in a child forked from this process, stopped after ``timeout``
    seconds; with the child's peak RSS.  A UserError is the fast engine declining."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                       # the child
        os.close(read)
        signal.alarm(timeout)
        try:
            out = work()
        except UserError as e:
            out = {"declined": str(e)}
        except Exception as e:         # (reported: the child must not go on with the bench)
            out = {"failed": f"{type(e).__name__}: {e}"}
        with os.fdopen(write, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status, usage = os.wait4(pid, 0)
    if text:
        out = json.loads(text)
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        out = {"failed": f"past its timeout of {timeout} s"}
    else:
        out = {"failed": f"the child ended with status {status}"}
    out["rss_B"] = usage.ru_maxrss * 1024
    return out


def compile_bytecode() -> None:
    """Compile commsim's modules to bytecode, as ``pip install`` does: an editable install (or a
    shell with PYTHONDONTWRITEBYTECODE set) would otherwise compile them from source at every
    start, which a user's installed commsim does not do."""
    import compileall
    import importlib.util

    for name in ("commsim", "commsim.calibrate", "commsim.analysis"):
        for folder in importlib.util.find_spec(name).submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def fresh(argv: list[str], timeout: int) -> dict:
    """A fresh ``python -m commsim`` process: wall time (start-up included) and its peak RSS
    (reaped here with ``os.wait4``, which reports that child's own resource use)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "commsim", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)    # reaped: Popen must not wait
    proc.stderr.close()
    out = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
           "rss_B": usage.ru_maxrss * 1024}
    if proc.returncode:
        last = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        out["failed"] = f"timeout {timeout} s" if proc.returncode < 0 else last
    return out


def median_of(runs: int, once) -> dict:
    """The run of median wall time among ``runs`` runs of ``once()`` (a start-up moves with
    what else the machine does; one run would judge the target on its noise), or the first
    that failed."""
    done = []
    for _ in range(runs):
        run = once()
        if "failed" in run:
            return run
        done.append(run)
    return sorted(done, key=lambda run: run["wall_s"])[len(done) // 2]


def target_s(ranks: int) -> float:
    """The predict target at ``ranks``: that of the least target rank count at or above it
    (1,000 ranks are held to 1,024's), the largest one's beyond."""
    above = [r for r in PREDICT_TARGET_S if r >= ranks]
    return PREDICT_TARGET_S[min(above) if above else max(PREDICT_TARGET_S)]


def verdict(run: dict, limit_s: float) -> str:
    """The target and whether the run's wall and CPU time and peak RSS met it."""
    memory = run["rss_B"] < MEMORY_TARGET
    judged = [f"{kind} {'ok' if run[f'{kind}_s'] < limit_s and memory else 'MISSED'}"
              for kind in ("wall", "cpu")]
    return f"< {limit_s:g} s & 1 GiB: " + ", ".join(judged)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile")
    ap.add_argument("--ranks", default="1024,65536")
    ap.add_argument("--no-pairs", action="store_true", help="options one at a time only")
    ap.add_argument("--no-fresh", action="store_true", help="no fresh predict processes")
    ap.add_argument("--no-commands", action="store_true", help="no sweep or tune")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per prediction or command")
    ap.add_argument("--combos", action="store_true",
                    help="1,000 and 1,024 ranks (unless --ranks), triples, in-process only")
    ap.add_argument("--only", metavar="OPTION", action="append",
                    help="only the rows with this option (repeatable: with any of them)")
    ap.add_argument("--engine", choices=("auto", "fast"), default="auto",
                    help="the engine timed: auto, as commsim predict runs it (default), or "
                         "fast asked for by name (every rank replayed while memory holds)")
    ap.add_argument("--against-des", type=int, metavar="S",
                    help=f"rows of {REPLAYED_S} s or more also against the DES (S s at most)")
    args = ap.parse_args(argv)
    prof = bench_profile(args.profile)
    if args.combos:
        args.no_fresh = args.no_commands = True
        if args.ranks == ap.get_default("ranks"):
            args.ranks = "1000,1024"
    rank_counts = [int(x) for x in args.ranks.split(",")]
    print(f"profile: {prof.model_name}, {len(prof.params)} tensors, {prof.model_bytes / 1e6:.1f} MB "
          f"({prof.metadata.get('source', '?')}); {BATCH} samples per rank; {os.cpu_count()} cores; "
          f"replays' event loop: {'compiled' if fast_queues._replay else 'Python (no compiler)'}")
    print(f"--engine {args.engine}; in-process: forked from this process (commsim imported, "
          f"profile loaded); fresh: python -m commsim predict ... --engine {args.engine}, "
          f"start-up included (bytecode compiled, as pip install leaves it), the median of "
          f"{FRESH_RUNS}")
    if not (args.no_fresh and args.no_commands):
        compile_bytecode()
    print(f"{'option':40} {'strategy':8} {'ranks':>6} {'engine':6} {'wall s':>7} {'cpu s':>6} "
          f"{'MiB':>5} | {'fresh':>6} {'cpu s':>6} {'MiB':>5}  target (fresh process where run)")
    missed, declines = [], []
    checked, off = [], []                  # (--against-des) each row's difference; those over
    for label, strategy, options in cases(not args.no_pairs, args.combos):
        if not wanted(label, args.only):
            continue
        single = "+" not in label
        for ranks in rank_counts:
            if ranks % options.get("ranks_per_host", 1):
                continue
            limit = target_s(ranks)
            reason = declined(prof, strategy, ranks, options, args.engine)
            if reason is None:
                got = in_child(prof, strategy, ranks, options, args.timeout, args.engine)
                if "failed" in got:           # (past the timeout: over, not declined)
                    missed.append(f"{label} ({strategy}, {ranks}): {got['failed']}")
                    print(f"{label:40} {strategy:8} {ranks:>6} {'fast':6} over: "
                          f"{got['failed']}", flush=True)
                    continue
                reason = got.get("declined")
            if reason:
                declines.append(f"{label} ({strategy}, {ranks}): {reason}")
                print(f"{label:40} {strategy:8} {ranks:>6} {'des':6} fast engine declines: "
                      f"{reason}", flush=True)
                continue
            run = None
            if single and not args.no_fresh:
                run = median_of(FRESH_RUNS, lambda: fresh(
                    ["predict", "--strategy", strategy, "--nodes", str(nodes_for(ranks, options)),
                     "--batch-per-rank", str(BATCH), "--engine", args.engine,
                     *cli_flags(options)],
                    args.timeout))
                if "failed" in run:
                    missed.append(f"{label} ({strategy}, {ranks}) fresh: {run['failed']}")
                    run = None
            shown = verdict(run or got, limit)
            if "MISSED" in shown:
                missed.append(f"{label} ({strategy}, {ranks}): {shown}")
            if args.against_des and got["wall_s"] >= REPLAYED_S:
                des = against_des(prof, strategy, ranks, options, args.against_des)
                if "diff" in des:
                    checked.append(des["diff"])
                    shown += f"; DES {des['des_s']:.0f} s, off by {des['diff']:.1e}"
                    if not des["diff"] < DES_TOLERANCE:
                        off.append(f"{label} ({strategy}, {ranks}): {des['diff']:.2e}")
                else:
                    shown += f"; DES {des.get('failed') or des.get('declined')}"
            print(f"{label:40} {strategy:8} {ranks:>6} {got['engine']:6} {got['wall_s']:7.3f} "
                  f"{got['cpu_s']:6.3f} {got['rss_B'] / 2**20:5.0f} | "
                  + (f"{run['wall_s']:6.3f} {run['cpu_s']:6.3f} {run['rss_B'] / 2**20:5.0f}"
                     if run else f"{'':6} {'':6} {'':5}")
                  + f"  {shown}", flush=True)

    if not args.no_commands:
        print()
        sweeps = [["--strategies", "single,ps,ring,ddp,dp"],
                  *(["--strategies", "ring,ddp", "--algorithm", a]
                    for a in ("recursive_doubling", "rabenseifner", "tree", "hierarchical")),
                  ["--strategies", "ps", "--algorithm", "binomial"]]
        total = 0.0
        for extra in sweeps:
            command = ["sweep", "--nodes", "pow2:65536", "--batch-per-rank", str(BATCH), *extra]
            run = fresh(command, args.timeout)
            line = f"commsim {' '.join(command)}"
            if "failed" in run:
                missed.append(f"{line}: {run['failed']}")
                print(f"{line}: FAILED {run['failed']}")
                continue
            total += run["wall_s"]
            shown = verdict(run, SWEEP_TARGET_S)
            if "MISSED" in shown:
                missed.append(f"{line}: {shown}")
            print(f"{line}: {run['wall_s']:.2f} s (cpu {run['cpu_s']:.2f} s), peak "
                  f"{run['rss_B'] / 2**20:.0f} MiB  {shown}", flush=True)
        print(f"every strategy and algorithm, {len(sweeps)} sweep commands: {total:.2f} s")
        command = ["tune", "--nodes", "65536", "--batch-per-rank", str(BATCH)]
        run = fresh(command, args.timeout)
        line = f"commsim {' '.join(command)}"
        if "failed" in run:
            missed.append(f"{line}: {run['failed']}")
            print(f"{line}: FAILED {run['failed']}")
        else:
            shown = verdict(run, TUNE_TARGET_S)
            if "MISSED" in shown:
                missed.append(f"{line}: {shown}")
            print(f"{line}: {run['wall_s']:.2f} s (cpu {run['cpu_s']:.2f} s), peak "
                  f"{run['rss_B'] / 2**20:.0f} MiB  {shown}")

    print()
    print(f"fast engine declines (not timed; the DES, or --engine auto's refusal): "
          f"{len(declines)}")
    for line in declines:
        print(f"  {line}")
    if args.against_des:
        print(f"against the DES: {len(checked)} rows, the largest difference "
              f"{max(checked, default=0.0):.1e}; over {DES_TOLERANCE:g}: {len(off)}"
              + "".join(f"\n  {m}" for m in off))
    print(f"MISSED: {len(missed)}" + "".join(f"\n  {m}" for m in missed))
    return 1 if missed or off else 0


if __name__ == "__main__":
    sys.exit(main())
