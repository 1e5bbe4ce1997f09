"""Variants are found and read without importing them; requirements give clear reasons on the wrong machine."""
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
