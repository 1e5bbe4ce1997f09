"""Number formats and layouts of nvfp4_group_gemm: e2m1 (fp4), e4m3fn (fp8 scales), the blocked 32x4x4 layout.

Facts from docs/problem.md, "Number formats" (OCP MX spec for e2m1/e4m3fn; cuBLAS "block scaling factors layout").
"""
import torch

#: e2m1 code -> value, codes 0..15 (sign bit 3, exponent bits 2..1 with bias 1, mantissa bit 0).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
#: Elements sharing one e4m3fn scale factor ("block16").
SF_VEC = 16
#: The blocked scale layout's atom: 32 x 4 rows by 4 scale columns, 512 bytes.
ATOM_ROWS, ATOM_COLS = 128, 4
#: Bytes of one atom (one e4m3fn byte a scale), stored contiguously.
ATOM_BYTES = ATOM_ROWS * ATOM_COLS
#: K elements one atom's 4 scale columns cover.
ATOM_K = ATOM_COLS * SF_VEC
#: Largest finite e4m3fn value.
E4M3FN_MAX = 448.0


def e4m3fn_value(code: int) -> float:
    """Decode one e4m3fn byte from its bits (sign, 4 exponent bits bias 7, 3 mantissa bits; 0x7F/0xFF NaN)."""
    sign = -1.0 if code & 0x80 else 1.0
    exp, man = (code >> 3) & 0xF, code & 0x7
    if exp == 0xF and man == 0x7:
        return float("nan")
    if exp == 0:
        return sign * man / 8.0 * 2.0**-6
    return sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)


_LUT_CACHE: dict[tuple[str, torch.device], torch.Tensor] = {}


def _lut(kind: str, device: torch.device) -> torch.Tensor:
    key = (kind, torch.device(device))
    if key not in _LUT_CACHE:
        if kind == "e2m1":
            values = [E2M1_VALUES[i] for i in range(16)]
        else:
            values = [e4m3fn_value(i) for i in range(256)]
        _LUT_CACHE[key] = torch.tensor(values, dtype=torch.float64, device=device)
    return _LUT_CACHE[key]


def decode_e2m1(packed: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unpack e2m1 pairs: [..., K/2] bytes (uint8 or float4_e2m1fn_x2) -> [..., K] values of ``dtype``.

    Element 2i is the LOW nibble of byte i, element 2i+1 the HIGH nibble. Exact in any float dtype.
    """
    u = packed.view(torch.uint8)
    lut = _lut("e2m1", u.device).to(dtype)
    low, high = lut[(u & 0xF).long()], lut[(u >> 4).long()]
    return torch.stack((low, high), dim=-1).flatten(-2)


def decode_e4m3fn(sf: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Decode e4m3fn bytes (float8_e4m3fn or uint8) from their bits into ``dtype`` (exact in fp32/fp64)."""
    u = sf.view(torch.uint8)
    return _lut("e4m3fn", u.device).to(dtype)[u.long()]


def blocked_rest(rows: int, sf_cols: int) -> tuple[int, int]:
    """(rest_mn, rest_k): atoms along the rows (ceil(rows / 128)) and along the scale columns (ceil(sf_cols / 4))."""
    return -(-rows // ATOM_ROWS), -(-sf_cols // ATOM_COLS)


def blocked_shape(rows: int, sf_cols: int) -> tuple[int, int, int, int, int, int]:
    """Storage shape (L=1, rest_mn, rest_k, 32, 4, 4) of the blocked layout for ``rows`` x ``sf_cols`` scales."""
    return (1, *blocked_rest(rows, sf_cols), 32, 4, 4)


def blocked_view_shape(rows: int, sf_cols: int) -> tuple[int, int, int, int, int, int]:
    """Shape of the exposed blocked view in input_t (storage permuted by BLOCKED_PERMUTE):
    [32, 4, rest_mn, 4, rest_k, 1]."""
    rest_mn, rest_k = blocked_rest(rows, sf_cols)
    return (32, 4, rest_mn, 4, rest_k, 1)


def blocked_view_strides(rows: int, sf_cols: int) -> tuple[int, int, int, int, int, int]:
    """Element strides of the exposed view when its storage is the contiguous blocked layout (as generated):
    (16, 4, rest_k * 512, 1, 512, rest_mn * rest_k * 512)."""
    rest_mn, rest_k = blocked_rest(rows, sf_cols)
    return (16, 4, rest_k * ATOM_BYTES, 1, ATOM_BYTES, rest_mn * rest_k * ATOM_BYTES)


#: The permutation from blocked storage (L, rest_mn, rest_k, 32, 4, 4) to the exposed view
#: [32, 4, rest_mn, 4, rest_k, L].
BLOCKED_PERMUTE = (3, 4, 1, 5, 2, 0)


def blocked_offset(r, j, rest_k: int):
    """Storage offset of scale (row ``r``, scale-column ``j``) in the blocked 32x4x4 layout.

    ``((r // 128) * rest_k + j // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4``; works on ints
    and integer tensors alike.
    """
    return ((r // ATOM_ROWS) * rest_k + j // ATOM_COLS) * ATOM_BYTES + (r % 32) * 16 + ((r % ATOM_ROWS) // 32) * 4 \
        + j % ATOM_COLS


def blocked_index(rows: int, sf_cols: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 [rows, sf_cols]: the storage offset of every valid scale (the index map of the blocked layout)."""
    r = torch.arange(rows, device=device).unsqueeze(1)
    j = torch.arange(sf_cols, device=device).unsqueeze(0)
    return blocked_offset(r, j, blocked_rest(rows, sf_cols)[1])


def unblock(reordered: torch.Tensor, rows: int, sf_cols: int) -> torch.Tensor:
    """The valid [rows, sf_cols] scales read back out of a blocked view [32, 4, rest_mn, 4, rest_k, 1]."""
    storage = reordered.permute(5, 2, 4, 0, 1, 3).reshape(-1)
    return storage[blocked_index(rows, sf_cols, reordered.device)]
