"""Shape specs: the official text format, YAML shape sets, inline cases, and their error messages."""
import pytest

from problems.nvfp4_group_gemm.spec import (CONFIG_DIR, DEFAULT_SEED, Case, SpecError, load_shapes, parse_case_line,
                                           parse_text)


def test_parse_official_line():
    c = parse_case_line("m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111")
    assert c == Case((96, 128), (128, 256), (256, 512), 2, 1111)
    assert c.text() == "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"
    assert parse_case_line(c.text()) == c
    assert c.problem_sizes == [(96, 128, 256, 1), (128, 256, 512, 1)]


def test_scalars_broadcast_and_comments_skipped():
    cases = parse_text("# header\n\nm: 64; n: 128; k: 256; g: 3; seed: 1\n")
    assert cases == [Case((64,) * 3, (128,) * 3, (256,) * 3, 3, 1)]


@pytest.mark.parametrize("line,message", [
    ("m: [96]; n: [128]; k: [256]; g: 2; seed: 1", "m has 1 entries but g is 2"),
    ("m: [96]; n: [128]; k: [250]; g: 1; seed: 1", "k must be a multiple of 64, got 250"),
    ("m: [98]; n: [128]; k: [256]; g: 1; seed: 1", "m must be a multiple of 4, got 98"),
    ("m: [96]; n: [128]; g: 1", "missing ['k']"),
    ("m: [96]; n: [128]; k: [256]; g: 1; seed: 1; x: 3", "unexpected ['x']"),
    ("m [96]; n: [128]", "expected 'key: value' in 'm [96]'"),
    ("m: [96]; m: [96]", "key 'm' given twice"),
])
def test_bad_lines_say_what_is_wrong(line, message):
    with pytest.raises(SpecError) as info:
        parse_case_line(line)
    assert message in str(info.value)


def test_official_shape_sets():
    tests, benches = load_shapes("tests"), load_shapes("benchmarks")
    assert len(tests.cases) == 10 and len(benches.cases) == 4
    assert all(c.seed == 1111 for c in tests.cases + benches.cases)
    assert benches.cases[1].m == (40, 76, 168, 72, 164, 148, 196, 160) and benches.cases[1].n == (7168,) * 8
    assert tests.cases[8] == Case((40, 56, 384, 512), (512, 384, 256, 128), (256,) * 4, 4, 1111)
    assert len(load_shapes("smoke").cases) == 3


def test_inline_and_files(tmp_path):
    inline = load_shapes("m: [64]; n: [128]; k: [256]; g: 1; seed: 9")
    assert inline.name == "inline" and inline.cases[0].seed == 9
    text = tmp_path / "mine.txt"
    text.write_text("m: [64]; n: [128]; k: [256]; g: 1; seed: 9\nm: [8]; n: [128]; k: [64]; g: 1; seed: 2\n")
    assert [c.m for c in load_shapes(str(text)).cases] == [(64,), (8,)]
    bad = tmp_path / "bad.yml"
    bad.write_text("cases:\n  - {m: [64], n: [128], g: 1}\n")
    with pytest.raises(SpecError, match=r"bad.yml case 1: expected keys"):
        load_shapes(str(bad))
    with pytest.raises(SpecError, match="expected a shape-set name"):
        load_shapes("no-such-set")


@pytest.mark.parametrize("name, content, message", [
    ("bin.txt", b"\x89PNG\x00\xff", "{path}: not a UTF-8 text file (byte 0x89 at offset 0)"),
    ("bin.yml", b"cases: \xff\n", "{path}: not a UTF-8 text file (byte 0xff at offset 7)"),
    ("garbage.txt", b"# two cases\nm: 64; n: 128; k: 256; g: 1; seed: 1\nhello world\n",
     "{path}:3: expected 'key: value' in 'hello world' of line 'hello world'"),
    ("g0.txt", b"m: 64; n: 128; k: 256; g: 0; seed: 1\n", "{path}:1: g must be >= 1, got 0"),
    ("g0.yml", b"cases:\n  - {m: 64, n: 128, k: 256, g: 0, seed: 1}\n", "{path} case 1: g must be >= 1, got 0"),
    ("bad.yml", b"cases: [\n  - a\n",
     "{path}: not valid YAML at line 2, column 3: expected the node content, but found '-'"),
])
def test_bad_shape_files_are_named_in_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SpecError) as info:
        load_shapes(str(path))
    assert str(info.value) == message.format(path=path)


