"""KernelGuard (PyPI ``kernelguard``, the official pipeline's rule-based hack detector), called when installed.

fp4bench does not rewrite its rules: it calls ``kernelguard.analyze_code(code, compute_structural_hash=False)``,
which returns ``classification`` (``valid``, ``low_confidence``, ``suspicious``, ``default_reference`` or
``hacked``), ``should_filter`` (the pipeline drops the file when True), ``filter_reason`` and
``matched_patterns`` (dicts with ``pattern``, ``severity``, ``evidence``), and reports those. Install it with
``pip install 'fp4bench[kernelguard]'`` (it needs Python 3.11+).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

#: The module the adapter imports (a test may point it at a stand-in).
MODULE = "kernelguard"


@dataclass(frozen=True)
class Pattern:
    """One rule KernelGuard matched: its name, severity and evidence text, as KernelGuard words them."""

    pattern: str
    severity: str
    evidence: str


@dataclass(frozen=True)
class GuardVerdict:
    """KernelGuard's answer for one file: ``filtered`` True means the official pipeline drops it."""

    version: str
    classification: str
    filtered: bool
    reason: str | None
    patterns: tuple[Pattern, ...]


def available() -> str | None:
    """None when KernelGuard can be imported; otherwise why not, in one sentence."""
    try:
        importlib.import_module(MODULE)
    except ImportError as exc:
        return (f"KernelGuard is not installed ({exc.msg}): pip install 'fp4bench[kernelguard]' to check what the "
                f"official pipeline's hack detector says")
    return None


def classify(code: str) -> GuardVerdict | None:
    """KernelGuard's verdict on ``code`` (a whole submission's text), or None when it is not installed. Raises
    RuntimeError naming the call when KernelGuard fails or answers in a form this adapter does not know."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError:
        return None
    try:
        result = module.analyze_code(code, compute_structural_hash=False)
        patterns = tuple(Pattern(str(p.get("pattern", "?")), str(p.get("severity", "?")),
                                 str(p.get("evidence", ""))) for p in result["matched_patterns"])
        return GuardVerdict(str(getattr(module, "__version__", "") or _version()), str(result["classification"]),
                       bool(result["should_filter"]), result.get("filter_reason"), patterns)
    except Exception as exc:  # noqa: BLE001  (its failure is reported, not a traceback)
        raise RuntimeError(f"kernelguard.analyze_code failed: {type(exc).__name__}: {exc}") from None


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version(MODULE)
    except metadata.PackageNotFoundError:
        return "unknown"
