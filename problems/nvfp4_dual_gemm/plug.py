"""The nvfp4_dual_gemm plug (harness/problem.py's contract). Facts: reference-kernels
problems/nvidia/nvfp4_dual_gemm (task.yml, reference.py) and problems/nvidia/eval_better_bench.py (its timing
loop). Loads without torch."""
from __future__ import annotations

from harness.problem import TimingLoop
from problems._nvfp4.dense import DenseCase, DenseProblem


class DualGemm(DenseProblem):
    """C [M, N, L] = silu(A B1^T) * (A B2^T), block-scaled operands; cases ``m, n, k, l, seed``."""

    name = "nvfp4_dual_gemm"
    case_fields = ("m", "n", "k", "l", "seed")
    timing = TimingLoop(calls_per_sample=50, fresh_inputs_each_sample=False, seed_step=42,
                        l2_clear_bytes=16000 * 1024 * 1024 * 4, max_samples_benchmark=200,
                        max_samples_leaderboard=1000, warm_up_every_shape=True,
                        source="reference-kernels problems/nvidia/eval_better_bench.py")
    #: task.yml's SOL of its two compute-bound benchmarks, 4 M N K / time: 60.13 GFLOP / 8.714 us and 45.10 / 6.535
    #: (512 x 4096 x 7168, 512 x 3072 x 7168), 6.90 PFLOP/s, not the 7.27 of 148 SMs x 32768 FLOP/clk at 1.5 GHz
    #: that the other three tasks' tables match.
    task_fp4_tflops = 6900.0
    #: problems.nvfp4_dual_gemm.inputs.FULL_RANGE_BOUND (repeated so the plug loads without torch).
    full_range_bound = 255.0

    def generate(self, case: DenseCase, seed: int, data: str = "official", device=None):
        """problems.nvfp4_dual_gemm.inputs.generate_input for the case's sizes."""
        from problems.nvfp4_dual_gemm.inputs import generate_input

        return generate_input(case.m, case.n, case.k, case.l, seed, data, device)

    def reference(self, data):
        """problems.nvfp4_dual_gemm.reference.ref_kernel."""
        from problems.nvfp4_dual_gemm.reference import ref_kernel

        return ref_kernel(data)

    def fp4_rows(self, case: DenseCase) -> tuple[int, ...]:
        return case.m, case.n, case.n

    def reference_bytes(self, case: DenseCase) -> int:
        """The base's, plus H2 and silu's temporaries beside H1 (fp64 [M, N] each)."""
        return super().reference_bytes(case) + 3 * 8 * case.m * case.n

    def flops(self, case: DenseCase) -> int:
        """Two GEMMs: 4 M N K L (the SiLU and product, a few per output, are left out)."""
        return 4 * case.m * case.n * case.k * case.l

    def bytes_moved(self, case: DenseCase) -> int:
        """A, B1 and B2 (K/2 bytes a row) with their scales (K/16 a row), C in fp16; with B200's 7.68 TB/s this
        gives task.yml's SOL of the memory-bound benchmarks (4.708 us for 256 x 4096 x 7168)."""
        return case.l * ((case.m + 2 * case.n) * (case.k // 2 + case.k // 16) + 2 * case.m * case.n)


PROBLEM = DualGemm()
