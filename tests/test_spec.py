"""Shape specs: the official text format, YAML shape sets, inline cases, and their error messages."""
import pytest

from task.spec import Case, SpecError, load_shapes, parse_case_line, parse_text


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
    ("m: [96]; n: [128]; k: [256]; g: 1", "missing ['seed']"),
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
    bad.write_text("cases:\n  - {m: [64], n: [128], k: [256], g: 1}\n")
    with pytest.raises(SpecError, match=r"bad.yml case 0: expected keys"):
        load_shapes(str(bad))
    with pytest.raises(SpecError, match="expected a shape-set name"):
        load_shapes("no-such-set")


@pytest.mark.parametrize("name, content, message", [
    ("bin.txt", b"\x89PNG\x00\xff", "{path}: not a UTF-8 text file (byte 0x89 at offset 0)"),
    ("bin.yml", b"cases: \xff\n", "{path}: not a UTF-8 text file (byte 0xff at offset 7)"),
    ("garbage.txt", b"# two cases\nm: 64; n: 128; k: 256; g: 1; seed: 1\nhello world\n",
     "{path}:3: expected 'key: value' in 'hello world' of line 'hello world'"),
    ("g0.txt", b"m: 64; n: 128; k: 256; g: 0; seed: 1\n", "{path}:1: g must be >= 1, got 0"),
    ("g0.yml", b"cases:\n  - {m: 64, n: 128, k: 256, g: 0, seed: 1}\n", "{path} case 0: g must be >= 1, got 0"),
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
