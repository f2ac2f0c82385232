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
