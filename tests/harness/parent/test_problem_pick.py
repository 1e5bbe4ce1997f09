"""A run finds its problem: --problem, else the submission's #!POPCORN leaderboard line or problem folder, else
nvfp4_group_gemm; the registry finds the variants of every problem."""
from __future__ import annotations

from click.testing import CliRunner

from harness.cli.commands import main
from harness.parent.registry import find_variants, problem_of, read_variant, resolve, shown_name

KNOWN = "nvfp4_dual_gemm, nvfp4_gemm, nvfp4_gemv, nvfp4_group_gemm"


def test_the_registry_finds_variants_of_every_problem():
    found = {shown_name(v): problem_of(v) for v in find_variants()}
    assert found["torch_reference"] == "nvfp4_group_gemm"
    for problem in ("nvfp4_gemm", "nvfp4_gemv", "nvfp4_dual_gemm"):
        assert found[f"{problem}/torch_reference"] == problem and found[f"{problem}/triton"] == problem
    v = resolve("nvfp4_gemv/torch_reference")
    assert (v.name, v.problem) == ("torch_reference", "nvfp4_gemv")


def test_a_file_without_a_directive_is_group_gemm(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("def custom_kernel(data):\n    return data\n")
    v = read_variant(f)
    assert (v.problem, problem_of(v)) == ("", "nvfp4_group_gemm")
    f.write_text("#!POPCORN leaderboard nvfp4_gemv\ndef custom_kernel(data):\n    return data\n")
    assert problem_of(read_variant(f)) == "nvfp4_gemv"


def _run(*args):
    return CliRunner().invoke(main, ["run", "--no-store", *args])


def test_an_unknown_problem_is_one_line_naming_the_known_ones():
    result = _run("--submission", "torch_reference", "--problem", "nvfp4_gem")
    assert (result.exit_code, result.output) == (
        113, f"Error: unknown problem 'nvfp4_gem': expected one of {KNOWN}\n")


def test_an_unknown_directive_names_the_submission(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("#!POPCORN leaderboard nvfp4_bogus\ndef custom_kernel(data):\n    return data\n")
    result = _run("--submission", str(f))
    assert (result.exit_code, result.output) == (
        113, f"Error: submission 'k' (#!POPCORN leaderboard nvfp4_bogus): unknown problem 'nvfp4_bogus': expected "
             f"one of {KNOWN}\n")


def test_problem_option_against_a_declared_problem_is_refused():
    result = _run("--submission", "nvfp4_gemm/torch_reference", "--problem", "nvfp4_group_gemm")
    assert result.exit_code == 113 and result.output.startswith(
        "Error: submission 'torch_reference' declares problem nvfp4_gemm (")
    assert result.output.endswith("), not --problem nvfp4_group_gemm\n")


def test_submissions_of_two_problems_are_not_one_run():
    result = CliRunner().invoke(main, ["compare", "triton_grouped", "nvfp4_gemm/triton", "--no-store"])
    assert (result.exit_code, result.output) == (
        113, "Error: the submissions solve different problems (triton_grouped: nvfp4_group_gemm, nvfp4_gemm/triton: "
             "nvfp4_gemm); a run times one problem\n")
    same_name = CliRunner().invoke(main, ["run", "--submission", "nvfp4_gemv/torch_reference,torch_reference",
                                          "--no-store"])
    assert (same_name.exit_code, same_name.output) == (  # the problems differ: that is said, not the name clash
        113, "Error: the submissions solve different problems (nvfp4_gemv/torch_reference: nvfp4_gemv, "
             "torch_reference: nvfp4_group_gemm); a run times one problem\n")


def test_shapes_resolve_to_the_problems_own_sets():
    result = _run("--submission", "nvfp4_gemv/torch_reference", "--shapes", "smok")
    assert (result.exit_code, result.output) == (
        113, "Error: --shapes 'smok': expected a shape-set name of nvfp4_gemv (auto, benchmarks, smoke, tests), a "
             ".yml or text file (an official task.yml too), one case of a set (benchmarks#2), or an inline case like "
             "'m: 128; k: 256; l: 1; seed: 1111'\n")


def test_list_shows_each_variants_problem():
    result = CliRunner().invoke(main, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    rows = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.split("\u2502")[1:-1]]
        if len(cells) > 2 and cells[0]:
            rows[cells[0]] = cells[1]
    assert rows["nvfp4_dual_gemm/triton"] == "nvfp4_dual_gemm" and rows["nvfp4_gemv/torch_reference"] == "nvfp4_gemv"
    assert rows["torch_reference"] == "nvfp4_group_gemm"
