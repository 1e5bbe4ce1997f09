"""--submission given wrongly (no such file, empty, not Python, a folder with a link, two of one name, a
file built for another GPU): one line naming it, before the worker runs it."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from tests.conftest import ROOT
from tests.harness.cli._cli_helpers import TINY, _flat

from harness.cli.commands import main
from harness.parent.registry import RegistryError


def test_missing_submission_file_says_no_such_file():
    result = CliRunner().invoke(main, ["run", "--submission", "kernels/my_kernel.py", "--no-store"])
    assert result.exit_code == 113
    assert result.output == "Error: submission file kernels/my_kernel.py: no such file\n"


@pytest.mark.parametrize("value", ["", " ", ","])
def test_empty_submission_is_refused(value):
    result = CliRunner().invoke(main, ["run", "--submission", value, "--no-store"])
    assert (result.exit_code, result.output) == (
        113, f"Error: --submission: expected a variant name, a folder or a .py file (several separated by "
             f"commas), got {value!r}\n")


def test_submission_that_is_not_a_python_file_is_refused(tmp_path):
    text = tmp_path / "g5.txt"
    text.write_text("def custom_kernel(data): pass\n")
    result = CliRunner().invoke(main, ["run", "--submission", str(text), "--no-store"])
    assert (result.exit_code, result.output) == (
        113, f"Error: expected a .py file or a variant folder, got {text}\n")


@pytest.mark.parametrize("extra", [[], ["--cluster", "local:1"]])
def test_a_variant_folder_with_a_link_is_refused_before_anything_runs(tmp_path, extra):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "submission.py").write_text("def custom_kernel(data):\n    return data\n")
    (folder / "data.bin").symlink_to("/etc/passwd")
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", str(folder), "--db", str(db)] + extra)
    assert (result.exit_code, result.output) == (
        113, f"Error: {folder}/data.bin is a symbolic link (to /etc/passwd); a variant's folder may hold only regular "
             f"files and folders\n")
    assert not db.exists()


def test_two_submissions_of_one_name_are_refused(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(ROOT / "tests" / "cases" / "shared" / "honest_torch.py", tmp_path / folder / "k.py")
    a, b = tmp_path / "a" / "k.py", tmp_path / "b" / "k.py"
    result = CliRunner().invoke(main, ["run", "--submission", f"{a},{b}", "--shapes", TINY, "--no-store"])
    assert (result.exit_code, _flat(result.output)) == (
        113, f"Error: two submissions are both named 'k' ({a} and {b}): results, --json files and the store tell "
             f"variants apart by name, so rename one")
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--shapes", TINY, "--no-store"])
    assert result.exit_code == 113 and "both named 'k'" in result.output
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference,torch_reference", "--shapes", TINY,
                                       "--no-store"])
    ref = ROOT / "submissions" / "torch_reference" / "submission.py"
    assert (result.exit_code, _flat(result.output)) == (
        113, f"Error: submission 'torch_reference' is given twice ({ref}); a run times each variant once")


def test_one_file_twice_is_allowed_for_compare():
    from harness.cli.run_setup import distinct_names
    from harness.parent.registry import resolve

    ref = resolve("torch_reference")
    distinct_names([ref, resolve("torch_reference")], same_file_ok=True)  # an A/A compare: no error
    with pytest.raises(RegistryError, match="given twice"):
        distinct_names([ref, resolve("torch_reference")])


def test_a_file_built_for_another_gpu_is_named_before_it_runs(tmp_path):
    sub = tmp_path / "bw.py"
    sub.write_text('PTX = "tcgen05.mma.cta_group::1"\n\n\ndef custom_kernel(data):\n    raise RuntimeError("no")\n')
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--shapes", "smoke#2", "--no-store",
                                       "--timeout", "120"])
    assert result.exit_code == 112, result.output
    note, *progress = result.stderr.splitlines()
    assert note == (
        "note: bw looks built for sm_100a (line 1: PTX = \"tcgen05.mma.cta_group::1\"); this machine has no CUDA "
        "GPU: running it anyway; a '#!FP4BENCH requires sm_100a' line at its top would skip it here")
    assert progress[0] == "bw test: starting the worker, loading the submission"  # then it runs
