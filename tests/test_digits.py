"""--data digits: scikit-learn's real handwritten digits, a fixed split, a small CNN for 8x8."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from commsim.calibrate import digits  # noqa: E402


def test_the_split_is_fixed_stratified_and_disjoint():
    _, labels = digits._load()
    train, test = digits.split_indices(labels, True), digits.split_indices(labels, False)
    assert len(train) + len(test) == len(labels) == 1797
    assert not set(train) & set(test)
    assert np.array_equal(train, digits.split_indices(labels, True))       # same every time
    for c in range(10):
        share = np.mean(labels[train] == c) / np.mean(labels == c)
        assert share == pytest.approx(1.0, abs=0.02)                        # stratified


def test_images_are_normalised_by_the_training_split():
    x, y = digits.digits_split(True)
    xt, yt = digits.digits_split(False)
    assert x.shape == (1438, 1, 8, 8) and xt.shape == (359, 1, 8, 8)
    assert float(x.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(x.std()) == pytest.approx(1.0, abs=1e-3)
    assert y.dtype == torch.int64 and set(y.tolist()) == set(range(10))


def test_the_cnn_learns_the_digits():
    """A few epochs on one process reach well above chance: accuracy means something here."""
    x, y = digits.digits_split(True)
    xt, yt = digits.digits_split(False)
    torch.manual_seed(0)
    model = digits.digits_cnn()
    assert sum(p.numel() for p in model.parameters()) == 15_338
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(5):
        for i in range(0, len(y), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
            opt.step()
    assert (model(xt).argmax(1) == yt).float().mean() > 0.8


@pytest.mark.slow
def test_live_trains_on_the_digits(capsys):
    """--data digits picks the small CNN (VGG-11 cannot take 8x8) and reports test accuracy."""
    import json

    from commsim.cli import main
    assert main(["live", "--strategy", "ring", "--nodes", "2", "--data", "digits",
                 "--iterations", "30", "--global-batch", "64", "--json"]) == 0
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert r["test_accuracy"] > 0.3
    # Rank 0's progress, relayed as plain lines without a terminal: every cycle, then the test.
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("[live")]
    assert "0/32 ring on 2 rank(s)" in lines[0] and "1/32 warm-up" in lines[1]
    assert "31/32 iteration 30 of 30" in lines[-2] and "32/32 test accuracy" in lines[-1]


def test_data_that_is_neither_a_folder_nor_digits_is_one_line(capsys, tmp_path):
    from commsim.cli import main
    assert main(["live", "--strategy", "single", "--data", str(tmp_path / "nope")]) == 2
    assert "neither a directory nor 'digits'" in capsys.readouterr().err
