"""submissions/cuda_inline: host logic on real values, the sm_100a compile, and (on a B200) the kernel itself.

The host tests need no GPU. The compile tests need the CUDA toolkit (nvcc 13) and fail, never skip, without it.
The GPU tests run only on compute capability 10.0: an H200 (sm_90) has no tcgen05.
"""
from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.parent.registry import read_variant
from problems.nvfp4_group_gemm.check import compare
from problems.nvfp4_group_gemm.formats import ATOM_BYTES, ATOM_ROWS, SF_VEC, blocked_offset, unblock
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import dequantize, ref_kernel, round_to_fp16
from problems.nvfp4_group_gemm.spec import load_shapes

from ._load import load_submission, variant_dir

VARIANT = "cuda_inline"
sub = load_submission(VARIANT)
host = sub.host
build = sub.cuda_inline_build
KERNEL_CU = variant_dir(VARIANT) / "kernel.cu"

TEST_CASES = load_shapes("tests").cases
BENCHMARK_CASES = load_shapes("benchmarks").cases


def sizes_of(case) -> list[tuple[int, int, int, int]]:
    return case.problem_sizes


# --- the entry file -------------------------------------------------------------------------------------------

def test_entry_file_declares_leaderboard_gpu_and_sm100a():
    lines = (variant_dir(VARIANT) / "submission.py").read_text().splitlines()
    assert lines[:3] == ["#!POPCORN leaderboard nvfp4_group_gemm", "#!POPCORN gpu B200",
                         "#!FP4BENCH requires sm_100a"]
    variant = read_variant(variant_dir(VARIANT) / "submission.py")
    assert variant.popcorn == {"leaderboard": "nvfp4_group_gemm", "gpu": "B200"}
    assert (variant.requires.major, variant.requires.minor, variant.requires.exact) == (10, 0, True)


def test_import_builds_nothing():
    # Loaded at the top of this module on a machine that may have no GPU and no CUDA torch.
    assert sub._extension is None and sub._map_cache is None
    assert callable(sub.custom_kernel)


def test_unsupported_sizes_are_refused_before_any_build():
    data = generate_input([128], [128], [128], 1, seed=1, device="cpu")
    with pytest.raises(ValueError, match=r"K a positive multiple of 256 .* got K = 128"):
        sub.custom_kernel(data)
    assert sub._extension is None


def _constexpr(name: str) -> int:
    match = re.search(rf"constexpr int {name} = (\d+);", KERNEL_CU.read_text())
    assert match, f"{name} not found in kernel.cu"
    return int(match.group(1))


def test_host_constants_mirror_kernel_cu():
    assert _constexpr("kMaxGroups") == host.MAX_GROUPS
    assert (_constexpr("kTileM"), _constexpr("kTileN"), _constexpr("kTileK")) == (host.TILE_M, host.TILE_N,
                                                                                   host.TILE_K)
    assert _constexpr("kMmaK") == host.MMA_K
    assert _constexpr("kStages") == host.STAGES
    assert _constexpr("kSfVec") == SF_VEC
    assert _constexpr("kSfAtomRows") == ATOM_ROWS
    assert _constexpr("kSfAtomBytes") == ATOM_BYTES
    assert "constexpr int64_t kMaxExtent = 0x7FFFFFFF - kTileM;" in KERNEL_CU.read_text()
    assert host.MAX_EXTENT == 0x7FFFFFFF - host.TILE_M
    assert host.SF_BYTES_PER_STAGE == 2048


# --- problem-size validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", TEST_CASES + BENCHMARK_CASES, ids=lambda c: c.text())
def test_every_official_shape_is_accepted(case):
    sizes = host.validate_problem_sizes(case.problem_sizes)
    assert [tuple(s) for s in sizes] == [(m, n, k) for m, n, k, _ in case.problem_sizes]


