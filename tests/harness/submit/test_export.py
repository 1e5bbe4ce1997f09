"""fp4bench export (harness.submit.export): deterministic bytes, real inlined code in dependency order, kernel
sources embedded exactly, every shipped variant exported with no finding (the sm_90a ones told they are for another GPU),
and each kind of variant it cannot export refused with one line naming the file and line."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from harness.parent.registry import read_variant, resolve
from harness.submit.check import check
from harness.submit.export import ExportError, export_variant, literal

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ["cuda_inline", "cute_dense_per_group", "cute_grouped", "cute_wgmma_sm90", "torch_reference", "triton_grouped",
           "wgmma_sm90"] + [f"{p}/{v}" for p in ("nvfp4_gemm", "nvfp4_gemv", "nvfp4_dual_gemm")
                            for v in ("torch_reference", "triton")]
#: Built for sm_90a (the H200): the check says the B200 board would fail them, and nothing else.
FOR_SM90 = ("cute_wgmma_sm90", "wgmma_sm90")
HEAD = "#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu B200\n"


def exported(name: str) -> str:
    return export_variant(resolve(name)).text


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_variant_exports_with_no_finding_but_the_sm90_ones_are_told_their_gpu(name):
    checked = check(exported(name).encode(), name, "submission.py")
    if name in FOR_SM90:
        assert [(f.rule, f.line, f.message) for f in checked.findings] == [
            ("gpu", 3, "built for another GPU: needs sm_90a; this is NVIDIA B200, sm_100; the nvfp4_group_gemm "
                       "board runs only B200, so it would fail there")]
    else:
        assert checked.findings == ()


@pytest.mark.parametrize("name", ["torch_reference", "wgmma_sm90"])
def test_export_is_deterministic(name):
    assert exported(name) == exported(name)


def test_torch_reference_export_inlines_task_formats_as_code_before_the_entry():
    text = exported("torch_reference")
    assert text.splitlines()[:3] == ["#!POPCORN leaderboard nvfp4_group_gemm", "#!POPCORN gpu B200",
                                     "# fp4bench export of submissions/torch_reference; inlined: task/formats.py."]
    assert "from __future__" not in text  # neither module asks for one (task/formats.py dropped its own)
    tree = ast.parse(text)
    defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert defs.index("decode_e2m1") < defs.index("unblock") < defs.index("_dequantize") < defs.index("custom_kernel")
    imports = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports == ["import torch", "import torch", "from task import input_t, output_t"]
    assert text.index("# ---- task/formats.py ----") < text.index("# ---- submissions/torch_reference/submission.py")


def test_wgmma_export_rewrites_the_host_alias_and_embeds_the_kernel_sources_exactly():
    text = exported("wgmma_sm90")
    tree = ast.parse(text)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "host"]
    assert "import wgmma_sm90_host" not in text
    assert text.splitlines()[2] == "#!FP4BENCH requires sm_90a"
    assert text.splitlines()[6] == "from __future__ import annotations"  # after the head and a blank line
    sources = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "_EXPORT_SOURCES")
    embedded = ast.literal_eval(sources)
    folder = ROOT / "submissions" / "wgmma_sm90"
    assert embedded == {"fast_call.cpp": (folder / "fast_call.cpp").read_text(),
                        "kernel.cu": (folder / "kernel.cu").read_text()}
    assert "HERE = Path(_export_os.path.join(_EXPORT_DIR, 'wgmma_sm90_host.py')).resolve().parent" in text


@pytest.mark.parametrize("text", ["plain\n", 'has """ quotes\n', "ends in a backslash \\", "tab\tand \\n escapes\n",
                                  "carriage\r\nreturn"])
def test_literal_spells_the_text_exactly(text):
    assert ast.literal_eval(literal(text)) == text


