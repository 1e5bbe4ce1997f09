"""Bring CuTe DSL (nvidia-cutlass-dsl) to a GPU machine that has no network and takes at most 64 MiB per call.

The device tool copies the working tree plus at most 8 ignored "carry" paths, 64 MiB in all, and its machine goes
back 30 s after a call. The DSL for CPython 3.12 / CUDA 13 is four wheels whose largest alone is about 92 MB, so
it travels as two xz parts (about 35 MB each) in two calls, the second within the warm window of the first:

    here:    python3 tools/dsl_to_device.py pack        # pip download, unpack, tar.xz, split into .dsl/1, .dsl/2
    call 1:  carry [".dsl/1"]   python3 tools/dsl_to_device.py stage
    call 2:  carry [".dsl/2"]   python3 tools/dsl_to_device.py install && <command that needs the DSL>

``stage`` copies the parts present under .dsl/ to a folder outside the tree (/opt/fp4bench-dsl), which lives as
long as the machine does. ``install`` stages too, checks every part against the manifest's sha256, and unpacks
into python3's own site-packages, so every process (a sandboxed fp4bench worker too) finds the DSL as installed;
the wheels' dependencies (cuda-bindings, protobuf, typing-extensions) are in the device image. Later calls on the
same warm machine need nothing; ``install`` there returns at once. A call that finds part 1 missing (the machine
went back between the calls) says so and exits 2: run both calls again.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
STAGE_DIR = Path("/opt/fp4bench-dsl")
MANIFEST = "manifest.json"


class ToolError(Exception):
    """A one-line reason the step cannot go on."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_names(version: str, cuda: str) -> list[str]:
    """The pip requirements of one DSL install: the three common packages and the CUDA-major libraries."""
    return [f"{p}=={version}" for p in PACKAGES] + [f"nvidia-cutlass-dsl-libs-cu{cuda}=={version}"]


