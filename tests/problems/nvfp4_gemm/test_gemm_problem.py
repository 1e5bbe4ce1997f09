"""nvfp4_gemm's plug on the CPU: the draw (determinism, official shapes, dtypes, layouts, value sets), a known
product, the exact decode, the check's evidence, full-range data, cost, and torch_reference against the reference."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from harness import plugs
from harness.worker.task_alias import alias_task
from harness.problem import CaseError
from problems._nvfp4.draw import with_blocked
from problems._nvfp4.exact import dequantize
from problems._nvfp4.formats import E2M1_VALUES, e4m3fn_codes, pack_e2m1, unblock

ROOT = Path(__file__).resolve().parents[3]
P = plugs.get("nvfp4_gemm")


def load(variant: str):
    path = ROOT / "submissions" / "nvfp4_gemm" / variant / "submission.py"
    alias_task("nvfp4_gemm")  # its ``from task import``, as the worker resolves it
    spec = importlib.util.spec_from_file_location(f"fp4bench_nvfp4_gemm_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(m=136, n=72, k=192, l=2, seed=7):
    return P.parse_case({"m": m, "n": n, "k": k, "l": l, "seed": seed})


def bits(data):
    return [t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16) for t in data]


def test_draw_is_deterministic_and_seeded():
    one, two, other = P.generate(case(), 5), P.generate(case(), 5), P.generate(case(), 6)
    assert all(torch.equal(x, y) for x, y in zip(bits(one), bits(two)))
    assert not torch.equal(bits(one)[0], bits(other)[0])


def test_official_shapes_dtypes_and_layouts():
    a, b, sfa, sfb, sfa_p, sfb_p, c = P.generate(case(), 5)
    assert (a.shape, b.shape, c.shape) == ((136, 96, 2), (72, 96, 2), (136, 72, 2))
    assert a.dtype == b.dtype == torch.float4_e2m1fn_x2 and c.dtype == torch.float16
    assert a.stride() == (96, 1, 136 * 96) and c.stride() == (72, 1, 136 * 72)     # views of (L, rows, cols)
    assert sfa.shape == (136, 12, 2) and sfa.stride() == (12, 1, 136 * 12) and sfa.dtype == torch.float8_e4m3fn
    assert sfa_p.shape == (32, 4, 2, 4, 3, 2) and sfb_p.shape == (32, 4, 1, 4, 3, 2)
    assert sfa_p.stride() == (16, 4, 3 * 512, 1, 512, 2 * 3 * 512)
    for i in range(2):
        assert torch.equal(unblock(sfa_p[..., i:i + 1], 136, 12).view(torch.uint8), sfa[:, :, i].view(torch.uint8))
        assert torch.equal(unblock(sfb_p[..., i:i + 1], 72, 12).view(torch.uint8), sfb[:, :, i].view(torch.uint8))


def test_official_value_sets():
    a, b, sfa, sfb, sfa_p, _sfb_p, _c = P.generate(case(m=256, n=256, k=512, l=1), 1)
    assert a.view(torch.uint8).unique().numel() == 256                       # int8 over [-128, 128): every byte
    assert set(sfa.float().unique().tolist()) == {0.0, 1.0, 2.0, 3.0}         # randint(0, 4) -> e4m3fn
    assert set(sfa_p.float().unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_a_known_product():
    """A = [[1, -0.5, ...]] with scale 2, B rows of 1.5 with scale 0.25 and a subnormal scale 2^-9: exact values."""
    k = 64
    a_vals = torch.tensor([[1.0, -0.5] * 32, [6.0] * 64])
    b_vals = torch.tensor([[1.5] * 64, [-4.0] * 64, [0.5] * 64])
    a = pack_e2m1(a_vals).view(2, 32, 1).view(torch.float4_e2m1fn_x2)
    b = pack_e2m1(b_vals).view(3, 32, 1).view(torch.float4_e2m1fn_x2)
    sfa_plain = e4m3fn_codes(torch.tensor([[2.0] * 4, [1.0] * 4])).view(torch.float8_e4m3fn).view(1, 2, 4)
    sfb_plain = e4m3fn_codes(torch.tensor([[0.25] * 4, [1.0] * 4, [2.0**-9] * 4])).view(torch.float8_e4m3fn)
    (sfa, sfa_p), (sfb, sfb_p) = with_blocked(sfa_plain), with_blocked(sfb_plain.view(1, 3, 4))
    c = torch.zeros(2, 3, 1, dtype=torch.float16)
    out = P.reference((a, b, sfa, sfb, sfa_p, sfb_p, c))
    # row 0: 32 * (2 - 1) = 32 per unit of B; row 1: 64 * 6
    expected = torch.tensor([[32 * 1.5 * 0.25, -32 * 4.0, 32 * 0.5 * 2.0**-9],
                             [384 * 1.5 * 0.25, -384 * 4.0, 384 * 0.5 * 2.0**-9]], dtype=torch.float16)
    assert torch.equal(out[:, :, 0], expected)
    assert torch.equal(load("torch_reference").custom_kernel((a, b, sfa, sfb, sfa_p, sfb_p, c.clone())), out)
    assert k == 64


def test_exact_decode_of_every_code_pair():
    """Every e2m1 byte times every finite e4m3fn scale, against ml_dtypes' e4m3fn values."""
    packed = torch.arange(256, dtype=torch.uint8).repeat(256, 8)                  # [256 scales, 2048 bytes]
    codes = torch.arange(256, dtype=torch.uint8).view(256, 1).repeat(1, 256)     # one scale per 8 bytes
    got = dequantize(packed, codes.view(torch.float8_e4m3fn))
    scale = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    e2m1 = np.array(E2M1_VALUES)
    byte = np.arange(256)
    pairs = np.stack([e2m1[byte & 0xF], e2m1[byte >> 4]], axis=-1).reshape(-1)     # 512 values per 256 bytes
    expected = scale[:, None] * np.tile(pairs, 8)[None, :]
    finite = np.isfinite(scale)
    assert np.array_equal(got.numpy()[finite], expected[finite])


