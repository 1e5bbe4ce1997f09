"""Every problem's torch_reference runs end to end on the CPU through ``fp4bench run`` (parent, worker, judge,
store), and what a wrong kernel returns fails the way the plug's output spec and check say."""
from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from harness.cli.commands import main
from harness.results.store import ResultStore

SMOKE = {
    "nvfp4_gemm": ["m: 128; n: 256; k: 256; l: 1; seed: 1111", "m: 64; n: 128; k: 64; l: 2; seed: 2222"],
    "nvfp4_gemv": ["m: 128; k: 256; l: 1; seed: 1111", "m: 256; k: 64; l: 2; seed: 2222"],
    "nvfp4_dual_gemm": ["m: 256; n: 128; k: 256; l: 1; seed: 1111", "m: 64; n: 128; k: 64; l: 2; seed: 2222"],
}


@pytest.mark.parametrize("problem", sorted(SMOKE))
def test_torch_reference_passes_every_smoke_case_and_is_stored_under_its_problem(tmp_path, problem):
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--problem", problem, "--submission", f"{problem}/torch_reference",
                                       "--shapes", "smoke", "--db", str(db)])
    assert result.exit_code == 0, result.output
    with ResultStore(db) as store:
        (run,) = store.runs(problem=problem)
        assert [c.status.value for c in run.cases] == ["pass", "pass"]
        assert [c.calls_checked for c in run.cases] == [1, 1]
        assert store.runs(problem="nvfp4_group_gemm") == []
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT spec FROM cases ORDER BY idx")] == SMOKE[problem]
    conn.close()


def _kernel(tmp_path, body: str, problem: str = "nvfp4_gemm"):
    f = tmp_path / "k.py"
    f.write_text(f"#!POPCORN leaderboard {problem}\nimport torch\n\n\ndef custom_kernel(data):\n{body}")
    return str(f)


def _run(path, shapes="m: 128; n: 256; k: 256; l: 1; seed: 1111"):
    return CliRunner().invoke(main, ["run", "--submission", path, "--shapes", shapes, "--no-store"])


def test_a_kernel_that_returns_c_unwritten_fails_with_the_plugs_evidence(tmp_path):
    # the generator's c is random; returning it as drawn is wrong almost everywhere
    result = _run(_kernel(tmp_path, "    return data[-1]\n"))
    assert result.exit_code == 112, result.output
    assert "elements differ (rtol=0.001, atol=0.001)" in result.output.replace("\n", " ").replace("│", " ")


def test_a_kernel_that_returns_a_list_is_told_what_output_t_is(tmp_path):
    result = _run(_kernel(tmp_path, "    return [data[-1]]\n"))
    assert result.exit_code == 112
    text = " ".join(result.output.replace("│", " ").split())
    assert "expected a torch.Tensor (output_t), got builtins.list" in text


def test_a_kernel_that_returns_the_wrong_dtype_is_told_the_spec(tmp_path):
    result = _run(_kernel(tmp_path, "    return data[-1].float()\n"))
    assert result.exit_code == 112
    text = " ".join(result.output.replace("│", " ").split())
    assert "dtype torch.float32 (expected torch.float16)" in text


def test_canaries_go_into_the_fp4_operands_only_and_fix_restores_the_drawn_bytes():
    """nvfp4_gemm's operands are a and b (float4_e2m1fn_x2): the worker's copy differs from the drawn input only
    inside them (at most CANARIES bytes each, per call) until ``fix``."""
    import torch

    from harness import plugs
    from harness import shapes
    from harness.parent.plain_samples import PlainSample
    from harness.parent.samples import CANARIES, SharedSet

    plug = plugs.get("nvfp4_gemm")
    case = shapes.load_shapes("smoke", "nvfp4_gemm").cases[0]
    shared = SharedSet(torch.device("cpu"))
    sample = PlainSample(plug, case, 2, "official", torch.device("cpu"), shared)
    shared.grow(sample.layout)
    sample.prepare([5, 6])
    plan = sample.plan
    operands = [t for t in plan.tensors if t.dtype == "torch.float4_e2m1fn_x2"]
    assert [(t.shape, t.nbytes) for t in operands] == [((128, 128, 1), 128 * 128), ((256, 128, 1), 256 * 128)]
    worker = shared.buffers["device"].tensor[:plan.device_bytes]
    wrong = (worker != sample._private).nonzero().flatten().tolist()
    inside = [any(j * plan.device_stride + t.offset <= p < j * plan.device_stride + t.offset + t.nbytes
                  for j in range(2) for t in operands) for p in wrong]
    assert wrong and all(inside) and len(wrong) <= 2 * len(operands) * CANARIES
    sample.fix()
    assert torch.equal(worker, sample._private)
    shared.close()
