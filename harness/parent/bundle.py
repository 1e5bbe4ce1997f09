"""A submission's files carried by content, so a machine without the submitter's checkout can run it.

``pack(variant)`` reads the files a variant may import: its whole folder for ``submissions/<name>/submission.py``
(other files beside it may be imported; ``__pycache__`` and dot-files stay behind); for any other .py file, that
file and the .py files beside it (a serial run can import those too; subfolders stay behind). ``unpack(bundle,
root)`` writes them under ``root/<bundle id>/`` (the id is a hash of every file's name and sha256, so equal contents
share one folder and a changed file gets a new one), checking every file's hash, and returns the Variant to run from
there: same name, same entry sha256 as the packed one.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.parent.registry import ENTRY_FILE, Variant, read_variant


class BundleError(ValueError):
    """A bundle cannot be packed or unpacked (a file is unreadable, or its content does not match its hash)."""


@dataclass(frozen=True)
class Bundle:
    """A variant's files: ``files`` as (path relative to the bundle folder, sha256) pairs, sorted; ``blobs``
    maps each sha256 to the file's bytes; ``entry`` is the entry file's relative path."""

    name: str
    entry: str
    files: tuple[tuple[str, str], ...]
    blobs: dict[str, bytes] = field(compare=False, repr=False)

    @property
    def id(self) -> str:
        """16 hex digits of a hash of the name and every (path, sha256) pair: the bundle's folder name."""
        manifest = "\n".join([self.name, self.entry] + [f"{p} {h}" for p, h in self.files])
        return hashlib.sha256(manifest.encode()).hexdigest()[:16]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _carried(variant: Variant) -> tuple[Path, list[Path]]:
    """The folder the bundle mirrors and the files it carries (see the module docstring)."""
    path = Path(variant.path).resolve()
    if path.name != ENTRY_FILE:
        return path.parent, sorted(p for p in path.parent.glob("*.py") if p.is_file() and not p.name.startswith("."))
    folder = path.parent
    files = []
    for here, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        files += [Path(here) / n for n in sorted(names) if not n.startswith(".")]
    return folder, files


def pack(variant: Variant) -> Bundle:
    """The bundle of ``variant``'s files. Raises BundleError when one cannot be read."""
    folder, paths = _carried(variant)
    files, blobs = [], {}
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise BundleError(f"cannot read {p} to send it with {variant.name}: {exc.strerror or exc}") from None
        digest = _sha256(data)
        files.append((p.relative_to(folder).as_posix(), digest))
        blobs[digest] = data
    entry = Path(variant.path).resolve().relative_to(folder).as_posix()
    return Bundle(variant.name, entry, tuple(sorted(files)), blobs)


def unpack(bundle: Bundle, root: Path) -> Variant:
    """Write ``bundle`` under ``root/<bundle.id>/`` unless it is already there, and read its entry file.

    A folder is written whole in a temporary sibling, then renamed into place, so a half-written bundle is never
    used (two workers unpacking the same bundle race harmlessly: the second rename finds it there). Raises
    BundleError when a blob is missing or does not match its hash."""
    target = Path(root) / bundle.id
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{bundle.id}-", dir=target.parent))
        try:
            for rel, digest in bundle.files:
                data = bundle.blobs.get(digest)
                if data is None or _sha256(data) != digest:
                    raise BundleError(f"bundle {bundle.id} of {bundle.name}: {rel} does not match its sha256")
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
            try:
                staging.rename(target)
            except OSError:
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    variant = read_variant(target / bundle.entry, name=bundle.name)
    expected = dict(bundle.files)[bundle.entry]
    if variant.sha256 != expected:
        raise BundleError(f"bundle {bundle.id} of {bundle.name}: {bundle.entry} on disk does not match its sha256")
    return variant