def variant(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "v"
    folder.mkdir()
    for name, body in files.items():
        (folder / name).write_text(body)
    return folder / "submission.py"


ENTRY = HEAD + "import torch\nfrom task import input_t, output_t\n"


def refusal(tmp_path: Path, files: dict[str, str]) -> str:
    with pytest.raises(ExportError) as info:
        export_variant(read_variant(variant(tmp_path, files)))
    return str(info.value)


@pytest.mark.parametrize("files, message", [
    ({"submission.py": ENTRY + "from .helper import f\n"},
     "v/submission.py:5: a relative import; write 'import NAME' for a module beside submission.py"),
    ({"submission.py": ENTRY + "def f():\n    import helper\n", "helper.py": "X = 1\n"},
     "v/submission.py:6: imports helper inside a function or block; export inlines only imports at a module's top "
     "level"),
    ({"submission.py": ENTRY + "import helper\nh = helper\n", "helper.py": "X = 1\n"},
     "v/submission.py:6: uses helper (the inlined module helper) other than as helper.NAME, which export cannot "
     "inline"),
    ({"submission.py": ENTRY + "import helper\nhelper.X = 2\n", "helper.py": "X = 1\n"},
     "v/submission.py:6: assigns helper.X; once helper is inlined there is no module object to assign to"),
    ({"submission.py": ENTRY + "import helper\nY = helper.Z\n", "helper.py": "X = 1\n"},
     "v/submission.py:6: helper.Z: helper defines no top-level 'Z'"),
    ({"submission.py": ENTRY + "import helper\nX = 2\n", "helper.py": "X = 1\n"},
     "v/submission.py:6: the top-level name 'X' is also bound in v/helper.py:1; export puts both modules in one "
     "namespace: rename one"),
    ({"submission.py": ENTRY + "import helper\nlen = 3\n", "helper.py": "Y = len([1])\n"},
     "v/helper.py: reads 'len' from its globals or the builtins, but v/submission.py:6 binds that name at top "
     "level"),
    ({"submission.py": ENTRY + "from task.reference import ref_kernel\n"},
     "v/submission.py:5: imports task.reference, which the official runner does not have (its task is task.py); "
     "export inlines only task.formats"),
    ({"submission.py": ENTRY + "import helper\n", "helper.py": "if __name__ == '__main__':\n    pass\n"},
     "v/helper.py:1: reads __name__, which changes meaning once helper is inlined into submission.py"),
    ({"submission.py": ENTRY + "import a\n", "a.py": "import b\n", "b.py": "import a\n"},
     "v/b.py:1: imports a, which imports this module back (a cycle export cannot order)"),
    ({"submission.py": ENTRY + "import utils\n", "utils.py": "X = 1\n"},
     "v/utils.py: has the name of the official runner's utils.py, which would replace it there: rename it"),
    ({"submission.py": ENTRY + "import helper\ndef f(helper):\n    return helper.X\n", "helper.py": "X = 1\n"},
     "v/submission.py: 'helper' names the inlined module helper and also a local or parameter: rename one"),
])
def test_what_cannot_be_exported_is_refused_with_one_line(tmp_path, files, message):
    got = refusal(tmp_path, files)
    assert got.startswith(message) and "\n" not in got


def test_a_source_that_is_not_utf8_is_refused(tmp_path):
    entry = variant(tmp_path, {"submission.py": ENTRY + "import os\nHERE = os.path.dirname(__file__)\n"})
    (entry.parent / "k.cu").write_bytes(b"// \xff\n")
    with pytest.raises(ExportError, match=r"^v/k.cu: not UTF-8 \(offset 3\): export embeds kernel sources as text$"):
        export_variant(read_variant(entry))


def test_renamed_from_imports_become_assignments_and_run(tmp_path):
    entry = variant(tmp_path, {"submission.py": ENTRY + "from helper import X as Y\nZ = Y + 1\n",
                               "helper.py": "X = 41\n"})
    text = export_variant(read_variant(entry)).text
    namespace: dict = {}
    exec(compile(text.replace("from task import input_t, output_t\n", ""), "s.py", "exec"), namespace)
    assert (namespace["Y"], namespace["Z"]) == (41, 42) and "Y = X\n" in text


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_export_command_writes_the_file_and_exits_by_its_findings(tmp_path):
    out = tmp_path / "new" / "folder" / "submission.py"  # made, as --json and --db make theirs
    ok = run_cli("export", "torch_reference", "-o", str(out))
    assert ok.returncode == 0, ok.stderr
    assert out.read_text() == exported("torch_reference")
    assert ok.stdout.splitlines()[0] == (f"wrote {out}: {len(out.read_bytes()):,} bytes from "
                                         f"submissions/torch_reference/submission.py (inlined task/formats.py)")
    wg = run_cli("export", "wgmma_sm90", "-o", str(tmp_path / "wg.py"))
    assert wg.returncode == 112 and "built for another GPU: needs sm_90a" in wg.stdout
    assert (tmp_path / "wg.py").read_text() == exported("wgmma_sm90")


def test_export_command_refusals_are_one_line_with_exit_113(tmp_path):
    missing = run_cli("export", "no_such_variant", "-o", str(tmp_path / "x.py"))
    assert missing.returncode == 113 and missing.stderr.startswith("Error: submission 'no_such_variant' not found")
    inside = run_cli("export", "torch_reference", "-o", "submissions/torch_reference/out.py")
    assert inside.returncode == 113
    assert inside.stderr.strip() == ("Error: -o submissions/torch_reference/out.py: inside the variant's folder "
                                     "submissions/torch_reference, which export reads; write it elsewhere")
    entry = variant(tmp_path, {"submission.py": ENTRY + "from .helper import f\n"})
    bad = run_cli("export", str(entry.parent), "-o", str(tmp_path / "x.py"))
    assert bad.returncode == 113 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("Error: cannot export v: v/submission.py:5: a relative import")


def test_a_problem_variant_exports_for_its_own_board_with_the_runners_task_types():
    """nvfp4_gemm/torch_reference imports its types from task, as the official runner's task.py gives them (the
    worker makes task problems.nvfp4_gemm): export keeps the import, writes the problem's leaderboard directive,
    and the check passes."""
    from harness.parent.registry import resolve
    from harness.submit.check import check
    from harness.submit.export import export_variant

    exported = export_variant(resolve("nvfp4_gemm/torch_reference"))
    lines = exported.text.splitlines()
    assert lines[:2] == ["#!POPCORN leaderboard nvfp4_gemm", "#!POPCORN gpu B200"]
    assert "from task import input_t, output_t" in lines and not any("problems" in x for x in lines
                                                                     if x.startswith(("from ", "import ")))
    assert check(exported.text.encode(), "x", "submission.py", use_guard=False).findings == ()


def test_a_file_naming_no_problem_is_exported_for_the_default_board_with_a_note_or_for_problem(tmp_path):
    """No #!POPCORN leaderboard line and no problem folder: exported for nvfp4_group_gemm with a note saying so, or
    for the board --problem names; a --problem other than the one a variant declares is refused."""
    entry = variant(tmp_path, {"submission.py": "import torch\nfrom task import input_t, output_t\n\n\n"
                                                "def custom_kernel(data: input_t) -> output_t:\n    return data[-1]\n"})
    plain = run_cli("export", str(entry), "-o", str(tmp_path / "a.py"))
    assert plain.returncode == 0, plain.stderr
    assert (tmp_path / "a.py").read_text().splitlines()[0] == "#!POPCORN leaderboard nvfp4_group_gemm"
    assert ("note: it names no problem (no #!POPCORN leaderboard line, no problem folder): exported for "
            "nvfp4_group_gemm, the default; --problem names another board") in plain.stdout.splitlines()
    gemv = run_cli("export", str(entry), "-o", str(tmp_path / "b.py"), "--problem", "nvfp4_gemv")
    assert gemv.returncode == 0 and "note:" not in gemv.stdout
    assert (tmp_path / "b.py").read_text().splitlines()[0] == "#!POPCORN leaderboard nvfp4_gemv"
    other = run_cli("export", "nvfp4_gemv/torch_reference", "-o", str(tmp_path / "c.py"), "--problem", "nvfp4_gemm")
    assert other.returncode == 113 and other.stderr.strip().endswith("not --problem nvfp4_gemm")
    assert not (tmp_path / "c.py").exists()
