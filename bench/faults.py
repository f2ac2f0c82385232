"""Faults and bad input: how commsim copes, in figures.

Usage: ``python bench/faults.py [--cli-examples N] [--profile-examples N] [--skip-faults]``

1. Fuzz: draw argument lists and corrupted profiles with the generators of
   ``tests/test_fuzz.py`` (predict/sweep lists, lists for every other command, profile
   mutations) and run each through ``commsim.cli.main`` / the profile loader with the same checks
   as the tests; count the inputs, those refused with exit code 2, and tracebacks (any output
   containing one, any exception escaping, any exit code other than 0/2).
2. Faults: run ``tests/test_faults.py`` under pytest with ``COMMSIM_FAULTS_LOG`` set, so every
   scenario (SIGKILL, link down, wrong master, port in use; on the emulated cluster when root)
   appends its figures, and read them back.
3. Environment faults: run every scenario of ``tests/envfaults.py`` (each command and each
   option that names a path, against a folder that cannot be made, a read-only or full file
   system, a folder of another user, standard output full or closed, hostile inputs).
4. Print one row per scenario and the summary: bad inputs tried, tracebacks seen, faults
   injected, worst time to exit, orphans left, samples lost; environment faults tried,
   tracebacks, partial files left.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


class _Capture:
    """Stands in for pytest's ``capsys`` so the tests' own checks can run here."""

    def __init__(self):
        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self):
        out, err = self.out.getvalue(), self.err.getvalue()
        self.out.seek(0), self.out.truncate(), self.err.seek(0), self.err.truncate()
        return out, err


def fuzz(cli_examples: int, profile_examples: int) -> dict:
    """Run the fuzz generators; counts of inputs, refusals (exit 2) and tracebacks."""
    from hypothesis import HealthCheck, given, settings

    import test_fuzz as F
    from commsim.profile import save

    counts = {"inputs": 0, "refused": 0, "tracebacks": 0}
    failures: list[str] = []
    cap = _Capture()

    def attempt(check, *args) -> None:
        counts["inputs"] += 1
        try:
            with contextlib.redirect_stdout(cap.out), contextlib.redirect_stderr(cap.err):
                code = check(*args)
        except AssertionError as exc:  # the test's own check failed: a traceback or a bad code
            counts["tracebacks"] += 1
            failures.append(f"{args[0]!r}: {' '.join(str(exc).split())[:200]}")
            return
        except BaseException as exc:  # noqa: BLE001 - anything escaping is a traceback
            counts["tracebacks"] += 1
            failures.append(f"{args[0]!r}: {type(exc).__name__}: {exc}")
            return
        finally:
            cap.readouterr()
        counts["refused"] += code == 2

    def rejected(args) -> int:
        F.check_rejected(args, cap)
        return 2

    def profile(mutations) -> int:
        # The test's body, with its loader watched so that refusals can be counted.
        from commsim.profile import ProfileError

        refused, real = [], F.loads

        def watched(text):
            try:
                return real(text)
            except ProfileError:
                refused.append(text)
                raise
        F.loads = watched
        try:
            F.test_corrupted_profiles_are_refused_or_usable.hypothesis.inner_test(mutations)
        finally:
            F.loads = real
        return 2 if refused else 0

    fast = settings(max_examples=cli_examples, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
    with tempfile.TemporaryDirectory() as tmp:
        toy = str(Path(tmp) / "toy.json")
        save(F.TOY, toy)
        given(F.argv())(fast(lambda args: attempt(F.check_cli, args, toy, cap)))()
        given(F.other_argv())(fast(lambda args: attempt(rejected, args)))()
        given(F._mutations())(settings(fast, max_examples=profile_examples)(
            lambda m: attempt(profile, m)))()
    counts["failures"] = failures[:5]
    return counts


def faults() -> tuple[list[dict], str, float]:
    """Run tests/test_faults.py with the figures log on; (rows, pytest summary, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "faults.jsonl"
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(ROOT / "tests" / "test_faults.py")],
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "COMMSIM_FAULTS_LOG": str(log)})
        elapsed = time.monotonic() - start
        rows = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    summary = lines[-1] if lines else f"pytest exited {proc.returncode}"
    if proc.returncode != 0:
        print(proc.stdout[-3000:], file=sys.stderr)
    return rows, summary, elapsed


