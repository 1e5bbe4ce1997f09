"""The nvfp4_group_gemm plug: this package's spec, inputs, reference, check and cost behind harness/problem.py's
contract, and its own sample buffers (``sample_buffers``, the optional capability). Facts: reference-kernels
problems/nvidia/nvfp4_group_gemm and eval_better_bench_grouped_gemm.py. Loads without torch (spec and cost are
torch-free; the capability imports torch on first use)."""
from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any, Mapping

from harness.problem import CaseError, OutputSpec, SampleBuffers, TensorSpec, TimingLoop
from problems.nvfp4_group_gemm import cost
from problems.nvfp4_group_gemm.spec import DATA_MODES, Case, SpecError, case_from_mapping

#: Bytes an exact-reference decode element takes (fp64), as harness.parent.memory counts it.
_REF_ELEMENT = 8


class GroupGemm:
    """C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T for every group; cases ``m, n, k, g, seed`` (spec.Case)."""

    name = "nvfp4_group_gemm"
    case_fields = ("m", "n", "k", "g", "seed")
    data_modes = DATA_MODES
    task_fp4_tflops = None  # task.yml's table is B200's at 1.5 GHz (harness.hardware.GPU_PEAKS)
    timing = TimingLoop(calls_per_sample=15, fresh_inputs_each_sample=False, seed_step=42,
                        l2_clear_bytes=16000 * 1024 * 1024 * 4, max_samples_benchmark=100,
                        max_samples_leaderboard=100, warm_up_every_shape=True,
                        source="reference-kernels problems/nvidia/eval_better_bench_grouped_gemm.py (task.yml's "
                               "eval.py; its clear_l2_cache is utils.py's clear_l2_cache_large)")

    @cached_property
    def sample_buffers(self) -> SampleBuffers:
        """This problem's sample buffers (sample_buffers.py), batched reference (reference.ReferencePlan,
        ref_kernel_many, warm_up) and check module, as harness.problem.SampleBuffers. Imports torch (first use)."""
        from problems.nvfp4_group_gemm import check, reference, sample_buffers as sb

        def validate_outputs(container: str, metas, case: Case, device: str) -> str | None:
            return check.validate_container(container, metas, case.problem_sizes, device)

        def warm_up(cases, calls, device) -> None:
            reference.warm_up([(case.k, n) for case in cases for n in calls], device)

        return SampleBuffers(layout=sb.Layout, sizes_of=sb.sizes_of, layout_of_sizes=sb.layout_of_sizes,
                             views=sb.Views, write_input=sb.write_input, draw_official=sb.draw_official,
                             copy_plain=sb.copy_plain, reference_inputs=sb.reference_inputs,
                             reference_plan=reference.ReferencePlan, ref_kernel_many=reference.ref_kernel_many,
                             warm_up=warm_up, validate_outputs=validate_outputs, check=check)

    def parse_case(self, mapping: Mapping[str, Any], where: str = "") -> Case:
        """spec.case_from_mapping; its SpecError becomes CaseError (same message)."""
        try:
            return case_from_mapping(mapping, where=where)
        except SpecError as exc:
            raise CaseError(str(exc)) from None

    def case_text(self, case: Case) -> str:
        """spec.Case.text(): ``m: [..]; n: [..]; k: [..]; g: G; seed: S``."""
        return case.text()

    def case_id(self, case: Case) -> str:
        return hashlib.sha256(f"{self.name}\n{case.text()}".encode()).hexdigest()[:12]

    def label(self, case: Case) -> str:
        """``G=2 M=[..] N=.. K=..`` (a list only where the groups differ), as harness.report.figures labels."""
        short = lambda xs: str(xs[0]) if len(set(xs)) == 1 else "[" + ",".join(map(str, xs)) + "]"  # noqa: E731
        return f"G={case.g} M={short(case.m)} N={short(case.n)} K={short(case.k)}"

    def check_drawable(self, case: Case, data: str) -> None:
        """An unknown mode, or full-range data with a K above inputs.full_range_max_k, raises CaseError."""
        if data not in self.data_modes:
            raise CaseError(f"data mode must be one of {', '.join(self.data_modes)}, got {data!r}")
        if data == "full-range":
            from problems.nvfp4_group_gemm.inputs import check_full_range_k

            for k in case.k:
                try:
                    check_full_range_k(k)
                except ValueError as exc:
                    raise CaseError(str(exc)) from None

    def generate(self, case: Case, seed: int, data: str = "official", device=None):
        """inputs.generate_input."""
        from problems.nvfp4_group_gemm.inputs import generate_input

        return generate_input(case.m, case.n, case.k, case.g, seed, data, device)

    def reference(self, data):
        """reference.ref_kernel (exact; the plain scales)."""
        from problems.nvfp4_group_gemm.reference import ref_kernel

        return ref_kernel(data)

    def check(self, got, expected):
        """check.compare per group, summed into one Evidence: mismatches and elements over all groups, the
        first mismatches' indices prefixed with their group (``(g, i, j, 0)``). Raises ValueError when the numbers
        of outputs or a group's shapes differ."""
        from problems.nvfp4_group_gemm.check import SHOW_MISMATCHES, Evidence, compare

        if len(got) != len(expected):
            raise ValueError(f"{len(got)} outputs vs {len(expected)} expected")
        mismatches = total = 0
        first: list = []
        for g, (o, e) in enumerate(zip(got, expected)):
            ev = compare(o, e)
            mismatches, total = mismatches + ev.mismatches, total + ev.total
            first += [((g, *i), x, y) for i, x, y in ev.first]
        return Evidence(mismatches, total, tuple(first[:SHOW_MISMATCHES]))

    def output_spec(self, case: Case) -> OutputSpec:
        """A list of G fp16 tensors [M_g, N_g, 1]."""
        return OutputSpec("list", tuple(TensorSpec((m, n, 1), "torch.float16") for m, n in zip(case.m, case.n)))

    def input_bytes(self, case: Case) -> int:
        """harness.parent.memory.input_bytes's figure: bytes_moved plus the blocked scale copies."""
        blocked = sum(512 * -(-rows // 128) * -(-(k // 16) // 4) for m, n, k in zip(case.m, case.n, case.k)
                      for rows in (m, n))
        return cost.bytes_moved(case) + blocked

    def reference_bytes(self, case: Case) -> int:
        """harness.parent.memory.reference_bytes's figure (the fp64 path's largest group)."""
        return max(2 * (m + n) * k * _REF_ELEMENT + 3 * m * n * _REF_ELEMENT for m, n, k in zip(case.m, case.n, case.k))

    def flops(self, case: Case) -> int:
        return cost.flops(case)

    def bytes_moved(self, case: Case) -> int:
        return cost.bytes_moved(case)


PROBLEM = GroupGemm()
