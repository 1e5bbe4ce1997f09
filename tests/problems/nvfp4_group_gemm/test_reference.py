"""The exact reference: both paths against an independent numpy + ml_dtypes computation, the fast path against the
fp64 path bit for bit, the fp32-exactness predicate's decisions (hand-made, at its bound), hand-made products,
rounding."""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import problems.nvfp4_group_gemm.inputs
from problems.nvfp4_group_gemm.formats import unblock
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm import reference_paths
from problems.nvfp4_group_gemm.reference import (
    dequantize_lut,
    exact_in_fp32,
    ref_kernel,
    ref_kernel_fp64,
    ref_kernel_many,
    round_to_fp16,
    warm_up,
)
from problems.nvfp4_group_gemm.reference_bound import _read_stats, _scale_stats
from problems.nvfp4_group_gemm.reference_paths import _fast, _fast_cpu, _int8_shift, _int8_table
from problems.nvfp4_group_gemm.reference_scales import _unblocked
from problems.nvfp4_group_gemm.spec import K_MULTIPLE, MN_MULTIPLE, load_shapes

ONE, TWO, NAN = 0x38, 0x40, 0x7F  # e4m3fn bytes of 1.0, 2.0 and NaN


def _independent(packed: torch.Tensor, sf: torch.Tensor) -> np.ndarray:
    """Decode with ml_dtypes only: nibbles -> float4_e2m1fn, bytes -> float8_e4m3fn, float64 products."""
    u = packed[:, :, 0].view(torch.uint8).numpy()
    nibbles = np.stack([u & 0xF, u >> 4], axis=-1).reshape(u.shape[0], -1).astype(np.uint8)
    values = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = sf[:, :, 0].view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return values * np.repeat(scales, 16, axis=1)


def _bits(outputs):
    return [o.view(torch.int16) for o in outputs]


def _assert_same_bits(fast, exact):
    assert len(fast) == len(exact)
    for g, (f, e) in enumerate(zip(_bits(fast), _bits(exact))):
        assert f.shape == e.shape, f"group {g}: shape {tuple(f.shape)} != {tuple(e.shape)}"
        differ = (f != e).nonzero()
        assert differ.numel() == 0, f"group {g}: {differ.shape[0]} outputs differ, first at {differ[0].tolist()}"


def _group(a_bytes, b_bytes, sfa_codes, sfb_codes):
    """One hand-made group from uint8 [M, K/2], [N, K/2] data and uint8 [M, K/16], [N, K/16] scale codes."""
    a, b = (torch.as_tensor(x, dtype=torch.uint8).unsqueeze(-1).view(torch.float4_e2m1fn_x2)
            for x in (a_bytes, b_bytes))
    sfa, sfb = (torch.as_tensor(x, dtype=torch.uint8).unsqueeze(-1).view(torch.float8_e4m3fn)
                for x in (sfa_codes, sfb_codes))
    m, n, k = a.shape[0], b.shape[0], a.shape[1] * 2
    return ([(a, b, torch.zeros(m, n, 1, dtype=torch.float16))], [(sfa, sfb)], [(None, None)], [(m, n, k, 1)])


