"""cute_dense_per_group: host logic on the CPU (grid, scale offsets, limits, caches), the sm_100a compile with PTX
evidence of the FP4 block-scaled MMA, and a B200-only correctness run."""
from __future__ import annotations

import importlib
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

VARIANT = "cute_dense_per_group"
# By its plain name, as submission.py imports it, so both see one module (and one set of classes).
put_first_on_path(variant_dir(VARIANT))
host = importlib.import_module("dense_host")

ON_B200 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 0)
FP4_MMA = "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16"


def small_input(seed: int = 5):
    return generate_input([96, 40], [128, 256], [256, 512], 2, seed)


# ---------------------------------------------------------------------------------------------------------------
# Grid and scale factors
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,grid", [(1, 32, (1, 1, 1)), (128, 128, (1, 1, 1)), (129, 4096, (2, 32, 1)),
                                      (76, 7168, (1, 56, 1)), (384, 160, (3, 2, 1))])
def test_launch_grid_is_one_cta_per_output_tile(m, n, grid):
    assert host.launch_grid(host.GroupShape(m, n, 256)) == grid


@pytest.mark.parametrize("rows,k", [(40, 256), (256, 768)])
def test_a_stage_of_scales_is_one_contiguous_2048_byte_block(rows, k):
    rest_k = blocked_rest(rows, k // SF_VEC)[1]
    assert host.sf_tile_bytes() == 2048
    for tile in range(host.ceil_div(rows, 128)):
        for kt in range(k // 256):
            start = host.sf_tile_offset(tile, kt, rest_k)
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


@pytest.mark.parametrize("sizes,message", [
    ([(128, 128, 384, 1)], r"K must be a positive multiple of 256.*got K=384"),
    ([(128, 128, 0, 1)], r"got K=0"),
    ([(128, 100, 256, 1)], r"N must be a multiple of 32.*got N=100"),
    ([(128, 0, 256, 1)], r"M and N must be >= 1.*N=0"),
    ([(128, 128, 256, 2)], r"L must be 1, got L=2"),
    ([(2**15, 2**16, 256, 1)], r"M\*N = 2147483648 elements exceeds"),
    ([(64, 65536 * 128, 256, 1)], r"N\*K = .* exceeds"),
    ([], r"at least 1 group"),
    ([(128, 128, 256, 1), (64, 96, 768, 1), (40, 100, 256, 1)], r"group 2: N must be a multiple of 32"),
])
def test_unsupported_sizes_raise_value_error_naming_the_limit(sizes, message):
    with pytest.raises(ValueError, match=message):
        host.validate_sizes(sizes)


def test_grid_limit_is_checked(monkeypatch):
    monkeypatch.setattr(host, "MAX_GRID_Y", 3)
    host.validate_sizes([(128, 384, 256, 1)])
    with pytest.raises(ValueError, match=r"grid \(1, 4\) exceeds the launch limits"):
        host.validate_sizes([(128, 512, 256, 1)])


def test_bad_tensors_raise_value_error_naming_the_problem():
    data = small_input()
    abc, sfs, sfr, sizes = data
    a, b, c = abc[1]
    swapped = [abc[0], (a, b, c[:, :, 0].t().contiguous().t().unsqueeze(-1))]
    with pytest.raises(ValueError, match=r"group 1 c: expected strides"):
        host.validate_inputs((swapped, sfs, sfr, sizes))
    shifted = torch.zeros(c.numel() * 2 + 64, dtype=torch.uint8)[2:2 + c.numel() * 2].view(torch.float16)
    shifted = shifted.view(c.shape)
    with pytest.raises(ValueError, match=r"group 1 c: base pointer must be 32-byte aligned"):
        host.validate_inputs(([abc[0], (a, b, shifted)], sfs, sfr, sizes))
    with pytest.raises(ValueError, match=r"group 0 sfa_reordered: expected dtype torch.float8_e4m3fn"):
        host.validate_inputs((abc, sfs, [(sfr[0][0].view(torch.uint8), sfr[0][1]), sfr[1]], sizes))
    with pytest.raises(ValueError, match="one entry per group"):
        host.validate_inputs((abc[:1], sfs, sfr, sizes))


# ---------------------------------------------------------------------------------------------------------------
# Caches
# ---------------------------------------------------------------------------------------------------------------
def test_compile_key_holds_everything_baked_into_the_artefact():
    key = host.compile_key("sm_100a", "4.8.1")
    assert key == host.compile_key("sm_100a", "4.8.1")
    assert key != host.compile_key("sm_100a", "4.8.2")
    assert key != host.compile_key("sm_103a", "4.8.1")
    assert key != host.compile_key("sm_100a", "4.8.1", host.KernelConfig(ab_stages=6))
    assert key.config.ab_stages == 4  # the seed's stage count


def test_launch_args_are_rebuilt_exactly_when_a_pointer_or_size_changes():
    built = []
    cache = host.ArgsCache(lambda key: built.append(key) or ("args", key), capacity=2)
    d1, d2 = small_input(1), small_input(2)
    shapes = host.validate_inputs(d1)
    k1, k2 = host.group_launches(d1, shapes), host.group_launches(d2, shapes)
    (a, b, c), (sfa, sfb) = d1[0][0], d1[2][0]
    assert k1[0] == (a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr(), 96, 128, 256)
    assert k1[1][5:] == (40, 256, 512)
    assert cache.get(k1) == ("args", k1)
    assert cache.get(k1) == ("args", k1) and cache.builds == 1  # same pointers and sizes: reused
    cache.get(k2)
    assert cache.builds == 2  # new pointers
    one_changed = (k1[0], k1[1][:4] + (k1[1][4] + 32,) + k1[1][5:])
    cache.get(one_changed)
    assert cache.builds == 3  # a single pointer differs: rebuilt
    cache.get(k1)
    assert cache.builds == 4  # evicted (capacity 2): rebuilt, never a stale entry
    assert len(cache) == 2


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


def test_host_module_imports_without_cutlass():
    folder = variant_dir(VARIANT)
    code = ("import sys; sys.modules['cutlass'] = None; "
            f"sys.path[:0] = [{str(folder)!r}, {str(folder.parents[1])!r}]; "
            "from harness.worker.task_alias import alias_task; alias_task('nvfp4_group_gemm'); "  # as the worker
            "import dense_host")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_runner_launches_every_group_in_order_with_its_own_pointers_and_sizes(sub):
    launches = []
    runner = sub.PerGroupRunner(launcher=lambda device, args: launches.append((device, args)),
                                build=lambda key: key)
    d1, d2 = small_input(1), small_input(2)
    out = runner.run(d1)
    assert [t.data_ptr() for t in out] == [c.data_ptr() for _a, _b, c in d1[0]]
    runner.run(d1)
    runner.run(d2)
    assert runner.args.builds == 2
    device, args = launches[0]
    assert device == torch.device("cpu")
    assert args == host.group_launches(d1, host.validate_inputs(d1))
    assert launches[2][1] == host.group_launches(d2, host.validate_inputs(d2))
    with pytest.raises(ValueError, match="K must be a positive multiple of 256"):
        runner.run(generate_input([96], [128], [320], 1, 0))
    assert len(launches) == 3


def test_launch_args_hold_cute_pointers_and_sizes(sub):
    import cutlass

    launches = host.group_launches(small_input(), host.validate_inputs(small_input()))
    args = sub.build_launch_args(launches)
    assert len(args) == 2
    dtypes = (cutlass.Float4E2M1FN, cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, cutlass.Float8E4M3FN,
              cutlass.Float16)  # a, b, sfa, sfb, c: the kernel's argument order
    for group_args, launch in zip(args, launches):
        assert len(group_args) == 8
        for ptr, address, dtype in zip(group_args[:5], launch[:5], dtypes):
            # _pointer / _assumed_align: the 4.8 runtime pointer's fields (no public getter outside a jit trace)
            assert (ptr._pointer, ptr.dtype, ptr._assumed_align) == (address, dtype, host.PTR_ALIGN_BYTES)
        assert [int(x) for x in group_args[5:]] == list(launch[5:])
        assert all(isinstance(x, cutlass.Int32) for x in group_args[5:])


def test_device_launcher_compiles_once(sub):
    compiled = []
    launcher = sub.DeviceLauncher(compile_fn=lambda cfg: compiled.append(cfg) or object())
    first = launcher.kernel()
    assert launcher.kernel() is first
    assert compiled == [host.CONFIG]


def test_custom_kernel_refuses_a_non_blackwell_device(sub):
    if ON_B200:
        pytest.skip("this machine is a B200")
    with pytest.raises(ValueError, match="needs .*sm_100a"):
        sub.custom_kernel(small_input())


# ---------------------------------------------------------------------------------------------------------------
# Compilation for sm_100a (no GPU needed)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled(sub, tmp_path_factory):
    return sub.compile_for_sm100(dump_dir=str(tmp_path_factory.mktemp("ptx_dense")))


@pytest.mark.slow
def test_compiles_once_for_sm100a_with_the_fp4_block_scaled_mma(compiled):
    import cutlass

    print(f"cute_dense_per_group: compiled in {compiled.seconds:.2f} s")
    assert compiled.key == host.compile_key("sm_100a", cutlass.__version__)
    ptx = compiled.ptx
    assert ".target sm_100a" in ptx
    assert ptx.count(FP4_MMA) == host.CONFIG.tile_k // host.CONFIG.mma_inst_k
    assert "tcgen05.cp.cta_group::1.32x128b.warpx4" in ptx
    assert "tcgen05.ld.sync.aligned.32x32b.x128" in ptx
    assert len(re.findall(r"cp\.async\.bulk\.tensor", ptx)) == 4  # A, B, SFA, SFB per stage
    assert "prefetch.tensormap" in ptx  # descriptors come from the launch parameters, built on the host
    assert "tensormap.replace" not in ptx  # nothing rewritten on the device


@pytest.mark.slow
def test_the_epilogue_is_predicated(compiled):
    """The seed stored the whole 128x128 tile unconditionally; this kernel must keep both the 16-byte path and an
    element-wise path for tiles cut by N."""
    ptx = compiled.ptx
    row_bytes = host.CONFIG.tile_n * 2
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == row_bytes // 16  # full tile: a row in 16-byte stores
    # Tile cut by N: one 2-byte store per column, each behind its own branch on the columns left (the last
    # column cannot be reached on that path, since it is taken only when fewer than 128 columns are left).
    stores = re.findall(r"st\.global\.b16", ptx)
    guarded = re.findall(r"setp\.\w+\.[sb]32\s+%p\d+, %r\d+, (\d+);\s*@%p\d+ bra\s+\S+;\s*st\.global\.b16", ptx)
    assert len(stores) == len(guarded) == host.CONFIG.tile_n - 1
    assert sorted(int(x) for x in guarded) == list(range(1, host.CONFIG.tile_n))


@pytest.mark.slow
def test_cute_scale_layout_addresses_the_blocked_layout():
    """The SFA/SFB layout the kernel builds (tile_atom_to_shape_SF), evaluated by CuTe on the CPU, against
    problems.nvfp4_group_gemm.formats.blocked_offset."""
    import cutlass.cute as cute
    import cutlass.utils.blockscaled_layout as blockscaled_utils

    m, k = 130, 512
    seen = {}

    def collect(layout):
        seen["pairs"] = [(r, j, cute.crd2idx((r, j * 16, 0), layout)) for r in range(m) for j in range(k // 16)]

    @cute.jit
    def probe():
        collect(blockscaled_utils.tile_atom_to_shape_SF((m, k, 1), 16))

    cute.compile(probe)
    rest_k = blocked_rest(m, k // SF_VEC)[1]
    assert len(seen["pairs"]) == m * (k // 16)
    for r, j, offset in seen["pairs"]:
        assert int(offset) == blocked_offset(r, j, rest_k)


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
def test_benchmark_shape_and_full_range_data(sub):
    case = load_shapes("benchmarks").cases[1]
    for d in (generate_input(case.m, case.n, case.k, case.g, case.seed),
              generate_input(case.m, case.n, case.k, case.g, 7, data="full-range")):
        got = sub.custom_kernel(d)
        torch.cuda.synchronize()
        assert check_outputs(got, ref_kernel(d)) is None
