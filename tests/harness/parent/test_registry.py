"""Variants are found and read without importing them; requirements give clear reasons on the wrong machine."""
import os
import socket

import pytest

from harness.parent.registry import DeviceFacts, RegistryError, find_variants, parse_requirement, read_variant, resolve

H200 = DeviceFacts(True, "NVIDIA H200", 9, 0)
B200 = DeviceFacts(True, "NVIDIA B200", 10, 0)
CPU = DeviceFacts(False, "CPU (x86_64)")


def test_requirements():
    sm100a = parse_requirement("sm_100a")
    assert (sm100a.major, sm100a.minor, sm100a.exact) == (10, 0, True)
    assert sm100a.unmet_reason(H200) == "needs sm_100a; this is NVIDIA H200, sm_90"
    assert sm100a.unmet_reason(CPU) == "needs sm_100a; this machine has no CUDA GPU"
    assert sm100a.unmet_reason(B200) is None
    assert sm100a.unmet_reason(DeviceFacts(True, "NVIDIA B300", 10, 3)) is not None  # 'a' means exactly 10.0
    sm90 = parse_requirement("sm_90")
    assert sm90.unmet_reason(H200) is None and sm90.unmet_reason(B200) is None
    assert parse_requirement("cuda").unmet_reason(CPU) == "needs cuda; this machine has no CUDA GPU"
    assert parse_requirement("cpu-ok").unmet_reason(CPU) is None
    with pytest.raises(RegistryError, match="expected cpu-ok, cuda, sm_XY or sm_XYa"):
        parse_requirement("blackwell")


