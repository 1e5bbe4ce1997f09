"""Find kernel variants and read what they declare, without importing them.

A variant is ``submissions/<name>/submission.py`` (an nvfp4_group_gemm variant unless it says otherwise),
``submissions/<problem>/<name>/submission.py`` (a variant of ``problem``, a name ``plugs.names()`` knows; given
as ``<problem>/<name>``), or any .py file given by path. Its problem (``Variant.problem``) is its
``#!POPCORN leaderboard`` line's, else its problem folder's, else nvfp4_group_gemm (``problem_of``). Header lines at the top of the file declare metadata:

    #!POPCORN leaderboard nvfp4_group_gemm
    #!POPCORN gpu B200
    #!FP4BENCH requires sm_100a

``requires`` takes ``cpu-ok`` (default: runs anywhere, CPU included), ``cuda`` (any CUDA GPU), ``sm_XY``
(compute capability X.Y or newer) or ``sm_XYa`` (exactly X.Y: architecture-specific features such as tcgen05).

A variant's folder (the one of a ``submission.py``: the worker may import anything in it, and a pool run carries it
whole) may hold only regular files and folders: a symbolic link (to a file or a folder, inside it or outside) or a
FIFO, socket or device is refused when the variant is read, naming the path and what it is (``walk_folder``;
``__pycache__`` and names starting with ``.`` are passed over, as harness.parent.bundle leaves them behind).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import plugs
from harness import ROOT
from harness.problem import DEFAULT_PROBLEM

SUBMISSIONS_DIR = ROOT / "submissions"
ENTRY_FILE = "submission.py"
_HEADER = re.compile(r"^#!(POPCORN|FP4BENCH)\s+(\S+)\s*(.*?)\s*$")
_ARCH = re.compile(r"^sm_(\d+?)(\d)(a?)$")
#: What a variant's folder may hold, said when it holds something else.
FOLDER_RULE = "a variant's folder may hold only regular files and folders"
#: Folders and files a variant's folder may hold that are neither checked nor carried: byte-code caches (and every
#: name starting with ".").
PASSED_OVER = ("__pycache__",)


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

    def met(self, device: "DeviceFacts") -> bool:
        """Whether ``device`` satisfies this."""
        if self.kind == "any":
            return True
        if not device.cuda:
            return False
        if self.kind == "cuda":
            return True
        have = (device.cc_major, device.cc_minor)
        return have == (self.major, self.minor) if self.exact else have >= (self.major, self.minor)

    def unmet_reason(self, device: "DeviceFacts") -> str | None:
        """None when ``device`` satisfies this; otherwise a sentence such as
        ``needs sm_100a; this is NVIDIA H200, sm_90``."""
        return None if self.met(device) else f"needs {self.text}; {machine_text(device)}"


def machine_text(device: "DeviceFacts") -> str:
    """``this is NVIDIA H200, sm_90`` or ``this machine has no CUDA GPU``: the machine a refusal names."""
    if not device.cuda:
        return "this machine has no CUDA GPU"
    return f"this is {device.name}, sm_{device.cc_major}{device.cc_minor}"


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


#: Code that exists for one GPU architecture only, and the requirement it implies: Blackwell's fifth-generation
#: tensor-core instructions (tcgen05: PTX in a string, cutlass.cute.nvgpu.tcgen05) and CUTLASS's Blackwell helpers
#: need sm_100a, Hopper's wgmma sm_90a; an architecture named in build flags or strings (sm_100a,
#: compute_90a, sm_100) needs itself.
_BUILT_FOR = (
    (re.compile(r"\btcgen05\b"), "sm_100a"),
    (re.compile(r"\bblackwell_helpers\b"), "sm_100a"),
    (re.compile(r"\bwgmma\b"), "sm_90a"),
    (re.compile(r"\b(?:sm|compute)_(\d{2,3}a?)\b"), None),
)


def built_for(text: str) -> tuple[Requirement, str] | None:
    """The one GPU architecture a source file is plainly built for, from its code lines (comment lines passed
    over; ``_BUILT_FOR``), and the first line that says so (``line 5: from cutlass.cute.nvgpu import tcgen05``);
    None when it names none, or more than one (a file that dispatches between GPUs is not plainly built for
    one). ``sm_100`` and ``sm_100a`` are one architecture: the exact ``a`` form wins."""
    found: dict[tuple[int, int], tuple[Requirement, str]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        code = line.strip()
        if not code or code.startswith(("#", "//")):
            continue
        for pattern, implied in _BUILT_FOR:
            for match in pattern.finditer(code):
                req = parse_requirement(implied or f"sm_{match.group(1)}")
                key = (req.major, req.minor)
                if key not in found or (req.exact and not found[key][0].exact):
                    shown_line = code if len(code) <= 80 else code[:77] + "..."
                    found[key] = (req, found.get(key, (None, f"line {lineno}: {shown_line}"))[1])
    return next(iter(found.values())) if len(found) == 1 else None


@dataclass(frozen=True)
class Variant:
    """A submission file and its declared metadata; ``sha256`` is the entry file's content hash; ``built_for``:
    for a file that declares no requirement, the architecture its code is plainly built for and the line that
    says so, else None; ``problem`` the problem it declares (its ``#!POPCORN leaderboard`` line, else its problem
    folder), "" when it declares none."""

    name: str
    path: Path
    popcorn: dict = field(default_factory=dict)
    requires: Requirement = Requirement()
    sha256: str = ""
    built_for: tuple[Requirement, str] | None = None
    problem: str = ""

    def looks_unmet(self, device: DeviceFacts) -> str | None:
        """For a file that declares no requirement but is plainly built for a GPU ``device`` is not: a sentence
        such as ``looks built for sm_100a (line 5: from cutlass.cute.nvgpu import tcgen05); this is NVIDIA H200,
        sm_90``; else None. It is run all the same (nothing was declared); a ``requires`` line skips it."""
        if self.built_for is None or self.built_for[0].met(device):
            return None
        req, evidence = self.built_for
        return f"looks built for {req.text} ({evidence}); {machine_text(device)}"


def problem_of(variant: Variant) -> str:
    """The problem ``variant`` runs as when no ``--problem`` says otherwise: the one it declares, else
    nvfp4_group_gemm (what every variant was before problems were plugs)."""
    return variant.problem or DEFAULT_PROBLEM


def _problem_folder(path: Path, root: Path) -> str:
    """``problem`` when ``path`` is ``<root>/<problem>/<name>/submission.py`` for a known problem, else ""."""
    folder = path.parent.parent
    if path.name == ENTRY_FILE and folder.name in plugs.names() and folder.parent == Path(root).resolve():
        return folder.name
    return ""


def shown(path: Path) -> str:
    """``path`` as an error names it: relative to the checkout when inside it (``submissions/x/data.bin``)."""
    path = Path(path).absolute()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def what_it_is(mode: int, link: str = "") -> str:
    """The kind of a file that is neither a regular file nor a folder, as a refusal names it (``link``: what a
    symbolic link points to, as written in it)."""
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {link})"
    for test, words in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return f"not a regular file (mode {stat.filemode(mode)})"


def refusal(path: Path, mode: int, link: str = "", rule: str = FOLDER_RULE) -> str:
    """``submissions/x/data.bin is a symbolic link (to /etc/passwd); a variant's folder may hold only ...``"""
    return f"{shown(path)} is {what_it_is(mode, link)}; {rule}"