def download(version: str, python: str, cuda: str, dest: Path) -> list[Path]:
    """pip download the wheels for ``python`` (e.g. 3.12) on x86-64 Linux into ``dest``; returns their paths."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    done = subprocess.run(cmd + wheel_names(version, cuda), capture_output=True, text=True)
    if done.returncode != 0:
        raise ToolError(f"pip download failed (needs a network or a wheel cache): {done.stderr.strip()[-400:]}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 4:
        raise ToolError(f"expected 4 wheels in {dest}, got {[w.name for w in wheels]}")
    return wheels


def split_file(path: Path, part_bytes: int, out: Path, meta: dict) -> list[dict]:
    """Cut ``path`` into parts of at most ``part_bytes``: part i in ``out/<i+1>/part.<i>``, each folder with the
    whole manifest (so either call alone can say what is missing)."""
    parts = []
    with open(path, "rb") as f:
        for i, chunk in enumerate(iter(lambda: f.read(part_bytes), b"")):
            folder = out / str(i + 1)
            folder.mkdir(parents=True)
            (folder / f"part.{i:02d}").write_bytes(chunk)
            parts.append({"name": f"part.{i:02d}", "folder": folder.name, "bytes": len(chunk),
                          "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {**meta, "parts": parts}
    for p in parts:
        (out / p["folder"] / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return parts


def pack(args) -> None:
    out = (ROOT / args.out).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wheels = sorted(Path(args.wheels).glob("*.whl")) if args.wheels else download(
            args.version, args.python, args.cuda, tmp / "wheels")
        tree = tmp / "tree"
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                z.extractall(tree)
        archive = tmp / "dsl.tar.xz"
        start = time.perf_counter()
        with lzma.open(archive, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
            for entry in sorted(tree.iterdir()):
                tar.add(entry, arcname=entry.name)
        print(f"packed {len(wheels)} wheels: {archive.stat().st_size / 1e6:.1f} MB xz in "
              f"{time.perf_counter() - start:.0f} s")
        if out.exists():
            shutil.rmtree(out)
        meta = {"version": args.version, "python": args.python, "cuda": args.cuda,
                "wheels": [w.name for w in wheels], "sha256": _sha256(archive)}
        parts = split_file(archive, int(args.part_mb * 1e6), out, meta)
    for p in parts:
        print(f"{args.out}/{p['folder']}/{p['name']}: {p['bytes'] / 1e6:.1f} MB")
    print("device calls, the second within 30 s of the first:")
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        print(f'  carry ["{args.out}/{p["folder"]}"]  python3 tools/dsl_to_device.py '
              f'{"install && <command>" if last else "stage"}')


def _manifest(src: Path) -> dict:
    found = sorted(src.glob(f"*/{MANIFEST}"))
    if not found:
        raise ToolError(f"no {src.name}/*/{MANIFEST} here: carry a part folder (pack makes them)")
    return json.loads(found[0].read_text())


def stage(args) -> dict:
    """Copy the parts this call carried to the staging folder; returns the manifest."""
    src = (ROOT / args.dir).resolve()
    manifest = _manifest(src)
    dest = Path(args.to)
    dest.mkdir(parents=True, exist_ok=True)
    for p in manifest["parts"]:
        here = src / p["folder"] / p["name"]
        if here.is_file():
            shutil.copyfile(here, dest / p["name"])
    have = [p["name"] for p in manifest["parts"] if (dest / p["name"]).is_file()]
    print(f"staged in {dest}: {', '.join(have) or 'nothing'} of {len(manifest['parts'])} parts")
    return manifest


def _installed_version() -> str | None:
    done = subprocess.run([sys.executable, "-c", "import cutlass; print(cutlass.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def install(args) -> None:
    found = _installed_version()
    manifest = None if found else stage(args)
    if found:
        print(f"CuTe DSL {found} already importable; nothing to do")
        return
    dest = Path(args.to)
    missing = [p["name"] for p in manifest["parts"] if not (dest / p["name"]).is_file()]
    if missing:
        raise ToolError(f"{', '.join(missing)} not in {dest}: the machine of the earlier call went back (it stays "
                        f"30 s); run the stage call and this one again, this one right after")
    for p in manifest["parts"]:
        if _sha256(dest / p["name"]) != p["sha256"]:
            raise ToolError(f"{dest / p['name']}: sha256 differs from the manifest (a part of another pack?)")
    site = Path(args.site or sysconfig.get_paths()["purelib"])
    start = time.perf_counter()
    with tempfile.TemporaryFile() as whole:
        for p in manifest["parts"]:
            with open(dest / p["name"], "rb") as f:
                shutil.copyfileobj(f, whole)
        whole.seek(0)
        with lzma.open(whole) as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
            tar.extractall(site, filter="data")
    found = _installed_version()
    if found is None:
        raise ToolError(f"unpacked into {site}, but `import cutlass` still fails there")
    print(f"CuTe DSL {found} installed into {site} in {time.perf_counter() - start:.1f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("pack", help="here: download, pack and split the DSL's wheels into OUT/1, OUT/2, ...")
    p.add_argument("--version", default="4.8.1")
    p.add_argument("--python", default="3.12", help="the device's Python (default 3.12)")
    p.add_argument("--cuda", default="13", help="CUDA major of the DSL's libraries (default 13)")
    p.add_argument("--wheels", help="a folder holding the four wheels already (skips pip download)")
    p.add_argument("--out", default=".dsl")
    p.add_argument("--part-mb", type=float, default=38.0, help="MB per part (default 38: room for the tree)")
    for name, text in (("stage", "device call 1: keep the carried part(s) outside the tree"),
                       ("install", "device call 2: stage, check, unpack into site-packages, import")):
        q = sub.add_parser(name, help=text)
        q.add_argument("--dir", default=".dsl")
        q.add_argument("--to", default=str(STAGE_DIR))
        if name == "install":
            q.add_argument("--site", help="where to unpack (default: this python's site-packages)")
    args = parser.parse_args(argv)
    try:
        {"pack": pack, "stage": stage, "install": install}[args.step](args)
    except ToolError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