def test_headers_read_without_import(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("#!POPCORN leaderboard nvfp4_group_gemm\n#!POPCORN gpu B200\n#!FP4BENCH requires sm_100a\n"
                 "import a_module_that_does_not_exist\n#!FP4BENCH requires cuda\n")
    v = read_variant(f)
    assert v.name == "k" and v.popcorn == {"leaderboard": "nvfp4_group_gemm", "gpu": "B200"}
    assert v.requires.text == "sm_100a" and len(v.sha256) == 64
    f.write_text("#!FP4BENCH needs sm_100a\n")
    with pytest.raises(RegistryError, match=r"k.py:1: unknown #!FP4BENCH key 'needs'"):
        read_variant(f)


def test_find_and_resolve():
    names = [v.name for v in find_variants()]
    assert "torch_reference" in names
    assert resolve("torch_reference").path.name == "submission.py"
    with pytest.raises(RegistryError, match="submission 'nope' not found.*known: .*torch_reference"):
        resolve("nope")


def test_byte_order_mark_does_not_hide_the_headers(tmp_path):
    f = tmp_path / "k.py"
    f.write_bytes(b"\xef\xbb\xbf#!POPCORN gpu B200\n#!FP4BENCH requires sm_100a\nimport torch\n")
    v = read_variant(f)
    assert v.popcorn == {"gpu": "B200"} and v.requires.text == "sm_100a"
    assert v.requires.unmet_reason(H200) == "needs sm_100a; this is NVIDIA H200, sm_90"


HEADERS = "#!POPCORN gpu B200\n#!FP4BENCH requires sm_100a\n"


@pytest.mark.parametrize("text", [
    HEADERS.replace("\n", "\r\n") + "import torch\r\n",  # Windows line endings
    "\ufeff" + HEADERS.replace("\n", "\r\n") + "import torch\r\n",  # and a byte-order mark
    HEADERS.replace("\n", "\r") + "import torch\r",  # old Mac line endings
    "\n\n" + HEADERS + "import torch\n",  # blank lines first
    "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n" + HEADERS + "import torch\n",  # shebang, coding cookie
    "   # my kernel\n" + HEADERS + "import torch\n",  # an indented comment before them
    "  #!POPCORN gpu B200\n\t#!FP4BENCH requires sm_100a\nimport torch\n",  # indented headers
    "#!POPCORN\tgpu\tB200\n#!FP4BENCH\trequires\tsm_100a \nimport torch\n",  # tabs, a trailing space
    "\x0c" + HEADERS + "import torch\n",  # a form feed (Python allows one at a line's start)
], ids=["crlf", "bom-crlf", "cr", "blank-lines", "shebang-cookie", "indented-comment", "indented-headers", "tabs",
        "form-feed"])
def test_a_b200_file_is_refused_however_its_header_block_is_spelled(tmp_path, text):
    """Every spelling Python imports the same way declares the same: a B200-only file is never run elsewhere."""
    f = tmp_path / "k.py"
    f.write_bytes(text.encode())
    v = read_variant(f)
    assert v.popcorn == {"gpu": "B200"} and v.requires.text == "sm_100a"
    assert v.requires.unmet_reason(H200) == "needs sm_100a; this is NVIDIA H200, sm_90"


def test_missing_paths_say_no_such_file(tmp_path):
    with pytest.raises(RegistryError) as info:
        resolve(str(tmp_path / "my_kernel.py"))
    assert str(info.value) == f"submission file {tmp_path / 'my_kernel.py'}: no such file"
    with pytest.raises(RegistryError) as info:
        resolve(str(tmp_path / "kernels" / "v1"))
    assert str(info.value) == f"submission {tmp_path / 'kernels' / 'v1'}: no such file or folder"
    with pytest.raises(RegistryError) as info:
        resolve(str(tmp_path))
    assert str(info.value) == f"submission folder {tmp_path} has no submission.py"


def test_a_file_that_is_not_python_is_refused_before_import(tmp_path):
    text = tmp_path / "g5.txt"
    text.write_text("def custom_kernel(data): pass\n")
    with pytest.raises(RegistryError) as info:
        resolve(str(text))
    assert str(info.value) == f"expected a .py file or a variant folder, got {text}"


# --- a variant's folder holds only regular files and folders -------------------------------------------------
RULE = "a variant's folder may hold only regular files and folders"


def _folder(parent, name="mine"):
    folder = parent / name
    (folder / "lib").mkdir(parents=True)
    (folder / "submission.py").write_text("def custom_kernel(data):\n    return data\n")
    (folder / "lib" / "helper.py").write_text("X = 1\n")
    return folder


def test_a_link_to_a_file_outside_the_folder_is_refused_on_read(tmp_path):
    folder = _folder(tmp_path)
    (folder / "data.bin").symlink_to("/etc/passwd")
    with pytest.raises(RegistryError) as info:
        read_variant(folder / "submission.py")
    assert str(info.value) == f"{folder}/data.bin is a symbolic link (to /etc/passwd); {RULE}"
    with pytest.raises(RegistryError) as info:
        resolve(str(folder))
    assert str(info.value) == f"{folder}/data.bin is a symbolic link (to /etc/passwd); {RULE}"


def test_inside_the_checkout_the_refusal_names_the_path_from_its_root(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.parent.registry.ROOT", tmp_path)
    _folder(tmp_path / "submissions", "x")
    (tmp_path / "submissions" / "x" / "data.bin").symlink_to("/etc/passwd")
    with pytest.raises(RegistryError) as info:
        resolve("x", root=tmp_path / "submissions")
    assert str(info.value) == ("submissions/x/data.bin is a symbolic link (to /etc/passwd); a variant's folder may "
                               "hold only regular files and folders")


@pytest.mark.parametrize("where, target", [
    ("lib/up", ".."),                # a folder inside it (a loop)
    ("lib/etc", "/etc"),             # a folder outside it
    ("lib/twin.py", "helper.py"),    # a file inside it
    ("submission.py", "lib/helper.py"),  # the entry itself
])
def test_every_link_is_refused_wherever_it_points(tmp_path, where, target):
    folder = _folder(tmp_path)
    if where == "submission.py":
        (folder / "submission.py").unlink()
    (folder / where).symlink_to(target)
    with pytest.raises(RegistryError) as info:
        read_variant(folder / "submission.py")
    assert str(info.value) == f"{folder}/{where} is a symbolic link (to {target}); {RULE}"


def test_a_fifo_and_a_socket_are_refused_and_nothing_blocks(tmp_path):
    folder = _folder(tmp_path)
    os.mkfifo(folder / "lib" / "pipe")
    with pytest.raises(RegistryError) as info:
        read_variant(folder / "submission.py")
    assert str(info.value) == f"{folder}/lib/pipe is a named pipe (FIFO); {RULE}"
    (folder / "lib" / "pipe").unlink()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(folder / "s.sock"))
        with pytest.raises(RegistryError) as info:
            read_variant(folder / "submission.py")
    assert str(info.value) == f"{folder}/s.sock is a socket; {RULE}"
    (folder / "s.sock").unlink()
    assert read_variant(folder / "submission.py").name == "mine"


def test_dot_files_and_pycache_are_passed_over_and_a_loose_file_is_not_a_folder(tmp_path):
    folder = _folder(tmp_path)
    (folder / ".secret").symlink_to("/etc/passwd")
    os.mkfifo(folder / "lib" / ".pipe")
    (folder / "__pycache__").symlink_to("/tmp")
    assert read_variant(folder / "submission.py").name == "mine"
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "k.py").write_text("def custom_kernel(data):\n    return data\n")
    (loose / "data.bin").symlink_to("/etc/passwd")  # a loose file's folder is not read as the variant's
    assert read_variant(loose / "k.py").name == "k"


