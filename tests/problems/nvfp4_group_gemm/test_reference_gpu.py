"""The fast reference on CUDA (bf16 operands, fp32 output) against the fp64 path, bit for bit, on the full official
shapes, with the Triton decode (what ``decode="auto"`` takes there) and the torch decode; the Triton decode alone
against the torch decode for every (byte, scale code) pair, aligned and not. Run on the H200 through the device
tool (skipped without CUDA)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from problems.nvfp4_group_gemm.sample_buffers import Layout, Views, draw_official, reference_inputs
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import (ReferencePlan, dequantize_lut, exact_in_fp32, ref_kernel,
                                                ref_kernel_fp64, ref_kernel_many)
from problems.nvfp4_group_gemm.reference_bound import _key_table, _scale_stats
from problems.nvfp4_group_gemm.reference_paths import _fast, _fast_triton, _operand_dtype, _triton_decoder
from problems.nvfp4_group_gemm.spec import load_shapes

pytestmark = pytest.mark.gpu

CASES = [*load_shapes("tests").cases, *load_shapes("benchmarks").cases]


def _cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def _assert_same_bits(got, expected, what: str) -> None:
    assert len(got) == len(expected), what
    for g, (f, e) in enumerate(zip(got, expected)):
        assert f.is_cuda and f.dtype == e.dtype and f.shape == e.shape, f"{what} group {g}"
        differ = int((f.view(torch.int16) != e.view(torch.int16)).sum())
        assert differ == 0, f"{what} group {g}: {differ} outputs differ"


def test_cuda_takes_bf16_operands_with_fp32_output():
    assert _operand_dtype(_cuda()) == torch.bfloat16


def test_cuda_takes_the_triton_decode():
    decoder = _triton_decoder()
    assert decoder is not None and decoder.__name__ == "problems.nvfp4_group_gemm.reference_triton"


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name or c.text())
def test_fast_equals_fp64_on_cuda(case, data):
    for seed in (case.seed, 7, 123457):
        inputs = generate_input(case.m, case.n, case.k, case.g, seed, data=data)
        exact = ref_kernel_fp64(inputs)
        expected_fast = data == "official"
        assert [exact_in_fp32(k, sfa, sfb) for k, (sfa, sfb) in zip(case.k, inputs[1])] == [expected_fast] * case.g
        for decode in ("triton", "torch"):
            for scales in ("plain", "reordered"):
                _assert_same_bits(ref_kernel(inputs, scales=scales, decode=decode), exact,
                                  f"seed {seed} decode {decode} scales {scales}")


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", load_shapes("benchmarks").cases, ids=lambda c: c.name)
def test_triton_and_torch_decode_give_the_same_gemm_bits(case, data):
    """The fused Triton GEMM and the torch decode with cuBLAS: the same scale statistics whatever the data
    (full-range: every scale code class), and on official data, where the bound holds, the same bits; the plain
    scales here lie on the GPU already (the harness's case), so the Triton path reads them in place."""
    inputs = generate_input(case.m, case.n, case.k, case.g, case.seed, data=data)
    on_gpu = [tuple(sf.cuda() for sf in pair) for pair in inputs[1]]
    inputs = (inputs[0], on_gpu, inputs[2], inputs[3])
    codes, stats, fast = _fast_triton(_triton_decoder(), inputs, "plain", _cuda())
    assert all(c.data_ptr() == sf.data_ptr() for c, sf in zip(codes, (sf for pair in on_gpu for sf in pair)))
    flat = torch.cat([c.reshape(-1) for c in codes]).to(torch.int32)
    assert stats.tolist() == _scale_stats(flat, [c.numel() for c in codes]).tolist()
    if data == "official":
        torch_path = _fast([(a, b, ca.to(torch.int32), cb.to(torch.int32))
                            for (a, b, _), ca, cb in zip(inputs[0], codes[0::2], codes[1::2])])
        _assert_same_bits(fast, torch_path, f"{case.name} {data}")
        _assert_same_bits(ref_kernel(inputs), ref_kernel_fp64(inputs), f"{case.name} scales on the GPU")


@pytest.mark.parametrize("offset", [0, 1])
def test_triton_decode_of_every_byte_under_every_scale_code(offset):
    """Row c: the 256 bytes four times under scale code c; ``offset`` 1 starts every row one byte into a wider
    buffer, so the kernel compiled without the alignment hints runs too."""
    decoder = _triton_decoder()
    wide = torch.arange(256, dtype=torch.uint8, device=_cuda()).repeat(256, 5)
    packed = wide[:, offset:offset + 1024]
    scales = torch.arange(256, dtype=torch.uint8, device=_cuda()).view(256, 1).expand(256, 128).contiguous()
    (values,), stats = decoder.decode_operands([(packed, scales)], _key_table(_cuda()))
    expected = dequantize_lut(packed.unsqueeze(-1).view(torch.float4_e2m1fn_x2),
                              scales.unsqueeze(-1).view(torch.float8_e4m3fn), torch.bfloat16)
    nan = expected.isnan()
    assert torch.equal(values.isnan(), nan)
    assert int(((values.view(torch.int16) != expected.view(torch.int16)) & ~nan).sum()) == 0
    assert stats.tolist() == [[64, 0x7E]]


@pytest.mark.parametrize("shapes", ["tests", "benchmarks"])
def test_many_inputs_queued_before_one_sync_give_each_inputs_bits(shapes):
    """ref_kernel_many on the GPU queues every input (one statistics and one GEMM launch for all) before reading
    the statistics once: the same bits as the fp64 reference per input, official and full-range inputs mixed (some
    groups then take the fp64 path)."""
    dev = _cuda()
    for case in load_shapes(shapes).cases:
        inputs = [generate_input(case.m, case.n, case.k, case.g, 40 + s, data=data, device=dev)
                  for s, data in enumerate(["official", "full-range", "official"])]
        many = ref_kernel_many(inputs)
        assert [len(o) for o in many] == [case.g] * 3
        for s, (x, outs) in enumerate(zip(inputs, many)):
            _assert_same_bits(outs, ref_kernel_fp64(x), f"{case.name} input {s}")


def test_fused_gemm_decodes_every_byte_under_every_scale_code():
    """grouped_gemm on the GPU (bf16 operands, wgmma) against the exact decode: A row c holds the 256 bytes under
    scale code c and B is the identity, so C[c, j] is A's element j (as in the interpreter's test)."""
    dev, decoder = _cuda(), _triton_decoder()
    a = torch.arange(256, dtype=torch.uint8, device=dev).repeat(256, 1)
    sa = torch.arange(256, dtype=torch.uint8, device=dev).view(256, 1).expand(256, 32).contiguous()
    j = torch.arange(512, device=dev)
    eye = torch.zeros(512, 256, dtype=torch.uint8, device=dev)
    eye[j, j // 2] = torch.where(j % 2 == 0, 0x02, 0x20).to(torch.uint8)
    sb = torch.full((512, 32), 0x38, dtype=torch.uint8, device=dev)
    (c,), _stats = decoder.grouped_gemm([(a, sa, eye, sb)], _key_table(dev))
    expected = dequantize_lut(a.unsqueeze(-1).view(torch.float4_e2m1fn_x2), sa.unsqueeze(-1).view(torch.float8_e4m3fn),
                              torch.float32)
    nan_rows = torch.tensor([code in (0x7F, 0xFF) for code in range(256)], device=dev)
    assert bool(c[nan_rows].isnan().all()) and not bool(c[~nan_rows].isnan().any())
    assert torch.equal(c[~nan_rows].float(), expected[~nan_rows])


@pytest.mark.parametrize("shapes", ["tests", "benchmarks"])
def test_plan_over_a_samples_buffers_matches_fp64_after_each_draw(shapes):
    """ReferencePlan over one sample's buffers (problems.nvfp4_group_gemm.sample_buffers: 4 calls, plain scales on the
    device, as the parent's prepare builds them), built once and run after each of three draws into the same buffers:
    prepared (its launches built once) and bit for bit the fp64 reference of what the buffers hold at each run."""
    dev = _cuda()
    for case in load_shapes(shapes).cases:
        layout = Layout.of(case, 4)
        views = Views(layout, torch.empty(layout.device_bytes, dtype=torch.uint8, device=dev),
                      torch.empty(layout.host_slot_bytes, dtype=torch.uint8),
                      torch.empty(layout.output_bytes, dtype=torch.uint8, device=dev))
        plain, plan = None, None
        for draw in range(3):
            plain = draw_official(views, torch.Generator(device=dev).manual_seed(60 + draw), plain)
            if plan is None:
                inputs = reference_inputs(views, plain)
                plan = ReferencePlan(inputs)
                assert plan.prepared, case.name
            for j, (outs, x) in enumerate(zip(plan.run(), inputs)):
                _assert_same_bits(outs, ref_kernel_fp64(x), f"{case.name} draw {draw} call {j}")


_WARM_CHECK = """
import os, sys, torch
from problems.nvfp4_group_gemm.sample_buffers import Layout, Views, draw_official, reference_inputs
from problems.nvfp4_group_gemm.reference import ReferencePlan, warm_up
from problems.nvfp4_group_gemm.spec import load_shapes
dev = torch.device("cuda", 0)
cases = load_shapes("benchmarks").cases
warm_up([(c.k, n) for c in cases for n in (1, 15)], dev)
cache = os.environ["TRITON_CACHE_DIR"]
before = set(os.listdir(cache))
for c in cases:
    for n in (1, 15):
        layout = Layout.of(c, n)
        views = Views(layout, torch.empty(layout.device_bytes, dtype=torch.uint8, device=dev),
                      torch.empty(layout.host_slot_bytes, dtype=torch.uint8),
                      torch.empty(layout.output_bytes, dtype=torch.uint8, device=dev))
        plain = draw_official(views, torch.Generator(device=dev).manual_seed(7), None)
        ReferencePlan(reference_inputs(views, plain)).run()
torch.cuda.synchronize()
print(len(before), sorted(f for d in set(os.listdir(cache)) - before for f in os.listdir(os.path.join(cache, d))))
"""


def test_warm_up_compiles_every_kernel_a_samples_reference_launches(tmp_path):
    """After problems.nvfp4_group_gemm.reference.warm_up for the benchmarks' kinds (1 and 15 inputs), the reference over
    real sample buffers of those kinds compiles nothing new, kernels or launchers: Triton's cache (a fresh directory)
    gains no entry (the files of any new one are printed)."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", _WARM_CHECK], cwd=root, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_CACHE_DIR=str(tmp_path), PYTHONPATH=str(root)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, new = proc.stdout.split(maxsplit=1)
    assert int(count) > 0 and new.strip() == "[]", proc.stdout
