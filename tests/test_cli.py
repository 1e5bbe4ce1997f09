"""Bad command-line input: a clear error naming what was expected and what came, exit 113 (bad spec) or 2 (a
malformed option), before anything runs."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import main


def _run(*args):
    return CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--no-store", *args])


@pytest.mark.parametrize("args, code, text", [
    (["--seed", "99999999999999999999999999"], 113, "combined with the secret seed gives"),
    (["--shapes", "m: [64]; n: [128]; k: [256]; g: 1; seed: 99999999999999999999999"], 113,
     "case seed 99999999999999999999999 does not fit torch.manual_seed (expected < 2**64)"),
    (["--seed", "-5"], 2, "-5 is not in the range x>=0"),
    (["--timeout", "0"], 2, "0.0 is not in the range x>0"),
    (["--shapes", "configs/shapes/nothere.yml"], 113, "shape file configs/shapes/nothere.yml does not exist"),
])
def test_bad_options_are_refused_before_running(args, code, text):
    result = _run(*args)
    assert result.exit_code == code
    assert text in " ".join(result.output.split())


def test_settings_file_that_is_not_yaml_or_is_a_shape_file(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("timing: [\n")
    result = _run("--settings", str(bad))
    assert result.exit_code == 113 and f"{bad}: not valid YAML" in " ".join(result.output.split())
    settings = tmp_path / "s.yml"
    settings.write_text("timing:\n  max_runs: 5\n")
    result = _run("--shapes", str(settings))
    assert result.exit_code == 113
    assert "expected a mapping with a 'cases' list, got a mapping with keys 'timing'" in " ".join(result.output.split())


def test_settings_keys_keep_their_kinds(tmp_path):
    from harness.settings import Settings, SettingsError, load_settings

    path = tmp_path / "s.yml"
    path.write_text("timing:\n  max_runs: 5\n")
    assert load_settings(path) == Settings(max_runs=5)
    for text, message in (("timing:\n  max_runs: 2.5\n", "max_runs must be an int, got 2.5"),
                          ("timing:\n  max_runs: 0\n", "max_runs must be positive, got 0"),
                          ("- timing\n",
                           "expected a mapping with sections 'timeouts', 'timing' and 'sandbox', got list")):
        path.write_text(text)
        with pytest.raises(SettingsError, match=message):
            load_settings(path)