@pytest.mark.parametrize("kernel", [ref_kernel, ref_kernel_fp64])
@pytest.mark.parametrize("data", ["official", "full-range"])
def test_reference_matches_ml_dtypes_decode(data, kernel):
    inputs = generate_input((64, 36), (128, 256), (512, 1024), 2, 21, data=data, device="cpu")
    got = kernel(inputs)
    for (a, b, _), (sfa, sfb), out in zip(inputs[0], inputs[1], got):
        exact = _independent(a, sfa) @ _independent(b, sfb).T
        ours = out[:, :, 0].numpy()
        assert ours.dtype == np.float16
        # numpy rounds float64 -> float16 directly (one correct rounding): an independent rounding path
        np.testing.assert_array_equal(ours, exact.astype(np.float16))


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", load_shapes("tests").cases, ids=lambda c: c.text())
def test_fast_equals_fp64_on_every_test_shape(case, data):
    for seed in (case.seed, 7, 123457):
        inputs = generate_input(case.m, case.n, case.k, case.g, seed, data=data, device="cpu")
        exact = ref_kernel_fp64(inputs)
        _assert_same_bits(ref_kernel(inputs), exact)
        _assert_same_bits(ref_kernel(inputs, scales="reordered"), exact)


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", load_shapes("benchmarks").cases, ids=lambda c: c.name)
def test_fast_equals_fp64_on_benchmark_m_and_k(case, data):
    """The benchmarks' M and K with N cut to 128 (fp64 on the full N is too slow for a CPU test). Full-range data
    takes the fp64 path on both sides here (test_predicate_official_passes_full_range_falls_back), so one seed."""
    n = tuple(min(x, 128) for x in case.n)
    for seed in (case.seed, 99)[: 2 if data == "official" else 1]:
        inputs = generate_input(case.m, n, case.k, case.g, seed, data=data, device="cpu")
        _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs))


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("shapes", ["smoke", "tests"])
def test_many_inputs_at_once_give_each_inputs_bits(shapes, data):
    """ref_kernel_many over a sample's inputs (the CPU merges their groups into one pass) == ref_kernel per input,
    and == the fp64 reference, for every case of the set, the inputs of one case drawn from different seeds."""
    for case in load_shapes(shapes).cases:
        inputs = [generate_input(case.m, case.n, case.k, case.g, 17 + s, data=data, device="cpu") for s in range(4)]
        many = ref_kernel_many(inputs)
        assert [len(o) for o in many] == [case.g] * 4
        for x, outs in zip(inputs, many):
            _assert_same_bits(outs, ref_kernel(x))
            _assert_same_bits(outs, ref_kernel_fp64(x))
    assert ref_kernel_many([]) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3).flatmap(lambda g: st.tuples(
    st.lists(st.integers(1, 24).map(lambda x: x * MN_MULTIPLE), min_size=g, max_size=g),
    st.lists(st.integers(1, 24).map(lambda x: x * MN_MULTIPLE), min_size=g, max_size=g),
    st.lists(st.integers(1, 8).map(lambda x: x * K_MULTIPLE), min_size=g, max_size=g))),
    st.sampled_from(["official", "full-range"]), st.integers(0, 2**31 - 1))
def test_fast_equals_fp64_on_drawn_shapes(mnk, data, seed):
    m, n, k = mnk
    inputs = generate_input(m, n, k, len(m), seed, data=data, device="cpu")
    _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).map(lambda x: x * MN_MULTIPLE), st.integers(1, 8).map(lambda x: x * MN_MULTIPLE),
       st.integers(1, 16).map(lambda x: x * K_MULTIPLE), st.sampled_from([0xBB, 0xFF, 0x99, 0x77]),
       st.integers(0, 125), st.integers(0, 3), st.booleans(), st.integers(0, 2**31 - 1))
