"""The official server's rules (harness.submit.official_rules): each rule on a file that breaks it gives the finding
with its file and line; a file that keeps them gives none. KernelGuard: the real package when installed, and the
adapter's plumbing on a labelled stand-in module (tests/fixtures/fake_kernelguard.py, not KernelGuard)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from harness.parent.registry import resolve
from harness.submit import guard
from harness.submit.export import export_variant
from harness.submit.check import check
from harness.submit.official_rules import MAX_BYTES, check_bytes

ROOT = Path(__file__).resolve().parents[3]
HEAD = "#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu B200\n"
BODY = ("import torch\nfrom task import input_t, output_t\n\n\n"
        "def custom_kernel(data: input_t) -> output_t:\n    return []\n")


def found(text: str | bytes, name: str = "submission.py") -> list[tuple[str, int | None, str]]:
    data = text.encode() if isinstance(text, str) else text
    return [(f.rule, f.line, f.message) for f in check_bytes(data, name, name)]


def test_a_file_that_keeps_every_rule_has_no_finding():
    assert found(HEAD + BODY) == []


def test_the_word_stream_in_any_case_anywhere_is_a_finding_per_line():
    text = HEAD + BODY + "# a Stream of thought\nx = 'upstream'  # STREAMS\n"
    hits = [(rule, line) for rule, line, _ in found(text)]
    assert hits == [("stream", 9), ("stream", 10)]
    assert "(2x," in found(text)[1][2] and "x = 'upstream'" in found(text)[1][2]


def test_size_limit_is_one_million_bytes_and_empty_is_refused():
    padding = "#" * (MAX_BYTES - len(HEAD + BODY) - 1) + "\n"
    assert found(HEAD + BODY + padding) == []
    [(rule, line, message)] = found(HEAD + BODY + padding + "x")
    assert (rule, line) == ("size", None) and message.startswith("1,000,001 bytes")
    assert ("size", None, "the file is empty; the server refuses an empty submission") in found(b"")


def test_non_utf8_is_a_finding_on_its_line():
    [(rule, line, message)] = found((HEAD + BODY).encode() + b"x = '\xff'\n")
    assert (rule, line) == ("encoding", 9) and "0xff" in message


def test_extension_must_be_one_the_server_takes():
    assert [(r, m) for r, _, m in found(HEAD + BODY, "kernel.txt")] == [
        ("extension", "the server takes only .py, .cu, .cuh, .cpp files, got 'kernel.txt'")]


@pytest.mark.parametrize("head, expected", [
    ("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu B200\n#!POPCORN gpu B200\n",
     [("directive", 3, "gpus given again (first on line 2): the server refuses it")]),
    ("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu B200\n#!POPCORN timeout 5\n",
     [("directive", 3, "unknown directive 'timeout' (known: leaderboard, gpu, gpus); the server refuses it")]),
    ("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu\n",
     [("directive", 2, "#!POPCORN gpu without a value: the server refuses it"),
      ("directive", None, "no '#!POPCORN gpu' in the leading comment block (the board runs B200)")]),
    ("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu H200\n",
     [("directive", 2, "gpu 'H200': the nvfp4_group_gemm board runs B200")]),
    ("#!POPCORN leaderboard nvfp4_gemm\n#!POPCORN gpu B200\n", []),  # another NVFP4 board
    ("#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN gpu H200\n",
     [("directive", 2, "gpu 'H200': the nvfp4_gemv board runs B200")]),
    ("#!POPCORN leaderboard nvfp4_bogus\n#!POPCORN gpu B200\n",
     [("directive", 1, "leaderboard 'nvfp4_bogus': the boards fp4bench knows are nvfp4_dual_gemm, nvfp4_gemm, "
                       "nvfp4_gemv, nvfp4_group_gemm")]),
    ("#!POPCORN gpu B200\n\n#!POPCORN leaderboard nvfp4_group_gemm\n",
     [("directive", 3, "#!POPCORN after the leading comment block (line 2 ends it): the server ignores it"),
      ("directive", None, "no '#!POPCORN leaderboard <problem>' in the leading comment block (problems: "
                          "nvfp4_dual_gemm, nvfp4_gemm, nvfp4_gemv, nvfp4_group_gemm)")]),
])
def test_directives_are_read_as_the_server_reads_them(head, expected):
    assert found(head + BODY) == expected


def test_cpp_files_take_slash_directives_and_no_python_import_check():
    cpp = "//!POPCORN leaderboard nvfp4_group_gemm\n//!POPCORN gpu B200\n#include <cuda.h>\n"
    assert found(cpp, "kernel.cu") == []
    assert found(cpp.replace("//!POPCORN gpu", "#!POPCORN gpu"), "kernel.cu") == [
        ("directive", 2, "a C++ file takes //!POPCORN (a #! line does not compile)")]


def test_a_byte_order_mark_hides_every_directive():
    rules = found("\ufeff" + HEAD + BODY)
    assert rules[0] == ("directive", 1, "the file starts with a byte-order mark: the server then reads no directive "
                                        "at all")


@pytest.mark.parametrize("line, message", [
    ("import yaml", "imports 'yaml', which the official runner lacks"),
    ("from task.formats import SF_VEC", "imports 'task.formats': the runner's task is a module (task.py)"),
    ("from task import generate_input", "from task import generate_input: the runner's task.py defines only"),
    ("from .helpers import x", "a relative import: the runner's submission.py is not in a package"),
    ("def f():\n    import harness", "imports 'harness', which the official runner lacks"),
])
def test_imports_beyond_the_runner_and_the_image_are_findings_on_their_line(line, message):
    rule, number, text = found(HEAD + BODY + line + "\n")[0]
    assert (rule, number) == ("import", 10 if line.startswith("def") else 9) and text.startswith(message)


def test_the_image_packages_stdlib_and_runner_files_are_allowed():
    lines = "import triton, numpy, cutlass.cute, cuda.bindings.driver, ctypes, os\nimport utils, reference\n"
    assert found(HEAD + BODY + lines) == []


@pytest.mark.parametrize("body, ok", [
    ("def kernel(data):\n    return []\n", False),
    ("class K:\n    def custom_kernel(self, data):\n        return []\n", False),  # a method is not the entry
    ("def run(data):\n    return []\n\n\ncustom_kernel = run\n", True),
    ("from torch import add as custom_kernel\n", True),
    ("async def custom_kernel(data):\n    return []\n", True),
])
def test_a_file_without_custom_kernel_at_the_top_level_is_a_finding(body, ok):
    expected = [] if ok else [("entry", None, "defines no custom_kernel(data) at the top level: the runner calls it "
                                              "for every case")]
    assert found(HEAD + "import torch\n" + body) == expected


def test_syntax_errors_are_a_finding_on_their_line():
    assert found(HEAD + BODY + "def (:\n") == [("syntax", 9, "not valid Python: invalid syntax")]


def test_a_requirement_the_board_cannot_meet_is_told_plainly():
    [(rule, line, message)] = found(HEAD + "#!FP4BENCH requires sm_90a\n" + BODY)
    assert (rule, line) == ("gpu", 3)
    assert message == ("built for another GPU: needs sm_90a; this is NVIDIA B200, sm_100; the nvfp4_group_gemm "
                       "board runs only B200, so it would fail there")
    assert found(HEAD + "#!FP4BENCH requires sm_90\n" + BODY) == []  # sm_90 or newer: a B200 meets it
    gemm = HEAD.replace("leaderboard nvfp4_group_gemm", "leaderboard nvfp4_gemm")
    [(_, _, message)] = found(gemm + "#!FP4BENCH requires sm_90a\n" + BODY)
    assert message.endswith("the nvfp4_gemm board runs only B200, so it would fail there")


@pytest.fixture()
def fake_guard(monkeypatch):
    """The adapter pointed at tests/fixtures/fake_kernelguard.py: a stand-in with KernelGuard's analyze_code
    signature and result keys, to test the adapter's plumbing only (it is not KernelGuard and detects nothing)."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures"))
    monkeypatch.setattr(guard, "MODULE", "fake_kernelguard")


