"""DDP bucket assignment follows PyTorch's compute_bucket_assignment_by_size."""
from commsim.buckets import assign_buckets
from commsim.profile import ParamSpec

MiB = 1024 * 1024


def params(*sizes):
    return [ParamSpec(f"p{i}", s // 4, s) for i, s in enumerate(sizes)]


def test_reverse_order_first_bucket_small_then_cap():
    ps = params(*(512 * 1024,) * 6)                      # 6 x 0.5 MiB, registration order
    ready = [1.0, 0.8, 0.6, 0.4, 0.2, 0.0]               # the last registered is ready first
    b = assign_buckets(ps, ready, bucket_bytes=2 * MiB, first_bucket_bytes=1 * MiB)
    assert [x.param_indices for x in b] == [(5, 4), (3, 2, 1, 0)]
    assert [x.ready_fraction for x in b] == [0.2, 1.0]


def test_a_bucket_overshoots_by_its_last_tensor():
    ps = params(100, 3 * MiB, 100)
    b = assign_buckets(ps, [1.0, 0.5, 0.0], bucket_bytes=25 * MiB, first_bucket_bytes=1 * MiB)
    assert [x.param_indices for x in b] == [(2, 1), (0,)]
    assert b[0].bytes == 3 * MiB + 100


def test_vgg11_like_buckets_cover_every_tensor_once():
    sizes = [1000 * (i + 1) for i in range(34)]
    ready = [1 - i / 33 for i in range(34)]
    b = assign_buckets(params(*sizes), ready, 25 * MiB, MiB)
    seen = sorted(i for x in b for i in x.param_indices)
    assert seen == list(range(34))
    assert sum(x.bytes for x in b) == sum(sizes)
