"""e2m1 / e4m3fn decoding against ml_dtypes (an independent implementation) and the blocked layout's index map."""
import ml_dtypes
import numpy as np
import pytest
import torch

from problems.nvfp4_group_gemm.formats import (
    ATOM_BYTES,
    ATOM_K,
    E2M1_VALUES,
    SF_VEC,
    blocked_index,
    blocked_offset,
    blocked_view_shape,
    blocked_view_strides,
    decode_e2m1,
    decode_e4m3fn,
    e4m3fn_value,
    unblock,
)
from problems.nvfp4_group_gemm.inputs import generate_input


def test_e2m1_decode_agrees_with_ml_dtypes_from_bits():
    codes = np.arange(16, dtype=np.uint8)
    theirs = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)  # ml_dtypes decodes the 4-bit code
    packed = torch.tensor([[c | (c << 4) for c in range(16)]], dtype=torch.uint8)
    ours = decode_e2m1(packed)[0].numpy()
    np.testing.assert_array_equal(ours[0::2], theirs)
    np.testing.assert_array_equal(ours[1::2], theirs)
    np.testing.assert_array_equal(np.signbit(ours[0::2]), np.signbit(theirs))  # code 8 is -0
    assert list(theirs) == list(E2M1_VALUES)


def test_e2m1_decode_every_byte_low_nibble_first():
    packed = torch.arange(256, dtype=torch.uint8).view(1, 256)
    values = decode_e2m1(packed)[0]
    for byte in range(256):
        assert values[2 * byte].item() == E2M1_VALUES[byte & 0xF]
        assert values[2 * byte + 1].item() == E2M1_VALUES[byte >> 4]


def test_e4m3fn_every_byte_matches_ml_dtypes():
    raw = np.arange(256, dtype=np.uint8)
    theirs = raw.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    ours = decode_e4m3fn(torch.from_numpy(raw)).numpy()
    nan = np.isnan(theirs)
    assert list(np.nonzero(nan)[0]) == [0x7F, 0xFF]
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(ours[~nan], theirs[~nan])
    assert e4m3fn_value(0x7E) == 448.0 and e4m3fn_value(0x01) == 2.0**-9 and e4m3fn_value(0x38) == 1.0


def test_e4m3fn_decode_agrees_with_torch_cast():
    raw = torch.arange(256, dtype=torch.uint8)
    ours = decode_e4m3fn(raw)
    torch_vals = raw.view(torch.float8_e4m3fn).to(torch.float64)
    same = (ours == torch_vals) | (ours.isnan() & torch_vals.isnan())
    assert bool(same.all())


@pytest.mark.parametrize("r,j,rest_k,offset", [
    (0, 0, 1, 0), (1, 0, 1, 16), (32, 0, 1, 4), (0, 1, 1, 1), (0, 4, 2, 512), (128, 0, 2, 1024),
    (127, 3, 1, 31 * 16 + 3 * 4 + 3), (130, 5, 3, (1 * 3 + 1) * 512 + 2 * 16 + 0 * 4 + 1),
])
def test_blocked_offset_formula(r, j, rest_k, offset):
    assert blocked_offset(r, j, rest_k) == offset


def test_blocked_index_is_a_bijection_onto_valid_slots():
    rows, cols = 200, 12  # padded to 256 x 12 (rest_mn 2, rest_k 3)
    idx = blocked_index(rows, cols)
    assert idx.shape == (rows, cols)
    assert len(set(idx.flatten().tolist())) == rows * cols
    assert int(idx.max()) < 2 * 3 * 512


def test_unblock_inverts_the_official_permuted_view():
    rows, cols = 72, 8
    storage = torch.zeros(1, 1, 2, 32, 4, 4, dtype=torch.uint8)
    values = torch.randint(0, 255, (rows, cols), dtype=torch.uint8)
    for r in range(rows):
        for j in range(cols):
            storage.view(-1)[blocked_offset(r, j, 2)] = values[r, j]
    view = storage.permute(3, 4, 1, 5, 2, 0)
    assert view.shape == (32, 4, 1, 4, 2, 1)
    assert torch.equal(unblock(view, rows, cols), values)


@pytest.mark.parametrize(("rows", "k"), [(64, 256), (128, 512), (200, 320), (384, 7168)])
def test_blocked_view_shape_and_strides_describe_the_generated_view(rows, k):
    data = generate_input([rows], [128], [k], 1, seed=3)
    sfa = data[2][0][0]
    assert tuple(sfa.shape) == blocked_view_shape(rows, k // SF_VEC)
    assert tuple(sfa.stride()) == blocked_view_strides(rows, k // SF_VEC)
    assert blocked_view_strides(rows, k // SF_VEC)[4] == ATOM_BYTES == 512 and ATOM_K == 64
