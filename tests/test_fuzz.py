"""Fuzz the command line and the profile loader: nothing a user types or a file holds may
produce a traceback; bad input is one line on stderr and exit code 2."""
import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from commsim.cli import main
from commsim.profile import ProfileError, loads, save
from profiles import make_profile

TOY = make_profile()

JUNK = ["", "-1", "0", "x", "1e400", "nan", "inf", "1gbit", "5:2", "3:x", ":", "--", "é", "1,2",
        "pow2:4", "0.5", "99999999999999999999", "-5ms"]
VALUES = {
    "--strategy": ["ring", "ps", "ddp", "single", "RING", "tree"],
    "--nodes": ["1", "2", "3", "4", "-2", "two", "1.5"],
    "--global-batch": ["256", "1", "64", "-3"],
    "--batch-per-rank": ["32", "7"],
    "--bucket-mb": ["25", "-1", "0.001"],
    "--bandwidth": ["1gbit", "100mbit", "125MBps", "-1gbit", "1", "fast", "0bit", "1e-30bit"],
    "--latency": ["50us", "1ms", "-1ms", "soon", "1e9s", "0s"],
    "--ranks-per-host": ["1", "2"],
    "--cores-per-host": ["1", "2", "-1"],
    "--straggler": ["1:2", "0:1.5", "9:2", "1:-1", "1:0", "1:nan", "a:2", "1:1e400"],
    "--slow-link": ["0:10mbit", "1:1gbit", "7:1gbit", "0:x", "-1:1gbit"],
    "--engine": ["des", "analytic", "warp"],
}
FLAGS = ["--json", "--per-rank", "--no-overlap", "--bogus", "--help"]
COMMANDS = ["predict", "sweep"]
# A valid base that each single (option, value) is laid over, so the value itself is reached.
BASE = ["--strategy", "ring", "--nodes", "2"]


@st.composite
def argv(draw):
    cmd = draw(st.sampled_from(COMMANDS + ["predict", "nope"]))
    args = [cmd]
    for opt in draw(st.lists(st.sampled_from(sorted(VALUES)), max_size=6)):
        args += [opt, draw(st.sampled_from(VALUES[opt] + JUNK))]
    args += draw(st.lists(st.sampled_from(FLAGS), max_size=2))
    return args


def check_cli(args, profile_path, capsys):
    if args and args[0] in COMMANDS:
        args = args + ["--profile", profile_path]
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code in (0, 2), (args, code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    return code


@pytest.fixture(scope="module")
def toy_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "toy.json"
    save(TOY, path)
    return str(path)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(args=argv())
def test_cli_never_tracebacks(args, toy_path, capsys):
    check_cli(args, toy_path, capsys)


@pytest.mark.parametrize("opt, value", [(o, v) for o in sorted(VALUES) for v in VALUES[o] + JUNK])
def test_every_option_value_alone(opt, value, toy_path, capsys):
    """Each vocabulary value laid over a valid command, so every parser branch is reached."""
    base = [a for i, a in enumerate(BASE) if opt not in BASE[i - (i % 2):i - (i % 2) + 1]]
    check_cli(["predict"] + base + [opt, value], toy_path, capsys)


def _mutations():
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(allow_nan=True),
                     st.text(max_size=5), st.just([]), st.just({}))
    return st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["set", "del", "wrap"]),
                              leaf), min_size=1, max_size=4)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=500, deadline=None)
@given(_mutations())
def test_corrupted_profiles_are_refused_or_usable(mutations):
    doc = copy.deepcopy(TOY.to_json_dict())
    for pick, op, leaf in mutations:
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = paths[pick % len(paths)]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if op == "del" and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        else:
            parent[path[-1]] = leaf
    try:
        text = json.dumps(doc)
    except (TypeError, ValueError):
        return
    try:
        profile = loads(text)
    except ProfileError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    # Whatever loads must be usable: a prediction either works or is refused cleanly.
    from commsim.api import Scenario, predict
    from commsim.errors import UserError
    try:
        predict(profile, "ring", 2, Scenario(global_batch=64))
    except UserError:
        pass