def environment() -> list[dict]:
    """Run the environment-fault scenarios; one row each (skipped ones say why)."""
    import envfaults

    rows = []
    for scenario in envfaults.scenarios():
        why = envfaults.can_run(scenario)
        if why:
            rows.append({"scenario": scenario.name, "skipped": why})
            continue
        out = envfaults.run(scenario)
        rows.append({"scenario": scenario.name, "skipped": None, "returncode": out.returncode,
                     "seconds": out.seconds, "left": out.left,
                     "traceback": "Traceback" in out.stderr,
                     "problems": out.problems(envfaults.expected_name(scenario)),
                     "message": " ".join(out.stderr.split())})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli-examples", type=int, default=500,
                    help="argument lists per generator (two generators)")
    ap.add_argument("--profile-examples", type=int, default=500)
    ap.add_argument("--skip-faults", action="store_true", help="no distributed-run faults")
    ap.add_argument("--skip-environment", action="store_true", help="no environment faults")
    args = ap.parse_args()

    t0 = time.monotonic()
    counts = fuzz(args.cli_examples, args.profile_examples)
    fuzz_s = time.monotonic() - t0
    rows, summary, faults_s = ([], "skipped", 0.0) if args.skip_faults else faults()
    t1 = time.monotonic()
    env_rows = [] if args.skip_environment else environment()
    env_s = time.monotonic() - t1

    print(f"fuzz: {counts['inputs']} inputs ({counts['refused']} refused with exit code 2) "
          f"in {fuzz_s:.1f} s")
    for failure in counts["failures"]:
        print(f"  traceback: {failure}")
    if rows:
        print(f"\nfault scenarios (tests/test_faults.py, {faults_s:.0f} s: {summary}):")
        width = max(len(r["scenario"]) for r in rows)
        print(f"  {'scenario':{width}s}  exit  time to exit  orphans  samples kept/lost  message")
        for r in rows:
            kept = f"{r['samples_before']}/{r['samples_lost']}" if r["samples_before"] else "-"
            msg = (r["message"] or [""])[0][:90]
            print(f"  {r['scenario']:{width}s}  {r['returncode']:>4d}  {r['exit_s']:>10.1f} s"
                  f"  {r['orphans']:>7d}  {kept:>17s}  {msg}")
    elif not args.skip_faults:
        print(f"\nfault scenarios: none ran ({summary})")
    ran = [r for r in env_rows if not r["skipped"]]
    if env_rows:
        print(f"\nenvironment faults (tests/envfaults.py, {env_s:.0f} s):")
        width = max(len(r["scenario"]) for r in env_rows)
        print(f"  {'scenario':{width}s}  exit  left  message")
        for r in env_rows:
            if r["skipped"]:
                print(f"  {r['scenario']:{width}s}  skipped: {r['skipped']}")
                continue
            flag = "" if not r["problems"] else f"  PROBLEM: {'; '.join(r['problems'])}"
            print(f"  {r['scenario']:{width}s}  {r['returncode']:>4d}  {len(r['left']):>4d}  "
                  f"{r['message'][:100]}{flag}")
    print()
    print(f"bad inputs tried:    {counts['refused']} (of {counts['inputs']} generated; the "
          f"others were valid and ran)")
    print(f"tracebacks seen:     {counts['tracebacks']}")
    print(f"faults injected:     {len(rows)}")
    worst = max((r["exit_s"] for r in rows), default=float("nan"))
    print(f"worst time to exit:  {worst:.1f} s (bound 60 s)")
    print(f"orphans left:        {sum(r['orphans'] for r in rows)}")
    print(f"samples lost:        {sum(r['samples_lost'] for r in rows)}")
    if env_rows:
        print(f"environment faults:  tried {len(ran)} ({len(env_rows) - len(ran)} skipped), "
              f"tracebacks {sum(r['traceback'] for r in ran)}, partial files left "
              f"{sum(len(r['left']) for r in ran)}, handled as expected "
              f"{sum(not r['problems'] for r in ran)}")
    ok = (counts["tracebacks"] == 0 and (args.skip_faults or "failed" not in summary)
          and not any(r["problems"] for r in ran))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