def test_whenever_the_predicate_holds_fp32_accumulation_is_exact(m, n, k, mask, low_code, code_span, zeros, seed):
    """Random bytes (nibble ``mask``) and scale codes from a window of e4m3fn bytes: where ``exact_in_fp32`` says
    yes the fast GEMM alone gives the fp64 bits; ``ref_kernel`` gives them always."""
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randint(256, (r, k // 2), dtype=torch.uint8, generator=gen) & mask for r in (m, n)]
    codes = [torch.randint(low_code, low_code + 2 ** code_span, (r, k // 16), dtype=torch.uint8, generator=gen)
             for r in (m, n)]
    if zeros:
        codes[0][:, ::3] = 0x80  # -0 scales: blocks that contribute nothing
    inputs = _group(*data, *codes)
    (a, b, _), (sfa, sfb) = inputs[0][0], inputs[1][0]
    exact = ref_kernel_fp64(inputs)
    if exact_in_fp32(k, sfa, sfb, a, b):
        _assert_same_bits(_fast([(a, b, *(c.to(torch.int32) for c in codes))]), exact)
    _assert_same_bits(ref_kernel(inputs), exact)


def test_predicate_official_passes_full_range_falls_back():
    for case in (*load_shapes("tests").cases, *load_shapes("benchmarks").cases):
        n = tuple(min(x, 128) for x in case.n)
        for data, expected in (("official", True), ("full-range", False)):
            inputs = generate_input(case.m, n, case.k, case.g, case.seed, data=data, device="cpu")
            got = [exact_in_fp32(k, sfa, sfb) for k, (sfa, sfb) in zip(case.k, inputs[1])]
            assert got == [expected] * case.g, f"{data} {case.text()}"


def _independent_decision(k: int, codes_a: list[int], codes_b: list[int]) -> bool:
    """The bound in plain fractions: with s ranging over an operand's nonzero scales, elements are multiples of
    2^(min nu2(s) - 1) and at most 6 max|s|; every partial sum must be at most 2^24 units of the product's grid."""
    def nu2(x: Fraction) -> int:
        num, den = x.numerator, x.denominator
        return (num & -num).bit_length() - (den & -den).bit_length()

    def scales(codes):
        return [float(v) for v in np.array(codes, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)]

    sa, sb = scales(codes_a), scales(codes_b)
    if any(np.isnan(sa + sb)):
        return False
    sa, sb = ([Fraction(abs(x)) for x in s if x != 0] for s in (sa, sb))
    if not sa or not sb:
        return True
    grid = min(map(nu2, sa)) - 1 + min(map(nu2, sb)) - 1
    return k * 6 * max(sa) * 6 * max(sb) <= Fraction(2) ** (24 + grid)


@pytest.mark.parametrize("k", [64, 7168])
def test_predicate_matches_the_bound_in_fractions_for_every_scale_code(k):
    """A's scales: every byte c next to 1.0; B's: one of a few bytes (subnormal, 1, 2, odd mantissas, 448, -0,
    negative, NaN)."""
    for code_b in (0x01, 0x07, ONE, TWO, 0x3F, 0x7E, 0x80, 0xB9, NAN):
        sfb = torch.tensor([[code_b]], dtype=torch.uint8)
        got = [exact_in_fp32(k, torch.tensor([[c, ONE]], dtype=torch.uint8), sfb) for c in range(256)]
        assert got == [_independent_decision(k, [c, ONE], [code_b]) for c in range(256)], f"code_b {code_b:#x}"


def test_official_data_beyond_k_29127_passes_only_with_the_magnitudes_present():
    """Scales 1 or 2 (mu = 9, Q = 1024): with |e2m1| <= 6 assumed, K <= 2^22 / 144 = 29127; with the 1.5 present
    (H = 3), K <= 2^22 / 9. K = 32768 needs the data."""
    inputs = generate_input((4,), (8,), (32768,), 1, 5, device="cpu")
    (a, b, _), (sfa, sfb) = inputs[0][0], inputs[1][0]
    assert not exact_in_fp32(32768, sfa, sfb)
    assert exact_in_fp32(32768, sfa, sfb, a, b)
    assert exact_in_fp32(29127, sfa, sfb) and not exact_in_fp32(29128, sfa, sfb)
    _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs))


def _at_the_bound(b_block0_code):
    """K = 64, every e2m1 value 2.0 (H = 4). A's scales per row: 1.0, then 2^-9 three times (mu_A = 0,
    Q_A = 2^9); B's: ``b_block0_code``, then 1.0 three times (mu_B = 9). With 32.0 (Q_B = 2^14):
    64 * 4 * 4 * 2^9 * 2^14 = 2^33 = 2^(24 + 0 + 9), exactly on the bound; with 64.0, twice it."""
    m, n = 4, 8
    return _group(torch.full((m, 32), 0x44), torch.full((n, 32), 0x44),
                  torch.tensor([[ONE, 0x01, 0x01, 0x01]] * m), torch.tensor([[b_block0_code, ONE, ONE, ONE]] * n))


@pytest.mark.parametrize("b_block0_code, expected", [(0x60, True), (0x68, False)])  # 32.0, 64.0
def test_predicate_exactly_at_the_2_pow_24_bound(b_block0_code, expected):
    inputs = _at_the_bound(b_block0_code)
    (a, b, _), (sfa, sfb) = inputs[0][0], inputs[1][0]
    assert not exact_in_fp32(64, sfa, sfb)  # with |e2m1| <= 6 assumed: 2^33 * 9 > 2^33
    assert exact_in_fp32(64, sfa, sfb, a, b) == expected
    out = ref_kernel(inputs)
    _assert_same_bits(out, ref_kernel_fp64(inputs))
    # 16 * (2 * 1) * (2 * s) + 48 * (2 * 2^-9) * 2 = 64 s + 0.375 rounds to 64 s in fp16 (s = 32 or 64)
    assert bool((out[0] == 64 * (32 if expected else 64)).all())


def test_fallback_where_fp32_accumulation_would_round():
    """C = 4 * 4 * 8 * 16 (= 2048) + 1 * 1 + 2^-10 * 2^-10: 2049 + 2^-20 is not an fp32 number. fp32 keeps 2049, a
    tie that fp16 rounds to even (2048); the exact sum rounds up to 2050. The predicate sends it to fp64."""
    a = torch.zeros(1, 32, dtype=torch.uint8)
    b = torch.zeros(1, 32, dtype=torch.uint8)
    a[0, 0], b[0, 0] = 0x06, 0x06     # element 0: 4.0 and 4.0 (block 0)
    a[0, 8], b[0, 8] = 0x02, 0x02     # element 16: 1.0 and 1.0 (block 1)
    a[0, 16], b[0, 16] = 0x01, 0x01   # element 32: 0.5 and 0.5 (block 2)
    sfa = torch.tensor([[0x50, ONE, 0x01, ONE]])  # 8.0, 1.0, 2^-9
    sfb = torch.tensor([[0x58, ONE, 0x01, ONE]])  # 16.0, 1.0, 2^-9
    inputs = _group(a, b, sfa, sfb)
    (pa, pb, _), (fa, fb) = inputs[0][0], inputs[1][0]
    assert not exact_in_fp32(64, fa, fb, pa, pb)
    forced = _fast([(pa, pb, sfa.to(torch.int32), sfb.to(torch.int32))])[0]
    assert float(forced) == 2048.0
    assert float(ref_kernel(inputs)[0]) == 2050.0 == float(ref_kernel_fp64(inputs)[0])


def test_known_product_all_ones():
    """Every e2m1 value 1.0 (byte 0x22) with scale 1: each output is the sum of K ones, here 256."""
    m, n, k = 8, 12, 256
    inputs = _group(torch.full((m, k // 2), 0x22), torch.full((n, k // 2), 0x22),
                    torch.full((m, k // 16), ONE), torch.full((n, k // 16), ONE))
    assert exact_in_fp32(k, inputs[1][0][0], inputs[1][0][1])
    out = ref_kernel(inputs)
    assert out[0].shape == (m, n, 1) and out[0].dtype == torch.float16
    assert bool((out[0] == 256.0).all())


def test_known_product():
    """A = 1.5 everywhere with scale 2, B = -0.5 with scale 4, K = 64: each C = 64 * (3 * -2) = -384."""
    m, n, k = 4, 8, 64
    inputs = _group(torch.full((m, k // 2), 0x33), torch.full((n, k // 2), 0x99),   # codes 3|3 = 1.5, 9|9 = -0.5
                    torch.full((m, k // 16), TWO), torch.full((n, k // 16), 0x48))  # 2.0, 4.0
    for kernel in (ref_kernel, ref_kernel_fp64):
        out = kernel(inputs)
        assert out[0].shape == (m, n, 1) and out[0].dtype == torch.float16
        assert bool((out[0] == -384.0).all())


def test_nibble_order_matters_for_the_reference():
    """Byte 0x71 holds element 0 = code 1 (0.5) and element 1 = code 7 (6): a one-sided swap changes C."""
    inputs = _group([[0x71] + [0] * 7], [[0x01] + [0] * 7], [[ONE]], [[ONE]])
    for kernel in (ref_kernel, ref_kernel_fp64):
        assert float(kernel(inputs)[0]) == 0.25  # 0.5 (A's low nibble) * 0.5 (B's low nibble) + 6 * 0


def test_nan_and_zero_scales():
    """A NaN scale (0x7F) forces the fp64 path (NaN out where it is used); zero scales (0x00, 0x80) add nothing."""
    m, n, k = 4, 4, 64
    nan_inputs = _group(torch.full((m, 32), 0x22), torch.full((n, 32), 0x22),
                        torch.tensor([[NAN, ONE, ONE, ONE]] + [[ONE] * 4] * 3), torch.full((n, 4), ONE))
    assert not exact_in_fp32(k, nan_inputs[1][0][0], nan_inputs[1][0][1])
    out = ref_kernel(nan_inputs)[0][:, :, 0]
    assert bool(out[0].isnan().all()) and bool((out[1:] == 64.0).all())
    zero_inputs = _group(torch.full((m, 32), 0x22), torch.full((n, 32), 0x22),
                         torch.tensor([[0x00, ONE, 0x80, ONE]] * m), torch.full((n, 4), TWO))
    assert exact_in_fp32(k, zero_inputs[1][0][0], zero_inputs[1][0][1])
    out = ref_kernel(zero_inputs)
    assert bool((out[0] == 64.0).all())  # two live blocks: 32 * (1 * 2)
    _assert_same_bits(out, ref_kernel_fp64(zero_inputs))


def test_negative_zero_products_sum_to_positive_zero_on_both_paths():
    inputs = _group(torch.full((4, 32), 0x88), torch.full((8, 32), 0x11), torch.full((4, 4), ONE),
                    torch.full((8, 4), ONE))  # -0 times 0.5 everywhere
    for kernel in (ref_kernel, ref_kernel_fp64):
        assert bool((kernel(inputs)[0].view(torch.int16) == 0).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_table_decode_is_exact_for_every_byte_and_scale_code(dtype):
    """Row c: the 256 bytes once each, under scale code c; every (byte, code) pair against ml_dtypes."""
    packed = torch.arange(256, dtype=torch.uint8).repeat(256, 1).unsqueeze(-1).view(torch.float4_e2m1fn_x2)
    sf = torch.arange(256, dtype=torch.uint8).view(256, 1, 1).expand(256, 32, 1).contiguous().view(torch.float8_e4m3fn)
    got = dequantize_lut(packed, sf, dtype)
    assert got.dtype == dtype and got.shape == (256, 512)
    np.testing.assert_array_equal(got.double().numpy(), _independent(packed, sf))


def test_reordered_scales_read_back_like_unblock():
    inputs = generate_input((76, 132), (256, 128), (448 * 16, 320), 2, 3, data="full-range", device="cpu")
    for (sfa, sfb), (ra, rb) in zip(inputs[1], inputs[2]):
        for sf, r in ((sfa, ra), (sfb, rb)):
            rows, blocks = sf.shape[0], sf.shape[1]
            assert torch.equal(_unblocked(r.view(torch.uint8), rows, blocks), sf[:, :, 0].view(torch.uint8))
            assert torch.equal(unblock(r, rows, blocks).view(torch.uint8), sf[:, :, 0].view(torch.uint8))


def test_bad_arguments_get_one_line_errors():
    inputs = generate_input((8,), (16,), (64,), 1, 1, device="cpu")
    with pytest.raises(ValueError, match=r"^scales must be 'plain' or 'reordered', got 'blocked'$"):
        ref_kernel(inputs, scales="blocked")
    (a, b, c), (sfa, sfb) = inputs[0][0], inputs[1][0]
    bad = ([(a, b, c)], [(sfa[:, :2], sfb)], inputs[2], inputs[3])
    expected = (r"^group 0: expected a \[M, K/2, 1\], b \[N, K/2, 1\], sfa \[M, K/16, 1\], sfb \[N, K/16, 1\] with "
                r"K a multiple of 16; got a \(8, 32, 1\), b \(16, 32, 1\), sfa \(8, 2, 1\), sfb \(16, 4, 1\)$")
    for kernel in (ref_kernel, ref_kernel_fp64):
        with pytest.raises(ValueError, match=expected):
            kernel(bad)
    with pytest.raises(ValueError, match=r"^decode must be 'auto', 'torch' or 'triton', got 'lut'$"):
        ref_kernel(inputs, decode="lut")
    with pytest.raises(ValueError, match=r"^decode='triton' needs CUDA inputs and an importable triton; the inputs "
                                         r"are on cpu$"):
        ref_kernel(inputs, decode="triton")
    with pytest.raises(ValueError, match=r"^dtype must be one of torch.bfloat16, torch.float16, torch.float32, "
                                         r"got torch.float64$"):
        dequantize_lut(a, sfa, torch.float64)


def test_round_to_fp16_is_a_single_rounding():
    x = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-11, -(1 + 2**-11 + 2**-40), 70000.0, 2**-30], dtype=torch.float64)
    assert x[:1].to(torch.float32).to(torch.float16).item() == 1.0  # the double rounding we avoid
    got = round_to_fp16(x).tolist()
    assert got[0] == 1 + 2**-10          # just above the halfway point: rounds up
    assert got[1] == 1.0                 # exactly halfway: ties to even
    assert got[2] == -(1 + 2**-10)
    assert got[3] == float("inf")        # beyond fp16's range
    assert got[4] == 0.0                 # below fp16's smallest subnormal / 2


def _bounds(*scale_codes):
    """(-mu, Q) per operand of uint8 scale-code tensors, as ref_kernel reads them."""
    codes = [torch.as_tensor(c, dtype=torch.uint8).reshape(-1).to(torch.int32) for c in scale_codes]
    return _read_stats(_scale_stats(torch.cat(codes), [c.numel() for c in codes]))


@pytest.mark.parametrize("codes, expected", [
    ([ONE, TWO], 9),          # official: q = 512, 1024 -> mu 9, Q >> mu = 2, |e| <= 24
    ([0x7E], 15),             # 448 = 7 * 2^6: q = 7 * 2^15, |e| <= 84
    ([ONE, 0x39], 6),         # 1.0 and 1.125 = 9 * 2^-3: mu 6, Q >> mu = 9, |e| <= 108
    ([ONE, 0x3F], None),      # 1.875 = 15 * 2^-3: Q >> mu = 15, 12 * 15 > 127
    ([0x00, 0x80], 0),        # only zero scales: every element is 0
    ([ONE, NAN], None),       # a NaN scale never takes a fast path
])
def test_int8_shift_known_values(codes, expected):
    assert _int8_shift(_bounds(codes)[0]) == expected


def test_int8_table_decodes_every_byte_under_every_admitted_code():
    """For each finite nonzero scale code c, with mu = nu2(q(c)) as _int8_shift would give an operand of that code
    alone: when admitted, all 256 bytes decode to e with e * 2^(mu - 10) equal to ml_dtypes' value x scale."""
    packed = torch.arange(256, dtype=torch.uint8).view(1, 256, 1).view(torch.float4_e2m1fn_x2)
    admitted = 0
    for code in range(256):
        mu = _int8_shift(_bounds([code])[0])
        if mu is None or code in (0x00, 0x80):
            continue
        admitted += 1
        e = torch.index_select(_int8_table(mu), 0, torch.arange(256) + 256 * code).view(torch.int8).double()
        sf = torch.full((1, 32, 1), code, dtype=torch.uint8).view(torch.float8_e4m3fn)
        np.testing.assert_array_equal((e * 2.0 ** (mu - 10)).numpy(), _independent(packed, sf)[0])
    # q's odd part must be at most 10 (12 * odd <= 127): normal mantissas 0, 1, 2, 4, 6 (odd parts 1, 9, 5, 3, 7)
    # at each of 15 exponents, and all 7 subnormals; both signs
    assert admitted == 2 * (15 * 5 + 7)


@pytest.mark.parametrize("data, integer", [("official", True), ("full-range", False)])
def test_cpu_reference_takes_the_integer_path_where_it_fits(data, integer, monkeypatch):
    calls = []
    real = reference_paths._fast_int8
    monkeypatch.setattr(reference_paths, "_fast_int8", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(reference_paths, "_int_mm_pays", lambda: True)
    inputs = generate_input((64, 36), (128, 256), (512, 1024), 2, 5, data=data, device="cpu")
    _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs))
    assert bool(calls) == integer


def test_cpu_reference_keeps_fp32_where_the_integer_gemm_does_not_pay(monkeypatch):
    calls = []
    real = reference_paths._fast_int8
    monkeypatch.setattr(reference_paths, "_fast_int8", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(reference_paths, "_int_mm_pays", lambda: False)
    inputs = generate_input((64, 36), (128, 256), (512, 1024), 2, 5, device="cpu")
    _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs))
    assert calls == []


def test_integer_gemm_is_refused_where_int_mm_fails_or_misreads(monkeypatch):
    def broken(a, b):
        raise RuntimeError("_int_mm not compiled for this CPU")

    monkeypatch.setattr(torch, "_int_mm", broken)
    assert reference_paths._int_mm_faster() is False
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: torch.zeros(a.shape[0], b.shape[1], dtype=torch.int32))
    assert reference_paths._int_mm_faster() is False


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).map(lambda x: x * MN_MULTIPLE), st.integers(1, 8).map(lambda x: x * MN_MULTIPLE),
       st.integers(1, 16).map(lambda x: x * K_MULTIPLE), st.sampled_from([0xBB, 0xFF, 0x77]),
       st.integers(0, 248), st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_cpu_fast_path_equals_fp64_wherever_the_bound_holds(m, n, k, mask, low_code, code_span, seed):
    """Random bytes and scale codes from a window of e4m3fn bytes (negative scales from 0x80 on): where
    exact_in_fp32 holds, _fast_cpu gives the fp64 bits with the integer path (operands that fit int8; fp32 for the
    rest) and without it."""
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randint(256, (r, k // 2), dtype=torch.uint8, generator=gen) & mask for r in (m, n)]
    codes = [torch.randint(low_code, low_code + 2 ** code_span, (r, k // 16), dtype=torch.uint8, generator=gen)
             for r in (m, n)]
    inputs = _group(*data, *codes)
    (a, b, _), (sfa, sfb) = inputs[0][0], inputs[1][0]
    if exact_in_fp32(k, sfa, sfb):
        want = ref_kernel_fp64(inputs)
        for integer_path in (True, False):
            _assert_same_bits(_fast_cpu([(a, b, *(c.to(torch.int32) for c in codes))], _bounds(*codes), integer_path),
                              want)


def test_warm_up_on_the_cpu_only_chooses_the_integer_path(monkeypatch):
    monkeypatch.setattr(reference_paths, "_INT_MM", [])
    monkeypatch.setattr(reference_paths, "_int_mm_faster", lambda: "chosen")
    monkeypatch.setattr(problems.nvfp4_group_gemm.inputs, "generate_many",
                        lambda *a, **k: pytest.fail("no inputs drawn on the CPU"))
    warm_up([((256, 512), 15)], "cpu")
    assert reference_paths._INT_MM == ["chosen"]