def test_check_gives_evidence():
    ref = P.reference(P.generate(case(l=1), 3))
    bad = ref.clone()
    bad[5, 7, 0] = ref[5, 7, 0] + 1
    bad[9, 1, 0] = float("nan")
    ev = P.check(bad, ref)
    assert (ev.mismatches, ev.total, ev.ok) == (2, 136 * 72, False)
    assert ev.first[0] == ((5, 7, 0), float(bad[5, 7, 0]), float(ref[5, 7, 0]))
    assert ev.first[1][0] == (9, 1, 0) and ev.first[1][1] != ev.first[1][1]
    assert "2 of 9792 elements differ" in ev.describe()
    assert P.check(ref.clone(), ref).ok


@pytest.mark.parametrize("data", ["official", "full-range"])
def test_torch_reference_equals_the_reference(data):
    sub = load("torch_reference")
    for c in (case(), case(m=128, n=256, k=1024, l=1, seed=1111)):
        x = P.generate(c, c.seed, data)
        expected = P.reference(x)
        out = sub.custom_kernel(tuple(t.clone() for t in x))
        assert P.check(out, expected).ok
        if data == "official":  # sums of multiples of 1/4 far below 2^24: exact in fp32 too
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16))


def test_full_range_draws_every_code_and_stays_finite():
    x = P.generate(case(m=256, n=256, k=1024, l=1), 2, "full-range")
    assert x[0].view(torch.uint8).unique().numel() == 256
    codes = x[2].view(torch.uint8)
    assert (codes == 0).any() and ((codes > 0) & (codes < 8)).any() and (codes >= 0x70).any()  # 0 .. 2^7
    assert not ((codes & 0x7F) == 0x7F).any()                                    # no NaN scale
    assert torch.isfinite(P.reference(x).float()).all()


def test_full_range_limit_and_parse_errors():
    with pytest.raises(CaseError, match="at most K=33918912"):
        P.check_drawable(case(k=33918912 + 64), "full-range")
    P.check_drawable(case(k=16384), "full-range")
    with pytest.raises(CaseError, match="data mode must be one of official, full-range, got 'x'"):
        P.check_drawable(case(), "x")
    with pytest.raises(CaseError, match=r"k must be a multiple of 64, got 96"):
        case(k=96)
    with pytest.raises(CaseError, match=r"expected keys \['m', 'n', 'k', 'l', 'seed'\].*\(missing \['l'\]\)"):
        P.parse_case({"m": 1, "n": 1, "k": 64, "seed": 1})
    with pytest.raises(CaseError, match="case 3: m must be a positive integer, got 0"):
        P.parse_case({"m": 0, "n": 1, "k": 64, "l": 1, "seed": 1}, where="case 3: ")


def test_cost_reproduces_the_task_sol():
    """task.yml: SOL at B200's 7.68 TB/s and 1.5 GHz FP4 (148 SMs x 32768 FLOP/clk): 8.994, 2.354, 1.333 us."""
    for c, sol_us in zip(plugs.load_cases("nvfp4_gemm", "benchmarks"), (8.994, 2.354, 1.333)):
        t = max(P.flops(c) / 7274e12, P.bytes_moved(c) / 7.68e12) * 1e6
        assert t == pytest.approx(sol_us, rel=2e-3)
