"""tools/dsl_to_device.py on small stand-in wheels: pack splits with a manifest, each call stages what it carried,
install refuses a missing or foreign part with the reason and unpacks the whole into the site folder."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dsl_to_device", ROOT / "tools" / "dsl_to_device.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


@pytest.fixture
def packed(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payload = os.urandom(300_000)  # incompressible: the archive needs several 0.1 MB parts
    for i, name in enumerate(("a", "b", "c", "d")):
        with zipfile.ZipFile(wheels / f"{name}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"pkg_{name}/__init__.py", f"X = {i}\n")
            z.writestr(f"pkg_{name}-1.0.dist-info/METADATA", "Name: x\n")
            if name == "d":
                z.writestr("pkg_d/blob.bin", payload)
    out = tmp_path / "dsl"
    assert tool.main(["pack", "--wheels", str(wheels), "--out", str(out), "--part-mb", "0.1"]) == 0
    return out, payload


def test_pack_splits_into_one_folder_per_call_each_with_the_manifest(packed):
    out, _payload = packed
    folders = sorted(p.name for p in out.iterdir())
    manifest = json.loads((out / "1" / "manifest.json").read_text())
    assert folders == [str(i + 1) for i in range(len(manifest["parts"]))] and len(folders) >= 3
    for p in manifest["parts"]:
        data = (out / p["folder"] / p["name"]).read_bytes()
        assert len(data) == p["bytes"] <= 100_000 and hashlib.sha256(data).hexdigest() == p["sha256"]
        assert json.loads((out / p["folder"] / "manifest.json").read_text()) == manifest
    assert sorted(manifest["wheels"]) == [f"{n}-1.0-py3-none-any.whl" for n in "abcd"]


def _carry_only(out: Path, keep: str, dest: Path) -> Path:
    """What one device call sees: only the folder it carried."""
    call = dest / "tree"
    shutil.rmtree(call, ignore_errors=True)
    (call).mkdir(parents=True)
    shutil.copytree(out / keep, call / keep)
    return call


def test_install_after_every_call_unpacks_the_wheels_into_the_site(packed, tmp_path, monkeypatch, capsys):
    out, payload = packed
    stage_dir, site = tmp_path / "stage", tmp_path / "site"
    versions = iter([None, "9.9"])  # not importable before, importable after
    monkeypatch.setattr(tool, "_installed_version", lambda: next(versions))
    n = len(json.loads((out / "1" / "manifest.json").read_text())["parts"])
    for i in range(1, n):
        call = _carry_only(out, str(i), tmp_path)
        assert tool.main(["stage", "--dir", str(call), "--to", str(stage_dir)]) == 0
    call = _carry_only(out, str(n), tmp_path)
    assert tool.main(["install", "--dir", str(call), "--to", str(stage_dir), "--site", str(site)]) == 0
    assert (site / "pkg_d" / "blob.bin").read_bytes() == payload
    assert (site / "pkg_a" / "__init__.py").read_text() == "X = 0\n"
    assert (site / "pkg_c-1.0.dist-info" / "METADATA").is_file()
    assert f"CuTe DSL 9.9 installed into {site}" in capsys.readouterr().out


def test_install_without_the_earlier_parts_says_the_machine_went_back(packed, tmp_path, monkeypatch, capsys):
    out, _payload = packed
    monkeypatch.setattr(tool, "_installed_version", lambda: None)
    n = len(json.loads((out / "1" / "manifest.json").read_text())["parts"])
    call = _carry_only(out, str(n), tmp_path)
    assert tool.main(["install", "--dir", str(call), "--to", str(tmp_path / "stage"),
                      "--site", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: part.00") and "the machine of the earlier call went back" in err
    assert not (tmp_path / "site").exists()


def test_install_refuses_a_part_of_another_pack(packed, tmp_path, monkeypatch, capsys):
    out, _payload = packed
    monkeypatch.setattr(tool, "_installed_version", lambda: None)
    stage_dir = tmp_path / "stage"
    for folder in sorted(out.iterdir()):
        tool.main(["stage", "--dir", str(_carry_only(out, folder.name, tmp_path)), "--to", str(stage_dir)])
    (stage_dir / "part.00").write_bytes(b"other")
    last = sorted(out.iterdir(), key=lambda p: int(p.name))[-1].name
    assert tool.main(["install", "--dir", str(_carry_only(out, last, tmp_path)), "--to", str(stage_dir),
                      "--site", str(tmp_path / "site")]) == 2
    assert "part.00: sha256 differs from the manifest" in capsys.readouterr().err


def test_install_is_a_no_op_where_the_dsl_imports(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tool, "_installed_version", lambda: "4.8.1")
    assert tool.main(["install", "--dir", str(tmp_path / "none"), "--to", str(tmp_path / "s")]) == 0
    assert "CuTe DSL 4.8.1 already importable; nothing to do" in capsys.readouterr().out


def test_stage_without_a_carried_folder_names_what_to_carry(tmp_path, capsys):
    assert tool.main(["stage", "--dir", str(tmp_path / "none"), "--to", str(tmp_path / "s")]) == 2
    assert "Error: no none/*/manifest.json here: carry a part folder (pack makes them)" in capsys.readouterr().err