def link_text(name: str, dir_fd: int) -> str:
    """What symbolic link ``name`` in the folder open as ``dir_fd`` points to, as written in it ("?" if it is gone)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "?"


def walk_folder(folder: Path, on_file: Callable[[str, int, str], None] | None = None) -> list[str]:
    """The regular files of a variant's folder and its subfolders, as sorted '/'-separated paths relative to it,
    ``__pycache__`` (PASSED_OVER) and names starting with ``.`` passed over; a subfolder that cannot be listed is
    left out. ``on_file(relative path, dir_fd, name)`` is called for each while its folder is open as ``dir_fd``
    (harness.parent.bundle reads it from there, never through a link).

    Nothing is followed: folders are opened one by one without following links. Raises RegistryError naming the
    first symbolic link (to a file or a folder, inside or outside) or other non-regular file (FIFO, socket,
    device) met, and when ``folder`` itself cannot be listed."""
    files: list[str] = []

    def visit(dir_fd: int, prefix: str) -> None:
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it)
        for name in names:
            if name.startswith(".") or name in PASSED_OVER:
                continue
            rel = prefix + name
            try:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # removed since it was listed
            if stat.S_ISDIR(mode):
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                except PermissionError:
                    continue
                except OSError:  # replaced by a link or a file since its stat
                    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                    raise RegistryError(refusal(folder / rel, mode, link_text(name, dir_fd))) from None
                try:
                    visit(sub, rel + "/")
                except PermissionError:
                    pass  # a subfolder that cannot be listed: nobody with our rights can read it
                finally:
                    os.close(sub)
            elif stat.S_ISREG(mode):
                files.append(rel)
                if on_file is not None:
                    on_file(rel, dir_fd, name)
            else:
                raise RegistryError(refusal(folder / rel, mode, link_text(name, dir_fd)))

    folder = Path(folder)
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise RegistryError(f"cannot list the variant folder {shown(folder)}: {exc.strerror or exc}") from None
    try:
        visit(top, "")
    except PermissionError as exc:
        raise RegistryError(f"cannot list the variant folder {shown(folder)}: {exc.strerror or exc}") from None
    finally:
        os.close(top)
    return sorted(files)


def read_variant(path: Path, name: str | None = None, root: Path = SUBMISSIONS_DIR) -> Variant:
    """Read a submission's header lines (only ``#`` lines before the first code line, indented or not, any line
    ending; a UTF-8 byte-order mark before them is skipped, as Python's import skips it). A ``submission.py`` is a folder variant: it and its
    folder must hold only regular files and folders (``walk_folder``). Raises RegistryError."""
    given = Path(path)
    if given.name == ENTRY_FILE and given.is_symlink():
        raise RegistryError(refusal(given, stat.S_IFLNK, os.readlink(given)))
    path = given.resolve()
    if not path.is_file():
        raise RegistryError(f"no submission file at {path}")
    if path.name == ENTRY_FILE:
        walk_folder(path.parent)
    raw = path.read_bytes()
    popcorn: dict[str, str] = {}
    popcorn_lines: dict[str, int] = {}
    requires, declared = Requirement(), False
    text = raw.decode("utf-8-sig", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.lstrip()  # Python allows a comment indented at the top level; so do the headers
        if line and not line.startswith("#"):
            break
        match = _HEADER.match(line)
        if not match:
            continue
        tag, key, value = match.groups()
        if tag == "POPCORN":
            if key in popcorn:  # as the official server: a directive given twice is refused, not overridden
                raise RegistryError(f"{path}:{lineno}: #!POPCORN {key} given again (first on line "
                                    f"{popcorn_lines[key]}); give it once")
            if key == "leaderboard" and not value:
                raise RegistryError(f"{path}:{lineno}: #!POPCORN leaderboard without a value: expected a problem's "
                                    f"name ({', '.join(plugs.names())})")
            popcorn[key], popcorn_lines[key] = value, lineno
        elif key == "requires":
            try:
                requires, declared = parse_requirement(value), True
            except RegistryError as exc:
                raise RegistryError(f"{path}:{lineno}: {exc}") from None
        else:
            raise RegistryError(f"{path}:{lineno}: unknown #!FP4BENCH key {key!r} (known: requires)")
    if name is None:
        name = path.parent.name if path.name == ENTRY_FILE else path.stem
    problem = popcorn.get("leaderboard", "") or _problem_folder(path, root)
    return Variant(name, path, popcorn, requires, hashlib.sha256(raw).hexdigest(),
                   None if declared else built_for(text), problem)


def _entry_files(root: Path) -> list[Path]:
    """``<root>/<name>/submission.py`` and ``<root>/<problem>/<name>/submission.py`` (known problems only)."""
    found = sorted(Path(root).glob(f"*/{ENTRY_FILE}"))
    for problem in plugs.names():
        found += sorted((Path(root) / problem).glob(f"*/{ENTRY_FILE}"))
    return found


def spec_of(path: Path, root: Path = SUBMISSIONS_DIR) -> str:
    """How ``--submission`` names the variant whose entry file is ``path`` (under ``root``): ``<name>`` or
    ``<problem>/<name>``."""
    return Path(path).parent.relative_to(Path(root)).as_posix()


def shown_name(variant: Variant, root: Path = SUBMISSIONS_DIR) -> str:
    """The variant as a listing names it: ``<problem>/<name>`` for one in a problem folder (two problems may each
    have a ``torch_reference``), else its name."""
    folder = _problem_folder(variant.path, root)
    return f"{folder}/{variant.name}" if folder else variant.name


def find_variants(root: Path = SUBMISSIONS_DIR) -> list[Variant]:
    """Every ``<root>/<name>/submission.py`` sorted by name, then every ``<root>/<problem>/<name>/submission.py``
    by problem and name."""
    return [read_variant(p, root=root) for p in _entry_files(root)]


def resolve(spec: str, root: Path = SUBMISSIONS_DIR) -> Variant:
    """``--submission`` value -> Variant: a folder name under submissions/, a folder, or a .py path.

    Raises RegistryError: "no such file" for a .py path that does not exist, "no such folder" for a path to a
    missing folder, "expected a .py file or a variant folder" for another file, a list of the known variants when
    nothing matches.
    """
    for cand in (Path(root) / spec / ENTRY_FILE, Path(spec) / ENTRY_FILE):
        if cand.is_file():
            return read_variant(cand, root=root)
    path = Path(spec)
    if path.is_file():
        if path.suffix != ".py":
            raise RegistryError(f"expected a .py file or a variant folder, got {spec}")
        return read_variant(path, root=root)
    if path.suffix == ".py" and not path.exists():
        raise RegistryError(f"submission file {spec}: no such file")
    if path.is_dir():
        raise RegistryError(f"submission folder {spec} has no {ENTRY_FILE}")
    if "/" in spec or os.sep in spec:
        raise RegistryError(f"submission {spec}: no such file or folder")
    # names only: a variant that cannot be read must not hide this error behind its own
    known = ", ".join(spec_of(p, root) for p in _entry_files(root)) or "none"
    raise RegistryError(f"submission {spec!r} not found: expected a folder under {root} with {ENTRY_FILE} "
                        f"(known: {known}) or a path to a .py file")
