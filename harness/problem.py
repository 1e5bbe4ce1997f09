"""The contract every problem plug satisfies: what the harness may ask of a problem, and nothing more.

The harness owns processes, timing, statistics, the store, reports and machine facts; a problem owns its case
fields, inputs, reference, check, output shape, cost and timing-loop parameters. A plug is an object (one per
problem, ``problems.<name>.plug.PROBLEM``) satisfying ``Problem`` below; ``harness.plugs.get(name)`` finds it by the
name a submission's ``#!POPCORN leaderboard <name>`` line gives. ``tests/problems/test_conformance.py`` checks
every plug in ``problems/`` against this file.

This module imports neither ``task`` nor ``problems`` (nor torch): the harness can read it anywhere. The records
here are plain, frozen, with units in their names.

Errors: a case that breaks a problem's rules raises ``CaseError`` with a one-line message naming what was expected
and what came (the CLI turns it into exit 113). Nothing else a plug raises is the user's fault.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

#: The problem a shape set, a record or a variant without one belongs to (what fp4bench ran before it had plugs).
DEFAULT_PROBLEM = "nvfp4_group_gemm"

#: The official tolerance of every NVFP4 problem (each task.yml's ``make_match_reference(..., rtol=1e-03,
#: atol=1e-03)``): |got - expected| <= ATOL + RTOL * |expected|.
RTOL = 1e-3
ATOL = 1e-3


class CaseError(ValueError):
    """A case mapping or line a problem cannot use (the message names the field, what was expected, what came)."""


class ReferenceError(RuntimeError):
    """The exact reference's output holds NaN or inf: the harness's fault, never the submission's (ERROR)."""


@dataclass(frozen=True)
class TensorSpec:
    """One output tensor as a right submission returns it: ``shape`` (sizes), ``dtype`` as ``str(torch.dtype)``
    (e.g. ``"torch.float16"``). Device: always the inputs' device."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's elements (fp16 / bf16: 2, fp32: 4, fp64: 8, 8-bit types: 1)."""
        size = {"torch.float16": 2, "torch.bfloat16": 2, "torch.float32": 4, "torch.float64": 8}.get(self.dtype, 1)
        n = 1
        for s in self.shape:
            n *= s
        return n * size


@dataclass(frozen=True)
class OutputSpec:
    """What one call returns. ``container``: ``"tensor"`` (the call returns one tensor: ``tensors`` has one
    entry) or ``"list"`` (a Python list holding ``tensors`` in order). The worker copies and the parent validates
    outputs from this alone (``validate_outputs``), without knowing the problem."""

    container: str
    tensors: tuple[TensorSpec, ...]

    def __post_init__(self) -> None:
        if self.container not in ("tensor", "list"):
            raise ValueError(f"container must be 'tensor' or 'list', got {self.container!r}")
        if self.container == "tensor" and len(self.tensors) != 1:
            raise ValueError(f"a 'tensor' output holds exactly one tensor, got {len(self.tensors)}")

    @property
    def nbytes(self) -> int:
        """Bytes of one call's outputs."""
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class TimingLoop:
    """The official timing loop's parameters for one problem (reference-kernels ``problems/nvidia/eval*.py``).

    ``calls_per_sample``: calls between one pair of CUDA events, time / calls per sample.
    ``fresh_inputs_each_sample``: True when the leaderboard loop draws a new input before every sample (gemv's
    ``eval.py``: seed += ``seed_step`` per sample, one call a sample); False when ``calls_per_sample`` inputs
    are drawn once (seed += ``seed_step`` per input) and reused by every sample.
    ``l2_clear_bytes``: what the official loop writes to clear the L2 before each sample.
    ``max_samples_benchmark`` / ``max_samples_leaderboard``: the loop's ``max_repeats`` in each mode.
    ``warm_up_every_shape``: the leaderboard warms up every shape first (else only the first).
    ``source``: the file the figures come from.
    """

    calls_per_sample: int
    fresh_inputs_each_sample: bool
    seed_step: int
    l2_clear_bytes: int
    max_samples_benchmark: int
    max_samples_leaderboard: int
    warm_up_every_shape: bool
    source: str


@runtime_checkable
class Evidence(Protocol):
    """What a check returns (reference-kernels ``verbose_allclose``): ``mismatches`` of ``total`` elements outside
    the tolerance (NaN or inf where the reference has none count), ``first`` as (index, got, expected) for the
    first few, ``ok`` when there are none, ``describe(label)`` one line for a report."""

    mismatches: int
    total: int
    first: tuple

    @property
    def ok(self) -> bool: ...

    def describe(self, label: str = "") -> str: ...