def test_list_refuses_a_variant_with_a_link_in_one_line_exit_113(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.cli.commands import main

    root = tmp_path / "submissions"
    _folder(root, "x")
    (root / "x" / "data.bin").symlink_to("/etc/passwd")
    monkeypatch.setattr("harness.cli.commands.find_variants", lambda: find_variants(root))
    result = CliRunner().invoke(main, ["list"])
    assert (result.exit_code, result.output) == (113, f"Error: {root}/x/data.bin is a symbolic link (to "
                                                      f"/etc/passwd); {RULE}\n")
    with pytest.raises(RegistryError, match=r"^submission 'nope' not found.*\(known: x\)"):
        resolve("nope", root=root)  # the names alone: the unreadable variant does not hide this error


# The first lines of the official example submission of nvfp4_group_gemm (reference-kernels, a CuTe DSL kernel
# for B200): no fp4bench header.
OFFICIAL_EXAMPLE_HEAD = """\
import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, tcgen05
import cutlass.utils.blackwell_helpers as sm100_utils
import torch
from problems.nvfp4_group_gemm import input_t, output_t
"""


def test_a_file_plainly_built_for_blackwell_says_so_on_another_gpu(tmp_path):
    f = tmp_path / "submission.py"
    f.write_text(OFFICIAL_EXAMPLE_HEAD)
    v = read_variant(f)
    assert v.requires.text == "cpu-ok" and v.built_for[0].text == "sm_100a"
    assert v.built_for[1] == "line 5: from cutlass.cute.nvgpu import cpasync, tcgen05"
    assert v.looks_unmet(H200) == ("looks built for sm_100a (line 5: from cutlass.cute.nvgpu import cpasync, "
                                   "tcgen05); this is NVIDIA H200, sm_90")
    assert v.looks_unmet(CPU).endswith("; this machine has no CUDA GPU")
    assert v.looks_unmet(B200) is None


@pytest.mark.parametrize("source, expected", [
    ('FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]\n', "sm_90a"),
    ('PTX = "tcgen05.mma.cta_group::1.kind::mxf4nvf4"\nARCH = "sm_100"\n', "sm_100a"),  # one arch: the exact form
    ('ARCH = "sm_100"\n', "sm_100"),
    ('# tcgen05 is Blackwell only; this file is plain torch\nimport torch\n', None),   # comments do not count
    ('ARCHS = {"sm_90a": hopper, "sm_100a": blackwell}\n', None),                     # dispatches: not one GPU
    ("#!FP4BENCH requires cuda\nPTX = 'tcgen05.mma'\n", None),                           # a declared need wins
])
def test_built_for_needs_one_plain_architecture(tmp_path, source, expected):
    f = tmp_path / "k.py"
    f.write_text(source)
    v = read_variant(f)
    assert (v.built_for[0].text if v.built_for else None) == expected


def test_list_says_probably_not_for_a_header_less_blackwell_file(tmp_path, monkeypatch):
    from harness.cli.reports import variants_table
    from harness.report.stacked import render_text

    (tmp_path / "official").mkdir()
    (tmp_path / "official" / "submission.py").write_text(OFFICIAL_EXAMPLE_HEAD)
    text = " ".join(render_text(variants_table(find_variants(tmp_path), H200), 200).split())
    assert ("probably not: looks built for sm_100a (line 5: from cutlass.cute.nvgpu import cpasync, tcgen05); this is "
            "NVIDIA H200, sm_90") in text


@pytest.mark.parametrize("head, message", [
    ("#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN leaderboard nvfp4_gemm\n",
     "k.py:2: #!POPCORN leaderboard given again (first on line 1); give it once"),
    ("#!POPCORN gpu B200\n#!POPCORN gpu H100\n", "k.py:2: #!POPCORN gpu given again (first on line 1); give it once"),
    ("#!POPCORN leaderboard\n", "k.py:1: #!POPCORN leaderboard without a value: expected a problem's name "
                                "(nvfp4_dual_gemm, nvfp4_gemm, nvfp4_gemv, nvfp4_group_gemm)"),
])
def test_directives_the_server_refuses_are_refused_before_running(tmp_path, head, message):
    """A repeated directive or an empty leaderboard is refused, as the official server refuses it, instead of the
    last one winning or the default problem running."""
    f = tmp_path / "k.py"
    f.write_text(head + "def custom_kernel(data):\n    return data\n")
    with pytest.raises(RegistryError) as info:
        read_variant(f)
    assert str(info.value) == f"{tmp_path}/{message}"
