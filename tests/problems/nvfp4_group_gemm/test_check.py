"""Output checks: tolerance edges, NaN/inf rules, container validation messages."""
import pytest
import torch

from problems.nvfp4_group_gemm.check import (OutputMeta, ReferenceError, all_finite_fp16, check_outputs, compare,
                                            describe, validate_container)

SIZES = [(4, 8, 64, 1), (2, 8, 64, 1)]


def test_tolerance_edges():
    exp = torch.tensor([0.0, 1.0, 100.0], dtype=torch.float16)
    inside = exp.double() + torch.tensor([1e-3, 2e-3 - 1e-6, 0.1009], dtype=torch.float64)
    outside = exp.double() + torch.tensor([0.0, 2.1e-3, 0.2], dtype=torch.float64)
    assert compare(inside, exp).ok
    ev = compare(outside, exp)
    assert (ev.mismatches, ev.total) == (2, 3)
    assert ev.first[0][0] == (1,) and ev.first[0][2] == 1.0


def test_nan_and_inf_in_output_are_mismatches():
    exp = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
    got = torch.tensor([float("nan"), float("inf"), 3.0], dtype=torch.float16)
    ev = compare(got, exp)
    assert ev.mismatches == 2
    assert "2 of 3 elements differ" in ev.describe()
    assert "got nan expected 1.0" in ev.describe()


def test_nan_in_reference_is_a_harness_error():
    with pytest.raises(ReferenceError):
        compare(torch.zeros(2), torch.tensor([0.0, float("nan")]))


def test_check_outputs_names_the_group_and_indices():
    exp = [torch.zeros(4, 8, 1, dtype=torch.float16), torch.zeros(2, 8, 1, dtype=torch.float16)]
    got = [exp[0].clone(), exp[1].clone()]
    got[1][1, 3, 0] = 5
    msg = check_outputs(got, exp)
    assert msg.startswith("output 1: 1 of 16 elements differ")
    assert "[1, 3, 0] got 5.0 expected 0.0" in msg
    assert check_outputs(exp, exp) is None


def _metas(tensors):
    return [describe(t) for t in tensors]


def test_container_validation_messages():
    good = [torch.zeros(4, 8, 1, dtype=torch.float16), torch.zeros(2, 8, 1, dtype=torch.float16)]
    assert validate_container("builtins.list", _metas(good), SIZES, "cpu") is None
    assert validate_container("builtins.list", [], SIZES, "cpu") == "expected 2 outputs (one per group), got 0"
    assert validate_container("builtins.tuple", _metas(good), SIZES, "cpu") == \
        "expected a list of 2 tensors (output_t), got builtins.tuple"
    msg = validate_container("builtins.list", _metas([good[0].float(), good[1]]), SIZES, "cpu")
    assert msg == "output 0: dtype torch.float32 (expected torch.float16)"
    msg = validate_container("builtins.list", _metas([good[0][:, :, 0], good[1]]), SIZES, "cpu")
    assert msg == "output 0: shape [4, 8] (expected [4, 8, 1])"
    msg = validate_container("builtins.list", _metas(good), SIZES, "cuda:0")
    assert msg == "output 0: device cpu (expected cuda:0)"
    msg = validate_container("builtins.list", _metas([good[0].numpy(), good[1]]), SIZES, "cpu")
    assert msg == "output 0: expected torch.Tensor, got numpy.ndarray (not a tensor)"


class Lazy(torch.Tensor):
    pass


def test_tensor_subclass_is_rejected():
    t = torch.zeros(4, 8, 1, dtype=torch.float16).as_subclass(Lazy)
    meta = describe(t)
    assert meta == OutputMeta(meta.type_name, False, "torch.float16", (4, 8, 1), "cpu")
    msg = validate_container("builtins.list", [meta, describe(torch.zeros(2, 8, 1, dtype=torch.float16))], SIZES, "cpu")
    assert msg.startswith("output 0: expected torch.Tensor, got ") and "tensor subclass" in msg


def test_all_finite_fp16_agrees_with_isfinite_on_every_bit_pattern():
    """Every one of the 65536 fp16 patterns alone, then each non-finite one (+-inf, every NaN) planted among
    finite values: all_finite_fp16 says what torch.isfinite says."""
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = torch.isfinite(patterns)
    assert int((~finite).sum()) == 2 * 1024  # +-inf and the 2 x 1023 NaNs
    assert [all_finite_fp16(p.reshape(1)) for p in patterns] == finite.tolist()
    background = torch.linspace(-65504, 65504, 999).to(torch.float16)
    for bad in patterns[~finite][::17].tolist() + [float("inf"), float("-inf")]:
        planted = background.clone()
        planted[500] = bad
        assert not all_finite_fp16(planted.view(3, 333, 1))
    assert all_finite_fp16(background) and all_finite_fp16(patterns[finite]) and all_finite_fp16(background[:0])
    with pytest.raises(ValueError, match=r"^expected a torch.float16 tensor, got torch.float32$"):
        all_finite_fp16(background.float())
