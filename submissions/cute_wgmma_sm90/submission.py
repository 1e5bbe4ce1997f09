#!POPCORN leaderboard nvfp4_group_gemm
#!POPCORN gpu H200
#!FP4BENCH requires sm_90a
"""cute_wgmma_sm90: the NVFP4 grouped GEMM in CuTe DSL for Hopper (sm_90a), one launch for all groups.

Swap AB: a CTA computes a 128 x 128 tile of C_g^T (128 rows of the group's N on wgmma's M side, two warpgroups
of 64; 128 rows of its M on wgmma's N side). Per 64-wide K step every thread loads 16 bytes of one B row and of
one A row (32 e2m1 codes each) and their two e4m3fn scales from the blocked layout, a step ahead in registers;
decodes them to fp16 (value x scale x 2^-7, exact: cute_wgmma_sm90_host.decode_word), writes them into a
128-byte-swizzled shared buffer (3 of them), and the warpgroups run wgmma m64n128k16 (fp16 in, fp32 accumulate)
on it while the next step decodes. The epilogue scales by 2^14 and stores fp16, predicated at the group's edges.

Host logic that needs no GPU and no cutlass lives in cute_wgmma_sm90_host.py beside this file.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import cutlass
except ImportError as exc:  # the worker reports this message as the case's failure
    raise ImportError(
        f"cute_wgmma_sm90 needs CuTe DSL (the nvidia-cutlass-dsl package; `pip install nvidia-cutlass-dsl`, or on a "
        f"machine without network tools/dsl_to_device.py), and importing it failed: {exc}") from None
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.cute.runtime import make_ptr
from cutlass.tensor_utils import LayoutEnum

import cute_wgmma_sm90_host as host
from task import input_t, output_t

OP_DTYPE = cutlass.Float16
ACC_DTYPE = cutlass.Float32
C_DTYPE = cutlass.Float16
#: Values of one thread's load per operand and step: 16 bytes = 4 words = 32 e2m1 codes = 2 scales.
WORDS = 4
VALUES = 8 * WORDS
_FILES = tuple(dict.fromkeys((Path(__file__), host.HOST_SOURCE)))  #: one file in a one-file export


class Sm90Fp4GroupGemm:
    """Grouped NVFP4 GEMM, one CTA per 128 x 128 tile of C^T; compiled per (config, number of groups)."""

    def __init__(self, config: host.KernelConfig, num_groups: int):
        self.cfg = config
        self.num_groups = num_groups
        self.mma_tiler = (config.tile_n, config.tile_m, config.tile_k)

    @cute.jit
    def __call__(self, table_ptr: cute.Pointer, prefix_ptr: cute.Pointer, total_ctas: cutlass.Int32):
        cfg = self.cfg
        table = cute.make_tensor(table_ptr, cute.make_layout((self.num_groups, host.TABLE_COLS),
                                                             stride=(host.TABLE_COLS, 1)))
        prefix = cute.make_tensor(prefix_ptr, cute.make_layout(self.num_groups + 1))
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            OP_DTYPE, OP_DTYPE, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, ACC_DTYPE,
            (cfg.tile_n // 64, 1, 1), tiler_mn=(64, cfg.tile_m))
        # wgmma's A = the problem's B rows, its B = the problem's A rows; both K-major.
        sa_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.mma_tiler, OP_DTYPE, cfg.stages)
        sb_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.mma_tiler, OP_DTYPE, cfg.stages)
        self.kernel(tiled_mma, table, prefix, sa_layout, sb_layout).launch(
            grid=(total_ctas, 1, 1), block=(cfg.threads, 1, 1))  # the default queue, as the official example

    @cute.jit
    def find_group(self, prefix: cute.Tensor, cta: cutlass.Int32) -> cutlass.Int32:
        """Group owning CTA ``cta`` (cute_wgmma_sm90_host.group_of_cta mirrors this)."""
        group = cutlass.Int32(0)
        if cutlass.const_expr(self.num_groups <= self.cfg.unrolled_lookup_max_groups):
            for g in cutlass.range_constexpr(1, self.num_groups):
                if cta >= prefix[g]:
                    group = group + 1
        else:
            lo = cutlass.Int32(0)
            hi = cutlass.Int32(self.num_groups)
            while lo < hi:
                mid = (lo + hi) // 2
                if prefix[mid + 1] <= cta:
                    lo = mid + 1
                else:
                    hi = mid
            group = lo
        return group

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, table: cute.Tensor, prefix: cute.Tensor,
               sa_layout: cute.ComposedLayout, sb_layout: cute.ComposedLayout):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()

        # ---- which tile of which group ------------------------------------------------------------------------
        group = self.find_group(prefix, cta)
        m = cutlass.Int32(table[group, 5])
        n = cutlass.Int32(table[group, 6])
        k = cutlass.Int32(table[group, 7])
        tiles_m = (m + cfg.tile_m - 1) // cfg.tile_m
        rest = cta - prefix[group]
        tile_m = rest % tiles_m
        tile_n = rest // tiles_m
        k_steps = k // cfg.tile_k
        words = cute.assume(k // 8, 8)  # uint32 words per row
        rest_k = k // cfg.tile_k  # 4-column blocks of the scale layout

        gA = cute.make_tensor(
            cute.make_ptr(cutlass.Uint32, table[group, 0], cute.AddressSpace.gmem, assumed_align=16),
            cute.make_layout((m, words), stride=(words, 1)))
        gB = cute.make_tensor(
            cute.make_ptr(cutlass.Uint32, table[group, 1], cute.AddressSpace.gmem, assumed_align=16),
            cute.make_layout((n, words), stride=(words, 1)))
        mC = cute.make_tensor(
            cute.make_ptr(C_DTYPE, table[group, 2], cute.AddressSpace.gmem, assumed_align=2),
            cute.make_layout((m, n), stride=(n, 1)))
        sfa = cute.make_tensor(
            cute.make_ptr(cutlass.Uint16, table[group, 3], cute.AddressSpace.gmem, assumed_align=2),
            cute.make_layout(((m + 127) // 128) * rest_k * 256))
        sfb = cute.make_tensor(
            cute.make_ptr(cutlass.Uint16, table[group, 4], cute.AddressSpace.gmem, assumed_align=2),
            cute.make_layout(((n + 127) // 128) * rest_k * 256))

        # ---- shared buffers: wgmma A = decoded B rows, wgmma B = decoded A rows ------------------------------
        smem = cutlass.utils.SmemAllocator()
        sA = smem.allocate_tensor(OP_DTYPE, sa_layout.outer, byte_alignment=1024, swizzle=sa_layout.inner)
        sB = smem.allocate_tensor(OP_DTYPE, sb_layout.outer, byte_alignment=1024, swizzle=sb_layout.inner)

        # ---- this thread's rows: half h of row r of each operand (rows past the edge read the last row) ------
        r = tidx // 2
        h = tidx % 2
        row_b = cutlass.min(tile_n * cfg.tile_n + r, n - 1)
        row_a = cutlass.min(tile_m * cfg.tile_m + r, m - 1)
        g_row_b = gB[row_b, None]
        g_row_a = gA[row_a, None]

        raw_b = cute.make_rmem_tensor((WORDS,), cutlass.Uint32)
        raw_a = cute.make_rmem_tensor((WORDS,), cutlass.Uint32)
        cur_b = cute.make_rmem_tensor((WORDS,), cutlass.Uint32)
        cur_a = cute.make_rmem_tensor((WORDS,), cutlass.Uint32)
        dec = cute.make_rmem_tensor((VALUES // 2,), cutlass.Uint32)
        halves = cute.recast_tensor(dec, OP_DTYPE)
        out = cute.make_rmem_tensor((1, VALUES), OP_DTYPE)
        sbits = cute.make_rmem_tensor((2,), cutlass.Uint16)
        svals = cute.recast_tensor(sbits, OP_DTYPE)

        # step 0's raw words and scales
        cute.autovec_copy(cute.local_tile(g_row_b, (WORDS,), (h,)), raw_b)
        cute.autovec_copy(cute.local_tile(g_row_a, (WORDS,), (h,)), raw_a)
        sc_b = sfb[host.sf_pair_index(row_b, 0, h, rest_k)]
        sc_a = sfa[host.sf_pair_index(row_a, 0, h, rest_k)]

        # ---- MMA partitions ---------------------------------------------------------------------------------------
        wg = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma = tiled_mma.get_slice(wg * 128)
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        # The operands' partitions are per warpgroup (shared-memory descriptors); the accumulator's elements are
        # per thread, so their coordinates come from this thread's own slice.
        cC = cute.make_identity_tensor((cfg.tile_n, cfg.tile_m))
        tCcC = tiled_mma.get_slice(tidx).partition_C(cC)
        acc = cute.make_rmem_tensor(tCcC.shape, ACC_DTYPE)
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        kblocks = cute.size(tCrA, mode=[2])

        for s in cutlass.range(0, k_steps, 1, unroll=1):
            stage = s % cfg.stages
            # this step's raw data to cur, the next step's loads issued before the decode
            for i in cutlass.range_constexpr(WORDS):
                cur_b[i] = raw_b[i]
                cur_a[i] = raw_a[i]
            cb = sc_b
            ca = sc_a
            if s + 1 < k_steps:
                cute.autovec_copy(cute.local_tile(g_row_b, (WORDS,), ((s + 1) * 2 + h,)), raw_b)
                cute.autovec_copy(cute.local_tile(g_row_a, (WORDS,), ((s + 1) * 2 + h,)), raw_a)
                sc_b = sfb[host.sf_pair_index(row_b, s + 1, h, rest_k)]
                sc_a = sfa[host.sf_pair_index(row_a, s + 1, h, rest_k)]
            # Buffer `stage` was last read by step s - 3's wgmmas: every warpgroup waited for those (wait_group(1)
            # in step s - 2) before the barrier of step s - 1, which this thread has passed.
            self.decode_into(cur_b, cb, dec, halves, sbits, svals, out,
                             cute.local_tile(sA[None, None, stage], (1, VALUES), (r, h)))
            self.decode_into(cur_a, ca, dec, halves, sbits, svals, out,
                             cute.local_tile(sB[None, None, stage], (1, VALUES), (r, h)))
            cute.arch.fence_proxy("async.shared", space="cta")  # generic-proxy writes -> wgmma's reads
            cute.arch.barrier()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(kblocks):
                cute.gemm(tiled_mma, acc, tCrA[None, None, kb, stage], tCrB[None, None, kb, stage], acc)
            warpgroup.commit_group()
            warpgroup.wait_group(1)
        warpgroup.wait_group(0)

        # ---- epilogue: C[m, n] = fp16(acc x 2^14), predicated at the group's edges -------------------------------
        n0 = tile_n * cfg.tile_n
        m0 = tile_m * cfg.tile_m
        for i in cutlass.range_constexpr(cute.size(acc)):
            nl, ml = tCcC[i]
            gn = n0 + nl
            gm = m0 + ml
            if gn < n and gm < m:
                mC[gm, gn] = (acc[i] * host.ACC_RESCALE).to(C_DTYPE)

    @cute.jit
    def decode_into(self, raw: cute.Tensor, scales: cutlass.Uint16, dec: cute.Tensor, halves: cute.Tensor,
                    sbits: cute.Tensor, svals: cute.Tensor, out: cute.Tensor, dst: cute.Tensor):
        """32 e2m1 codes (4 words) and their 2 scales -> 32 fp16 (value x scale x 2^-7) stored at ``dst``."""
        for w in cutlass.range_constexpr(WORDS):
            d = host.decode_word(raw[w], cutlass.Uint32)
            for j in cutlass.range_constexpr(4):
                dec[4 * w + j] = d[j]
        u16 = cutlass.Uint16
        sbits[0] = host.scale_half_bits(scales & u16(0xFF), u16)
        sbits[1] = host.scale_half_bits((scales >> u16(8)) & u16(0xFF), u16)
        s0 = svals[0] * OP_DTYPE(host.SCALE_BOOST)
        s1 = svals[1] * OP_DTYPE(host.SCALE_BOOST)
        for i in cutlass.range_constexpr(VALUES // 2):
            out[0, i] = halves[i] * s0
        for i in cutlass.range_constexpr(VALUES // 2, VALUES):
            out[0, i] = halves[i] * s1
        cute.autovec_copy(out, dst)


# ---------------------------------------------------------------------------------------------------------------
# Compilation, with an on-disk cache of the compiled object (a second process loads it instead of compiling)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledKernel:
    """A compiled (or loaded) artefact, its cache key, what it took, and where it came from."""

    key: host.CompileKey
    fn: object
    seconds: float
    source: str  #: "compiled" or "cache"
    ptx: str | None = None  #: PTX text when compiled with a dump directory
    note: str = ""  #: why the on-disk cache was not used, if it was not


def _table_ptr(dtype, address: int):
    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)


def kernel_key(num_groups: int, config: host.KernelConfig = host.CONFIG) -> host.CompileKey:
    return host.compile_key(num_groups, cutlass.__version__, host.source_digest(_FILES), config)


def compile_for_sm90(num_groups: int, *, dump_dir: str | None = None,
                     config: host.KernelConfig = host.CONFIG) -> CompiledKernel:
    """Compile the kernel for ``num_groups`` groups for sm_90a; needs no GPU (null tables).
    With ``dump_dir`` (created if missing) the PTX is kept and returned."""
    kernel = Sm90Fp4GroupGemm(config, num_groups)
    options = f"--gpu-arch {host.TARGET_ARCH}"
    if dump_dir is not None:
        os.makedirs(dump_dir, exist_ok=True)  # 4.8.1 silently skips the dump into a missing folder
        options += f" --keep-ptx --dump-dir {dump_dir}"
    start = time.perf_counter()
    fn = cute.compile(kernel, _table_ptr(cutlass.Int64, 0), _table_ptr(cutlass.Int32, 0), cutlass.Int32(1),
                      options=options)
    seconds = time.perf_counter() - start
    ptx = fn.__ptx__ if dump_dir is not None else None
    if ptx is not None and ".target" not in ptx:
        raise RuntimeError(f"expected PTX text from the compiler in {dump_dir}, got {ptx[:200]!r}")
    return CompiledKernel(kernel_key(num_groups, config), fn, seconds, "compiled", ptx)


def load_or_compile(num_groups: int, config: host.KernelConfig = host.CONFIG,
                    folder: Path | None = None) -> CompiledKernel:
    """The kernel from ``folder`` (default host.cache_dir()) when its key's object file is there, else compiled
    and exported there (CuTe DSL's AOT object, written under a temporary name and renamed: a concurrent reader
    never sees half a file). ``cute.compile`` itself never caches across processes. An object that cannot be
    written (4.8.1 cannot link the export without the CUDA libraries, as on a CPU-only machine) or read costs
    the next process a compile, nothing else; ``CompiledKernel.note`` says why."""
    key = kernel_key(num_groups, config)
    folder = Path(folder) if folder is not None else host.cache_dir()
    name = f"k{key.digest()}"
    obj = folder / f"{name}.o"
    note = ""
    tmp = f"{name}.{os.getpid()}.tmp"
    if obj.is_file():
        start = time.perf_counter()
        try:
            fn = getattr(cute.runtime.load_module(str(obj)), name)
            return CompiledKernel(key, fn, time.perf_counter() - start, "cache")
        except Exception as exc:  # a damaged or foreign object: compile instead
            note = f"cached object {obj} not loaded: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    compiled = compile_for_sm90(num_groups, config=config)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        compiled.fn.export_to_c(str(folder), tmp, function_prefix=name)
        os.replace(folder / f"{tmp}.h", folder / f"{name}.h")
        os.replace(folder / f"{tmp}.o", obj)
    except Exception as exc:
        for part in (f"{tmp}.h", f"{tmp}.o"):
            (folder / part).unlink(missing_ok=True)
        text = str(exc).strip().splitlines()
        note = (note + "; " if note else "") + f"not cached in {folder}: {text[-1] if text else type(exc).__name__}"
    return CompiledKernel(compiled.key, compiled.fn, compiled.seconds, "compiled", compiled.ptx, note)


# ---------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------
def require_sm90(device: torch.device) -> None:
    """Raise UnsupportedProblem unless ``device`` is a compute capability 9.0 GPU (wgmma exists only there)."""
    if device.type != "cuda":
        raise host.UnsupportedProblem(f"{host.VARIANT}: needs CUDA tensors on an sm_90a GPU, got device {device}")
    cc = torch.cuda.get_device_capability(device)
    if cc != (9, 0):
        raise host.UnsupportedProblem(
            f"{host.VARIANT}: needs an sm_90a GPU (compute capability (9, 0)), got "
            f"{torch.cuda.get_device_name(device)} with {cc}")


class DeviceLauncher:
    """Loads or compiles on first use per compile key and launches on the default queue (torch's current one in
    fp4bench's worker and in the official runner, which leave it so)."""

    def __init__(self, config: host.KernelConfig = host.CONFIG, compile_fn=None):
        self.config = config
        #: (num_groups, config) -> CompiledKernel; replaceable so the cache logic can be tested without compiling.
        self.compile_fn = compile_fn if compile_fn is not None else (
            lambda groups, cfg: load_or_compile(groups, cfg))
        self.kernels: dict[tuple, CompiledKernel] = {}

    def kernel_for(self, num_groups: int) -> CompiledKernel:
        """The kernel for ``num_groups`` groups under this launcher's config, loaded or compiled once."""
        slot = (num_groups, self.config)
        compiled = self.kernels.get(slot)
        if compiled is None:
            compiled = self.kernels[slot] = self.compile_fn(num_groups, self.config)
        return compiled

    def __call__(self, plan: host.LaunchPlan, table: host.PointerTable) -> None:
        device = plan.prefix_t.device
        require_sm90(device)
        compiled = self.kernel_for(plan.num_groups)
        prepared = table.extras.get("launch")
        if prepared is None:
            prepared = table.extras["launch"] = prepare_launch(compiled.fn, plan, table)
        compiled.fn.run_compiled_program(prepared[0])


def prepare_launch(fn, plan: host.LaunchPlan, table: host.PointerTable) -> tuple:
    """The kernel's C arguments for ``table`` (pointer table) and ``plan`` (prefix sums, CTA count), converted
    once (CuTe DSL's ``generate_execution_args``: a call through ``fn(...)`` converts them on every launch) and
    returned with the objects whose storage they point into, which must live as long as they are used:
    (C arguments, the DSL's adapted arguments, the Python arguments)."""
    args = (_table_ptr(cutlass.Int64, table.tensor.data_ptr()), _table_ptr(cutlass.Int32, plan.prefix_t.data_ptr()),
            cutlass.Int32(plan.total_ctas))
    c_args, adapted = fn.generate_execution_args(*args)
    return c_args, adapted, args


class GroupedRunner:
    """validate -> launch plan (cached per sizes) -> pointer table (cached per input addresses) -> one launch;
    returns the C buffers."""

    def __init__(self, launcher=None, plans: host.PlanCache | None = None):
        self.launcher = launcher if launcher is not None else DeviceLauncher()
        self.plans = plans if plans is not None else host.PlanCache()

    def run(self, data: input_t) -> output_t:
        shapes = host.validate_inputs(data)
        abc = data[0]
        plan = self.plans.get(shapes, abc[0][0].device)
        self.launcher(plan, plan.table_for(host.table_rows(data, shapes)))
        return [c for _a, _b, c in abc]


_RUNNER = GroupedRunner()


def custom_kernel(data: input_t) -> output_t:
    """C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T for every group, in one launch; writes and returns the c buffers."""
    return _RUNNER.run(data)
