"""The generator: official layouts, dtypes, strides and devices; the index map; determinism; full-range data."""
import math

import pytest
import torch

from problems.nvfp4_group_gemm.formats import SF_VEC, blocked_offset, decode_e2m1, decode_e4m3fn, unblock
from problems.nvfp4_group_gemm.inputs import (
    FULL_RANGE_SUBNORMAL_SHARE,
    FULL_RANGE_ZERO_SHARE,
    check_full_range_k,
    default_device,
    full_range_max_k,
    full_range_scale_exponent,
    generate_input,
)

M, N, K = (64, 40, 132), (128, 256, 128), (256, 512, 64)


@pytest.fixture(scope="module")
def official():
    return generate_input(M, N, K, 3, 1111)


def test_structure_dtypes_shapes_devices(official):
    abc, sfs, sfr, sizes = official
    dev = default_device()
    assert len(abc) == len(sfs) == len(sfr) == len(sizes) == 3
    for (a, b, c), (sfa, sfb), (ra, rb), (m, n, k, l), in zip(abc, sfs, sfr, sizes):
        assert (l, a.dtype, b.dtype, c.dtype) == (1, torch.float4_e2m1fn_x2, torch.float4_e2m1fn_x2, torch.float16)
        assert a.shape == (m, k // 2, 1) and b.shape == (n, k // 2, 1) and c.shape == (m, n, 1)
        assert a.stride() == (k // 2, 1, m * k // 2)  # K-major permuted view of [1, M, K/2]
        assert c.stride() == (n, 1, m * n)
        assert sfa.shape == (m, k // 16, 1) and sfb.shape == (n, k // 16, 1)
        assert sfa.dtype == sfb.dtype == ra.dtype == rb.dtype == torch.float8_e4m3fn
        assert sfa.device.type == "cpu" and sfb.device.type == "cpu"
        assert a.device == b.device == c.device == ra.device == dev
        rest_k = math.ceil(k / 64)
        assert ra.shape == (32, 4, math.ceil(m / 128), 4, rest_k, 1)
        assert rb.shape == (32, 4, math.ceil(n / 128), 4, rest_k, 1)


def test_official_values_and_scales(official):
    abc, sfs, _, _ = official
    for (a, b, _), (sfa, sfb) in zip(abc, sfs):
        for x in (a, b):
            vals = set(decode_e2m1(x[:, :, 0]).unique().tolist())
            assert vals <= {0.0, 0.5, 1.0, 1.5, -0.5, -1.0, -1.5}
        for s in (sfa, sfb):
            assert set(decode_e4m3fn(s).unique().tolist()) == {1.0, 2.0}


def test_reordered_holds_plain_scales_at_index_map(official):
    _, sfs, sfr, sizes = official
    for (sfa, sfb), (ra, rb), (m, n, k, _) in zip(sfs, sfr, sizes):
        cols = k // SF_VEC
        for plain, blocked, rows in ((sfa, ra, m), (sfb, rb, n)):
            storage = blocked.permute(5, 2, 4, 0, 1, 3).reshape(-1).view(torch.uint8).cpu()
            p = plain[:, :, 0].view(torch.uint8)
            for r in (0, rows // 2, rows - 1):
                for j in (0, cols - 1):
                    assert storage[blocked_offset(r, j, math.ceil(cols / 4))] == p[r, j]
            assert torch.equal(unblock(blocked, rows, cols).view(torch.uint8).cpu(), p)
            padding = set(decode_e4m3fn(storage).unique().tolist())
            assert padding == {1.0, 2.0}  # padding rows/columns hold 1.0/2.0, not zeros


def test_same_seed_same_data_other_seed_other_data(official):
    again = generate_input(M, N, K, 3, 1111)
    other = generate_input(M, N, K, 3, 1112)
    for x, y, z in zip(official[0], again[0], other[0]):
        for t1, t2, t3 in zip(x, y, z):
            assert torch.equal(t1.view(torch.uint8) if t1.dtype != torch.float16 else t1,
                               t2.view(torch.uint8) if t2.dtype != torch.float16 else t2)
        assert not torch.equal(x[0].view(torch.uint8), z[0].view(torch.uint8))


def test_draw_order_matches_the_official_sequence():
    """Re-draw group 0 by hand in the documented order and compare (CPU generator on a CPU machine)."""
    if torch.cuda.is_available():
        pytest.skip("the CPU replay covers the CPU path; GPU bit-compatibility is tested in tests/trust/test_gpu.py")
    data = generate_input((64,), (128,), (256,), 1, 7)
    torch.manual_seed(7)
    a = torch.randint(255, (1, 64, 128), dtype=torch.uint8) & 0b1011_1011
    b = torch.randint(255, (1, 128, 128), dtype=torch.uint8) & 0b1011_1011
    c = torch.randn((1, 64, 128), dtype=torch.float16)
    sfa = torch.randint(1, 3, (1, 64, 16), dtype=torch.int8).to(torch.float8_e4m3fn)
    assert torch.equal(data[0][0][0].view(torch.uint8), a.permute(1, 2, 0))
    assert torch.equal(data[0][0][1].view(torch.uint8), b.permute(1, 2, 0))
    assert torch.equal(data[0][0][2], c.permute(1, 2, 0))
    assert torch.equal(data[1][0][0].view(torch.uint8), sfa.permute(1, 2, 0).view(torch.uint8))


def test_full_range_uses_all_codes_and_bounds_fp16():
    k = 7168
    data = generate_input((128,), (256,), (k,), 1, 3, data="full-range")
    (a, b, _), (sfa, sfb) = data[0][0], data[1][0]
    codes = torch.cat([(a.view(torch.uint8) & 15).flatten(), (a.view(torch.uint8) >> 4).flatten()])
    assert set(codes.unique().tolist()) == set(range(16))
    s = full_range_scale_exponent(k)
    assert s == -4 and full_range_scale_exponent(256) == 1
    va, vb = decode_e4m3fn(sfa)[:, :, 0], decode_e4m3fn(sfb)[:, :, 0]
    assert float(va.min()) == 0.0 and float(vb.min()) == 0.0  # zeros, and nothing negative
    assert float(va[va > 0].min()) == 2.0**-9 and float(vb[vb > 0].min()) == 2.0**-9  # subnormals
    assert float(va.max()) <= 448 and float(vb.max()) <= 448
    assert len(set(torch.log2(va[va >= 2.0**-6]).floor().unique().tolist())) >= 6  # spread over many binades
    worst = k * 36 * float((va.max(0).values * vb.max(0).values).max())
    assert worst <= 65504
    mantissas = (sfa.view(torch.uint8) & 7).unique().tolist()
    assert mantissas == list(range(8))


def test_full_range_draws_zero_and_subnormal_scales_at_their_shares():
    """One scale in 16 is zero (0x00) and one in 16 a subnormal (exponent field 0, every mantissa 1..7); the
    rest are normals. Counted over 2 x 512 x 448 = 458,752 scales: each share within 4 % of 1/16 (the binomial
    standard deviation is under 1 %)."""
    data = generate_input((512,), (512,), (7168,), 1, 11, data="full-range")
    codes = torch.cat([sf.view(torch.uint8).flatten() for sf in data[1][0]]).long()
    total = codes.numel()
    zeros, subnormal = int((codes == 0).sum()), codes[(codes >= 1) & (codes <= 7)]
    assert FULL_RANGE_ZERO_SHARE == FULL_RANGE_SUBNORMAL_SHARE == 1 / 16
    assert abs(zeros / total - FULL_RANGE_ZERO_SHARE) < 0.04 * FULL_RANGE_ZERO_SHARE
    assert abs(subnormal.numel() / total - FULL_RANGE_SUBNORMAL_SHARE) < 0.04 * FULL_RANGE_SUBNORMAL_SHARE
    assert sorted(subnormal.unique().tolist()) == [1, 2, 3, 4, 5, 6, 7]
    assert int((codes >= 0x80).sum()) == 0  # no negative scales, no -0


def test_full_range_keeps_every_block_bounded_with_zeros_and_subnormals():
    """The no-overflow bound holds block by block: sfa[r, j] * sfb[c, j] <= 2^S * (15/8)^2 for every row pair,
    so |C| <= K * 36 * max product <= 65504 (checked exactly in fp64, for small and large K)."""
    for k, seed in ((64, 1), (256, 2), (7168, 3)):
        data = generate_input((256,), (256,), (k,), 1, seed, data="full-range")
        va, vb = (decode_e4m3fn(sf)[:, :, 0] for sf in data[1][0])
        largest = float((va.max(0).values * vb.max(0).values).max())
        assert largest <= 2.0 ** full_range_scale_exponent(k) * (15 / 8) ** 2
        assert k * 36 * largest <= 65504


def test_full_range_refuses_a_k_it_cannot_bound():
    """The scale exponent S falls by one each time K doubles; below S = -10 one side's scales would have to leave
    e4m3fn's normal range. 529,920 is the largest multiple of 64 with S = -10."""
    limit = full_range_max_k()
    assert limit == 529_920 and limit % 64 == 0
    assert full_range_scale_exponent(limit) == -10 and full_range_scale_exponent(limit + 64) == -11
    check_full_range_k(limit)
    with pytest.raises(ValueError) as info:
        check_full_range_k(limit + 64)
    assert str(info.value) == ("full-range data cannot bound the fp16 output for K=529984: its scales keep "
                               "|C| <= 65504 only up to K=529920")
    with pytest.raises(ValueError, match="cannot bound the fp16 output for K=529984"):
        generate_input((4,), (4,), (limit + 64,), 1, 1, data="full-range")
    data = generate_input((4,), (4,), (limit,), 1, 1, data="full-range")  # the limit itself is drawn
    assert data[1][0][0].shape == (4, limit // 16, 1)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="data mode must be one of"):
        generate_input((64,), (128,), (256,), 1, 1, data="random")
    with pytest.raises(ValueError, match="expected g=2 entries"):
        generate_input((64,), (128,), (256,), 2, 1)


@pytest.mark.parametrize("k", [64, 128, 256])
def test_full_range_never_draws_nan_scales(k):
    """Small K allows the top binade (2^8): mantissa 7 there is e4m3fn's NaN code (0x7F) and must not appear."""
    for seed in range(20):
        data = generate_input((128,), (128,), (k,), 1, seed, data="full-range")
        for sf in data[1][0]:
            assert not decode_e4m3fn(sf).isnan().any()
            assert float(decode_e4m3fn(sf).max()) <= 448
