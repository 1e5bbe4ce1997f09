"""What the family's GPU tests share (nvfp4_gemm, nvfp4_gemv, nvfp4_dual_gemm): a variant loaded as the worker
loads it, a bitwise tensor comparison, and the Triton variant's check over the official tests shapes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from harness import plugs
from harness.worker.task_alias import alias_task

ROOT = Path(__file__).resolve().parents[2]


def load(problem: str, variant: str):
    """submissions/<problem>/<variant>/submission.py as a module, its ``from task import`` resolved to
    ``problem``'s package as the worker resolves it."""
    path = ROOT / "submissions" / problem / variant / "submission.py"
    alias_task(problem)
    spec = importlib.util.spec_from_file_location(f"fp4bench_{problem}_{variant}_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal bits, shape, strides and device."""
    u = (lambda t: t.view(torch.uint8)) if x.element_size() == 1 else (lambda t: t.view(torch.int16))
    return x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride() and x.device == y.device \
        and torch.equal(u(x), u(y))


def assert_triton_matches_reference(problem: str, index: int, data: str) -> None:
    """The problem's Triton variant on official tests shape ``index`` (``data``: official or full-range) equals
    the exact reference under the problem's check; the message names the shape and the mismatch."""
    plug = plugs.get(problem)
    case = plugs.load_cases(problem, "tests")[index]
    x = plug.generate(case, case.seed, data)
    expected = plug.reference(x)
    out = load(problem, "triton").custom_kernel(tuple(t.clone() for t in x))
    torch.cuda.synchronize()
    evidence = plug.check(out, expected)
    assert evidence.ok, evidence.describe(f"{plug.label(case)} {data}: ")


def assert_reference_same_on_gpu_and_cpu(problem: str) -> None:
    """The problem's reference gives the same fp16 bits on the GPU and on the CPU (full-range data)."""
    plug = plugs.get(problem)
    x = plug.generate(plugs.load_cases(problem, "tests")[0], 3, "full-range")
    on_gpu = plug.reference(x)
    on_cpu = plug.reference(tuple(t.cpu() for t in x))
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu().view(torch.int16), on_cpu.view(torch.int16))
