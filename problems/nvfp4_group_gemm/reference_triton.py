"""The fast reference's decode on a GPU: one Triton kernel for every operand of one input.

It reads each operand's packed e2m1 bytes [R, K/2] and e4m3fn scale bytes [R, K/16] once and writes the decoded
products (value x scale) as bf16 [R, K] once, two bf16 per byte read (one int32 store); on the way it folds the
scale bytes into ``reference``'s scale statistics (one (max key, max key) pair per operand, from the same
256-entry key table ``exact_in_fp32`` reads), so no index tensor and no separate statistics pass exist.

Decoding (exact, integer and fp32 operations only): a packed byte becomes two fp16 patterns worth its two e2m1
values times 2^-14 (bit moves), widened to fp32; its e4m3fn scale becomes fp32 scale times 2^14 from its bits.
Each product is exact in fp32 (at most 6 significant bits, in [2^-10, 2688]), so its fp32 pattern's high half is
the bf16 pattern of the same number. NaN scales (0x7F, 0xFF) give NaN products, as the torch table decode does.

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the kernel runs on CPU tensors; otherwise it
needs CUDA tensors. ``reference.ref_kernel`` uses it on CUDA when triton imports.
"""
from __future__ import annotations

import contextlib
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import torch
import triton
import triton.language as tl

#: Rows per program; a program walks the whole K of its rows, so every program of one input costs the same.
BLOCK_ROWS = 16
#: Packed bytes (2 values each) per row per step: 16 scale blocks of 8 bytes.
BLOCK_BYTES = 128
NUM_WARPS = 4
#: Bytes sharing one scale: 16 e2m1 values.
_BLOCK = tl.constexpr(8)
#: Packed bytes per thread and step: one 4-byte load, one 16-byte store.
_VEC = tl.constexpr(4)
#: Addresses and strides divisible by this let the compiler vectorise loads and stores.
_ALIGN = tl.constexpr(16)
#: Operand slots the kernel searches at least (a power of 2): one compiled kernel up to 8 groups.
_MIN_OPS = 16
#: Per-operand descriptor, one int64 row each, in this order (the kernel reads fields by these positions).
_FIELDS = ("packed address", "packed row stride", "scales address", "scales row stride", "rows",
           "packed bytes per row", "output offset (int32 words)", "first program")
_PACKED, _PACKED_STRIDE, _SCALES, _SCALES_STRIDE, _ROWS, _HALF_K, _OUT, _FIRST = (tl.constexpr(i) for i in range(8))
_WIDTH = tl.constexpr(len(_FIELDS))
#: Two int32 minima read as one int64 (little-endian): where the statistics start.
_INT32_MIN_PAIR = -(2**63) + 2**31


@triton.jit
def _e2m1_pair_as_fp16(byte):
    """uint32 bytes of two e2m1 codes -> uint32 of two fp16 patterns, the low nibble's in the low half, each worth
    its e2m1 value * 2^-14: a code's magnitude bits (exponent 2 bits, mantissa 1 bit) become the fp16's exponent
    low bits and mantissa top bit (code 1 a subnormal), its sign the fp16's sign. ``byte * 0x200200`` is
    ``byte << 9 | byte << 21`` and ``byte * 0x1001000`` is ``byte << 12 | byte << 24`` (no overlapping bits)."""
    return ((byte * 0x00200200) & 0x0E000E00) | ((byte * 0x01001000) & 0x80008000)


