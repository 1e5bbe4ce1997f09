"""harness/shapes.py: shape sets of every problem through its plug; nvfp4_group_gemm's ids and cases unchanged."""
from __future__ import annotations

import pytest

from harness import shapes
from harness.problem import CaseError
from problems.nvfp4_group_gemm import spec as task_spec


def test_group_gemm_sets_are_the_task_sets_with_the_same_ids():
    for name in ("tests", "benchmarks", "smoke"):
        ours, theirs = shapes.load_shapes(name), task_spec.load_shapes(name)
        assert ours == theirs and ours.problem == "nvfp4_group_gemm"
        assert ours.id == task_spec.shape_set_id(theirs.cases)
    # the id of a set is the sha256 of its official lines: a known value keeps it stable across the move
    assert shapes.load_shapes("m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111").id == \
        shapes.shape_set_id(["m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"])


@pytest.mark.parametrize("problem,first", [
    ("nvfp4_gemm", "m: 128; n: 256; k: 256; l: 1; seed: 1111"),
    ("nvfp4_gemv", "m: 128; k: 256; l: 1; seed: 1111"),
    ("nvfp4_dual_gemm", "m: 1536; n: 512; k: 7168; l: 1; seed: 1111"),
])
def test_a_problem_finds_its_own_official_sets(problem, first):
    from harness import plugs

    tests = shapes.load_shapes("tests", problem)
    plug = plugs.get(problem)
    assert tests.problem == problem and len(tests.cases) == 10 and plug.case_text(tests.cases[0]) == first
    assert tests.cases == plugs.load_cases(problem, "tests")
    assert shapes.load_shapes("benchmarks", problem).cases == plugs.load_cases(problem, "benchmarks")


def test_inline_and_text_cases_go_through_the_plug(tmp_path):
    one = shapes.load_shapes("m: 64; n: 128; k: 64; l: 2; seed: 5", "nvfp4_gemm")
    (case,) = one.cases
    assert (case.m, case.n, case.k, case.l, case.seed, one.name) == (64, 128, 64, 2, 5, "inline")
    f = tmp_path / "two.txt"
    f.write_text("# gemv\nm: 128; k: 256; l: 1; seed: 1\n\nm: 256; k: 64; l: 2; seed: 2\n")
    two = shapes.load_shapes(str(f), "nvfp4_gemv")
    assert [(c.m, c.k, c.l, c.seed) for c in two.cases] == [(128, 256, 1, 1), (256, 64, 2, 2)]
    f.write_text("m: 128; k: 250; l: 1; seed: 1\n")
    with pytest.raises(CaseError, match=rf"^{f}:1: k must be a multiple of 64, got 250$"):
        shapes.load_shapes(str(f), "nvfp4_gemv")


def test_a_yaml_sets_cases_are_numbered_from_1_and_an_item_that_is_no_mapping_says_what_it_is(tmp_path):
    f = tmp_path / "set.yml"
    f.write_text("cases:\n  - {m: 128, k: 256, l: 1, seed: 1}\n  - {m: abc, k: 256, l: 1, seed: 1}\n")
    with pytest.raises(CaseError, match=rf"^{f} case 2: m must be"):
        shapes.load_shapes(str(f), "nvfp4_gemv")
    f.write_text("cases: [5]\n")
    with pytest.raises(CaseError, match=rf"^{f} case 1: expected a mapping of m, k, l, seed, got int 5$"):
        shapes.load_shapes(str(f), "nvfp4_gemv")


def test_another_problems_shape_file_says_which_problem_it_is_for():
    with pytest.raises(CaseError, match=r"unexpected \['l'\]\); these are nvfp4_gemv cases: --problem nvfp4_gemv$"):
        shapes.load_shapes("configs/shapes/nvfp4_gemv/smoke.yml", "nvfp4_group_gemm")
    with pytest.raises(CaseError, match=r"; these are cases of nvfp4_dual_gemm or nvfp4_gemm: --problem with one of "
                                        r"them$"):
        shapes.load_shapes("configs/shapes/nvfp4_gemm/smoke.yml", "nvfp4_group_gemm")
    with pytest.raises(CaseError, match=r"^line 'm: 128; k: 256; l: 1; seed: 1111': .*; these are nvfp4_gemv cases: "
                                        r"--problem nvfp4_gemv$"):  # an inline case too
        shapes.load_shapes("m: 128; k: 256; l: 1; seed: 1111", "nvfp4_group_gemm")


