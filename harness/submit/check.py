"""The whole check of a file for the official board: the server's rules (official_rules) and, when installed,
KernelGuard's verdict (guard), as findings and one line saying what KernelGuard said or why it was not asked."""
from __future__ import annotations

from dataclasses import dataclass

from harness.submit import guard
from harness.submit.official_rules import Finding, check_bytes


@dataclass(frozen=True)
class Checked:
    """``findings``: every reason the server, KernelGuard or the board would refuse or fail the file (none: it
    passes what can be checked here); ``guard_line``: KernelGuard's classification, or why it was not asked."""

    findings: tuple[Finding, ...]
    guard_line: str


def check(data: bytes, shown: str, file_name: str, use_guard: bool = True) -> Checked:
    """Check a file's content ``data`` submitted as ``file_name`` (messages name it ``shown``). KernelGuard runs on
    a UTF-8 file when installed and ``use_guard``; each pattern it matches is a finding (rule ``kernelguard``), and
    so is a classification that the pipeline filters. Raises RuntimeError when KernelGuard itself fails."""
    findings = check_bytes(data, shown, file_name)
    if not use_guard:
        return Checked(tuple(findings), "KernelGuard not asked")
    missing = guard.available()
    if missing is not None:
        return Checked(tuple(findings), missing)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Checked(tuple(findings), "KernelGuard not asked: the file is not UTF-8")
    verdict = guard.classify(text)
    for p in verdict.patterns:
        findings.append(Finding("kernelguard", shown, None, f"KernelGuard matched {p.pattern} ({p.severity}): "
                                                            f"{p.evidence}"))
    if verdict.filtered:
        findings.append(Finding("kernelguard", shown, None, f"KernelGuard classifies it {verdict.classification} "
                                                            f"and the official pipeline filters it out "
                                                            f"({verdict.reason})"))
    matched = f"{len(verdict.patterns)} pattern(s) matched" if verdict.patterns else "no pattern matched"
    return Checked(tuple(findings), f"KernelGuard {verdict.version}: {verdict.classification}, "
                                    f"{'filtered' if verdict.filtered else 'not filtered'}, {matched}")