@triton.jit
def _fp16_half_to_fp32(bits):
    """uint32 holding an fp16 pattern in its low 16 bits -> that number as fp32 (exact)."""
    return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _e4m3fn_fp32_times_2_pow_14(code):
    """uint32 e4m3fn bytes -> fp32 scale * 2^14: subnormals m * 2^5, normals (1 + m/8) * 2^(e - 7 + 14), NaN for
    0x7F and 0xFF."""
    magnitude = code & 0x7F
    normal = (((magnitude >> 3) + (127 - 7 + 14)) << 23) | ((code & 7) << 20)
    normal = tl.where(magnitude == 0x7F, 0x7FC00000, normal)
    value = tl.where(magnitude < 8, (code & 7).to(tl.float32) * 32.0, normal.to(tl.float32, bitcast=True))
    # the sign as a bit: compiled, -value is 0 - value, which turns the scale -0.0 (code 0x80) into +0.0
    return (value.to(tl.uint32, bitcast=True) | ((code & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def _decode_kernel(meta_ptr, keys_ptr, out_ptr, stats_ptr, n_ops, OPS: tl.constexpr,
                   BLOCK_ROWS: tl.constexpr, BLOCK_BYTES: tl.constexpr, ALIGNED: tl.constexpr,
                   STATS_ONLY: tl.constexpr = False):
    # this program's operand: the last one whose first program is at most this one (OPS >= n_ops, a power of 2)
    pid = tl.program_id(0)
    ops = tl.arange(0, OPS)
    firsts = tl.load(meta_ptr + ops * _WIDTH + _FIRST, mask=ops < n_ops, other=2**62)
    op = tl.sum((firsts <= pid).to(tl.int32), 0) - 1
    desc = meta_ptr + op * _WIDTH
    packed = tl.load(desc + _PACKED).to(tl.pointer_type(tl.uint8))
    packed_stride = tl.load(desc + _PACKED_STRIDE)
    scales = tl.load(desc + _SCALES).to(tl.pointer_type(tl.uint8))
    scales_stride = tl.load(desc + _SCALES_STRIDE)
    n_rows = tl.load(desc + _ROWS)
    half_k = tl.load(desc + _HALF_K)
    out = out_ptr + tl.load(desc + _OUT)
    if ALIGNED:
        packed = tl.multiple_of(packed, _ALIGN)
        packed_stride = tl.multiple_of(packed_stride, _ALIGN)
        scales = tl.multiple_of(scales, _ALIGN)
        scales_stride = tl.multiple_of(scales_stride, _ALIGN)
        half_k = tl.multiple_of(half_k, _ALIGN)
        out = tl.multiple_of(out, _ALIGN)

    # a step is [BLOCK_ROWS, BLOCK_BYTES // _VEC, _VEC] packed bytes -> as many int32 words (two bf16 each): one
    # layout for the load and the store
    rows = (pid - tl.load(desc + _FIRST)) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    quads = tl.arange(0, BLOCK_BYTES // _VEC)
    lane = tl.arange(0, _VEC)
    row_ok = rows < n_rows
    # running maxima of the key halves, from the key of scale byte 0x00 (what masked entries read), so that every
    # program, even one with no rows or no K, leaves its operand at least that key
    zero_key = tl.load(keys_ptr)
    key_lo = tl.full([BLOCK_ROWS, BLOCK_BYTES // _VEC], 0, tl.int32) + ((zero_key << 16) >> 16)
    key_hi = tl.full([BLOCK_ROWS, BLOCK_BYTES // _VEC], 0, tl.int32) + (zero_key >> 16)
    for k0 in range(0, half_k, BLOCK_BYTES):
        col = k0 + quads * _VEC  # first packed byte of each quad
        ok = row_ok[:, None] & (col < half_k)[None, :]
        code = tl.load(scales + rows[:, None] * scales_stride + (col // _BLOCK)[None, :], mask=ok, other=0)
        key = tl.load(keys_ptr + code.to(tl.int32))
        key_lo = tl.maximum(key_lo, (key << 16) >> 16)
        key_hi = tl.maximum(key_hi, key >> 16)
        if not STATS_ONLY:
            scale = _e4m3fn_fp32_times_2_pow_14(code.to(tl.uint32))[:, :, None]
            within = col[:, None] + lane[None, :]
            ok3 = ok[:, :, None]
            x = tl.load(packed + rows[:, None, None] * packed_stride + within[None, :, :], mask=ok3, other=0)
            x = x.to(tl.uint32)
            pair = _e2m1_pair_as_fp16(x)
            # exact fp32 products (value * 2^-14 times scale * 2^14): their high halves are the bf16 patterns
            low = (_fp16_half_to_fp32(pair & 0xFFFF) * scale).to(tl.uint32, bitcast=True)
            high = (_fp16_half_to_fp32(pair >> 16) * scale).to(tl.uint32, bitcast=True)
            word = (low >> 16) | (high & 0xFFFF0000)  # element 2i (low nibble) at the lower address
            tl.store(out + rows[:, None, None] * half_k + within[None, :, :], word.to(tl.int32, bitcast=True),
                     mask=ok3)
    tl.atomic_max(stats_ptr + 2 * op, tl.max(tl.max(key_lo, 1), 0), sem="relaxed")
    tl.atomic_max(stats_ptr + 2 * op + 1, tl.max(tl.max(key_hi, 1), 0), sem="relaxed")


def _check_operand(i: int, packed: torch.Tensor, scales: torch.Tensor, device: torch.device) -> None:
    ok = (packed.dtype == scales.dtype == torch.uint8 and packed.dim() == scales.dim() == 2
          and packed.shape[0] == scales.shape[0] and packed.shape[1] == scales.shape[1] * _BLOCK.value
          and packed.stride(1) == scales.stride(1) == 1 and packed.device == scales.device == device)
    if not ok:
        raise ValueError(f"operand {i}: expected uint8 packed [R, K/2] and scales [R, K/16] with unit column "
                         f"strides on {device}; got packed {packed.dtype} {tuple(packed.shape)} stride "
                         f"{packed.stride()} on {packed.device}, scales {scales.dtype} {tuple(scales.shape)} "
                         f"stride {scales.stride()} on {scales.device}")


def decode_operands(operands: Sequence[tuple[torch.Tensor, torch.Tensor]], keys: torch.Tensor,
                    block_rows: int = BLOCK_ROWS, block_bytes: int = BLOCK_BYTES,
                    num_warps: int = NUM_WARPS) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Decode every operand in one launch, queued on the current stream (no sync).

    ``operands``: per operand (packed, scales): uint8 [R, K/2] e2m1 pairs (element 2i the low nibble) and uint8
    [R, K/16] e4m3fn bytes, both with unit column stride (any row stride), on ``keys``' device. ``keys``: int32
    [256], entry c the int16 pair (low half, high half) of scale byte c whose maxima are wanted
    (``reference``'s key table); entry 0x00 must lose both maxima. ``block_rows``, ``block_bytes``,
    ``num_warps``: the tile (powers of two; ``block_bytes`` at least 8).

    Returns (values, stats): per operand a bf16 [R, K] tensor of value x scale (views of one buffer), and int32
    [len(operands), 2] holding per operand the maxima of the two key halves over its scale bytes (the key of 0x00
    for an operand with no scales). Raises ValueError naming the operand for a wrong dtype, shape, stride or device.
    """
    out, stats = _run_decode(operands, keys, False, block_rows, block_bytes, num_warps)
    words = [p.shape[0] * p.shape[1] for p, _ in operands]
    values = [w.view(torch.bfloat16).view(p.shape[0], 2 * p.shape[1]) for w, (p, _) in zip(out.split(words), operands)]
    return values, stats


def scale_stats(operands: Sequence[tuple[torch.Tensor, torch.Tensor]], keys: torch.Tensor) -> torch.Tensor:
    """``decode_operands``' statistics alone (its kernel reading only the scale bytes, writing no values), queued on
    the current stream: int32 [len(operands), 2]. Same arguments and errors as ``decode_operands``."""
    return _run_decode(operands, keys, True, BLOCK_ROWS, BLOCK_BYTES, NUM_WARPS)[1]


def _check_keys(keys: torch.Tensor) -> None:
    if keys.dtype != torch.int32 or tuple(keys.shape) != (256,):
        raise ValueError(f"keys: expected int32 [256], got {keys.dtype} {tuple(keys.shape)}")


class _DecodeLaunch:
    """``_decode_kernel`` over the same ``operands`` again and again (their contents may change between calls, not
    their addresses, shapes or strides): checks and descriptors done once; a call queues one launch and returns
    (int32 words of the values, empty when ``stats_only``; int32 [n, 2] statistics), fresh tensors each call."""

    def __init__(self, operands, keys: torch.Tensor, stats_only: bool, block_rows: int, block_bytes: int,
                 num_warps: int):
        device = keys.device
        _check_keys(keys)
        for i, (packed, scales) in enumerate(operands):
            _check_operand(i, packed, scales, device)
        self.n, self.keys, self.stats_only, self._keep = len(operands), keys, stats_only, list(operands)
        self.words = [p.shape[0] * p.shape[1] for p, _ in operands]
        self.tile = (block_rows, block_bytes, num_warps)
        # one upload: the descriptors, then the statistics' starting values (INT32_MIN pairs as one int64 each),
        # which every operand's programs (at least one each) raise to at least the key of 0x00
        host, offset, self.programs = [], 0, 0
        for (packed, scales), size in zip(operands, self.words):
            host += [packed.data_ptr(), packed.stride(0), scales.data_ptr(), scales.stride(0), packed.shape[0],
                     packed.shape[1], offset, self.programs]
            offset, self.programs = offset + size, self.programs + max(1, triton.cdiv(packed.shape[0], block_rows))
        self.aligned = all(host[i * _WIDTH.value + f] % _ALIGN.value == 0
                           for i in range(self.n) for f in (0, 1, 2, 3, 5))
        upload = torch.tensor(host + [_INT32_MIN_PAIR] * self.n, dtype=torch.int64).to(device, non_blocking=True)
        self.desc, self.init = upload[:_WIDTH.value * self.n], upload[_WIDTH.value * self.n:]

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty(0 if self.stats_only else sum(self.words), dtype=torch.int32, device=self.keys.device)
        stats = self.init.clone().view(torch.int32).view(self.n, 2)
        if self.n:
            self._launch(out, stats, _decode_kernel[(self.programs,)])
        return out, stats

    def compile(self) -> None:
        """Compile (or load from triton's cache) the kernel a call launches, launching nothing (see ``compiling``)."""
        if self.n:
            out = torch.empty(0 if self.stats_only else sum(self.words), dtype=torch.int32, device=self.keys.device)
            self._launch(out, self.init.view(torch.int32).view(self.n, 2),
                         functools.partial(_decode_kernel.warmup, grid=(self.programs,)))

    def _launch(self, out: torch.Tensor, stats: torch.Tensor, kernel) -> None:
        block_rows, block_bytes, num_warps = self.tile
        with _on(self.keys.device):
            kernel(self.desc, self.keys, out, stats, self.n, OPS=max(_MIN_OPS, triton.next_power_of_2(self.n)),
                   BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes, ALIGNED=self.aligned, STATS_ONLY=self.stats_only,
                   num_warps=num_warps)


def _on(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def compiling(workers: int):
    """A context in which ``compile()`` of PreparedGemm and the decode launches hands its compile to a pool of
    ``workers`` threads (``triton.AsyncCompileMode``, triton >= 3.4), all finished when the context exits; where
    triton lacks it, compiles run one after another."""
    if not hasattr(triton, "AsyncCompileMode"):
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    pool = stack.enter_context(ThreadPoolExecutor(max(1, workers), thread_name_prefix="triton-compile"))
    stack.enter_context(triton.AsyncCompileMode(pool))
    return stack


def _run_decode(operands, keys: torch.Tensor, stats_only: bool, block_rows: int, block_bytes: int,
                num_warps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One launch of ``_decode_kernel`` over ``operands``: (int32 words of the values, empty when ``stats_only``;
    int32 [n, 2] statistics)."""
    return _DecodeLaunch(operands, keys, stats_only, block_rows, block_bytes, num_warps)()


#: The fused GEMM's tile: BLOCK_N rows of B (the dot's M side) by BLOCK_M rows of A, GEMM_BYTES packed bytes (2
#: values each) of K per step. A step is two dots of K = GEMM_BYTES: the low nibbles' values, then the high ones'
#: (K permuted alike for A and B, which an exact sum does not see). H200, 15 inputs of g8_n4096_k7168 (2026-12-01,
#: kernels only): 7.0 ms in this tile; 15.2 with A on the dot's M side and 8 warps, 9.2-13.0 for 128-byte steps,
#: 256 rows of B or 32 of A; about 58 ms without the alignment hints and with a scale load per byte.
BLOCK_M, BLOCK_N, GEMM_BYTES, GEMM_WARPS, GEMM_STAGES = 64, 128, 64, 4, 3
#: Per-group descriptor of the fused GEMM, one int64 row each, in this order.
_GEMM_FIELDS = ("A packed address", "A row stride", "A scales address", "A scales row stride",
                "B packed address", "B row stride", "B scales address", "B scales row stride",
                "M", "N", "packed bytes per row", "output offset (fp16 elements)", "first program", "N tiles")
(_A, _A_STRIDE, _SA, _SA_STRIDE, _B, _B_STRIDE, _SB, _SB_STRIDE, _M, _N, _HK, _C, _GFIRST,
 _NTILES) = (tl.constexpr(i) for i in range(14))
_GWIDTH = tl.constexpr(len(_GEMM_FIELDS))


@triton.jit
def _decoded_halves(packed_ptr, scales_ptr, rows, stride, scales_stride, n_rows, k0, half_k, R: tl.constexpr,
                    BYTES: tl.constexpr, EVEN_K: tl.constexpr, BF16: tl.constexpr):
    """The [R, BYTES] packed bytes at ``rows`` x ``k0 + arange(BYTES)`` -> their low and high nibbles' values x
    scales as bf16 [R, BYTES] each (fp32 with ``BF16`` false; exact either way: see the module docstring); each
    scale byte is loaded and decoded once and broadcast to its 8 bytes; masked bytes read as code 0 under scale
    0x00, i.e. 0. ``EVEN_K``: K needs no mask (a multiple of BYTES)."""
    col = k0 + tl.arange(0, BYTES)
    scol = k0 // _BLOCK + tl.arange(0, BYTES // _BLOCK)
    row_ok = (rows < n_rows)[:, None]
    if EVEN_K:
        x = tl.load(packed_ptr + rows[:, None] * stride + col[None, :], mask=row_ok, other=0)
        code = tl.load(scales_ptr + rows[:, None] * scales_stride + scol[None, :], mask=row_ok, other=0)
    else:
        x = tl.load(packed_ptr + rows[:, None] * stride + col[None, :], mask=row_ok & (col < half_k)[None, :],
                    other=0)
        code = tl.load(scales_ptr + rows[:, None] * scales_stride + scol[None, :],
                       mask=row_ok & (scol < half_k // _BLOCK)[None, :], other=0)
    scale = _e4m3fn_fp32_times_2_pow_14(code.to(tl.uint32))
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (R, BYTES // _BLOCK, _BLOCK)), (R, BYTES))
    pair = _e2m1_pair_as_fp16(x.to(tl.uint32))
    low = _fp16_half_to_fp32(pair & 0xFFFF) * scale
    high = _fp16_half_to_fp32(pair >> 16) * scale
    if BF16:
        low, high = low.to(tl.bfloat16), high.to(tl.bfloat16)
    return low, high


@triton.jit
def _gemm_kernel(meta_ptr, out_ptr, n_groups, GROUPS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BYTES: tl.constexpr, ALIGNED: tl.constexpr, EVEN_K: tl.constexpr, BF16: tl.constexpr):
    # this program's group: the last one whose first program is at most this one (GROUPS >= n_groups, a power of 2)
    pid = tl.program_id(0)
    slots = tl.arange(0, GROUPS)
    firsts = tl.load(meta_ptr + slots * _GWIDTH + _GFIRST, mask=slots < n_groups, other=2**62)
    grp = tl.sum((firsts <= pid).to(tl.int32), 0) - 1
    desc = meta_ptr + grp * _GWIDTH
    tile = pid - tl.load(desc + _GFIRST)
    n_tiles = tl.load(desc + _NTILES)
    m, n, half_k = tl.load(desc + _M), tl.load(desc + _N), tl.load(desc + _HK)
    a = tl.load(desc + _A).to(tl.pointer_type(tl.uint8))
    sa = tl.load(desc + _SA).to(tl.pointer_type(tl.uint8))
    b = tl.load(desc + _B).to(tl.pointer_type(tl.uint8))
    sb = tl.load(desc + _SB).to(tl.pointer_type(tl.uint8))
    a_stride, sa_stride = tl.load(desc + _A_STRIDE), tl.load(desc + _SA_STRIDE)
    b_stride, sb_stride = tl.load(desc + _B_STRIDE), tl.load(desc + _SB_STRIDE)
    if ALIGNED:
        a, b = tl.multiple_of(a, _ALIGN), tl.multiple_of(b, _ALIGN)
        a_stride, b_stride = tl.multiple_of(a_stride, _ALIGN), tl.multiple_of(b_stride, _ALIGN)
        sa, sb = tl.multiple_of(sa, _BLOCK), tl.multiple_of(sb, _BLOCK)
        sa_stride, sb_stride = tl.multiple_of(sa_stride, _BLOCK), tl.multiple_of(sb_stride, _BLOCK)
        half_k = tl.multiple_of(half_k, _ALIGN)
    rows_a = (tile // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_b = (tile % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)  # C^T: B's rows on the dot's M side
    for k0 in range(0, half_k, BYTES):
        a_low, a_high = _decoded_halves(a, sa, rows_a, a_stride, sa_stride, m, k0, half_k, BLOCK_M, BYTES, EVEN_K, BF16)
        b_low, b_high = _decoded_halves(b, sb, rows_b, b_stride, sb_stride, n, k0, half_k, BLOCK_N, BYTES, EVEN_K, BF16)
        acc = tl.dot(b_low, tl.trans(a_low), acc)
        acc = tl.dot(b_high, tl.trans(a_high), acc)
    out = out_ptr + tl.load(desc + _C)
    ok = (rows_b < n)[:, None] & (rows_a < m)[None, :]
    tl.store(out + rows_a[None, :] * n + rows_b[:, None], acc.to(tl.float16), mask=ok)


class PreparedGemm:
    """``grouped_gemm`` for the same ``groups`` again and again (a sample's buffers, refilled between runs: their
    contents change, not their addresses, shapes or strides): the checks, descriptors and their upload happen once,
    so a run is two launches and no per-group host work (H200, 15 inputs of g8_n4096_k7168: 12.4 ms of wall for
    6.6 ms of kernels when built per call). It holds references to every tensor of ``groups``. Arguments and errors
    as ``grouped_gemm``; ``run`` returns what it returns, in fresh tensors each run."""

    def __init__(self, groups: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
                 keys: torch.Tensor):
        device = keys.device
        operands = [op for a, sa, b, sb in groups for op in ((a, sa), (b, sb))]
        for g, (a, _sa, b, _sb) in enumerate(groups):
            if a.shape[1] != b.shape[1]:
                raise ValueError(f"group {g}: A and B must share K; got {2 * a.shape[1]} and {2 * b.shape[1]}")
        self._stats = _DecodeLaunch(operands, keys, True, BLOCK_ROWS, BLOCK_BYTES, NUM_WARPS)
        self.device, self.n_groups = device, len(groups)
        self.shapes = [(a.shape[0], b.shape[0]) for a, _sa, b, _sb in groups]
        self.sizes = [m * n for m, n in self.shapes]
        self.tile = (BLOCK_M, BLOCK_N, GEMM_BYTES, GEMM_WARPS, GEMM_STAGES)
        host, offset, self.programs, self.aligned, self.even = [], 0, 0, True, True
        for (a, sa, b, sb), size in zip(groups, self.sizes):
            n_tiles = triton.cdiv(b.shape[0], BLOCK_N)
            row = [a.data_ptr(), a.stride(0), sa.data_ptr(), sa.stride(0), b.data_ptr(), b.stride(0), sb.data_ptr(),
                   sb.stride(0), a.shape[0], b.shape[0], a.shape[1], offset, self.programs, n_tiles]
            self.aligned &= all(row[i] % _ALIGN.value == 0 for i in (0, 1, 4, 5, 10))
            self.aligned &= all(row[i] % _BLOCK.value == 0 for i in (2, 3, 6, 7))
            self.even &= row[10] % GEMM_BYTES == 0
            host += row
            offset, self.programs = offset + size, self.programs + triton.cdiv(a.shape[0], BLOCK_M) * n_tiles
        self.desc = torch.tensor(host, dtype=torch.int64).to(device, non_blocking=True) if self.programs else None

    def run(self) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Queue both launches (no sync): (fp16 [M, N] per group, views of one buffer; int32 [2 G, 2] statistics)."""
        _words, stats = self._stats()
        out = torch.empty(sum(self.sizes), dtype=torch.float16, device=self.device)
        if self.programs:
            self._launch(out, _gemm_kernel[(self.programs,)])
        return [o.view(shape) for o, shape in zip(out.split(self.sizes), self.shapes)], stats

    def compile(self) -> None:
        """Compile (or load from triton's cache) both kernels ``run`` launches, launching nothing; inside
        ``compiling`` the compiles go to its pool and this returns at once."""
        self._stats.compile()
        if self.programs:
            out = torch.empty(sum(self.sizes), dtype=torch.float16, device=self.device)
            self._launch(out, functools.partial(_gemm_kernel.warmup, grid=(self.programs,)))

    def _launch(self, out: torch.Tensor, kernel) -> None:
        block_m, block_n, step, warps, stages = self.tile
        with _on(self.device):
            kernel(self.desc, out, self.n_groups, GROUPS=max(_MIN_OPS, triton.next_power_of_2(self.n_groups)),
                   BLOCK_M=block_m, BLOCK_N=block_n, BYTES=step, ALIGNED=self.aligned, EVEN_K=self.even,
                   BF16=self.device.type == "cuda", num_warps=warps, num_stages=stages)


def grouped_gemm(groups: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
                 keys: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every group's ``(A * SFA) @ (B * SFB)^T`` with fp32 accumulation, rounded once to fp16, decoded in registers
    (no decoded operand is ever written to memory; bf16 operands on a GPU, fp32 under the interpreter, whose dot
    does not take bf16): two launches queued on the current stream, no sync. The first takes the scale statistics
    (``scale_stats``), the second runs the GEMMs of all groups, tiled BLOCK_N x BLOCK_M; the same bits as
    ``decode_operands`` followed by a GEMM with fp32 output wherever ``reference.exact_in_fp32`` holds (the
    caller checks it with the statistics and discards the rest). ``PreparedGemm`` does the same for groups whose
    tensors are refilled and run again.

    ``groups``: per group (A packed uint8 [M, K/2], A scales uint8 [M, K/16], B packed uint8 [N, K/2], B scales
    uint8 [N, K/16]), unit column strides, on ``keys``' device; ``keys`` as for ``decode_operands``.

    Returns (outputs, stats): per group an fp16 [M, N] tensor (views of one buffer), and int32 [2 * len(groups), 2]
    statistics of the operands A0, B0, A1, B1, ... Raises ValueError naming the operand for a wrong dtype, shape,
    stride or device, or for groups whose K differ between A and B.
    """
    return PreparedGemm(groups, keys).run()