def test_kernelguard_adapter_reports_classification_and_patterns_as_findings(fake_guard):
    checked = check((HEAD + BODY + "# FAKE-HACK\n").encode(), "s.py", "s.py")
    assert checked.guard_line == "KernelGuard 0.0-fake: hacked, filtered, 1 pattern(s) matched"
    assert [str(f) for f in checked.findings] == [
        "s.py: KernelGuard matched FAKE_PATTERN (high): line 9 holds FAKE-HACK [kernelguard]",
        "s.py: KernelGuard classifies it hacked and the official pipeline filters it out (fake reason) "
        "[kernelguard]"]
    clean = check((HEAD + BODY).encode(), "s.py", "s.py")
    assert clean.findings == () and clean.guard_line == "KernelGuard 0.0-fake: valid, not filtered, no pattern matched"


def test_kernelguard_missing_is_said_not_a_finding(monkeypatch):
    monkeypatch.setattr(guard, "MODULE", "no_such_kernelguard_module")
    checked = check((HEAD + BODY).encode(), "s.py", "s.py")
    assert checked.findings == () and checked.guard_line.startswith("KernelGuard is not installed")
    assert "pip install 'fp4bench[kernelguard]'" in checked.guard_line


@pytest.mark.skipif(importlib.util.find_spec("kernelguard") is None, reason="kernelguard is not installed")
def test_real_kernelguard_flags_a_timer_patch_and_passes_a_plain_kernel():
    hack = HEAD + "import torch\n\ntorch.cuda.Event.elapsed_time = lambda self, other: 0.001\n" + BODY
    bad = check(hack.encode(), "s.py", "s.py")
    assert "hacked, filtered" in bad.guard_line and any(f.rule == "kernelguard" for f in bad.findings)
    exported = export_variant(resolve("torch_reference")).text
    good = check(exported.encode(), "s.py", "s.py")
    assert good.findings == () and ": valid, not filtered, no pattern matched" in good.guard_line


def test_check_command_prints_findings_and_exits_112(tmp_path):
    path = tmp_path / "sub.py"
    path.write_text("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu H200\n" + BODY + "# stream\n")
    proc = subprocess.run([sys.executable, "-m", "harness", "check", str(path), "--no-kernelguard"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 112, proc.stderr
    assert f"{path}:2: gpu 'H200': the nvfp4_group_gemm board runs B200 [directive]" in proc.stdout
    assert f"{path}:9: contains 'stream'" in proc.stdout
    missing = subprocess.run([sys.executable, "-m", "harness", "check", str(tmp_path / "none.py")], cwd=ROOT,
                             capture_output=True, text=True)
    assert (missing.returncode, missing.stderr.strip()) == (113, f"Error: {tmp_path / 'none.py'}: no such file")
