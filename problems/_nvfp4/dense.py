"""The torch-free base of the NVFP4 plugs whose call returns one fp16 tensor C [M, N, L] (gemm, gemv, dual_gemm):
the case record, parsing, labels, ids, output shape, memory and the check. Each problem's plug subclasses
``DenseProblem`` and adds its draw, reference and cost (harness/problem.py states the contract)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.problem import CaseError, OutputSpec, SampleBuffers, TensorSpec, TimingLoop

#: e4m3fn scales cover 16 values, two values a byte, and the blocked layout groups 4 scale columns: K must be a
#: multiple of 64 (the official sets use multiples of 256).
K_MULTIPLE = 64
SF_VEC = 16
#: torch.manual_seed accepts seeds below 2^64.
SEED_LIMIT = 2**64
#: Hex digits of a case id (48 bits).
CASE_ID_DIGITS = 12
#: Bytes of one blocked-layout atom (32 x 4 rows by 4 scale columns).
_ATOM_ROWS, _ATOM_COLS, _ATOM_BYTES = 128, 4, 512


@dataclass(frozen=True)
class DenseCase:
    """One case: C [m, n, l] from K-long dot products; ``seed`` seeds its inputs; ``name`` is a label only.
    gemv's cases have n = 1 (not one of its fields)."""

    m: int
    n: int
    k: int
    l: int
    seed: int
    name: str = field(default="", compare=False)


def blocked_bytes(rows: int, k: int, l: int) -> int:
    """Bytes of the blocked scale copy of ``rows`` x K/16 scales, ``l`` batches (padded to whole atoms)."""
    return l * -(-rows // _ATOM_ROWS) * -(-(k // SF_VEC) // _ATOM_COLS) * _ATOM_BYTES


def fp4_operand_bytes(rows: int, k: int, l: int) -> int:
    """Bytes of one fp4 operand as drawn: data (K/2 a row), plain scales (K/16 a row) and their blocked copy."""
    return l * rows * (k // 2 + k // SF_VEC) + blocked_bytes(rows, k, l)


def _int_field(d: Mapping, key: str, where: str, minimum: int) -> int:
    v = d[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        kind = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise CaseError(f"{where}{key} must be {kind}, got {v!r}")
    return v


class DenseProblem:
    """Shared behaviour of the single-output NVFP4 plugs. Subclasses set ``name``, ``case_fields``, ``timing``,
    ``data_modes`` and ``labels`` (field -> report letter), and implement ``generate``, ``reference``,
    ``fp4_rows`` (rows of each fp4 operand as drawn), ``flops`` and ``bytes_moved``."""

    name: str = ""
    case_fields: tuple[str, ...] = ()
    data_modes: tuple[str, ...] = ("official", "full-range")
    timing: TimingLoop
    #: No buffers of their own: the harness lays their inputs out through harness.plan.
    sample_buffers: SampleBuffers | None = None
    task_fp4_tflops: float | None = None
    #: The largest |partial sum| full-range data may reach (fp16's 65504 unless the output multiplies two sums).
    full_range_bound: float = 65504.0

    # ---- cases
    def parse_case(self, mapping: Mapping[str, Any], where: str = "") -> DenseCase:
        """See harness.problem.Problem.parse_case. Rules: sizes positive integers, K a multiple of 64, seed in
        [0, 2^64)."""
        if not isinstance(mapping, Mapping):
            raise CaseError(f"{where}expected a mapping with keys {list(self.case_fields)}, "
                            f"got {type(mapping).__name__}")
        expected, keys = set(self.case_fields), set(mapping) - {"name"}
        if keys != expected:
            extra, missing = sorted(keys - expected), sorted(expected - keys)
            raise CaseError(f"{where}expected keys {list(self.case_fields)}, got {sorted(keys)}"
                            + (f" (missing {missing})" if missing else "")
                            + (f" (unexpected {extra})" if extra else ""))
        values = {key: _int_field(mapping, key, where, 0 if key == "seed" else 1) for key in self.case_fields}
        if values["k"] % K_MULTIPLE:
            raise CaseError(f"{where}k must be a multiple of {K_MULTIPLE}, got {values['k']}")
        if values["seed"] >= SEED_LIMIT:
            raise CaseError(f"{where}seed must be below 2^64, got {values['seed']}")
        values.setdefault("n", 1)
        return DenseCase(name=str(mapping.get("name", "")), **values)

    def case_text(self, case: DenseCase) -> str:
        """The official line, e.g. ``m: 128; n: 256; k: 256; l: 1; seed: 1111``."""
        return "; ".join(f"{key}: {getattr(case, key)}" for key in self.case_fields)

    def case_id(self, case: DenseCase) -> str:
        """12 hex digits of sha256("<problem>\\n<official line>")."""
        return hashlib.sha256(f"{self.name}\n{self.case_text(case)}".encode()).hexdigest()[:CASE_ID_DIGITS]

    def label(self, case: DenseCase) -> str:
        """E.g. ``M=128 N=7168 K=16384 L=1``: every size field, upper-case, in order."""
        return " ".join(f"{key.upper()}={getattr(case, key)}" for key in self.case_fields if key != "seed")

    def check_drawable(self, case: DenseCase, data: str) -> None:
        """Raises CaseError for an unknown data mode, or a K full-range data cannot bound."""
        if data not in self.data_modes:
            raise CaseError(f"data mode must be one of {', '.join(self.data_modes)}, got {data!r}")
        if data == "full-range":
            from problems._nvfp4.draw import full_range_max_k

            limit = full_range_max_k(self.full_range_bound, K_MULTIPLE)
            if case.k > limit:
                raise CaseError(f"full-range data cannot bound the output for K={case.k}: at most K={limit} "
                                f"for {self.name}")

    # ---- outputs and the check
    def output_spec(self, case: DenseCase) -> OutputSpec:
        """One fp16 tensor [M, N, L]."""
        return OutputSpec("tensor", (TensorSpec((case.m, case.n, case.l), "torch.float16"),))

    def check(self, got, expected):
        """problems.nvfp4_group_gemm.check.compare: elementwise with rtol = atol = 1e-3, NaN/inf where the reference has
        none a mismatch. Raises ValueError when the shapes differ, ReferenceError for a non-finite reference."""
        from problems._nvfp4.formats import compare

        return compare(got, expected)

    # ---- memory
    def fp4_rows(self, case: DenseCase) -> tuple[int, ...]:
        """Rows of each fp4 operand as drawn (A first)."""
        raise NotImplementedError

    def input_bytes(self, case: DenseCase) -> int:
        """Every fp4 operand (data, plain and blocked scales) plus C (fp16)."""
        ops = sum(fp4_operand_bytes(rows, case.k, case.l) for rows in self.fp4_rows(case))
        return ops + 2 * case.m * case.n * case.l

    def reference_bytes(self, case: DenseCase) -> int:
        """One batch's fp64 decode of every operand (twice: decode temporaries) and three fp64 [M, N] results."""
        return 16 * case.k * sum(self.fp4_rows(case)) + 3 * 8 * case.m * case.n