def test_g_zero_inline_says_g_must_be_positive():
    with pytest.raises(SpecError) as info:
        load_shapes("m: [64]; n: [128]; k: [256]; g: 0; seed: 1")
    assert str(info.value) == "line 'm: [64]; n: [128]; k: [256]; g: 0; seed: 1': g must be >= 1, got 0"


# The official task.yml's layout (gpu-mode/reference-kernels problems/nvidia/nvfp4_group_gemm/task.yml): other
# top-level keys around a `tests` and a `benchmarks` list of JSON-style mappings.
OFFICIAL_TASK_YML = """\
files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
lang: "py"
description: |
  block scaled group gemm
tests:
  - {"m": [96, 128], "n": [128, 256], "k": [256, 512], "g": 2, "seed": 1111}
  - {"m": [256, 72], "n": [512, 384], "k": [256, 256], "g": 2, "seed": 1111}
  - {"m": [128, 128], "n": [128, 256], "k": [512, 256], "g": 2, "seed": 1111}
  - {"m": [80, 128, 256], "n": [384, 256, 128], "k": [256, 512, 256], "g": 3, "seed": 1111}
  - {"m": [64, 72, 96], "n": [128, 384, 512], "k": [512, 512, 256], "g": 3, "seed": 1111}
  - {"m": [64, 256, 128], "n": [768, 128, 256], "k": [512, 256, 512], "g": 3, "seed": 1111}
  - {"m": [128, 128, 64], "n": [256, 512, 512], "k": [768, 256, 768], "g": 3, "seed": 1111}
  - {"m": [128, 128, 128, 128], "n": [128, 128, 128, 128], "k": [512, 256, 512, 256], "g": 4, "seed": 1111}
  - {"m": [40, 56, 384, 512], "n": [512, 384, 256, 128], "k": [256, 256, 256, 256], "g": 4, "seed": 1111}
  - {"m": [512, 384, 256, 128], "n": [256, 256, 256, 256], "k": [512, 768, 512, 768], "g": 4, "seed": 1111}
benchmarks:
  - {"m": [80, 176, 128, 72, 64, 248, 96, 160], "n": [4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096], "k": [7168, 7168, 7168, 7168, 7168, 7168, 7168, 7168], "g": 8, "seed": 1111}
  - {"m": [40, 76, 168, 72, 164, 148, 196, 160], "n": [7168, 7168, 7168, 7168, 7168, 7168, 7168, 7168], "k": [2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048], "g": 8, "seed": 1111}
  - {"m": [192, 320], "n": [3072, 3072], "k": [4096, 4096], "g": 2, "seed": 1111}
  - {"m": [128, 384], "n": [4096, 4096], "k": [1536, 1536], "g": 2, "seed": 1111}
ranking_by: "geom"
"""


@pytest.fixture
def task_yml(tmp_path):
    path = tmp_path / "task.yml"
    path.write_text(OFFICIAL_TASK_YML)
    return path


def test_official_task_yml_lists_are_the_same_sets_as_ours(task_yml):
    tests, benches = load_shapes(f"{task_yml}#tests"), load_shapes(f"{task_yml}#benchmarks")
    assert (tests.name, len(tests.cases)) == ("tests", 10)
    assert (benches.name, len(benches.cases)) == ("benchmarks", 4)
    assert benches.cases[2] == Case((192, 320), (3072, 3072), (4096, 4096), 2, 1111)
    # same cases, same identity: a run on the official file lands on the same leaderboard as --shapes benchmarks
    assert tests.id == load_shapes("tests").id and benches.id == load_shapes("benchmarks").id


def test_task_yml_with_both_lists_asks_which(task_yml):
    with pytest.raises(SpecError) as info:
        load_shapes(str(task_yml))
    assert str(info.value) == (f"{task_yml} holds 'tests' and 'benchmarks': expected {task_yml}#tests or "
                               f"{task_yml}#benchmarks, got {task_yml}")
    with pytest.raises(SpecError) as info:
        load_shapes(f"{task_yml}#bench")
    assert str(info.value).endswith(f"got {task_yml}#bench")


