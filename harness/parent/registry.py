"""Find kernel variants and read what they declare, without importing them.

A variant is ``submissions/<name>/submission.py`` (plus any files beside it), or any .py file given by path.
Header lines at the top of the file declare metadata:

    #!POPCORN leaderboard nvfp4_group_gemm
    #!POPCORN gpu B200
    #!FP4BENCH requires sm_100a

``requires`` takes ``cpu-ok`` (default: runs anywhere, CPU included), ``cuda`` (any CUDA GPU), ``sm_XY``
(compute capability X.Y or newer) or ``sm_XYa`` (exactly X.Y: architecture-specific features such as tcgen05).
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT

SUBMISSIONS_DIR = ROOT / "submissions"
ENTRY_FILE = "submission.py"
_HEADER = re.compile(r"^#!(POPCORN|FP4BENCH)\s+(\S+)\s*(.*?)\s*$")
_ARCH = re.compile(r"^sm_(\d+?)(\d)(a?)$")


class RegistryError(ValueError):
    """A submission cannot be found or its headers are malformed (the message names the file and line)."""


@dataclass(frozen=True)
class Requirement:
    """What a variant needs: ``kind`` is ``any``, ``cuda`` or ``arch`` (then ``major``/``minor``/``exact``)."""

    text: str = "cpu-ok"
    kind: str = "any"
    major: int = 0
    minor: int = 0
    exact: bool = False

    def unmet_reason(self, device: "DeviceFacts") -> str | None:
        """None when ``device`` satisfies this; otherwise a sentence such as
        ``needs sm_100a; this is NVIDIA H200, sm_90``."""
        if self.kind == "any":
            return None
        if not device.cuda:
            return f"needs {self.text}; this machine has no CUDA GPU"
        if self.kind == "cuda":
            return None
        have = (device.cc_major, device.cc_minor)
        ok = have == (self.major, self.minor) if self.exact else have >= (self.major, self.minor)
        if ok:
            return None
        return f"needs {self.text}; this is {device.name}, sm_{device.cc_major}{device.cc_minor}"


@dataclass(frozen=True)
class DeviceFacts:
    """The GPU a run would use: ``cuda`` False means CPU only."""

    cuda: bool
    name: str = "cpu"
    cc_major: int = 0
    cc_minor: int = 0


def parse_requirement(text: str) -> Requirement:
    """``cpu-ok`` | ``cuda`` | ``sm_90`` | ``sm_100a`` -> Requirement. Raises RegistryError otherwise."""
    text = text.strip()
    if text in ("cpu-ok", "any", ""):
        return Requirement()
    if text == "cuda":
        return Requirement(text, "cuda")
    match = _ARCH.match(text)
    if not match:
        raise RegistryError(f"requires: expected cpu-ok, cuda, sm_XY or sm_XYa (e.g. sm_100a), got {text!r}")
    major, minor, a = match.groups()
    return Requirement(text, "arch", int(major), int(minor), bool(a))


@dataclass(frozen=True)
class Variant:
    """A submission file and its declared metadata; ``sha256`` is the entry file's content hash."""

    name: str
    path: Path
    popcorn: dict = field(default_factory=dict)
    requires: Requirement = Requirement()
    sha256: str = ""


def read_variant(path: Path, name: str | None = None) -> Variant:
    """Read a submission's header lines (only ``#`` lines before the first code line; a UTF-8 byte-order mark
    before them is skipped, as Python's import skips it). Raises RegistryError."""
    path = Path(path).resolve()
    if not path.is_file():
        raise RegistryError(f"no submission file at {path}")
    raw = path.read_bytes()
    popcorn: dict[str, str] = {}
    requires = Requirement()
    for lineno, line in enumerate(raw.decode("utf-8-sig", errors="replace").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            break
        match = _HEADER.match(line)
        if not match:
            continue
        tag, key, value = match.groups()
        if tag == "POPCORN":
            popcorn[key] = value
        elif key == "requires":
            try:
                requires = parse_requirement(value)
            except RegistryError as exc:
                raise RegistryError(f"{path}:{lineno}: {exc}") from None
        else:
            raise RegistryError(f"{path}:{lineno}: unknown #!FP4BENCH key {key!r} (known: requires)")
    if name is None:
        name = path.parent.name if path.name == ENTRY_FILE else path.stem
    return Variant(name, path, popcorn, requires, hashlib.sha256(raw).hexdigest())


def find_variants(root: Path = SUBMISSIONS_DIR) -> list[Variant]:
    """Every ``<root>/<name>/submission.py``, sorted by name."""
    return [read_variant(p) for p in sorted(Path(root).glob(f"*/{ENTRY_FILE}"))]


def resolve(spec: str, root: Path = SUBMISSIONS_DIR) -> Variant:
    """``--submission`` value -> Variant: a folder name under submissions/, a folder, or a .py path.

    Raises RegistryError: "no such file" for a .py path that does not exist, "no such folder" for a path to a
    missing folder, "expected a .py file or a variant folder" for another file, a list of the known variants when
    nothing matches.
    """
    for cand in (Path(root) / spec / ENTRY_FILE, Path(spec) / ENTRY_FILE):
        if cand.is_file():
            return read_variant(cand)
    path = Path(spec)
    if path.is_file():
        if path.suffix != ".py":
            raise RegistryError(f"expected a .py file or a variant folder, got {spec}")
        return read_variant(path)
    if path.suffix == ".py" and not path.exists():
        raise RegistryError(f"submission file {spec}: no such file")
    if path.is_dir():
        raise RegistryError(f"submission folder {spec} has no {ENTRY_FILE}")
    if "/" in spec or os.sep in spec:
        raise RegistryError(f"submission {spec}: no such file or folder")
    known = ", ".join(v.name for v in find_variants(root)) or "none"
    raise RegistryError(f"submission {spec!r} not found: expected a folder under {root} with {ENTRY_FILE} "
                        f"(known: {known}) or a path to a .py file")
