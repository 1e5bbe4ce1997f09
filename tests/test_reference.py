"""The exact reference against an independent numpy + ml_dtypes computation, a hand-made product, rounding."""
import ml_dtypes
import numpy as np
import pytest
import torch

from task.inputs import generate_input
from task.reference import ref_kernel, round_to_fp16


def _independent(packed: torch.Tensor, sf: torch.Tensor) -> np.ndarray:
    """Decode with ml_dtypes only: nibbles -> float4_e2m1fn, bytes -> float8_e4m3fn, float64 products."""
    u = packed[:, :, 0].view(torch.uint8).numpy()
    nibbles = np.stack([u & 0xF, u >> 4], axis=-1).reshape(u.shape[0], -1).astype(np.uint8)
    values = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = sf[:, :, 0].view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return values * np.repeat(scales, 16, axis=1)


@pytest.mark.parametrize("data", ["official", "full-range"])
def test_reference_matches_ml_dtypes_decode(data):
    inputs = generate_input((64, 36), (128, 256), (512, 1024), 2, 21, data=data, device="cpu")
    got = ref_kernel(inputs)
    for (a, b, _), (sfa, sfb), out in zip(inputs[0], inputs[1], got):
        exact = _independent(a, sfa) @ _independent(b, sfb).T
        ours = out[:, :, 0].numpy()
        assert ours.dtype == np.float16
        # numpy rounds float64 -> float16 directly (one correct rounding): an independent rounding path
        np.testing.assert_array_equal(ours, exact.astype(np.float16))


def test_known_product():
    """A = 1.5 everywhere with scale 2, B = -0.5 with scale 4, K = 64: each C = 64 * (3 * -2) = -384."""
    m, n, k = 4, 8, 64
    a = torch.full((m, k // 2, 1), 0x33, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)   # codes 3|3 = 1.5
    b = torch.full((n, k // 2, 1), 0x99, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)   # codes 9|9 = -0.5
    sfa = torch.full((m, k // 16, 1), 2.0).to(torch.float8_e4m3fn)
    sfb = torch.full((n, k // 16, 1), 4.0).to(torch.float8_e4m3fn)
    c = torch.zeros(m, n, 1, dtype=torch.float16)
    out = ref_kernel(([(a, b, c)], [(sfa, sfb)], [(None, None)], [(m, n, k, 1)]))
    assert out[0].shape == (m, n, 1) and out[0].dtype == torch.float16
    assert bool((out[0] == -384.0).all())


def test_nibble_order_matters_for_the_reference():
    """Byte 0x71 holds element 0 = code 1 (0.5) and element 1 = code 7 (6): a one-sided swap changes C."""
    m, n, k = 1, 1, 16
    a = torch.tensor([[0x71] + [0] * 7], dtype=torch.uint8).view(m, k // 2, 1).view(torch.float4_e2m1fn_x2)
    b = torch.tensor([[0x01] + [0] * 7], dtype=torch.uint8).view(n, k // 2, 1).view(torch.float4_e2m1fn_x2)
    one = torch.ones(1, 1, 1).to(torch.float8_e4m3fn)
    out = ref_kernel(([(a, b, None)], [(one, one)], [(None, None)], [(m, n, k, 1)]))
    assert float(out[0]) == 0.25  # 0.5 (A's low nibble) * 0.5 (B's low nibble) + 6 * 0


def test_round_to_fp16_is_a_single_rounding():
    x = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-11, -(1 + 2**-11 + 2**-40), 70000.0, 2**-30], dtype=torch.float64)
    assert x[:1].to(torch.float32).to(torch.float16).item() == 1.0  # the double rounding we avoid
    got = round_to_fp16(x).tolist()
    assert got[0] == 1 + 2**-10          # just above the halfway point: rounds up
    assert got[1] == 1.0                 # exactly halfway: ties to even
    assert got[2] == -(1 + 2**-10)
    assert got[3] == float("inf")        # beyond fp16's range
    assert got[4] == 0.0                 # below fp16's smallest subnormal / 2
