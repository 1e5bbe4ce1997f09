"""The nvfp4_gemv plug (harness/problem.py's contract). Facts: reference-kernels problems/nvidia/nvfp4_gemv
(task.yml, reference.py) and problems/nvidia/eval.py (its timing loop). Loads without torch."""
from __future__ import annotations

from harness.problem import TimingLoop
from problems._nvfp4.dense import DenseCase, DenseProblem

#: Rows of b as drawn (problems.nvfp4_gemv.inputs.B_ROWS; repeated here so the plug loads without torch).
B_ROWS = 128


class Gemv(DenseProblem):
    """c [M, 1, L] = (A * SFA) @ (b * SFB)^T; cases ``m, k, l, seed`` (N is 1)."""

    name = "nvfp4_gemv"
    case_fields = ("m", "k", "l", "seed")
    timing = TimingLoop(calls_per_sample=1, fresh_inputs_each_sample=True, seed_step=13,
                        l2_clear_bytes=1024 * 1024 * 1024 * 4, max_samples_benchmark=200,
                        max_samples_leaderboard=1000, warm_up_every_shape=False,
                        source="reference-kernels problems/nvidia/eval.py")

    def generate(self, case: DenseCase, seed: int, data: str = "official", device=None):
        """problems.nvfp4_gemv.inputs.generate_input for the case's sizes."""
        from problems.nvfp4_gemv.inputs import generate_input

        return generate_input(case.m, case.k, case.l, seed, data, device)

    def reference(self, data):
        """problems.nvfp4_gemv.reference.ref_kernel."""
        from problems.nvfp4_gemv.reference import ref_kernel

        return ref_kernel(data)

    def fp4_rows(self, case: DenseCase) -> tuple[int, ...]:
        return case.m, B_ROWS

    def flops(self, case: DenseCase) -> int:
        """2 M K L."""
        return 2 * case.m * case.k * case.l

    def bytes_moved(self, case: DenseCase) -> int:
        """A and the one vector row (K/2 bytes a row) with their scales (K/16 a row), c in fp16; with B200's
        7.68 TB/s within 0.4 % of task.yml's SOL (8.604 against 8.622 us for 7168 x 16384)."""
        return case.l * ((case.m + 1) * (case.k // 2 + case.k // 16) + 2 * case.m)


PROBLEM = Gemv()
