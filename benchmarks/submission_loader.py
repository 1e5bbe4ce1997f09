"""Import a submission into a benchmark script's own process (fp4bench itself imports one only in its worker)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.parent.registry import RegistryError, Variant, problem_of, resolve
from harness.worker.task_alias import alias_task


def load_submission(spec: str) -> tuple[Variant, object]:
    """``--submission`` value (a name under submissions/, a folder or a .py path) -> (its Variant, the imported
    module), its folder first on sys.path and ``task`` its problem's package, as the worker has them. Exits with the
    registry's one-line message for a submission that does not exist; raises whatever the import raises."""
    try:
        variant = resolve(spec)
    except RegistryError as exc:
        raise SystemExit(str(exc)) from None
    sys.path.insert(0, str(variant.path.parent))
    alias_task(problem_of(variant))
    module_spec = importlib.util.spec_from_file_location("submission", variant.path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return variant, module
