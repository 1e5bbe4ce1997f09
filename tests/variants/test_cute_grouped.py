"""cute_grouped: host logic on the CPU (tile bookkeeping, group lookup, scale offsets, limits, caches), the
sm_100a compile with PTX evidence of the FP4 block-scaled MMA, and a B200-only correctness run."""
from __future__ import annotations

import importlib
import random
import re
import subprocess
import sys

import pytest
import torch

from problems.nvfp4_group_gemm.check import check_outputs
from problems.nvfp4_group_gemm.formats import SF_VEC, blocked_offset, blocked_rest
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import load_shapes
from ._load import load_submission, put_first_on_path, variant_dir

VARIANT = "cute_grouped"
# By its plain name, as submission.py imports it, so both see one module (and one set of classes). It imports
# without cutlass: everything up to the "entry point" section below runs on any CPU.
put_first_on_path(variant_dir(VARIANT))
host = importlib.import_module("grouped_host")

ON_B200 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 0)
FP4_MMA = "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16"


def shapes_of(*triples):
    return tuple(host.GroupShape(m, n, k) for m, n, k in triples)


def small_input(seed: int = 5):
    return generate_input([96, 40], [128, 256], [256, 512], 2, seed)


# ---------------------------------------------------------------------------------------------------------------
# Grid bookkeeping
# ---------------------------------------------------------------------------------------------------------------
def test_tile_counts_and_prefix_for_the_first_benchmark():
    ms = (80, 176, 128, 72, 64, 248, 96, 160)
    shapes = shapes_of(*((m, 4096, 7168) for m in ms))
    counts = host.tile_counts(shapes)
    assert counts == [32, 64, 32, 32, 32, 64, 32, 64]  # ceil(M/128) * 4096/128
    assert host.cta_prefix(counts) == [0, 32, 96, 128, 160, 192, 256, 288, 352]


def brute_force_tiles(shapes):
    """Walk the groups in order, M tiles fastest: the CTA -> (group, m tile, n tile) the kernel must produce."""
    out = []
    for g, s in enumerate(shapes):
        for tn in range(host.ceil_div(s.n, 128)):
            for tm in range(host.ceil_div(s.m, 128)):
                out.append((g, tm, tn))
    return out


def random_shapes(rng: random.Random, groups: int):
    return tuple(host.GroupShape(rng.choice([4, 40, 128, 130, 256, 388]), rng.choice([32, 128, 256, 384]), 256)
                 for _ in range(groups))


@pytest.mark.parametrize("groups", [*range(1, 10), 12, 17, 33, 64])
def test_group_lookup_matches_brute_force_for_every_cta(groups):
    rng = random.Random(groups)
    for _ in range(3):
        shapes = random_shapes(rng, groups)
        prefix = host.cta_prefix(host.tile_counts(shapes))
        expected = brute_force_tiles(shapes)
        assert prefix[-1] == len(expected)
        for cta, (g, tm, tn) in enumerate(expected):
            assert host.group_of_cta_unrolled(prefix, cta) == g
            assert host.group_of_cta_bisect(prefix, cta) == g
            assert host.group_of_cta(prefix, cta) == g
            assert host.cta_tile(prefix, shapes, cta) == (g, tm, tn)


@pytest.mark.parametrize("groups,strategy", [(1, "unrolled"), (8, "unrolled"), (9, "bisect"), (40, "bisect")])
def test_group_lookup_strategy_follows_the_group_count_like_the_kernel(monkeypatch, groups, strategy):
    # Both strategies agree (tested above); the dispatcher must pick the one the kernel compiles for that G.
    assert host.CONFIG.unrolled_lookup_max_groups == 8
    calls = []
    unrolled, bisect = host.group_of_cta_unrolled, host.group_of_cta_bisect
    monkeypatch.setattr(host, "group_of_cta_unrolled", lambda p, c: calls.append("unrolled") or unrolled(p, c))
    monkeypatch.setattr(host, "group_of_cta_bisect", lambda p, c: calls.append("bisect") or bisect(p, c))
    host.group_of_cta(host.cta_prefix([1] * groups), 0)
    assert calls == [strategy]


def test_group_lookup_rejects_ctas_outside_the_grid():
    prefix = host.cta_prefix([2, 3])
    with pytest.raises(IndexError):
        host.group_of_cta(prefix, 5)
    with pytest.raises(IndexError):
        host.group_of_cta(prefix, -1)


