"""A submission's files carried by content, so a machine without the submitter's checkout can run it.

``pack(variant)`` reads the files a variant may import: its whole folder for ``submissions/<name>/submission.py``
(other files beside it may be imported; ``__pycache__`` and dot-files stay behind); for any other .py file, that
file and the .py files beside it (a serial run can import those too; subfolders stay behind). Nothing is read
through a link: a symbolic link (to a file or a folder, inside or outside) or a FIFO, socket or device among the
files it would carry is refused with BundleError naming the path and what it is (a link's target would otherwise
travel under the link's name, and a FIFO would block the read). ``unpack(bundle,
root)`` writes them under ``root/<bundle id>/`` (the id is a hash of every file's name and sha256, so equal contents
share one folder and a changed file gets a new one), checking every file's hash, and returns the Variant to run from
there: same name, same entry sha256 as the packed one.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.parent.registry import (
    ENTRY_FILE,
    FOLDER_RULE,
    RegistryError,
    Variant,
    link_text,
    read_variant,
    refusal,
    walk_folder,
)


class BundleError(ValueError):
    """A bundle cannot be packed or unpacked (a file is unreadable or not a regular file, or its content does not
    match its hash)."""


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


#: Said when a .py file beside a loose submission (which travels with it) is not a regular file.
LOOSE_RULE = "a .py file beside a submission travels with it and must be a regular file"


def _read(dir_fd: int, name: str, path: Path, variant: Variant, rule: str) -> bytes:
    """The bytes of regular file ``name`` in the folder open as ``dir_fd``, opened without following a link (and
    without blocking on a FIFO). Raises BundleError when it is not a regular file or cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):  # replaced since the folder was listed
            link = link_text(name, dir_fd) if stat.S_ISLNK(st.st_mode) else ""
            raise BundleError(refusal(path, st.st_mode, link, rule)) from None
        raise BundleError(f"cannot read {path} to send it with {variant.name}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BundleError(refusal(path, mode, "", rule))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as exc:
        raise BundleError(f"cannot read {path} to send it with {variant.name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _carried(variant: Variant) -> tuple[Path, dict[str, bytes]]:
    """The folder the bundle mirrors and the bytes of each file it carries, by relative path (see the module
    docstring). Raises BundleError."""
    path = Path(variant.path).resolve()
    folder = path.parent
    contents: dict[str, bytes] = {}
    if path.name == ENTRY_FILE:
        def keep(rel: str, dir_fd: int, name: str) -> None:
            contents[rel] = _read(dir_fd, name, folder / rel, variant, FOLDER_RULE)

        try:
            walk_folder(folder, keep)
        except RegistryError as exc:
            raise BundleError(str(exc)) from None
        return folder, contents
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BundleError(f"cannot list {folder} to send {variant.name}: {exc.strerror or exc}") from None
    try:
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it if e.name.endswith(".py") and not e.name.startswith("."))
        for name in names:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                continue  # a folder named *.py: subfolders stay behind
            if not stat.S_ISREG(st.st_mode):
                link = link_text(name, dir_fd) if stat.S_ISLNK(st.st_mode) else ""
                raise BundleError(refusal(folder / name, st.st_mode, link, LOOSE_RULE))
            contents[name] = _read(dir_fd, name, folder / name, variant, LOOSE_RULE)
    except OSError as exc:
        raise BundleError(f"cannot list {folder} to send {variant.name}: {exc.strerror or exc}") from None
    finally:
        os.close(dir_fd)
    return folder, contents


def pack(variant: Variant) -> Bundle:
    """The bundle of ``variant``'s files. Raises BundleError when one cannot be read or is not a regular file."""
    folder, contents = _carried(variant)
    files, blobs = [], {}
    for rel, data in contents.items():
        digest = _sha256(data)
        files.append((rel, digest))
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