@runtime_checkable
class Case(Protocol):
    """A case is a frozen, hashable record of the problem's own fields; the harness reads only ``seed`` (the seed
    its inputs are drawn from, before any secret is combined in) and ``name`` (a label, may be empty)."""

    seed: int
    name: str


@dataclass(frozen=True)
class SampleBuffers:
    """An optional plug capability (``Problem.sample_buffers``): the problem lays one timed sample's inputs out in
    flat byte buffers itself, draws straight into them and computes its exact reference over them in one batch,
    where harness.plan's generic layout (from ``generate`` and ``output_spec``) would cost too much per sample.
    The parent (harness.parent.samples) and the worker reach it only through the plug; each entry is the
    problem's own code (nvfp4_group_gemm: problems/nvfp4_group_gemm/sample_buffers.py and its reference and check).

    ``layout``: a class; ``layout.of(case, calls)`` lays out ``calls`` inputs of ``case`` (bytes: ``device_bytes``,
    ``host_slot_bytes``, ``host_bytes``, ``output_bytes``; ``calls``, ``device_stride``; ``output_shapes``: each
    output's shape, in order; ``operand_regions``: (offset, bytes) of one call's operands in the device buffer,
    where the parent plants canaries).
    ``sizes_of(case)``: the sizes a layout depends on, a tuple of int tuples (what a Run request carries);
    ``layout_of_sizes(sizes, calls)``: the same layout from them alone (the worker's side).
    ``views``: a class; ``views(layout, device, host, output)`` gives tensor views of three flat uint8 buffers,
    ``.inputs()`` the calls' inputs, ``.outputs(call)`` / ``.out`` the output regions.
    ``write_input(views, call, data)``, ``draw_official(views, generator, into, fill_c)``, ``copy_plain(views,
    plain)``, ``reference_inputs(views, plain)``: fill the buffers (the official distribution, bit-identical to
    ``generate`` where it promises so).
    ``reference_plan``: a class; ``reference_plan(inputs).run()`` the expected outputs of the same buffers,
    launches built once. ``ref_kernel_many(inputs)``: the expected outputs of a list of inputs.
    ``warm_up(cases, calls, device)``: compile what ``reference_plan`` and ``ref_kernel_many`` launch for samples
    of these cases with each of these numbers of calls. ``validate_outputs(container, metas, case, device)``: None
    if a call's returned container (its type's name) and items (harness.problem.OutputMeta) are what ``case``
    expects on ``device``, else what is wrong. ``check``: the module comparing outputs (``all_finite_fp16``,
    ``compare``, ``check_outputs``).
    """

    layout: Any
    sizes_of: Any
    layout_of_sizes: Any
    views: Any
    write_input: Any
    draw_official: Any
    copy_plain: Any
    reference_inputs: Any
    reference_plan: Any
    ref_kernel_many: Any
    warm_up: Any
    validate_outputs: Any
    check: Any


