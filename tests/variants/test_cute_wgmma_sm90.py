"""submissions/cute_wgmma_sm90: the decode's bit arithmetic (the very functions the kernel traces) against
problems.nvfp4_group_gemm.formats, the scale layout, grid bookkeeping, validation, the caches, the sm_90a compile on the
CPU, and on a Hopper GPU every official test and benchmark shape in both data modes against the exact reference."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from problems.nvfp4_group_gemm.check import check_outputs
from problems.nvfp4_group_gemm.formats import E2M1_VALUES, blocked_offset, blocked_rest, e4m3fn_value
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import load_shapes

from ._load import ROOT, load_submission, variant_dir

VARIANT = "cute_wgmma_sm90"
sub = load_submission(VARIANT)
host = sub.host
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
TEST_CASES = load_shapes("tests").cases
BENCHMARK_CASES = load_shapes("benchmarks").cases


def _f16(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def small_input(seed: int = 1, data: str = "official"):
    return generate_input([96, 40], [128, 256], [256, 512], 2, seed, data=data)


# --- the entry file (its headers: test_sm90_headers.py) -----------------------------------------------------------
def test_host_module_imports_without_cutlass():
    folder = variant_dir(VARIANT)
    code = ("import sys; sys.modules['cutlass'] = None; "
            f"sys.path[:0] = [{str(folder)!r}, {str(ROOT)!r}]; "
            "from harness.worker.task_alias import alias_task; alias_task('nvfp4_group_gemm'); "  # as the worker
            "import cute_wgmma_sm90_host")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_the_dsl_the_import_names_the_package_and_the_tool():
    code = ("import sys; sys.modules['cutlass'] = None; "
            f"sys.path.insert(0, {str(ROOT)!r}); "
            "from tests.variants._load import load_submission; load_submission('cute_wgmma_sm90')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ImportError: cute_wgmma_sm90 needs CuTe DSL (the nvidia-cutlass-dsl package" in done.stderr
    assert "tools/dsl_to_device.py" in done.stderr


# --- the decode: exact against problems.nvfp4_group_gemm.formats ------------------------------------------------
def test_decode_word_gives_every_code_times_2_to_the_minus_14_in_every_position():
    for code in range(16):
        for pos in range(8):  # nibble pos of the word = K element pos (element 2i the low nibble of byte i)
            word = code << (4 * pos)
            out = host.decode_word(word)
            assert all(0 <= d < 2**32 for d in out)
            halves = [(out[pos // 2] >> (16 * (pos % 2))) & 0xFFFF]
            assert _f16(halves[0]) * 2.0**14 == E2M1_VALUES[code], (code, pos)
            others = [(out[j // 2] >> (16 * (j % 2))) & 0xFFFF for j in range(8) if j != pos]
            assert all(h == 0 for h in others), (code, pos)  # code 0 everywhere else decodes to +0


def test_decode_word_on_random_words_matches_decode_e2m1():
    from problems.nvfp4_group_gemm.formats import decode_e2m1

    rng = np.random.default_rng(5)
    words = rng.integers(0, 2**32, size=2000, dtype=np.uint64)
    packed = torch.from_numpy(words.astype(np.uint32).view(np.uint8).copy())
    expected = decode_e2m1(packed).numpy()
    got = []
    for w in words.tolist():
        for d in host.decode_word(w):
            got += [_f16(d & 0xFFFF) * 2.0**14, _f16(d >> 16) * 2.0**14]
    assert np.array_equal(np.array(got), expected)


def test_scale_bits_and_the_fp16_products_are_exact_for_every_finite_scale_and_code():
    boost = np.float16(host.SCALE_BOOST)
    for byte in range(256):
        value = e4m3fn_value(byte)
        if value != value:  # NaN codes 0x7F, 0xFF: never drawn
            continue
        assert _f16(host.scale_half_bits(byte)) * 2.0**8 == value, hex(byte)
        scale = np.float16(_f16(host.scale_half_bits(byte))) * boost  # the kernel's fp16 multiply
        assert float(scale) == value * 2.0**7, hex(byte)
        for code in range(16):
            operand = np.float16(_f16(host.decode_word(code)[0] & 0xFFFF)) * scale
            assert float(operand) == E2M1_VALUES[code] * value * 2.0**-7, (hex(byte), code)
    # the two operands' 2^-7 undone by the epilogue's factor
    assert host.ACC_RESCALE == 2.0**14


def test_sf_pair_index_addresses_two_scales_of_the_blocked_layout():
    for rows, k in ((40, 256), (200, 768), (384, 7168)):
        rest_k = blocked_rest(rows, k // 16)[1]
        assert rest_k == k // host.CONFIG.tile_k
        for r in range(rows):
            for step in range(k // 64):
                for half in (0, 1):
                    idx = host.sf_pair_index(r, step, half, rest_k)
                    assert 2 * idx == blocked_offset(r, 4 * step + 2 * half, rest_k)
                    assert 2 * idx + 1 == blocked_offset(r, 4 * step + 2 * half + 1, rest_k)


# --- grid bookkeeping -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("groups", [3, 8, 9, 13])
def test_every_tile_of_every_group_has_exactly_one_cta(groups):
    rng = np.random.default_rng(groups)
    shapes = [host.GroupShape(int(rng.integers(1, 400)), int(rng.integers(1, 5)) * 4 * 37, 256)
              for _ in range(groups)]
    prefix = host.cta_prefix(shapes)
    seen = {host.cta_tile(prefix, shapes, cta) for cta in range(prefix[-1])}
    want = {(g, i, j) for g, s in enumerate(shapes) for i in range(s.tiles_m()) for j in range(s.tiles_n())}
    assert seen == want and len(want) == prefix[-1]
    with pytest.raises(IndexError, match="outside the grid"):
        host.group_of_cta(prefix, prefix[-1])


def test_benchmark_grid_sizes():
    counts = [host.cta_prefix([host.GroupShape(m, n, k) for m, n, k in zip(c.m, c.n, c.k)])[-1]
              for c in BENCHMARK_CASES]
    assert counts == [11 * 32, 13 * 56, 5 * 24, 4 * 32]  # M tiles of 128 x N tiles of 128


@pytest.mark.parametrize("sizes, message", [
    ([], "expected at least 1 group, got 0"),
    ([(96, 128, 256, 2)], "L must be 1, got L=2"),
    ([(96, 128, 96, 1)], "K must be a positive multiple of 64, got K=96"),
    ([(0, 128, 256, 1)], "M and N must be >= 1, got M=0, N=128"),
    ([(96, 128, 256)], r"expected \(M, N, K, L\), got \(96, 128, 256\)"),
])
def test_validate_sizes_names_the_limit(sizes, message):
    with pytest.raises(host.UnsupportedProblem, match=message):
        host.validate_sizes(sizes)


def test_validate_inputs_names_what_is_wrong():
    abc, sfs, sfr, sizes = small_input()
    a, b, c = abc[0]
    bad = ([(a, b, c.to(torch.float32))] + abc[1:], sfs, sfr, sizes)
    with pytest.raises(host.UnsupportedProblem, match="group 0 c: expected dtype torch.float16, got torch.float32"):
        host.validate_inputs(bad)
    bad = ([(a, b[:, :64], c)] + abc[1:], sfs, sfr, sizes)
    with pytest.raises(host.UnsupportedProblem, match=r"group 0 b: expected shape \(128, 128, 1\), got \(128, 64, 1\)"):
        host.validate_inputs(bad)
    with pytest.raises(host.UnsupportedProblem, match="one entry per group"):
        host.validate_inputs((abc, sfs, sfr[:1], sizes))
    assert host.validate_inputs(small_input()) == (host.GroupShape(96, 128, 256), host.GroupShape(40, 256, 512))


# --- caches ------------------------------------------------------------------------------------------------------
def test_compile_key_holds_everything_baked_into_the_artefact():
    k = host.compile_key(2, "4.8.1", "abc")
    assert k == host.compile_key(2, "4.8.1", "abc") and k.digest() == host.compile_key(2, "4.8.1", "abc").digest()
    others = [host.compile_key(3, "4.8.1", "abc"), host.compile_key(2, "4.9.0", "abc"),
              host.compile_key(2, "4.8.1", "abd"), host.compile_key(2, "4.8.1", "abc", host.KernelConfig(stages=4))]
    assert len({k.digest(), *(o.digest() for o in others)}) == 5
    assert sub.kernel_key(2).source_sha == host.source_digest(sub._FILES)


def test_cache_dir_is_the_variants_own_folder_under_fp4bench_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FP4BENCH_CACHE", str(tmp_path))
    assert host.cache_dir() == tmp_path / "cute_wgmma_sm90"


def test_plan_uploads_a_table_once_per_set_of_input_addresses():
    d1, d2, d3 = small_input(1), small_input(2), small_input(3)
    shapes = host.validate_inputs(d1)
    plan = host.build_plan(shapes, "cpu")
    plan.capacity = 2
    assert plan.prefix == (0, 1, 3) and plan.prefix_t.tolist() == [0, 1, 3] and plan.total_ctas == 3
    r1, r2, r3 = (host.table_rows(d, shapes) for d in (d1, d2, d3))
    t1 = plan.table_for(r1)
    assert plan.table_for(r1) is t1 and plan.uploads == 1
    assert t1.tensor.tolist()[1] == [d1[0][1][0].data_ptr(), d1[0][1][1].data_ptr(), d1[0][1][2].data_ptr(),
                                     d1[2][1][0].data_ptr(), d1[2][1][1].data_ptr(), 40, 256, 512]
    t2 = plan.table_for(r2)
    assert t2 is not t1 and t2.tensor.tolist()[0][0] == d2[0][0][0].data_ptr() and plan.uploads == 2
    assert plan.table_for(r1) is t1 and plan.uploads == 2  # the official loop's cycle: nothing uploaded again
    plan.table_for(r3)  # beyond capacity: the least recently used (r2's) goes
    assert list(plan.tables) == [r1, r3] and plan.uploads == 3
    cache = host.PlanCache(capacity=1)
    p = cache.get(shapes, "cpu")
    assert cache.get(shapes, "cpu") is p
    cache.get(shapes[:1], "cpu")
    assert len(cache) == 1 and cache.get(shapes, "cpu") is not p


def test_runner_validates_then_launches_once_per_call():
    launches = []
    runner = sub.GroupedRunner(launcher=lambda plan, table: launches.append(table))
    d = small_input()
    out = runner.run(d)
    assert [t.data_ptr() for t in out] == [c.data_ptr() for _a, _b, c in d[0]] and len(launches) == 1
    abc, sfs, sfr, sizes = d
    with pytest.raises(host.UnsupportedProblem, match="group 1 c: expected dtype torch.float16"):
        runner.run((abc[:1] + [(abc[1][0], abc[1][1], abc[1][2].float())], sfs, sfr, sizes))  # never launched
    assert len(launches) == 1


def test_device_launcher_compiles_once_per_group_count():
    built = []
    launcher = sub.DeviceLauncher(compile_fn=lambda g, cfg: built.append(g) or object())
    k2 = launcher.kernel_for(2)
    assert launcher.kernel_for(2) is k2
    launcher.kernel_for(8)
    assert built == [2, 8] and sub._RUNNER.launcher.kernels == {}  # importing compiled nothing


def test_custom_kernel_refuses_cpu_tensors_and_names_the_device():
    with pytest.raises(host.UnsupportedProblem, match="needs CUDA tensors on an sm_90a GPU, got device cpu"):
        sub.GroupedRunner().run(small_input())


# --- the sm_90a compile (no GPU) ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """G=2 (compare chain) and G=9 (binary search), compiled with their PTX."""
    return {g: sub.compile_for_sm90(g, dump_dir=str(tmp_path_factory.mktemp(f"ptx{g}"))) for g in (2, 9)}


@pytest.mark.slow
@pytest.mark.parametrize("groups", [2, 9])
def test_compiles_for_sm90a_with_wgmma_from_swizzled_shared_memory(compiled, groups):
    c = compiled[groups]
    print(f"cute_wgmma_sm90 G={groups}: compiled for sm_90a in {c.seconds:.2f} s")
    ptx = c.ptx
    assert ".target sm_90a" in ptx
    # One m64n128k16 wgmma per 16-wide slice of a 64-wide K step, both operands from shared memory descriptors.
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16", ptx)) == 4
    assert ptx.count("wgmma.fence.sync.aligned") >= 1 and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    assert "fence.proxy.async.shared::cta" in ptx  # decoded stores made visible to wgmma's async proxy
    # per thread and step: 16 bytes of a B row and of an A row, 64 decoded bytes of each into shared memory
    assert len(re.findall(r"ld\.global[.\w]*\.v4\.b32", ptx)) >= 2
    assert len(re.findall(r"st\.shared\.v4\.b32", ptx)) == 8
    assert ".local" not in ptx  # nothing spilled to local memory
    assert len(re.findall(r"st\.global\.b16", ptx)) == 64  # 128 x 128 accumulators over 256 threads, predicated


@pytest.mark.slow
def test_epilogue_coordinates_are_each_threads_own_wgmma_accumulators():
    """The kernel stores accumulator i of thread t at tiled_mma.get_slice(t).partition_C(identity)[i]: for every
    thread that is the m64nNk16 accumulator layout (row = warp x 16 + lane / 4 (+8), column pairs 2 (lane % 4) +
    8 j), the second warpgroup 64 rows down, and the 256 threads cover the 128 x 128 tile once."""
    import cutlass
    import cutlass.cute as cute

    cfg = host.CONFIG
    seen = {}

    @cute.jit
    def probe():
        mma = sub.sm90_utils.make_trivial_tiled_mma(
            sub.OP_DTYPE, sub.OP_DTYPE, sub.warpgroup.OperandMajorMode.K, sub.warpgroup.OperandMajorMode.K,
            sub.ACC_DTYPE, (cfg.tile_n // 64, 1, 1), tiler_mn=(64, cfg.tile_m))
        ident = cute.make_identity_tensor((cfg.tile_n, cfg.tile_m))
        for t in cutlass.range_constexpr(cfg.threads):
            part = mma.get_slice(t).partition_C(ident)
            seen[t] = [tuple(int(x) for x in part[i]) for i in range(cute.size(part))]

    cute.compile(probe, options=f"--gpu-arch {host.TARGET_ARCH}")
    cover = [c for coords in seen.values() for c in coords]
    assert len(cover) == len(set(cover)) == cfg.tile_n * cfg.tile_m
    for t, coords in seen.items():
        lane, warp = t % 32, t // 32
        rows = {warp * 16 + lane // 4, warp * 16 + lane // 4 + 8}
        cols = {8 * j + 2 * (lane % 4) + b for j in range(cfg.tile_m // 8) for b in (0, 1)}
        assert {r for r, _c in coords} == rows and {c for _r, c in coords} == cols, t


@pytest.mark.slow
def test_group_count_changes_the_compiled_code(compiled):
    assert compiled[2].key != compiled[9].key and compiled[2].ptx != compiled[9].ptx


# --- on a Hopper GPU -------------------------------------------------------------------------------------------
def _check_case(case, data: str):
    inputs = generate_input(case.m, case.n, case.k, case.g, case.seed, data=data)
    expected = ref_kernel(inputs)
    got = sub.custom_kernel(inputs)
    torch.cuda.synchronize()
    assert check_outputs(got, expected) is None, (case.text(), data)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_SM90, reason="needs an sm_90a GPU (compute capability 9.0) and CUDA")
@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", TEST_CASES, ids=lambda c: c.text())
def test_gpu_matches_reference_on_every_test_shape(case, data):
    _check_case(case, data)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_SM90, reason="needs an sm_90a GPU (compute capability 9.0) and CUDA")
@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", BENCHMARK_CASES, ids=lambda c: c.name)
def test_gpu_matches_reference_on_every_benchmark_shape(case, data):
    _check_case(case, data)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_SM90, reason="needs an sm_90a GPU (compute capability 9.0) and CUDA")
def test_gpu_back_to_back_calls_with_new_pointers_each_read_their_own():
    case = BENCHMARK_CASES[3]
    inputs = [generate_input(case.m, case.n, case.k, case.g, case.seed + i) for i in range(3)]
    expected = [ref_kernel(d) for d in inputs]
    for d in inputs:  # nothing synchronised in between: each call's table upload is stream-ordered
        sub.custom_kernel(d)
    torch.cuda.synchronize()
    for d, e in zip(inputs, expected):
        assert check_outputs([c for _a, _b, c in d[0]], e) is None
    plan = sub._RUNNER.plans.get(host.validate_inputs(inputs[0]), inputs[0][0][0][0].device)
    uploads = plan.uploads
    for d in inputs:  # the official loop's second pass over the same inputs: their tables are on the GPU already
        for _a, _b, c in d[0]:
            c.zero_()
        sub.custom_kernel(d)
    torch.cuda.synchronize()
    assert plan.uploads == uploads
    for d, e in zip(inputs, expected):
        assert check_outputs([c for _a, _b, c in d[0]], e) is None


_FIRST_CALL = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from tests.variants._load import load_submission
from problems.nvfp4_group_gemm.inputs import generate_input
import torch
sub = load_submission("cute_wgmma_sm90")
t1 = time.perf_counter()
d = generate_input([96, 40], [128, 256], [256, 512], 2, 1)
t2 = time.perf_counter()
sub.custom_kernel(d); torch.cuda.synchronize()
t3 = time.perf_counter()
k = sub._RUNNER.launcher.kernels[(2, sub.host.CONFIG)]
print(json.dumps({{"import_s": t1 - t0, "first_call_s": t3 - t2, "source": k.source, "note": k.note}}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not ON_SM90, reason="needs an sm_90a GPU (compute capability 9.0) and CUDA")
def test_gpu_second_process_loads_the_compiled_kernel_instead_of_compiling(tmp_path):
    env = {**os.environ, "FP4BENCH_CACHE": str(tmp_path)}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _FIRST_CALL.format(root=str(ROOT))], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("cold, warm:", runs)
    assert runs[0]["source"] == "compiled"
    assert runs[1]["source"] == "cache", runs[1]["note"] or runs[0]["note"]
    assert sorted(p.suffix for p in (tmp_path / "cute_wgmma_sm90").iterdir()) == [".h", ".o"]


def test_the_launch_arguments_are_converted_once_per_pointer_table(monkeypatch):
    """The DSL converts a call's arguments on every ``fn(...)``; the launcher converts them once per pointer table
    (each set of input addresses) and replays the C arguments, keeping the objects they point into alive."""
    class Fn:
        converted, launched = [], []

        def generate_execution_args(self, *args):
            self.converted.append(args)
            return [f"c{len(self.converted)}"], ["adapted"]

        def run_compiled_program(self, c_args):
            self.launched.append(c_args)

    fn = Fn()
    monkeypatch.setattr(sub, "require_sm90", lambda device: None)
    monkeypatch.setattr(sub, "_table_ptr", lambda kind, address: (kind, address))
    launcher = sub.DeviceLauncher(compile_fn=lambda g, cfg: sub.CompiledKernel(None, fn, 0.0, "fake"))
    d1, d2 = small_input(1), small_input(2)
    shapes = host.validate_inputs(d1)
    plan = host.build_plan(shapes, "cpu")
    t1, t2 = plan.table_for(host.table_rows(d1, shapes)), plan.table_for(host.table_rows(d2, shapes))
    for table in (t1, t1, t2, t1):
        launcher(plan, table)
    assert fn.launched == [["c1"], ["c1"], ["c2"], ["c1"]] and len(fn.converted) == 2
    pointer, prefix, ctas = fn.converted[0]
    assert pointer[1] == t1.tensor.data_ptr() and prefix[1] == plan.prefix_t.data_ptr() and int(ctas) == 3
    kept = t1.extras["launch"][2]  # the Python arguments live as long as the table
    assert all(a is b for a, b in zip(kept, fn.converted[0])) and len(kept) == 3
