"""Profile schema: round trip, and every kind of corruption refused with the field named."""
import copy
import json

import pytest

from commsim.profile import ProfileError, load, loads, profile_from_dict, save
from profiles import make_profile


def doc():
    return make_profile().to_json_dict()


def test_round_trip(tmp_path):
    p = make_profile()
    save(p, tmp_path / "p.json")
    assert load(tmp_path / "p.json") == p


def test_save_refuses_to_overwrite(tmp_path):
    save(make_profile(), tmp_path / "p.json")
    with pytest.raises(FileExistsError):
        save(make_profile(), tmp_path / "p.json")
    save(make_profile(), tmp_path / "p.json", force=True)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(schema_version=2), "schema_version"),
    (lambda d: d.update(schema="other"), "schema"),
    (lambda d: d.pop("network"), "network"),
    (lambda d: d["network"].update(bandwidth_Bps=-1), "network.bandwidth_Bps"),
    (lambda d: d["network"].update(latency_s="fast"), "network.latency_s"),
    (lambda d: d["compute"]["forward_s"].pop(), "compute.forward_s"),
    (lambda d: d["compute"].update(batch_sizes=[64, 32]), "compute.batch_sizes"),
    (lambda d: d["model"]["params"][0].update(numel=0), "model.params[0].numel"),
    (lambda d: d["model"].update(params=[]), "model.params"),
    (lambda d: d["grad_ready"].update(fraction=[0.5]), "grad_ready.fraction"),
    (lambda d: d["collectives"]["all_reduce"].update(overhead_s=float("nan")),
     "collectives.all_reduce.overhead_s"),
    (lambda d: d["collectives"].update(all_reduce=[]), "collectives.all_reduce"),
])
def test_corruption_names_the_field(mutate, field):
    d = copy.deepcopy(doc())
    mutate(d)
    with pytest.raises(ProfileError) as exc:
        profile_from_dict(d)
    assert field in str(exc.value)


def test_not_json_and_not_an_object():
    with pytest.raises(ProfileError, match="not valid JSON"):
        loads("{oops")
    with pytest.raises(ProfileError, match="JSON object"):
        loads(json.dumps([1, 2]))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load(tmp_path / "nope.json")
    with pytest.raises(ProfileError, match="directory"):
        load(tmp_path)


def test_data_loading_column_round_trips_and_counts_before_forward():
    import dataclasses

    from commsim.api import run_spec, Scenario
    from commsim.costs import cost_inputs
    from profiles import make_profile

    prof = make_profile()
    comp = prof.compute
    loaded = dataclasses.replace(prof, compute=dataclasses.replace(
        comp, data_s=tuple(0.01 * b / comp.batch_sizes[0] for b in comp.batch_sizes)))
    assert loads(loaded.dumps()).compute.data_s == loaded.compute.data_s
    spec = run_spec(prof, "ring", 2, Scenario(global_batch=64))
    before, after = cost_inputs(spec, prof), cost_inputs(spec, loaded)
    assert after.forward_s - before.forward_s == pytest.approx(
        loaded.compute.time_s("data", spec.per_rank_batch))
    assert prof.compute.time_s("data", 32) == 0.0   # not measured: nothing added
