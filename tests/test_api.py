"""The notebook API (``commsim.predict``, ``commsim.sweep``, ``commsim.load_profile``): the same
answers as the CLI, options by the CLI's names, and its docstring examples hold (doctest)."""
from __future__ import annotations

import doctest
import json

import pytest

import commsim
from commsim.cli import main
from commsim.errors import UserError


def test_docstring_examples_hold():
    result = doctest.testmod(commsim, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 6 and result.failed == 0


def test_predict_equals_the_cli(capsys):
    assert main(["predict", "--strategy", "ddp", "--nodes", "8", "--bandwidth", "10gbit",
                 "--sync-every", "2", "--straggler", "3:1.5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = commsim.predict("ddp", nodes=8, bandwidth="10gbit", sync_every=2,
                          straggler={3: 1.5}).to_dict()
    assert api == cli


def test_pairs_by_mapping_list_or_one_string():
    by_map = commsim.predict("ring", 8, straggler={3: 1.5}, slow_link={1: "100mbit"})
    for straggler, slow in ((["3:1.5"], ["1:100mbit"]), ("3:1.5", "1:100mbit")):
        assert commsim.predict("ring", 8, straggler=straggler,
                               slow_link=slow).iteration_s == by_map.iteration_s
    with pytest.raises(UserError, match="INDEX:VALUE"):
        commsim.predict("ring", 8, straggler="3")


def test_numbers_are_si_and_text_has_units():
    by_text = commsim.predict("ring", 4, bandwidth="10gbit", latency="50us")
    by_number = commsim.predict("ring", 4, bandwidth=1.25e9, latency=5e-5)
    assert by_text.iteration_s == by_number.iteration_s


def test_sweep_rows_are_plain_dicts():
    rows = commsim.sweep(nodes=[1, 2, 4])
    assert {r["strategy"] for r in rows} == {"single", "ps", "ring", "ddp"}
    assert all(isinstance(r, dict) and isinstance(r["iteration_s"], float) for r in rows)
    json.dumps(rows)  # plain data, as a DataFrame or a file takes it


def test_profile_by_path_or_object(tmp_path):
    from commsim.profile import save
    path = tmp_path / "p.json"
    save(commsim.load_profile(), path)
    assert (commsim.predict("ps", 3, profile=path).iteration_s
            == commsim.predict("ps", 3, profile=commsim.load_profile(path)).iteration_s)


def test_bad_options_are_user_errors():
    with pytest.raises(UserError, match="--bandwidth"):
        commsim.predict("ring", 4, bandwidth="1e-300bit")
    with pytest.raises(TypeError):
        commsim.predict("ring", 4, bandwith="1gbit")


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"commsim {commsim.__version__}"