@pytest.mark.parametrize("problem_sizes, message", [
    ([], r"supports 1\.\.8 groups, got 0"),
    ([(128, 128, 256, 1)] * 9, r"supports 1\.\.8 groups, got 9"),
    ([(128, 128, 256, 2)], r"group 0: expected L = 1, got L = 2"),
    ([(128, 128, 256)], r"group 0: expected a problem size \(M, N, K, L\), got \(128, 128, 256\)"),
    ([(128, 128, 256, 1), (0, 128, 256, 1)], r"group 1: expected 1 <= M <= 2147483519, got M = 0"),
    ([(2**31, 128, 256, 1)], r"expected 1 <= M <= 2147483519, got M = 2147483648"),
    ([(128, 96, 256, 1)], r"group 0: expected N a positive multiple of 64 .* got N = 96"),
    ([(128, 0, 256, 1)], r"expected N a positive multiple of 64 .* got N = 0"),
    ([(128, 128, 300, 1)], r"expected K a positive multiple of 256 .* got K = 300"),
    ([(128, 128, 128, 1)], r"expected K a positive multiple of 256 .* got K = 128"),
    ([(128, 128, 0, 1)], r"expected K a positive multiple of 256 .* got K = 0"),
    ([(128.0, 128, 256, 1)], r"group 0: M must be an integer, got 128\.0"),
])
def test_invalid_problem_sizes_name_expected_and_got(problem_sizes, message):
    with pytest.raises(ValueError, match=message):
        host.make_plan(problem_sizes)


def test_smoke_shapes_with_small_k_are_refused():
    # configs/shapes/nvfp4_group_gemm/smoke.yml has K = 64 and 128: this kernel needs whole 256-wide stages.
    smoke = load_shapes("smoke").cases
    refused = [c for c in smoke if any(k % 256 for k in c.k)]
    assert refused
    for case in refused:
        with pytest.raises(ValueError, match="multiple of 256"):
            host.make_plan(case.problem_sizes)


