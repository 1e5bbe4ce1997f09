"""The nvfp4_gemm plug (harness/problem.py's contract). Facts: reference-kernels problems/nvidia/nvfp4_gemm
(task.yml, reference.py) and problems/nvidia/eval_better_bench.py (its timing loop). Loads without torch."""
from __future__ import annotations

from harness.problem import TimingLoop
from problems._nvfp4.dense import DenseCase, DenseProblem


class Gemm(DenseProblem):
    """C [M, N, L] = (A * SFA) @ (B * SFB)^T; cases ``m, n, k, l, seed``."""

    name = "nvfp4_gemm"
    case_fields = ("m", "n", "k", "l", "seed")
    timing = TimingLoop(calls_per_sample=50, fresh_inputs_each_sample=False, seed_step=42,
                        l2_clear_bytes=16000 * 1024 * 1024 * 4, max_samples_benchmark=200,
                        max_samples_leaderboard=1000, warm_up_every_shape=True,
                        source="reference-kernels problems/nvidia/eval_better_bench.py")

    def generate(self, case: DenseCase, seed: int, data: str = "official", device=None):
        """problems.nvfp4_gemm.inputs.generate_input for the case's sizes."""
        from problems.nvfp4_gemm.inputs import generate_input

        return generate_input(case.m, case.n, case.k, case.l, seed, data, device)

    def reference(self, data):
        """problems.nvfp4_gemm.reference.ref_kernel."""
        from problems.nvfp4_gemm.reference import ref_kernel

        return ref_kernel(data)

    def fp4_rows(self, case: DenseCase) -> tuple[int, ...]:
        return case.m, case.n

    def flops(self, case: DenseCase) -> int:
        """2 M N K L."""
        return 2 * case.m * case.n * case.k * case.l

    def bytes_moved(self, case: DenseCase) -> int:
        """A and B (K/2 bytes a row) with their scales (K/16 a row), C in fp16; with B200's 7.68 TB/s this gives
        task.yml's SOL of the memory-bound benchmarks (8.994 us for 128 x 7168 x 16384)."""
        return case.l * ((case.m + case.n) * (case.k // 2 + case.k // 16) + 2 * case.m * case.n)


PROBLEM = Gemm()