@runtime_checkable
class Problem(Protocol):
    """One problem plug. Methods take the plug's own case records (``parse_case``'s results) and never mutate
    them. ``device`` arguments take a ``torch.device`` or string; ``None`` means the current CUDA device, or the
    CPU when there is none (inputs then come from the CPU generator: other values than on a GPU)."""

    #: The problem's name, as ``#!POPCORN leaderboard <name>`` gives it (e.g. ``"nvfp4_gemm"``).
    name: str
    #: The keys of its case mappings, in the official line's order (e.g. ``("m", "n", "k", "l", "seed")``).
    case_fields: tuple[str, ...]
    #: How inputs can be drawn: ``"official"`` (bit-identical to the official generator on CUDA) first.
    data_modes: tuple[str, ...]
    #: The official timing loop.
    timing: TimingLoop
    #: Its own sample buffers (SampleBuffers), or None: the harness then lays inputs out through harness.plan.
    sample_buffers: SampleBuffers | None
    #: The FP4 MMA peak (TFLOP/s) behind its task.yml's speed-of-light table where that is not B200's at 1.5 GHz
    #: (harness.hardware.GPU_PEAKS), else None; reports' "SOL B200 (task)" column uses it.
    task_fp4_tflops: float | None

    def parse_case(self, mapping: Mapping[str, Any], where: str = "") -> Case:
        """A case from ``{field: value}`` (``case_fields``, plus an optional ``name``). Raises CaseError, its
        message starting with ``where``, for a missing, unexpected or impossible field."""
        ...

    def case_text(self, case: Case) -> str:
        """The official one-line form, ``key: value`` pairs joined by ``; `` in ``case_fields`` order."""
        ...

    def case_id(self, case: Case) -> str:
        """A stable id: 12 hex digits of the sha256 of ``"<name>\\n<case_text>"`` (sizes and seed; not the name)."""
        ...

    def label(self, case: Case) -> str:
        """Its sizes for a report, e.g. ``"M=128 N=7168 K=16384 L=1"``."""
        ...

    def check_drawable(self, case: Case, data: str) -> None:
        """Raises CaseError when inputs of ``case`` cannot be drawn in data mode ``data`` (an unknown mode, or
        sizes a mode cannot bound, naming the limit)."""
        ...

    def generate(self, case: Case, seed: int, data: str = "official", device: Any = None) -> Any:
        """One input (the problem's ``input_t``) drawn from ``seed`` (not ``case.seed``: the harness derives
        per-call seeds). Deterministic: equal arguments give equal bits."""
        ...

    def reference(self, data: Any) -> Any:
        """The exact expected output (``output_t``) of input ``data``: decode and products exact, rounded once to
        the output dtype; on ``data``'s device. Never mutates ``data``."""
        ...

    def check(self, got: Any, expected: Any) -> Evidence:
        """Compare a (validated) output with the reference's, elementwise with RTOL/ATOL, as evidence."""
        ...

    def output_spec(self, case: Case) -> OutputSpec:
        """What one call on ``case`` returns."""
        ...

    def input_bytes(self, case: Case) -> int:
        """Bytes of one drawn input (every tensor, padding included)."""
        ...

    def reference_bytes(self, case: Case) -> int:
        """Peak bytes of the reference's working set beyond its input and output."""
        ...

    def flops(self, case: Case) -> int:
        """Floating-point operations of one call (2 per multiply-add), for the roofline."""
        ...

    def bytes_moved(self, case: Case) -> int:
        """Bytes an ideal kernel moves once per call (inputs read, output written), for the roofline."""
        ...


@dataclass(frozen=True)
class OutputMeta:
    """What one returned object was, as the worker saw it (so the parent can judge without the object)."""

    type_name: str
    plain_tensor: bool      # exactly torch.Tensor (no subclass)
    dtype: str = ""
    shape: tuple[int, ...] = ()
    device: str = ""
    tensor_subclass: bool = False   # a subclass of torch.Tensor (its dtype/shape are not read: its code)


def validate_outputs(spec: OutputSpec, container: str, metas: Sequence[Any], device: str) -> str | None:
    """None when a call's returned objects match ``spec``; else one line saying what is wrong.

    ``container``: the returned object's type name (``"builtins.list"`` or ``"torch.Tensor"``); ``metas``: one
    ``OutputMeta`` per returned tensor; ``device``: where the inputs live, as ``str(torch.device)``.
    """
    expected = "torch.Tensor" if spec.container == "tensor" else "builtins.list"
    n = len(spec.tensors)
    if container != expected:
        want = "a torch.Tensor" if spec.container == "tensor" else f"a list of {n} tensor{'s' * (n != 1)}"
        return f"expected {want} (output_t), got {container}"
    if len(metas) != n:
        return f"expected {n} output{'s' * (n != 1)}, got {len(metas)}"
    for i, (meta, want) in enumerate(zip(metas, spec.tensors)):
        where = f"output {i}: " if spec.container == "list" else ""
        if not meta.plain_tensor:
            return f"{where}expected torch.Tensor, got {meta.type_name}"
        problems = []
        if meta.dtype != want.dtype:
            problems.append(f"dtype {meta.dtype} (expected {want.dtype})")
        if tuple(meta.shape) != want.shape:
            problems.append(f"shape {list(meta.shape)} (expected {list(want.shape)})")
        if _device_key(meta.device) != _device_key(device):
            problems.append(f"device {meta.device} (expected {device})")
        if problems:
            return where + ", ".join(problems)
    return None


def _device_key(device: str) -> str:
    """``"cuda"`` and ``"cuda:0"`` name the same device when only one is visible; compare type and index."""
    device = str(device)
    return device if ":" in device or device == "cpu" else f"{device}:0"
