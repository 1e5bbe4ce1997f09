"""The Triton kernels of the fast reference (problems.nvfp4_group_gemm.reference_triton) on the CPU, through Triton's
interpreter: decoded bf16 bits against the torch table decode and ml_dtypes for every (byte, scale code) pair, the same
pairs through the fused GEMM, the folded scale statistics against the torch gather, the whole CUDA fast path against the
fp64 reference. TRITON_INTERPRET must be set before
triton is imported, so these tests run in a child pytest with it set (test_kernel_under_the_interpreter) and never
reach other tests. The same kernel compiled for the GPU is tested in test_reference_gpu.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import _Pending, _finish, ReferencePlan, dequantize_lut, ref_kernel_fp64
from problems.nvfp4_group_gemm.reference_bound import _key_table, _read_stats, _scale_stats
from problems.nvfp4_group_gemm.reference_paths import _fast, _fast_triton, _queue_triton_many
from problems.nvfp4_group_gemm.spec import load_shapes

triton = pytest.importorskip("triton")

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[3]
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted_only = pytest.mark.skipif(not INTERPRETED, reason="runs in test_kernel_under_the_interpreter's child")
#: Tests this module runs in the child (every test marked interpreted_only, parametrizations counted).
CHILD_TESTS = 16


@pytest.mark.skipif(INTERPRETED, reason="the parent of the interpreted run")
def test_kernel_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    summary = re.search(r"(\d+) passed", proc.stdout)
    assert summary and int(summary.group(1)) == CHILD_TESTS, tail


@pytest.fixture(scope="module")
def interpreted():
    from problems.nvfp4_group_gemm import reference_triton
    return reference_triton


def _ml_dtypes_decode(packed: torch.Tensor, scales: torch.Tensor) -> np.ndarray:
    """uint8 [R, K/2] pairs and [R, K/16] scale bytes -> float64 [R, K] through ml_dtypes alone."""
    u = packed.numpy()
    nibbles = np.stack([u & 0xF, u >> 4], axis=-1).reshape(u.shape[0], -1).astype(np.uint8)
    values = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    return values * np.repeat(scales.numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16, axis=1)


def _assert_same_bf16(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Same bits everywhere but at NaNs, which must sit at the same places (their payloads may differ)."""
    assert got.dtype == expected.dtype == torch.bfloat16 and got.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(got.isnan(), nan)
    differ = (got.view(torch.int16) != expected.view(torch.int16)) & ~nan
    assert not bool(differ.any()), f"{int(differ.sum())} values differ, first at {differ.nonzero()[0].tolist()}"


