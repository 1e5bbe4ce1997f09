"""Load a variant's entry file by path, as the worker does: ``task`` its problem's package (nvfp4_group_gemm's:
these are its variants), its folder first on sys.path, then import.

Helper modules beside a submission.py are imported by plain name, so each variant names its helpers distinctly
(two variants' ``host.py`` would otherwise share one ``sys.modules`` entry).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from harness.worker.task_alias import alias_task

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = ROOT / "submissions"


def variant_dir(name: str) -> Path:
    """``submissions/<name>``; raises FileNotFoundError when it has no submission.py."""
    folder = SUBMISSIONS / name
    if not (folder / "submission.py").is_file():
        raise FileNotFoundError(f"no submission.py in {folder}")
    return folder


def put_first_on_path(folder: Path) -> None:
    """Make ``folder`` (and the repo root, for ``problems``) importable, ``folder`` first; ``task`` is
    nvfp4_group_gemm's package."""
    for path in (str(ROOT), str(folder)):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    alias_task("nvfp4_group_gemm")


def load_module(name: str, module: str = "submission") -> ModuleType:
    """Import ``submissions/<name>/<module>.py`` by path under the unique name ``fp4bench_<name>_<module>``
    (reused when already imported)."""
    folder = variant_dir(name)
    put_first_on_path(folder)
    qualified = f"fp4bench_{name}_{module}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, folder / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[qualified]
        raise
    return loaded


def load_submission(name: str) -> ModuleType:
    """The variant's submission.py module."""
    return load_module(name, "submission")