def test_an_empty_shape_file_says_it_is_empty(tmp_path):
    f = tmp_path / "set.yml"
    f.write_text("")
    with pytest.raises(CaseError) as info:
        shapes.load_shapes(str(f), "nvfp4_group_gemm")
    assert str(info.value) == f"{f}: the file is empty (expected a mapping with a 'cases' list, or an official task.yml)"


def test_an_unknown_set_names_the_problem_its_sets_and_an_example():
    with pytest.raises(CaseError) as info:
        shapes.load_shapes("smok", "nvfp4_gemv")
    assert str(info.value) == ("--shapes 'smok': expected a shape-set name of nvfp4_gemv (benchmarks, smoke, tests), "
                               "a .yml or text file (an official task.yml too), one case of a set (benchmarks#2), "
                               "or an inline case like 'm: 128; k: 256; l: 1; seed: 1111'")
    with pytest.raises(CaseError, match=r"^line 'm: 1; n: 2; k: 64; g: 1; seed: 1': expected keys \['m', 'n', 'k', 'l'"):
        shapes.load_shapes("m: 1; n: 2; k: 64; g: 1; seed: 1", "nvfp4_gemm")


def test_smoke_sets_are_small_enough_for_a_cpu():
    from harness import plugs

    for problem in ("nvfp4_gemm", "nvfp4_gemv", "nvfp4_dual_gemm"):
        plug = plugs.get(problem)
        for case in shapes.load_shapes("smoke", problem).cases:
            assert plug.flops(case) <= 2 * 256 * 256 * 256


def test_picks_task_yml_lists_and_mapping_lines_work_for_every_problem(tmp_path):
    """The forms the official task.yml brings (its tests/benchmarks lists, JSON-style case lines) and ``#``
    picks (a list, then one case by number from 1 or by name), through the plug."""
    second = shapes.load_shapes("benchmarks#2", "nvfp4_gemm")
    assert (second.name, second.problem) == ("benchmarks#2", "nvfp4_gemm")
    assert second.cases == (shapes.load_shapes("benchmarks", "nvfp4_gemm").cases[1],)
    task_yml = tmp_path / "task.yml"
    task_yml.write_text('tests:\n  - {"m": 128, "k": 256, "l": 1, "seed": 1}\n'
                        'benchmarks:\n  - {"m": 256, "k": 64, "l": 2, "seed": 2, "name": "tiny"}\n')
    bench = shapes.load_shapes(f"{task_yml}#benchmarks#tiny", "nvfp4_gemv")
    assert bench.name == "benchmarks#tiny" and [(c.m, c.k, c.l) for c in bench.cases] == [(256, 64, 2)]
    with pytest.raises(CaseError, match=r"holds 'tests' and 'benchmarks': expected .*#tests or .*#benchmarks"):
        shapes.load_shapes(str(task_yml), "nvfp4_gemv")
    (case,) = shapes.load_shapes('{"m": 64, "n": 128, "k": 64, "l": 2, "seed": 5}', "nvfp4_dual_gemm").cases
    assert (case.m, case.n, case.k, case.l, case.seed) == (64, 128, 64, 2, 5)
    with pytest.raises(CaseError, match=r"^--shapes smoke#3: expected a case number from 1 to 2, got '3'$"):
        shapes.load_shapes("smoke#3", "nvfp4_gemm")
    # nvfp4_group_gemm's picks name the same case as before
    assert shapes.load_shapes("smoke#2").cases == (task_spec.load_shapes("smoke").cases[1],)
