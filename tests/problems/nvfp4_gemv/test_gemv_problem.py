"""nvfp4_gemv's plug on the CPU: the draw (determinism, official shapes, dtypes, layouts, value sets), a known
product, the check's evidence, full-range data, cost, and torch_reference against the reference."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from harness import plugs
from harness.worker.task_alias import alias_task
from harness.problem import CaseError
from problems._nvfp4.draw import with_blocked
from problems._nvfp4.formats import e4m3fn_codes, pack_e2m1, unblock

ROOT = Path(__file__).resolve().parents[3]
P = plugs.get("nvfp4_gemv")


def load(variant: str):
    path = ROOT / "submissions" / "nvfp4_gemv" / variant / "submission.py"
    alias_task("nvfp4_gemv")  # its ``from task import``, as the worker resolves it
    spec = importlib.util.spec_from_file_location(f"fp4bench_nvfp4_gemv_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(m=136, k=192, l=2, seed=7):
    return P.parse_case({"m": m, "k": k, "l": l, "seed": seed})


def bits(data):
    return [t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16) for t in data]


def test_draw_is_deterministic_and_seeded():
    one, two, other = P.generate(case(), 5), P.generate(case(), 5), P.generate(case(), 6)
    assert all(torch.equal(x, y) for x, y in zip(bits(one), bits(two)))
    assert not torch.equal(bits(one)[0], bits(other)[0])


def test_official_shapes_dtypes_layouts_and_values():
    a, b, sfa, sfb, sfa_p, sfb_p, c = P.generate(case(), 5)
    assert (a.shape, b.shape, c.shape) == ((136, 96, 2), (128, 96, 2), (136, 1, 2))   # b padded to 128 rows
    assert a.dtype == b.dtype == torch.float4_e2m1fn_x2 and c.dtype == torch.float16
    assert a.stride() == (96, 1, 136 * 96) and c.stride() == (1, 1, 136)
    assert (sfa.shape, sfb.shape) == ((136, 12, 2), (128, 12, 2)) and sfb.stride() == (12, 1, 128 * 12)
    assert sfa_p.shape == (32, 4, 2, 4, 3, 2) and sfb_p.shape == (32, 4, 1, 4, 3, 2)
    assert set(a.view(torch.uint8).unique().tolist()) == {0, 1, 2, 3}      # randint(0, 4): high nibble 0
    assert set(sfa.float().unique().tolist()) == {0.0, 1.0, 2.0}           # randint(0, 3) -> e4m3fn
    for i in range(2):
        assert torch.equal(unblock(sfb_p[..., i:i + 1], 128, 12).view(torch.uint8), sfb[:, :, i].view(torch.uint8))


def test_a_known_product_uses_only_the_first_row_of_b():
    a_vals = torch.tensor([[1.5] * 64, [-6.0, 0.5] * 32])
    b_vals = torch.tensor([[2.0] * 64] + [[6.0] * 64] * 127)                       # rows 1.. must not count
    a = pack_e2m1(a_vals).view(2, 32, 1).view(torch.float4_e2m1fn_x2)
    b = pack_e2m1(b_vals).view(128, 32, 1).view(torch.float4_e2m1fn_x2)
    sfa_plain = e4m3fn_codes(torch.tensor([[1.0] * 4, [2.0**-7] * 4])).view(torch.float8_e4m3fn).view(1, 2, 4)
    sfb_plain = e4m3fn_codes(torch.full((128, 4), 0.5)).view(torch.float8_e4m3fn).view(1, 128, 4)
    (sfa, sfa_p), (sfb, sfb_p) = with_blocked(sfa_plain), with_blocked(sfb_plain)
    data = (a, b, sfa, sfb, sfa_p, sfb_p, torch.zeros(2, 1, 1, dtype=torch.float16))
    expected = torch.tensor([[[64 * 1.5 * 2.0 * 0.5]], [[32 * (-6.0 + 0.5) * 2.0**-7 * 2.0 * 0.5]]],
                            dtype=torch.float16)
    assert torch.equal(P.reference(data), expected)
    assert torch.equal(load("torch_reference").custom_kernel(data), expected)


def test_check_gives_evidence():
    ref = P.reference(P.generate(case(l=1), 3))
    bad = ref.clone()
    bad[5, 0, 0] = -ref[5, 0, 0] - 1
    ev = P.check(bad, ref)
    assert (ev.mismatches, ev.total) == (1, 136) and ev.first == (((5, 0, 0), float(bad[5, 0, 0]), float(ref[5, 0, 0])),)


@pytest.mark.parametrize("data", ["official", "full-range"])
def test_torch_reference_equals_the_reference(data):
    sub = load("torch_reference")
    for c in (case(), case(m=256, k=4096, l=2, seed=1111)):
        x = P.generate(c, c.seed, data)
        expected = P.reference(x)
        out = sub.custom_kernel(tuple(t.clone() for t in x))
        assert P.check(out, expected).ok
        if data == "official":
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16))


def test_rules_and_cost():
    with pytest.raises(CaseError, match=r"expected keys \['m', 'k', 'l', 'seed'\], got .*\(unexpected \['n'\]\)"):
        P.parse_case({"m": 1, "n": 1, "k": 64, "l": 1, "seed": 1})
    assert P.label(case()) == "M=136 K=192 L=2" and P.case_text(case()) == "m: 136; k: 192; l: 2; seed: 7"
    assert P.output_spec(case()).tensors[0].shape == (136, 1, 2)
    # task.yml: 8.622, 17.275, 4.317 us at B200's 7.68 TB/s (memory-bound)
    for c, sol_us in zip(plugs.load_cases("nvfp4_gemv", "benchmarks"), (8.622, 17.275, 4.317)):
        assert P.bytes_moved(c) / 7.68e12 * 1e6 == pytest.approx(sol_us, rel=5e-3)