def _torch_decode(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return dequantize_lut(packed.unsqueeze(-1).view(torch.float4_e2m1fn_x2),
                          scales.unsqueeze(-1).view(torch.float8_e4m3fn), torch.bfloat16)


@interpreted_only
def test_every_byte_under_every_scale_code(interpreted):
    """Row c holds the 256 bytes twice, under scale code c (all 256, NaN and zeros included)."""
    packed = torch.arange(256, dtype=torch.uint8).repeat(256, 2)
    scales = torch.arange(256, dtype=torch.uint8).view(256, 1).expand(256, 64).contiguous()
    (values,), stats = interpreted.decode_operands([(packed, scales)], _key_table(CPU))
    assert values.shape == (256, 1024)
    _assert_same_bf16(values, _torch_decode(packed, scales))
    np.testing.assert_array_equal(values.double().numpy(), _ml_dtypes_decode(packed, scales))
    assert stats.tolist() == [[64, 0x7E]]  # a NaN code wins the valuation key; 0x7E (448) the magnitude key


@interpreted_only
def test_known_values(interpreted):
    """Byte 0x71 (element 0 = 0.5, element 1 = 6) under 2.0 (0x40), 0xF9 (-0.5, -6) under 2^-9 (0x01), 0x88
    (-0, -0) under -1 (0xB8): exact values and the signs of zeros."""
    packed = torch.tensor([[0x71] * 8, [0xF9] * 8, [0x88] * 8], dtype=torch.uint8)
    scales = torch.tensor([[0x40], [0x01], [0xB8]], dtype=torch.uint8)
    (values,), _ = interpreted.decode_operands([(packed, scales)], _key_table(CPU))
    assert values[:, :2].tolist() == [[1.0, 12.0], [-2.0**-10, -6 * 2.0**-9], [0.0, 0.0]]
    assert values[2].view(torch.int16).tolist() == [0] * 16  # -0 times -1 is +0


@interpreted_only
@pytest.mark.parametrize("block_rows, block_bytes", [(16, 128), (4, 16), (8, 8)])
def test_many_operands_odd_sizes_and_strides(interpreted, block_rows, block_bytes):
    """One launch over operands with row counts off the tile, K/2 off the step, a zero-row operand and a packed
    operand read through a row stride wider than K/2 (a column slice): values and statistics against the torch
    path, per operand."""
    gen = torch.Generator().manual_seed(5)
    sizes = [(5, 64), (33, 136), (16, 8), (0, 32), (70, 256)]
    operands = []
    for rows, half_k in sizes:
        packed = torch.randint(0, 256, (rows, half_k + 24), dtype=torch.uint8, generator=gen)[:, 8:8 + half_k]
        codes = torch.randint(0, 256, (rows, half_k // 8), dtype=torch.uint8, generator=gen)
        operands.append((packed, codes))
    operands[1][1][:, ::2] = 0x38  # scale 1.0 in half the blocks: keys other than NaN's win some maxima
    operands[2][1][:] = 0x01       # only 2^-9: valuation 0 wins
    values, stats = interpreted.decode_operands(operands, _key_table(CPU), block_rows, block_bytes, num_warps=1)
    for (packed, codes), v in zip(operands, values):
        assert v.shape == (packed.shape[0], 2 * packed.shape[1])
        if packed.shape[0]:
            _assert_same_bf16(v, _torch_decode(packed, codes))
    live = [c for _, c in operands if c.numel()]
    expected = _scale_stats(torch.cat([c.reshape(-1) for c in live]).to(torch.int32), [c.numel() for c in live])
    assert stats.dtype == torch.int32 and stats.shape == (len(sizes), 2)
    assert stats[[0, 1, 2, 4]].tolist() == expected.tolist()
    assert stats[3].tolist() == [-64, 0]  # no scales: the key of 0x00 (a zero scale), which loses every max
    assert _read_stats(stats)[2] == (0, 1)  # -nu2(q) = 0, q = 1 (2^-9 is 1 * 2^-9)


@interpreted_only
def test_bad_operands_get_one_line_errors(interpreted):
    keys = _key_table(CPU)
    packed = torch.zeros(4, 16, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^operand 0: expected uint8 packed \[R, K/2\] and scales \[R, K/16\] with "
                                         r"unit column strides on cpu; got packed torch.uint8 \(4, 16\) stride "
                                         r"\(16, 1\) on cpu, scales torch.uint8 \(4, 3\) stride \(3, 1\) on cpu$"):
        interpreted.decode_operands([(packed, torch.zeros(4, 3, dtype=torch.uint8))], keys)
    with pytest.raises(ValueError, match=r"^operand 1: expected .* got packed torch.int8 \(4, 16\) stride"):
        interpreted.decode_operands([(packed, torch.zeros(4, 2, dtype=torch.uint8)),
                                     (packed.view(torch.int8), torch.zeros(4, 2, dtype=torch.uint8))], keys)
    with pytest.raises(ValueError, match=r"^keys: expected int32 \[256\], got torch.int64 \(256,\)$"):
        interpreted.decode_operands([], keys.to(torch.int64))


@interpreted_only
@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("scales", ["plain", "reordered", "plain column-major"])
def test_cuda_fast_path_through_the_interpreter(interpreted, data, scales):
    """ref_kernel's CUDA path (Triton statistics and fused GEMM) run on the CPU: the torch path's statistics; on
    official data the torch path's bits and the fp64 reference's (full-range data fails the bound, so its inexact
    sums may differ in order and bits, and ref_kernel takes the fp64 path for them). Plain scales stored
    column-major are staged into one copy, the others read in place."""
    case = load_shapes("tests").cases[4]  # m=[64,72,96] n=[128,384,512] k=[512,512,256]
    inputs = generate_input(case.m, case.n, case.k, case.g, case.seed, data=data, device="cpu")
    if scales == "plain column-major":
        column_major = [tuple(sf[:, :, 0].t().contiguous().t().unsqueeze(-1) for sf in pair) for pair in inputs[1]]
        inputs = (inputs[0], column_major, inputs[2], inputs[3])
    codes, stats, fast = _fast_triton(interpreted, inputs, scales.split()[0], CPU)
    sources = [sf for pair in inputs[1] for sf in pair]
    for c, sf in zip(codes, sources):
        assert c.stride(1) == 1 and torch.equal(c, sf[:, :, 0].view(torch.uint8))
        assert (c.data_ptr() == sf.data_ptr()) == (scales == "plain")
    flat = torch.cat([c.reshape(-1) for c in codes]).to(torch.int32)
    assert stats.tolist() == _scale_stats(flat, [c.numel() for c in codes]).tolist()
    if data == "official":
        torch_path = _fast([(a, b, ca.to(torch.int32), cb.to(torch.int32))
                            for (a, b, _), ca, cb in zip(inputs[0], codes[0::2], codes[1::2])])
        for g, (f, t) in enumerate(zip(fast, torch_path)):
            assert torch.equal(f.view(torch.int16), t.view(torch.int16)), f"group {g}: Triton and torch path differ"
        for g, (f, e) in enumerate(zip(fast, ref_kernel_fp64(inputs))):
            assert f.dtype == torch.float16 and f.shape == e.shape
            assert torch.equal(f.view(torch.int16), e.view(torch.int16)), f"group {g}"


@pytest.mark.skipif(INTERPRETED, reason="compiles; the interpreter decorates kernels differently")
@pytest.mark.parametrize("aligned", [True, False])
def test_kernel_compiles_for_hopper_without_a_gpu(aligned):
    """The kernel through Triton's compiler for sm_90 (the H200), no GPU needed: with the alignment hints the bf16
    pairs are stored 16 bytes at a time, without them 4."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from problems.nvfp4_group_gemm import reference_triton as rt

    signature = {"meta_ptr": "*i64", "keys_ptr": "*i32", "out_ptr": "*i32", "stats_ptr": "*i32", "n_ops": "i32",
                 "OPS": "constexpr", "BLOCK_ROWS": "constexpr", "BLOCK_BYTES": "constexpr", "ALIGNED": "constexpr",
                 "STATS_ONLY": "constexpr"}
    constants = {"OPS": 16, "BLOCK_ROWS": rt.BLOCK_ROWS, "BLOCK_BYTES": rt.BLOCK_BYTES, "ALIGNED": aligned,
                 "STATS_ONLY": False}
    source = ASTSource(fn=rt._decode_kernel, signature=signature, constexprs=constants)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 64), options={"num_warps": rt.NUM_WARPS}).asm["ptx"]
    assert ".target sm_90" in ptx
    assert ("st.global.v4.b32" in ptx) == aligned and ("st.global.b32" in ptx) != aligned


@pytest.mark.skipif(INTERPRETED, reason="compiles; the interpreter decorates kernels differently")
def test_fused_gemm_compiles_to_wgmma_for_hopper_without_a_gpu():
    """The fused GEMM through Triton's compiler for sm_90 (the H200), no GPU needed: its dots become bf16 wgmma
    with fp32 accumulation (the tensor-core sums the exactness argument covers), its aligned loads 16-byte
    asynchronous copies."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from problems.nvfp4_group_gemm import reference_triton as rt

    signature = {"meta_ptr": "*i64", "out_ptr": "*fp16", "n_groups": "i32", "GROUPS": "constexpr",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BYTES": "constexpr", "ALIGNED": "constexpr",
                 "EVEN_K": "constexpr", "BF16": "constexpr"}
    constants = {"GROUPS": 128, "BLOCK_M": rt.BLOCK_M, "BLOCK_N": rt.BLOCK_N, "BYTES": rt.GEMM_BYTES, "ALIGNED": True,
                 "EVEN_K": True, "BF16": True}
    source = ASTSource(fn=rt._gemm_kernel, signature=signature, constexprs=constants)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 64),
                         options={"num_warps": rt.GEMM_WARPS, "num_stages": rt.GEMM_STAGES}).asm["ptx"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.(\w+)\.(\w+)\.(\w+)", ptx)) == {
        ("f32", "bf16", "bf16")}
    assert "cp.async.cg.shared.global" in ptx  # the packed bytes arrive 16 at a time, pipelined


@interpreted_only
def test_inputs_queued_in_one_launch_keep_each_inputs_bits(interpreted):
    """_queue_triton_many over five inputs (one statistics and one GEMM launch for all their groups): each input's
    statistics and outputs are those of its own launch (_fast_triton), and after _finish every input matches the
    fp64 reference bit for bit (input 2 is full-range: its groups fail the bound and take the fp64 path)."""
    case_m, case_n, case_k = (40, 8), (128, 64), (256, 128)
    inputs = [generate_input(case_m, case_n, case_k, 2, 70 + s, data="full-range" if s == 2 else "official")
              for s in range(5)]
    queued = _queue_triton_many(interpreted, inputs, "plain", CPU)
    for s, (x, (data, q_stats, _codes, q_fast)) in enumerate(zip(inputs, queued)):
        codes, stats, fast = _fast_triton(interpreted, x, "plain", CPU)
        assert data is x and q_stats.tolist() == stats.tolist(), f"input {s}"
        if s != 2:
            assert all(torch.equal(f.view(torch.int16), g.view(torch.int16)) for f, g in zip(q_fast, fast)), s
        outs = _finish(_Pending(x, q_stats, codes, q_fast, []), _read_stats(q_stats))
        assert all(torch.equal(o.view(torch.int16), e.view(torch.int16)) for o, e in zip(outs, ref_kernel_fp64(x)))


@interpreted_only
def test_fused_gemm_decodes_every_byte_under_every_scale_code(interpreted):
    """grouped_gemm's own decode (in registers) of every (byte, scale code) pair: A row c holds the 256 bytes under
    scale code c, B is the identity (e2m1 1.0 under scale 1.0), so C[c, j] is A's element j, exact in fp16; rows of
    the NaN codes (0x7F, 0xFF) are all NaN. Zeros compare by value (+0 + -0 is +0 in any sum)."""
    a = torch.arange(256, dtype=torch.uint8).repeat(256, 1)
    sa = torch.arange(256, dtype=torch.uint8).view(256, 1).expand(256, 32).contiguous()
    eye = torch.zeros(512, 256, dtype=torch.uint8)
    j = torch.arange(512)
    eye[j, j // 2] = torch.where(j % 2 == 0, 0x02, 0x20).to(torch.uint8)  # e2m1 1.0 in the low or high nibble
    sb = torch.full((512, 32), 0x38, dtype=torch.uint8)  # e4m3fn 1.0
    (c,), stats = interpreted.grouped_gemm([(a, sa, eye, sb)], _key_table(CPU))
    expected = dequantize_lut(a.unsqueeze(-1).view(torch.float4_e2m1fn_x2), sa.unsqueeze(-1).view(torch.float8_e4m3fn),
                              torch.float32)
    nan_rows = torch.tensor([code in (0x7F, 0xFF) for code in range(256)])
    assert c.dtype == torch.float16 and c.shape == (256, 512)
    assert bool(c[nan_rows].isnan().all()) and not bool(c[~nan_rows].isnan().any())
    assert torch.equal(c[~nan_rows].float(), expected[~nan_rows])
    assert stats.tolist() == _scale_stats(torch.cat([sa.reshape(-1), sb.reshape(-1)]).to(torch.int32),
                                          [sa.numel(), sb.numel()]).tolist()


def _refill(x, y) -> None:
    """Copy input ``y``'s data and scales into input ``x``'s tensors (same shapes), as a sample's buffers are
    refilled (c, which the reference never reads, is left)."""
    for (a, b, _c), (a2, b2, _c2) in zip(x[0], y[0]):
        for dst, src in ((a, a2), (b, b2)):
            dst.view(torch.uint8).copy_(src.view(torch.uint8))
    for pair, pair2 in zip(x[1] + x[2], y[1] + y[2]):
        for dst, src in zip(pair, pair2):
            dst.view(torch.uint8).copy_(src.view(torch.uint8))


@interpreted_only
@pytest.mark.parametrize("layout", ["plain", "plain column-major"])
def test_plan_run_after_refills_matches_fp64(interpreted, layout):
    """ReferencePlan built once over four inputs (one full-range, whose groups fail the bound and take the fp64 path),
    then the inputs refilled in place with other draws twice: every run equals ref_kernel_fp64 of what the tensors
    hold then, bit for bit. Plain scales in place are prepared once; column-major ones (which ref_kernel stages
    into a copy) are not, and run ref_kernel_many each time."""
    m, n, k = (40, 8), (128, 64), (256, 128)
    draw = [lambda s, i=i: generate_input(m, n, k, 2, s, data="full-range" if i == 1 else "official")
            for i in range(4)]
    inputs = [d(90 + i) for i, d in enumerate(draw)]
    if layout == "plain column-major":
        inputs = [(x[0], [tuple(sf[:, :, 0].t().contiguous().t().unsqueeze(-1) for sf in pair) for pair in x[1]],
                   x[2], x[3]) for x in inputs]
    plan = ReferencePlan(inputs, decoder=interpreted)
    assert plan.prepared == (layout == "plain")
    for round_ in range(3):
        if round_:
            for i, (x, d) in enumerate(zip(inputs, draw)):
                _refill(x, d(200 + 10 * round_ + i))
        for i, (got, x) in enumerate(zip(plan.run(), inputs)):
            for g, (o, e) in enumerate(zip(got, ref_kernel_fp64(x))):
                assert o.shape == e.shape and torch.equal(o.view(torch.int16), e.view(torch.int16)), (round_, i, g)
