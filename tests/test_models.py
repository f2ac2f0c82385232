"""The assignment's VGG-11 and the --model factory loader."""
import pytest

torch = pytest.importorskip("torch")

from commsim.calibrate import models  # noqa: E402
from commsim.errors import UserError  # noqa: E402


def test_vgg11_has_the_assignment_parameter_count():
    model = models.vgg11_cifar()
    assert sum(p.numel() for p in model.parameters()) == 9_231_114


def test_vgg11_maps_a_cifar_batch_to_ten_logits():
    out = models.vgg11_cifar().eval()(torch.zeros(2, 3, 32, 32))
    assert out.shape == (2, 10)


def test_param_specs_follow_registration_order_and_sum_to_the_model():
    model = models.vgg11_cifar(track_running_stats=False)
    specs = models.param_specs(model)
    assert [s.name for s in specs] == [n for n, _ in model.named_parameters()]
    assert specs[0].name == "features.0.weight" and specs[-1].name == "classifier.bias"
    assert sum(s.bytes for s in specs) == 4 * 9_231_114


def test_load_factory_resolves_module_colon_function():
    assert models.load_factory(models.VGG11_FACTORY) is models.vgg11_cifar


@pytest.mark.parametrize("spec, words", [
    ("no_colon", "module:function"),
    ("commsim_no_such_module:f", "cannot import"),
    ("commsim.calibrate.models:nope", "no attribute"),
    ("commsim.calibrate.models:VGG11_CFG", "not callable"),
])
def test_load_factory_errors_are_one_clear_line(spec, words):
    with pytest.raises(UserError) as info:
        models.load_factory(spec)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_build_model_refuses_a_factory_that_returns_no_module():
    with pytest.raises(UserError, match="not an nn.Module"):
        models.build_model("builtins:dict")


# ---------------------------------------------------------------- the one factory contract

def test_keywords_go_only_to_factories_that_accept_them():
    wanted = {"num_classes": 10, "track_running_stats": False}
    assert isinstance(models.build_model("factories:plain", **wanted), torch.nn.Module)
    model = models.build_model("factories:with_classes", **wanted)
    assert model[-1].out_features == 10
    import factories
    models.build_model("factories:anything", **wanted)
    assert factories.anything.seen == wanted


def test_a_factory_that_fails_is_one_line():
    with pytest.raises(UserError) as info:
        models.build_model("factories:raises", num_classes=10)
    assert "RuntimeError: weights not found" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["live", "--strategy", "ring", "--nodes", "2", "--iterations", "2", "--global-batch", "8",
     "--synthetic-size", "64", "--test-samples", "8"],
    ["calibrate", "--quick", "--nodes", "2", "--oversubscribe", "0"],
])
def test_a_zero_argument_factory_works_in_every_command(command, tmp_path, monkeypatch):
    """The user's report: calibrate took 'mymod:build', live died with 'build() got an
    unexpected keyword argument num_classes'."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": here + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = ["--out", str(tmp_path / "out.json")]
    done = subprocess.run([sys.executable, "-m", "commsim", *command, "--model",
                           "factories:plain", *out], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out.json").exists()


def test_an_unusable_factory_is_one_line_and_exit_2(capsys):
    from commsim.cli import main
    assert main(["live", "--strategy", "single", "--model", "factories:raises"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "weights not found" in err


def test_the_second_model_puts_its_gradient_bytes_in_one_late_tensor():
    model = models.wide_mlp()
    sizes = [p.numel() for p in model.parameters()]
    assert sum(sizes) == 6_820_618
    assert sizes[0] == 3 * 32 * 32 * 2048 and sizes[0] / sum(sizes) > 0.9
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