def test_task_yml_with_one_list_needs_no_pick(tmp_path):
    path = tmp_path / "only.yaml"
    path.write_text('benchmarks:\n  - {"m": [192, 320], "n": [3072, 3072], "k": [4096, 4096], "g": 2, "seed": 7}\n')
    shapes = load_shapes(str(path))
    assert shapes.name == "benchmarks" and shapes.cases == (Case((192, 320), (3072, 3072), (4096, 4096), 2, 7),)


def test_one_case_of_a_set_by_number_or_name(task_yml):
    second = load_shapes("benchmarks#2")
    assert second.name == "benchmarks#2"
    assert second.cases == (Case((40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8, 8, 1111),)
    by_name = load_shapes("benchmarks#g8_n4096_k7168")
    assert by_name.cases[0].m == (80, 176, 128, 72, 64, 248, 96, 160) and by_name.name == "benchmarks#g8_n4096_k7168"
    third_test = load_shapes(f"{task_yml}#tests#3")
    assert third_test.name == "tests#3" and third_test.cases == (Case((128, 128), (128, 256), (512, 256), 2, 1111),)


@pytest.mark.parametrize("spec, message", [
    ("benchmarks#5", "--shapes benchmarks#5: expected a case number from 1 to 4 or a case name (g8_n4096_k7168, "
                     "g8_n7168_k2048, g2_n3072_k4096, g2_n4096_k1536), got '5'"),
    ("tests#0", "--shapes tests#0: expected a case number from 1 to 10, got '0'"),
    ("benchmarks#", "--shapes 'benchmarks#': expected SOURCE#PICK with nothing empty (e.g. benchmarks#2 or "
                    "task.yml#tests)"),
    ("benchmarks#1#2", "--shapes configs/shapes/nvfp4_group_gemm/benchmarks.yml#1#2: expected at most one case after the set"),
])
def test_bad_picks_say_what_there_is(spec, message):
    with pytest.raises(SpecError) as info:
        load_shapes(spec)
    assert str(info.value).replace(str(CONFIG_DIR.parents[2]) + "/", "").startswith(message)


def test_json_style_inline_case_with_defaults():
    official = load_shapes('{"m": [96, 128], "n": [128, 256], "k": [256, 512], "g": 2, "seed": 1111}')
    assert official.name == "inline"
    assert official.cases == (Case((96, 128), (128, 256), (256, 512), 2, 1111),)
    # g from the lists' length, seed DEFAULT_SEED (the official sets' 1111)
    assert load_shapes('{"m": [96, 128], "n": [128, 256], "k": [256, 512]}').cases == official.cases
    assert DEFAULT_SEED == 1111
    assert parse_case_line("m: [96, 128]; n: [128, 256]; k: [256, 512]") == official.cases[0]
    assert parse_case_line("m: 64; n: 128; k: 256") == Case((64,), (128,), (256,), 1, 1111)
    assert parse_text('{"m": [64], "n": [128], "k": [256], "seed": 5}\n') == [Case((64,), (128,), (256,), 1, 5)]


@pytest.mark.parametrize("spec, message", [
    ('{"m": [96, 128], "n": [128], "k": [256, 512]}',
     """case '{"m": [96, 128], "n": [128], "k": [256, 512]}': expected m, n and k lists of one length (g, the """
     "group count), got m 2, n 1, k 2 entries"),
    ('{"m": [96], "n": [128]}',
     """case '{"m": [96], "n": [128]}': expected keys ['k', 'm', 'n'] (and optionally g, seed, name), got """
     "['m', 'n'] (missing ['k'])"),
    ('{"m": [96], "n": [128], "k": [256]', """case '{"m": [96], "n": [128], "k": [256]': expected a mapping of m, n, """
     """k, g, seed, got '{"m": [96], "n": [128], "k": [256]' (expected ',' or '}', but got '<stream end>')"""),
    ('{"m": [96], "n": [128], "k": [256], "seed": -1}',
     """case '{"m": [96], "n": [128], "k": [256], "seed": -1}': seed must be a non-negative integer, got -1"""),
])
def test_bad_json_cases_in_one_line(spec, message):
    with pytest.raises(SpecError) as info:
        load_shapes(spec)
    assert str(info.value) == message and "\n" not in str(info.value)
