"""CIFAR-10 binary reader, synthetic data and the normalised dataset."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from commsim.calibrate import cifar  # noqa: E402
from commsim.errors import UserError  # noqa: E402


def write_batch(path, labels, seed=0):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    records = np.concatenate([np.asarray(labels, dtype=np.uint8)[:, None], pixels], axis=1)
    records.tofile(path)
    return pixels.reshape(-1, 3, 32, 32)


def test_reader_returns_labels_and_channel_major_pixels(tmp_path):
    pixels = write_batch(tmp_path / "b.bin", [3, 0, 9])
    images, labels = cifar.read_cifar_bin(tmp_path / "b.bin")
    assert labels.tolist() == [3, 0, 9]
    assert images.shape == (3, 3, 32, 32) and (images == pixels).all()


def test_directory_concatenates_the_five_training_files(tmp_path):
    for i, name in enumerate(cifar.TRAIN_FILES):
        write_batch(tmp_path / name, [i, i], seed=i)
    write_batch(tmp_path / "test_batch.bin", [7])
    train = cifar.load_dataset(str(tmp_path), train=True)
    test = cifar.load_dataset(str(tmp_path), train=False)
    assert len(train) == 10 and len(test) == 1
    assert [train[k][1] for k in range(0, 10, 2)] == [0, 1, 2, 3, 4]


def test_truncated_file_is_refused_naming_it(tmp_path):
    write_batch(tmp_path / "b.bin", [1, 2])
    data = (tmp_path / "b.bin").read_bytes()
    (tmp_path / "b.bin").write_bytes(data[:-5])
    with pytest.raises(UserError, match="b.bin.*multiple of 3073"):
        cifar.read_cifar_bin(tmp_path / "b.bin")


def test_bad_label_is_refused_naming_the_record(tmp_path):
    write_batch(tmp_path / "b.bin", [1, 12])
    with pytest.raises(UserError, match="b.bin: record 1 has label 12"):
        cifar.read_cifar_bin(tmp_path / "b.bin")


def test_missing_files_are_named(tmp_path):
    with pytest.raises(UserError, match="data_batch_1.bin"):
        cifar.load_dataset(str(tmp_path), train=True)


def test_synthetic_data_is_seeded_and_normalised():
    a = cifar.load_dataset(None, train=True, synthetic_size=64, seed=3, augment=False)
    b = cifar.load_dataset(None, train=True, synthetic_size=64, seed=3, augment=False)
    x, y = a[5]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= y < 10
    assert torch.equal(x, b[5][0])
    stacked = torch.stack([a[i][0] for i in range(64)])
    # Uniform pixels have mean 127.5: normalised means land near (127.5/255 - mean) / std.
    expected = (0.5 - torch.tensor(cifar.MEAN)) / torch.tensor(cifar.STD)
    assert torch.allclose(stacked.mean(dim=(0, 2, 3)), expected, atol=0.05)


def test_augmentation_keeps_shape_and_uses_pixel_zero_padding():
    torch.manual_seed(0)
    ds = cifar.load_dataset(None, train=True, synthetic_size=4)
    x, _ = ds[0]
    assert x.shape == (3, 32, 32)
    fill = (-torch.tensor(cifar.MEAN) / torch.tensor(cifar.STD)).view(3, 1, 1)
    out = cifar.random_crop_flip(torch.zeros(3, 32, 32) + 100.0, padding=4)
    assert ((out == 100.0) | torch.isclose(out, fill.expand_as(out))).all()


def test_learnable_synthetic_data_shares_templates_across_splits():
    train_x, train_y = cifar.learnable_cifar(600, seed=5, train=True)
    again_x, again_y = cifar.learnable_cifar(600, seed=5, train=True)
    test_x, test_y = cifar.learnable_cifar(300, seed=5, train=False)
    assert train_x.dtype == np.uint8 and train_x.shape == (600, 3, 32, 32)
    assert np.array_equal(train_x, again_x) and np.array_equal(train_y, again_y)
    assert not np.array_equal(train_x[:300], test_x)  # fresh noise for the test split
    assert set(np.unique(train_y)) == set(range(10))
    # Nearest class mean of the training split classifies the test split far above chance:
    # the classes are the shared templates.
    means = np.stack([train_x[train_y == c].astype(np.float32).mean(0) for c in range(10)])
    dist = ((test_x.astype(np.float32)[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (dist.argmin(1) == test_y).mean() > 0.9


def test_load_dataset_picks_the_synthetic_kind():
    learnable = cifar.load_dataset(None, train=False, synthetic_size=20_000, seed=1,
                                   synthetic="learnable")
    assert len(learnable) == cifar.CIFAR10_TEST_SAMPLES  # at most CIFAR-10's test split
    random = cifar.load_dataset(None, train=True, synthetic_size=64, seed=1)
    assert len(random) == 64
    with pytest.raises(UserError, match="--synthetic"):
        cifar.load_dataset(None, train=True, synthetic_size=8, synthetic="cifar")