def test_odd_m_and_single_group_are_accepted():
    for m in (1, 4, 40, 76, 127, 129, 148, 164, 196):
        plan = host.make_plan([(m, 64, 256, 1)])
        assert len(plan.tiles) == -(-m // 128)


# --- the tile list --------------------------------------------------------------------------------------------

def brute_force_tiles(sizes):
    """The tile of every output row and every output column, per group, sorted (m0, n0): the set of tiles that
    owns at least one element (r, c), which one CTA per tile must cover exactly once."""
    out = []
    for g, (m, n, _k) in enumerate(sizes):
        row_tiles = sorted({r // 128 * 128 for r in range(m)})
        col_tiles = sorted({c // 64 * 64 for c in range(n)})
        out += [(g, m0, n0) for m0 in row_tiles for n0 in col_tiles]
    return out


def random_sizes(rng: random.Random, groups: int) -> list[tuple[int, int, int, int]]:
    return [(rng.randint(1, 400), 64 * rng.randint(1, 9), 256 * rng.randint(1, 4), 1) for _ in range(groups)]


@pytest.mark.parametrize("groups", range(1, 9))
def test_tile_list_matches_brute_force_enumeration(groups):
    rng = random.Random(groups)
    for _ in range(12):
        problem_sizes = random_sizes(rng, groups)
        plan = host.make_plan(problem_sizes)
        assert [t[:3] for t in plan.tiles] == brute_force_tiles(plan.sizes)
        # Prefix sums: group g owns exactly tiles offsets[g] .. offsets[g+1]-1.
        assert plan.offsets[0] == 0 and plan.offsets[-1] == len(plan.tiles) and len(plan.offsets) == groups + 1
        for g in range(groups):
            owned = plan.tiles[plan.offsets[g]:plan.offsets[g + 1]]
            assert owned and all(t.group == g for t in owned)
            m, n, _k = plan.sizes[g]
            assert len(owned) == -(-m // 128) * (n // 64)
        assert plan.mnk == tuple(v for m, n, k, _ in problem_sizes for v in (m, n, k))


@pytest.mark.parametrize("case", BENCHMARK_CASES, ids=lambda c: c.name)
def test_tile_list_of_benchmarks(case):
    plan = host.make_plan(case.problem_sizes)
    expected = [(g, m0, n0) for g, (m, n, _) in enumerate(plan.sizes)
                for m0 in range(0, m, 128) for n0 in range(0, n, 64)]
    assert [t[:3] for t in plan.tiles] == expected
    counts = [-(-m // 128) * (n // 64) for m, n, _ in plan.sizes]
    assert plan.offsets == (0, *itertools.accumulate(counts))
    # M = 40, 76, 148, 164, 196: the last row tile of such a group is partial; N tiles never are.
    for t in plan.tiles:
        m, n, _ = plan.sizes[t.group]
        assert t.m0 < m and t.n0 + 64 <= n


def test_sfb_tmem_column_selects_the_rows_of_the_tile():
    # The SFB copy brings a whole 128-row atom: column c holds atom rows 32c .. 32c+31. A 64-column tile's B rows
    # must be the two columns starting at sfb_tmem_col.
    plan = host.make_plan([(128, 640, 256, 1)])
    assert [t.sfb_tmem_col for t in plan.tiles] == [0, 2] * 5
    for t in plan.tiles:
        cols = {((t.n0 + i) % 128) // 32 - t.sfb_tmem_col for i in range(64)}
        assert cols == {0, 1}


# --- scale factors against the blocked layout -----------------------------------------------------------------

@pytest.mark.parametrize("rows, k", [(40, 256), (76, 2048), (128, 512), (148, 768), (196, 1024), (384, 7168),
                                     (4096, 256)])
def test_scale_offsets_match_blocked_layout(rows, k):
    """For every row of every tile and every scale column of every K block: the byte the kernel's bulk copy brings
    to the place the MMA step reads is the byte problems.nvfp4_group_gemm.formats puts scale (r, j) at."""
    rest_k = k // 64
    storage_bytes = -(-rows // 128) * rest_k * 512
    j = torch.arange(k // 16)
    for row0 in range(0, rows, 64):  # A tiles start at multiples of 128, B tiles at multiples of 64
        r = torch.arange(row0, min(row0 + 64, rows)).unsqueeze(1)
        k_block = j // 16
        kernel_view = (host.sf_tile_base(row0, k) + k_block * host.SF_BYTES_PER_STAGE
                       + host.sf_stage_position(r, j))
        assert torch.equal(kernel_view, blocked_offset(r, j, rest_k))
        for kb in range(k // 256):
            start = host.sf_tile_base(row0, k) + host.sf_stage_offset(kb)
            assert 0 <= start and start + host.SF_BYTES_PER_STAGE <= storage_bytes


def test_scale_path_recovers_plain_scales_from_generated_data():
    """Emulate the kernel's scale path on a generated input: 2048-byte copies from the blocked storage, then each
    MMA step's 512-byte atom read at (lane r % 32, column (r % 128) // 32, byte j % 4)."""
    data = generate_input([148, 40], [192, 128], [768, 256], 2, seed=7, device="cpu")
    for (sfa, sfb), (sfa_r, sfb_r), (m, n, k, _) in zip(data[1], data[2], data[3]):
        for plain, blocked, rows in ((sfa, sfa_r, m), (sfb, sfb_r, n)):
            storage = blocked.permute(5, 2, 4, 0, 1, 3).reshape(-1).view(torch.uint8)
            got = torch.empty(rows, k // 16, dtype=torch.uint8)
            for row0 in range(0, rows, 64):
                for kb in range(k // 256):
                    start = host.sf_tile_base(row0, k) + host.sf_stage_offset(kb)
                    stage = storage[start:start + host.SF_BYTES_PER_STAGE]
                    for r in range(row0, min(row0 + 64, rows)):
                        for j in range(16 * kb, 16 * kb + 16):
                            got[r, j] = stage[host.sf_stage_position(r, j)]
            assert torch.equal(got, plain[:, :, 0].view(torch.uint8))
            assert torch.equal(got, unblock(blocked, rows, k // 16).view(torch.uint8))


def test_tile_by_tile_emulation_matches_reference():
    """The kernel's dataflow on the CPU: per tile, 128 A rows (zero past M), 64 B rows, scales fetched through the
    host offsets, fp32-exact accumulation, fp16 rounding, stores masked to row < M."""
    case_sizes = ([40, 76, 148], [128, 192, 64], [256, 512, 768])
    data = generate_input(*case_sizes, 3, seed=3, device="cpu")
    plan = host.make_plan(data[3])
    out = [torch.full((m, n), float("nan"), dtype=torch.float16) for m, n, _ in plan.sizes]
    for t in plan.tiles:
        (a, b, _c), (sfa_r, sfb_r), (m, n, k) = data[0][t.group], data[2][t.group], plan.sizes[t.group]
        a_rows = torch.zeros(128, k // 2, dtype=torch.uint8)
        valid = min(128, m - t.m0)
        a_rows[:valid] = a[t.m0:t.m0 + valid, :, 0].view(torch.uint8)
        b_rows = b[t.n0:t.n0 + 64, :, 0].view(torch.uint8)

        def scales(blocked, row0, count):
            storage = blocked.permute(5, 2, 4, 0, 1, 3).reshape(-1).view(torch.uint8)
            r = torch.arange(row0, row0 + count).unsqueeze(1)
            j = torch.arange(k // 16)
            idx = host.sf_tile_base(row0, k) + (j // 16) * host.SF_BYTES_PER_STAGE + host.sf_stage_position(r, j)
            return storage[idx].view(torch.float8_e4m3fn).unsqueeze(-1)

        a_vals = dequantize(a_rows.unsqueeze(-1).view(torch.float4_e2m1fn_x2), scales(sfa_r, t.m0, 128))
        b_vals = dequantize(b_rows.unsqueeze(-1).view(torch.float4_e2m1fn_x2), scales(sfb_r, t.n0, 64))
        tile = round_to_fp16(a_vals @ b_vals.T)
        out[t.group][t.m0:t.m0 + valid, t.n0:t.n0 + 64] = tile[:valid]
    for got, want in zip(out, ref_kernel(data)):
        assert torch.equal(got, want[:, :, 0])


# --- the tensor-map cache -------------------------------------------------------------------------------------

class FakeOperand:
    def __init__(self, ptr: int):
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


class RecordingEncoder:
    def __init__(self):
        self.calls = []

    def __call__(self, operand, rows, k, box_rows):
        self.calls.append((operand.data_ptr(), rows, k, box_rows))
        return ("map", operand.data_ptr(), rows, k, box_rows)


def test_map_cache_reuses_a_map_for_the_same_pointer_and_shape():
    enc = RecordingEncoder()
    cache = host.TensorMapCache(enc)
    plan = host.make_plan([(76, 7168, 2048, 1), (40, 7168, 2048, 1)])
    a, b = [FakeOperand(0x1000), FakeOperand(0x2000)], [FakeOperand(0x3000), FakeOperand(0x4000)]
    a_maps, b_maps = cache.maps_for(plan, a, b)
    assert enc.calls == [(0x1000, 76, 2048, 128), (0x2000, 40, 2048, 128),
                         (0x3000, 7168, 2048, 64), (0x4000, 7168, 2048, 64)]
    assert a_maps[1] == ("map", 0x2000, 40, 2048, 128) and b_maps[0] == ("map", 0x3000, 7168, 2048, 64)
    assert cache.maps_for(plan, a, b) == (a_maps, b_maps)
    assert cache.encodes == 4 and len(cache) == 4


def test_map_cache_re_encodes_on_pointer_change():
    enc = RecordingEncoder()
    cache = host.TensorMapCache(enc)
    plan = host.make_plan([(128, 256, 512, 1)])
    cache.maps_for(plan, [FakeOperand(0x1000)], [FakeOperand(0x2000)])
    a_maps, b_maps = cache.maps_for(plan, [FakeOperand(0x1000)], [FakeOperand(0x9000)])
    assert enc.calls[-1] == (0x9000, 256, 512, 64) and cache.encodes == 3
    assert b_maps == [("map", 0x9000, 256, 512, 64)]
    a_maps, _ = cache.maps_for(plan, [FakeOperand(0x5000)], [FakeOperand(0x9000)])
    assert enc.calls[-1] == (0x5000, 128, 512, 128) and cache.encodes == 4


def test_map_cache_re_encodes_on_shape_change_with_the_same_pointers():
    enc = RecordingEncoder()
    cache = host.TensorMapCache(enc)
    a, b = [FakeOperand(0x1000)], [FakeOperand(0x2000)]
    cache.maps_for(host.make_plan([(128, 256, 512, 1)]), a, b)
    cache.maps_for(host.make_plan([(64, 256, 512, 1)]), a, b)  # M changed: A only
    assert enc.calls[2:] == [(0x1000, 64, 512, 128)]
    cache.maps_for(host.make_plan([(64, 128, 512, 1)]), a, b)  # N changed: B only
    assert enc.calls[3:] == [(0x2000, 128, 512, 64)]
    # K changed, both pointers and M, N unchanged: both maps encode K, so both are re-encoded. (The seed shared
    # one "last K" between A and B and updated it when re-encoding A, so B kept its old K.)
    a_maps, b_maps = cache.maps_for(host.make_plan([(64, 128, 1024, 1)]), a, b)
    assert enc.calls[4:] == [(0x1000, 64, 1024, 128), (0x2000, 128, 1024, 64)]
    assert a_maps[0][3] == 1024 and b_maps[0][3] == 1024


def test_map_cache_keeps_a_rotating_set_of_inputs_and_evicts_least_recently_used():
    enc = RecordingEncoder()
    cache = host.TensorMapCache(enc)
    plan = host.make_plan([(128, 256, 512, 1)] * 8)
    inputs = [([FakeOperand(0x100000 * i + g) for g in range(8)], [FakeOperand(0x100000 * i + 0x80 + g)
                                                                   for g in range(8)]) for i in range(15)]
    for a, b in inputs + inputs:  # the official timing loop: 15 inputs, over and over
        cache.maps_for(plan, a, b)
    assert cache.encodes == 15 * 16

    small = host.TensorMapCache(enc, capacity=16)
    small.maps_for(plan, *inputs[0])
    small.maps_for(plan, *inputs[1])
    assert len(small) == 16 and small.encodes == 32
    small.maps_for(plan, *inputs[1])
    assert small.encodes == 32
    small.maps_for(plan, *inputs[0])  # evicted by inputs[1]
    assert small.encodes == 48
    with pytest.raises(ValueError, match="capacity must hold one launch's maps"):
        host.TensorMapCache(enc, capacity=15)


# --- build configuration --------------------------------------------------------------------------------------

def test_load_inline_gets_the_shared_flags(monkeypatch):
    captured = {}

    def fake_load_inline(**kwargs):
        captured.update(kwargs)
        return "extension"

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", fake_load_inline)
    assert build.load_extension() == "extension"
    assert captured["extra_cuda_cflags"] == list(build.CUDA_CFLAGS)
    assert "-gencode=arch=compute_100a,code=sm_100a" in captured["extra_cuda_cflags"]
    assert captured["extra_ldflags"] == ["-lcuda"]
    assert captured["cuda_sources"] == [KERNEL_CU.read_text()]
    assert captured["name"] == build.extension_name()
    nvcc = build.nvcc_command(KERNEL_CU, Path("kernel.o"))
    assert all(flag in nvcc for flag in build.CUDA_CFLAGS)
    assert nvcc[nvcc.index("-include") + 1] == "torch/extension.h"


def test_extension_name_follows_sources_and_flags(monkeypatch):
    before = build.extension_name()
    monkeypatch.setattr(build, "CUDA_CFLAGS", build.CUDA_CFLAGS + ("-DEXTRA",))
    assert build.extension_name() != before
    assert re.fullmatch(r"fp4bench_cuda_inline_[0-9a-f]{16}", before)


# --- compiling for sm_100a (no GPU needed) --------------------------------------------------------------------

def find_cuobjdump() -> Path | None:
    """cuobjdump on PATH, in the CUDA toolkit, or the copy Triton (a dev dependency) ships."""
    candidates = []
    if shutil.which("cuobjdump"):
        candidates.append(Path(shutil.which("cuobjdump")))
    candidates.append(build.find_cuda_home() / "bin" / "cuobjdump")
    try:
        import triton

        candidates.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    except ImportError:
        pass
    return next((c for c in candidates if c.is_file()), None)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """kernel.o (+ kept .ptx) for sm_100a, compiled once per session; a missing toolkit fails here, loudly."""
    out = tmp_path_factory.mktemp("cuda_inline_build")
    obj = build.compile_object(out)
    ptx = list(out.glob("*.ptx"))
    assert len(ptx) == 1, f"expected one kept .ptx in {out}, got {ptx}"
    return obj, ptx[0].read_text()


PTX_MMA = "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16"


@pytest.mark.slow
def test_kernel_compiles_for_sm100a_with_the_block_scaled_fp4_mma_in_ptx(compiled):
    obj, ptx = compiled
    assert obj.is_file() and obj.stat().st_size > 0
    assert re.search(r"^\.target sm_100a", ptx, re.M)
    # Four MMAs of K = 64 per 256-wide stage, unrolled.
    assert ptx.count(PTX_MMA) == host.TILE_K // host.MMA_K
    assert ptx.count("tcgen05.cp.cta_group::1.32x128b.warpx4") == 2 * host.TILE_K // host.MMA_K
    assert "cp.async.bulk.tensor.3d" in ptx and "tcgen05.ld.sync.aligned.16x256b.x8.b32" in ptx
    assert "tcgen05.alloc" in ptx and "tcgen05.dealloc" in ptx


@pytest.mark.slow
def test_machine_code_contains_the_block_scaled_fp4_mma(compiled):
    obj, _ = compiled
    cuobjdump = find_cuobjdump()
    assert cuobjdump is not None, "no cuobjdump: not on PATH, not in the CUDA toolkit, not in triton's package"
    sass = subprocess.run([str(cuobjdump), "--dump-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"code for sm_100a", sass)
    # UTCOMMA.4X: the tensor-core MMA with block-scaled operands, 4 scales per row per K = 64 (block16).
    mma = re.findall(r"\bUTC\w*MMA\.4X\b[^;]*;", sass)
    assert len(mma) == host.TILE_K // host.MMA_K, mma
    assert all(op.count("tmem[") >= 3 for op in mma)  # accumulator, scale A, scale B in tensor memory
    assert re.search(r"\bUTMALDG\.3D\b", sass)  # TMA tile loads of A and B
    assert re.search(r"\bUBLKCP\b", sass)  # plain bulk copies of the scales
    assert re.search(r"\bUTCCP\b", sass) and re.search(r"\bLDTM\b", sass)


@pytest.mark.slow
def test_bindings_declare_what_kernel_cu_defines(compiled, tmp_path_factory):
    obj, _ = compiled
    bindings = build.compile_bindings_object(tmp_path_factory.mktemp("cuda_inline_bindings"))

    def symbols(path: Path, *flags: str) -> set[str]:
        out = subprocess.run(["nm", *flags, str(path)], capture_output=True, text=True, check=True).stdout
        return {line.split()[-1] for line in out.splitlines() if "fp4bench_cuda_inline" in line}

    needed = symbols(bindings, "--undefined-only")
    assert len(needed) == 2, needed  # encode_operand_map, grouped_gemm
    assert needed <= symbols(obj, "--defined-only")


# --- on a B200 ------------------------------------------------------------------------------------------------

def on_sm100() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 0)


needs_sm100 = pytest.mark.skipif(not on_sm100(), reason="needs compute capability 10.0 (B200): tcgen05")


def assert_matches_reference(out, data):
    expected = ref_kernel(data)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        assert got.dtype == torch.float16
        evidence = compare(got, want)
        assert evidence.ok, evidence.describe()


@pytest.mark.gpu
@needs_sm100
@pytest.mark.parametrize("case", TEST_CASES + BENCHMARK_CASES, ids=lambda c: c.text())
def test_kernel_matches_reference_on_official_shapes(case):
    data = generate_input(case.m, case.n, case.k, case.g, case.seed)
    assert_matches_reference(sub.custom_kernel(data), data)


@pytest.mark.gpu
@needs_sm100
def test_kernel_on_full_range_data_and_odd_m():
    data = generate_input([40, 76, 148, 164, 196, 1], [128, 256, 64, 192, 7168, 64], [256, 512, 2048, 768, 256, 256],
                          6, seed=5, data="full-range")
    out = sub.custom_kernel(data)  # on the default queue, where the variant launches
    torch.cuda.synchronize()
    assert_matches_reference(out, data)


@pytest.mark.gpu
@needs_sm100
def test_kernel_with_rotating_inputs_and_changing_k():
    cases = [([96, 128], [128, 256], [256, 512]), ([96, 128], [128, 256], [512, 256])]
    datas = [generate_input(m, n, k, 2, seed=11 + i) for i in range(3) for m, n, k in cases]
    outs = [[t.clone() for t in sub.custom_kernel(d)] for d in datas]  # back to back, nothing synchronised between
    for out, data in zip(outs, datas):
        assert_matches_reference(out, data)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