# ---------------------------------------------------------------------------------------------------------------
# Scale factors in the blocked 32x4x4 layout
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows,k", [(40, 256), (256, 768), (388, 2048)])
def test_a_stage_of_scales_is_one_contiguous_2048_byte_block(rows, k):
    rest_k = blocked_rest(rows, k // SF_VEC)[1]
    assert host.sf_tile_bytes() == 2048
    for tile in range(host.ceil_div(rows, 128)):
        for kt in range(k // 256):
            start = host.sf_tile_offset(tile, kt, rest_k)
            assert start == blocked_offset(tile * 128, kt * 16, rest_k)
            offsets = {blocked_offset(r, j, rest_k)
                       for r in range(tile * 128, tile * 128 + 128) for j in range(kt * 16, kt * 16 + 16)}
            assert offsets == set(range(start, start + 2048))


# ---------------------------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------------------------
def test_every_official_test_and_benchmark_shape_is_accepted():
    for name in ("tests", "benchmarks"):
        for case in load_shapes(name).cases:
            shapes = host.validate_sizes(case.problem_sizes)
            assert [(s.m, s.n, s.k) for s in shapes] == list(zip(case.m, case.n, case.k))


def test_generated_inputs_pass_validation():
    data = small_input()
    assert host.validate_inputs(data) == shapes_of((96, 128, 256), (40, 256, 512))


@pytest.mark.parametrize("sizes,message", [
    ([(128, 128, 384, 1)], r"K must be a positive multiple of 256.*got K=384"),
    ([(128, 128, 128, 1)], r"K must be a positive multiple of 256.*got K=128"),
    ([(128, 128, 0, 1)], r"got K=0"),
    ([(128, 100, 256, 1)], r"N must be a multiple of 32.*got N=100"),
    ([(0, 128, 256, 1)], r"M and N must be >= 1.*got M=0"),
    ([(128, 128, 256, 2)], r"L must be 1, got L=2"),
    ([(128, 128, 256)], r"expected \(M, N, K, L\)"),
    ([(2**16, 128, 2**15, 1)], r"M\*K = 2147483648 elements exceeds"),
    ([], r"at least 1 group"),
    ([(128, 128, 256, 1), (64, 100, 512, 1)], r"group 1: N must be a multiple of 32.*got N=100"),
])
def test_unsupported_sizes_raise_value_error_naming_the_limit(sizes, message):
    with pytest.raises(ValueError, match=message):
        host.validate_sizes(sizes)


def replace_in(data, g: int, slot: str, tensor):
    abc, sfs, sfr, sizes = data
    abc = [list(t) for t in abc]
    sfr = [list(t) for t in sfr]
    if slot in ("a", "b", "c"):
        abc[g]["abc".index(slot)] = tensor
    else:
        sfr[g][("sfa", "sfb").index(slot)] = tensor
    return [tuple(t) for t in abc], sfs, [tuple(t) for t in sfr], sizes


def misaligned_like(t: torch.Tensor, shift: int) -> torch.Tensor:
    """A tensor equal in dtype, shape and strides to ``t`` whose data starts ``shift`` bytes past an allocation."""
    span = t.untyped_storage().nbytes()
    buf = torch.zeros(span + 64, dtype=torch.uint8)
    base = buf[shift:shift + span].view(t.dtype)
    return base.as_strided(t.shape, t.stride(), base.storage_offset() + t.storage_offset())


def test_bad_tensors_raise_value_error_naming_the_problem():
    data = small_input()
    a, b, c = data[0][1]
    sfa, sfb = data[2][1]
    cases = [
        (replace_in(data, 1, "c", c.to(torch.float32)), r"group 1 c: expected dtype torch.float16"),
        (replace_in(data, 1, "c", c[:, :128]), r"group 1 c: expected shape \(40, 256, 1\), got \(40, 128, 1\)"),
        (replace_in(data, 1, "c", c[:, :, 0].t().contiguous().t().unsqueeze(-1)), r"group 1 c: expected strides"),
        (replace_in(data, 1, "c", misaligned_like(c, 2)), r"group 1 c: base pointer must be 32-byte aligned"),
        (replace_in(data, 0, "sfb", misaligned_like(data[2][0][1], 16)), r"group 0 sfb_reordered: base pointer"),
        (replace_in(data, 1, "sfa", sfa.contiguous()), r"group 1 sfa_reordered: expected strides"),
        (replace_in(data, 1, "a", b), r"group 1 a: expected shape \(40, 256, 1\), got \(256, 256, 1\)"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            host.validate_inputs(bad)
    abc, sfs, sfr, sizes = data
    with pytest.raises(ValueError, match="one entry per group"):
        host.validate_inputs((abc, sfs, sfr[:1], sizes))


# ---------------------------------------------------------------------------------------------------------------
# Caches
# ---------------------------------------------------------------------------------------------------------------
def test_compile_key_holds_everything_baked_into_the_artefact():
    k2 = host.compile_key(2, "sm_100a", "4.8.1")
    assert k2 == host.compile_key(2, "sm_100a", "4.8.1")
    assert k2 != host.compile_key(8, "sm_100a", "4.8.1")  # group count: table shapes and lookup strategy
    assert k2 != host.compile_key(2, "sm_100a", "4.9.0")
    assert k2 != host.compile_key(2, "sm_103a", "4.8.1")
    assert k2 != host.compile_key(2, "sm_100a", "4.8.1", host.KernelConfig(ab_stages=3))
    assert k2.config == host.CONFIG and k2.variant == VARIANT


def test_launch_plan_refreshes_pointers_and_descriptors_only_when_a_pointer_changes():
    d1, d2 = small_input(1), small_input(2)
    shapes = host.validate_inputs(d1)
    assert host.validate_inputs(d2) == shapes
    plan = host.build_plan(shapes, "cpu")
    assert plan.prefix == (0, 1, 3) and plan.total_ctas == 3  # 1 tile, then 1 x 2 tiles
    assert plan.sizes_t.tolist() == [[96, 128, 256, 1], [40, 256, 512, 1]]
    assert plan.prefix_t.tolist() == [0, 1, 3]
    assert tuple(plan.tensormaps_t.shape) == (3, 4, 16)

    p1, p2 = host.input_pointers(d1), host.input_pointers(d2)
    assert plan.begin_launch(p1) is True  # first launch: descriptors must be built
    assert plan.abc_ptrs_t.tolist() == [list(r) for r in p1[0]]
    assert plan.sf_ptrs_t.tolist() == [list(r) for r in p1[1]]
    plan.end_launch()
    assert plan.begin_launch(p1) is False  # same pointers: reuse the descriptors
    plan.end_launch()
    assert plan.begin_launch(p2) is True  # new input, same sizes: new pointers, rebuild
    assert plan.abc_ptrs_t.tolist() == [list(r) for r in p2[0]]
    # A launch that never happened (no end_launch) must not leave the plan believing its descriptors are valid.
    assert plan.begin_launch(p2) is True
    plan.end_launch()
    assert plan.begin_launch(p2) is False


def test_plan_cache_is_keyed_on_sizes_and_device_and_bounded():
    cache = host.PlanCache(capacity=2)
    a, b, c = shapes_of((96, 128, 256)), shapes_of((40, 128, 256)), shapes_of((40, 128, 512))
    pa = cache.get(a, "cpu")
    assert cache.get(a, "cpu") is pa
    pb = cache.get(b, "cpu")
    assert pb is not pa
    cache.get(a, "cpu")  # a most recent: c evicts b
    cache.get(c, "cpu")
    assert len(cache) == 2
    assert cache.get(a, "cpu") is pa
    assert cache.get(b, "cpu") is not pb


# ---------------------------------------------------------------------------------------------------------------
# The entry point on the CPU, with the device launch replaced by a recorder
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sub():
    module = load_submission(VARIANT)
    assert module.host is host
    return module


def test_import_does_not_compile(sub):
    assert sub._RUNNER.launcher.kernels == {}


def test_runner_validates_plans_and_launches_once_per_call(sub):
    launches = []
    runner = sub.GroupedRunner(launcher=lambda plan, rebuild: launches.append((plan, rebuild)))
    d1, d2 = small_input(1), small_input(2)
    out = runner.run(d1)
    assert [t.data_ptr() for t in out] == [c.data_ptr() for _a, _b, c in d1[0]]
    runner.run(d1)
    runner.run(d2)
    assert [r for _p, r in launches] == [True, False, True]
    plan = launches[-1][0]
    assert all(p is plan for p, _r in launches)
    assert plan.abc_ptrs_t.tolist() == [list(r) for r in host.input_pointers(d2)[0]]

    bad = generate_input([96], [100], [256], 1, 0)
    with pytest.raises(ValueError, match="N must be a multiple of 32"):
        runner.run(bad)
    assert len(launches) == 3


def test_device_launcher_compiles_once_per_key(sub):
    compiled = []
    launcher = sub.DeviceLauncher(compile_fn=lambda g, cfg: compiled.append((g, cfg)) or object())
    k2 = launcher.kernel_for(2)
    assert launcher.kernel_for(2) is k2
    launcher.kernel_for(8)
    assert compiled == [(2, host.CONFIG), (8, host.CONFIG)]
    other = sub.DeviceLauncher(config=host.KernelConfig(ab_stages=3), compile_fn=lambda g, cfg: cfg)
    assert other.kernel_for(2).ab_stages == 3


def test_host_module_imports_without_cutlass():
    folder = variant_dir(VARIANT)
    code = ("import sys; sys.modules['cutlass'] = None; "  # any cutlass import now raises ImportError
            f"sys.path[:0] = [{str(folder)!r}, {str(folder.parents[1])!r}]; "
            "from harness.worker.task_alias import alias_task; alias_task('nvfp4_group_gemm'); "  # as the worker
            "import grouped_host")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_custom_kernel_refuses_a_non_blackwell_device(sub):
    if ON_B200:
        pytest.skip("this machine is a B200")
    data = small_input()
    with pytest.raises(ValueError, match="needs .*sm_100a"):
        sub.custom_kernel(data)


# ---------------------------------------------------------------------------------------------------------------
# Compilation for sm_100a (no GPU needed)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled(sub, tmp_path_factory):
    """G=8 (unrolled group lookup) and G=9 (binary search), compiled once per session with their PTX."""
    out = {}
    for groups in (8, 9):
        dump = tmp_path_factory.mktemp(f"ptx_g{groups}")
        out[groups] = sub.compile_for_sm100(groups, dump_dir=str(dump))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("groups", [8, 9])
def test_compiles_for_sm100a_with_the_fp4_block_scaled_mma(compiled, groups):
    import cutlass

    c = compiled[groups]
    print(f"cute_grouped G={groups}: compiled in {c.seconds:.2f} s")
    assert c.key == host.compile_key(groups, "sm_100a", cutlass.__version__)
    ptx = c.ptx
    assert ".target sm_100a" in ptx
    # One tcgen05.mma per 64-wide K block of a 256-wide stage, unrolled.
    assert ptx.count(FP4_MMA) == host.CONFIG.tile_k // host.CONFIG.mma_inst_k
    assert "tcgen05.cp.cta_group::1.32x128b.warpx4" in ptx  # scale factors shared -> tensor memory
    assert "tcgen05.ld.sync.aligned.32x32b.x128" in ptx  # accumulator tensor memory -> registers
    assert re.search(r"tcgen05\.alloc\.cta_group::1[^\n]*\n", ptx)
    assert "cp.async.bulk.tensor" in ptx


@pytest.mark.slow
@pytest.mark.parametrize("groups", [8, 9])
def test_descriptor_update_is_released_and_acquired_per_descriptor(compiled, groups):
    ptx = compiled[groups].ptx
    for field_ in ("global_address", "global_dim", "global_stride"):
        assert f"tensormap.replace.tile.{field_}" in ptx
    assert "fence.proxy.tensormap::generic.release.gpu" in ptx
    acquires = re.findall(r"fence\.proxy\.tensormap::generic\.acquire\.gpu \[(%rd\d+)\], 128", ptx)
    # The seed acquired only the SFB descriptor, in the wrong warp; the TMA warp acquires all four here.
    assert len(set(acquires)) == 4


@pytest.mark.slow
def test_the_epilogue_is_predicated(compiled):
    ptx = compiled[8].ptx
    row_bytes = host.CONFIG.tile_n * 2
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == row_bytes // 16  # full tile: a row in 16-byte stores
    # Tile cut by N: one 2-byte store per column, each behind its own branch on the columns left (the last column
    # cannot be reached on that path, taken only when fewer than 128 columns are left).
    guarded = re.findall(r"setp\.\w+\.[sb]32\s+%p\d+, %r\d+, (\d+);\s*@%p\d+ bra\s+\S+;\s*st\.global\.b16", ptx)
    assert len(re.findall(r"st\.global\.b16", ptx)) == len(guarded) == host.CONFIG.tile_n - 1


@pytest.mark.slow
def test_group_count_changes_the_compiled_code(compiled):
    assert compiled[8].key != compiled[9].key
    assert compiled[8].ptx != compiled[9].ptx


@pytest.mark.slow
def test_cute_scale_layout_addresses_the_blocked_layout():
    """The layout the kernel builds for SFA/SFB (tile_atom_to_shape_SF) evaluated by CuTe itself, against
    problems.nvfp4_group_gemm.formats.blocked_offset; traced for a CPU-only compile of a host function."""
    import cutlass.cute as cute
    import cutlass.utils.blockscaled_layout as blockscaled_utils

    m, k = 200, 768
    seen = {}

    def collect(layout):
        seen["pairs"] = [(r, j, cute.crd2idx((r, j * 16, 0), layout))
                         for r in range(0, m, 3) for j in range(k // 16)]

    @cute.jit
    def probe():
        collect(blockscaled_utils.tile_atom_to_shape_SF((m, k, 1), 16))

    cute.compile(probe)
    rest_k = blocked_rest(m, k // SF_VEC)[1]
    assert len(seen["pairs"]) == len(range(0, m, 3)) * (k // 16)
    for r, j, offset in seen["pairs"]:
        assert int(offset) == blocked_offset(r, j, rest_k)


# ---------------------------------------------------------------------------------------------------------------
# On any CUDA GPU: the pointer-table upload under a GPU that lags behind the CPU (host code only, no tcgen05)
# ---------------------------------------------------------------------------------------------------------------
def _pointer_rows(i: int):
    return (tuple(tuple(i * 100 + 3 * g + j for j in range(3)) for g in range(2)),
            tuple(tuple(i * 100 + 50 + 2 * g + j for j in range(2)) for g in range(2)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pointer_upload_is_stream_ordered_while_the_gpu_lags():
    """Each call's table must be what that call's launch reads, even when every call brings new pointers and the
    GPU is far behind. The seed's scheme (rewrite one pinned buffer, copy non_blocking) is run alongside as the
    sensitivity check: on an H200 it showed the wrong table to 398 of 400 launches; this plan to 0."""
    calls, sleep_cycles = 200, 100_000
    device = torch.device("cuda")
    plan = host.build_plan(shapes_of((128, 128, 256), (64, 256, 512)), device)
    seen = torch.empty((calls, 2, 3), dtype=torch.int64, device=device)
    for i in range(calls):
        torch.cuda._sleep(sleep_cycles)  # keep the stream busy so the CPU runs ahead
        assert plan.begin_launch(_pointer_rows(i)) is True
        seen[i].copy_(plan.abc_ptrs_t)  # stands for the kernel reading the table, in stream order
        plan.end_launch()
    pinned = torch.empty((2, 3), dtype=torch.int64, pin_memory=True)
    table = torch.empty((2, 3), dtype=torch.int64, device=device)
    seen_seed = torch.empty_like(seen)
    for i in range(calls):
        torch.cuda._sleep(sleep_cycles)
        pinned.copy_(torch.tensor(_pointer_rows(i)[0]))  # the seed: one pinned buffer rewritten in place
        table.copy_(pinned, non_blocking=True)
        seen_seed[i].copy_(table)
    torch.cuda.synchronize()
    expected = [[list(r) for r in _pointer_rows(i)[0]] for i in range(calls)]
    assert sum(a != e for a, e in zip(seen.tolist(), expected)) == 0
    assert sum(a != e for a, e in zip(seen_seed.tolist(), expected)) > 0, "the check lost its sensitivity"


# ---------------------------------------------------------------------------------------------------------------
# On a B200: against the exact reference
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not ON_B200, reason="needs an sm_100a GPU (compute capability 10.0)")
def test_matches_the_reference_on_every_official_test_shape(sub):
    for case in load_shapes("tests").cases:
        data = generate_input(case.m, case.n, case.k, case.g, case.seed)
        expected = ref_kernel(data)
        got = sub.custom_kernel(data)
        torch.cuda.synchronize()
        assert check_outputs(got, expected) is None, case.text()


@pytest.mark.gpu
@pytest.mark.skipif(not ON_B200, reason="needs an sm_100a GPU (compute capability 10.0)")
def test_pointer_changes_between_calls_rebuild_the_descriptors(sub):
    case = load_shapes("benchmarks").cases[0]
    inputs = [generate_input(case.m, case.n, case.k, case.g, case.seed + i) for i in range(3)]
    expected = [ref_kernel(d) for d in inputs]
    for d in inputs:  # back to back, new pointers each call, nothing synchronised in between
        sub.custom_kernel(d)
    torch.cuda.synchronize()
    for d, e in zip(inputs, expected):
        assert check_outputs([c for _a, _b, c in d[0]], e) is None
    # Full-range data (all e2m1 codes, scales over e4m3fn's range) once more through a cached plan.
    d = generate_input(case.m, case.n, case.k, case.g, 7, data="full-range")
    got = sub.custom_kernel(d)
    torch.cuda.synchronize()
    assert check_outputs(got, ref_kernel(d)) is None