# --------------------------------------------------------------------------- the other commands
# Commands that run, build a cluster or write files are fuzzed with one option the parser itself
# rejects (range, type, unknown option) somewhere in the list: the parser checks every option
# before the command runs, so no run starts, no cluster is touched and nothing is written, while
# every other option value still goes through its parser.
POISON = {
    "calibrate": [["--nodes", "1"], ["--timeout", "0"], ["--nodes", "x"],
                  ["--collective-timeout", "-1"], ["--bogus"]],
    "live": [["--nodes", "0"], ["--iterations", "0"], ["--threads", "-2"], ["--seed", "x"],
             ["--timeout", "nan"], ["--bogus"]],
    "cluster up": [["--nodes", "0"], ["--nodes", "251"], ["--nodes", "two"], ["--bogus"]],
    "cluster down": [["--bogus"], ["--nodes", "2"]],  # only parser errors: down is destructive
    "cluster status": [["--bogus"], ["--nodes", "2"]],
    "validate": [["--calibrate-nodes", "0"], ["--iterations", "-1"], ["--timeout", "x"],
                 ["--tolerance", "-1"], ["--bogus"]],
    "report": [["--global-batch", "0"], ["--timeline-nodes", "-1"], ["--bogus"]],
    "trace": [["--nodes", "0"], ["--global-batch", "x"], ["--bogus"]],
}
OTHER_VALUES = {
    "--nodes": ["2", "4", "1,2,4", "0", "-1", "x", "250"], "--emulate": ["1gbit", "fast", "0bit"],
    "--quick": [], "--force": [], "--resume": [], "--json": [],
    "--out": ["/nonexistent/dir/p.json", "out.json", ""], "--model": ["nope", "os:nothing", ":"],
    "--batch-sizes": ["2,4", "0", "x,y", ""], "--input-shape": ["3,32,32", "0", "a"],
    "--strategy": ["ring", "tree", ""], "--strategies": ["ring,ps", "x"],
    "--iterations": ["3", "0", "-1"], "--timeout": ["10", "0", "x"],
    "--collective-timeout": ["5", "0.5", "inf"], "--cluster-prefix": ["csim", "Bad-", "a" * 20],
    "--bandwidth": ["1gbit", "x"], "--prefix": ["csim", "BAD", ""],
    "--profile": ["/nonexistent.json"], "--data": ["/nonexistent"],
    "--tolerance": ["0.2", "-1"], "--global-batch": ["64", "0"], "--threads": ["1", "0"],
    "--sync-every": ["2", "0", "x"], "--group-size": ["2", "0"], "--compress": ["fp16", "bf16"],
    "--lr-scaling": ["linear", "sqrt"], "--warmup-iters": ["10", "-1"],
    "--synthetic": ["learnable", "cifar"], "--synthetic-size": ["1000", "0"],
}


@st.composite
def other_argv(draw):
    cmd = draw(st.sampled_from(sorted(POISON)))
    poison = draw(st.sampled_from(POISON[cmd]))
    # Never the poisoned option again: a later occurrence would override the bad value.
    others = sorted(set(OTHER_VALUES) - {poison[0]})
    args = []
    for opt in draw(st.lists(st.sampled_from(others), max_size=6)):
        values = OTHER_VALUES[opt]
        args += [opt] + ([draw(st.sampled_from(values + JUNK))] if values else [])
    at = draw(st.integers(0, len(args)))
    return cmd.split() + args[:at] + poison + args[at:]


def check_rejected(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2, (args, code, err)
    assert len(err.strip().splitlines()) == 1, err


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(args=other_argv())
def test_other_commands_reject_bad_arguments_in_one_line(args, capsys):
    check_rejected(args, capsys)
