"""``fp4bench export`` and ``fp4bench check``: from a variant here to a file for the official board, and that
file's check against the official server's rules (harness.submit; docs/submitting.md says the steps).

Exit codes: 0 when the file passes every check that can be made here, 112 (a check failed, as the runner's code)
when it has findings (export still writes the file), 113 when the variant or file cannot be found or exported,
1 when the output cannot be written.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
from rich.markup import escape

from harness.cli.exits import EXIT_OUTPUT, Stdout, fail
from harness.cli.params import FilePath, nonempty
from harness.cli.run_setup import pick_problem
from harness.problem import DEFAULT_PROBLEM, CaseError
from harness.parent.registry import RegistryError, resolve
from harness.protocol import ExitCode
from harness.submit.check import Checked, check
from harness.submit.export import ExportError, export_variant, shown


@click.command("export")
@click.argument("submission", callback=nonempty)
@click.option("-o", "--out", type=FilePath(), default=Path("submission.py"),
              show_default=True, help="Where to write the exported file.")
@click.option("--problem", default=None,
              help=f"The board it is for, when the file has no #!POPCORN leaderboard line (default {DEFAULT_PROBLEM}).")
def export_cmd(submission: str, out: Path, problem: str | None) -> None:
    """Write SUBMISSION (a variant's name, its folder or a .py file) as one self-contained file the official runner
    accepts: sibling modules and the fp4bench helpers it imports inlined, kernel sources embedded, the board's
    directives first; then check it as `fp4bench check` does. Exits 0 with no finding, 112 with findings (the file
    is written), 113 when it cannot be exported."""
    try:
        variant = resolve(submission)
        board = pick_problem(problem, [variant])
    except (RegistryError, CaseError) as exc:
        fail(str(exc), ExitCode.BAD_SPEC)
    undeclared = not variant.problem and problem is None
    variant = dataclasses.replace(variant, problem=board)
    folder = variant.path.parent.resolve()
    if out.resolve().parent == folder or folder in out.resolve().parents:
        fail(f"-o {out}: inside the variant's folder {shown(folder)}, which export reads; write it elsewhere",
             ExitCode.BAD_SPEC)
    try:
        exported = export_variant(variant)
    except ExportError as exc:
        fail(f"cannot export {variant.name}: {exc}", ExitCode.BAD_SPEC)
    data = exported.text.encode("utf-8")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # as --json and --db: a missing folder is made
        out.write_bytes(data)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}", EXIT_OUTPUT)
    parts = [f"inlined {', '.join(exported.modules[:-1])}"] if len(exported.modules) > 1 else []
    parts += [f"embedded {', '.join(exported.sources)}"] if exported.sources else []
    console = Stdout()
    console.print(f"wrote {escape(str(out))}: {len(data):,} bytes from {escape(shown(variant.path))}"
                  + (f" ({escape('; '.join(parts))})" if parts else ""), soft_wrap=True)
    if undeclared:
        console.print(f"[yellow]note:[/] it names no problem (no #!POPCORN leaderboard line, no problem folder): "
                      f"exported for {board}, the default; --problem names another board", soft_wrap=True)
    _report(console, _checked(data, str(out), "submission.py"))


@click.command("check")
@click.argument("file", type=FilePath())
@click.option("--no-kernelguard", is_flag=True, help="Check the server's rules only, without KernelGuard.")
def check_cmd(file: Path, no_kernelguard: bool) -> None:
    """Check FILE against what the official server accepts for this board: size (1,000,000 bytes), UTF-8, the
    extension, the #!POPCORN directives, the substring "stream" in any case, imports beyond the runner's files and
    the official image, the GPU a #!FP4BENCH requires line needs; and KernelGuard's verdict when it is installed.
    Each finding names its file and line. Exits 0 with no finding, 112 with findings, 113 for a missing file."""
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        fail(f"{file}: no such file", ExitCode.BAD_SPEC)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", ExitCode.BAD_SPEC)
    _report(Stdout(), _checked(data, str(file), file.name, not no_kernelguard))


def _checked(data: bytes, name: str, file_name: str, use_guard: bool = True) -> Checked:
    try:
        return check(data, name, file_name, use_guard)
    except RuntimeError as exc:
        fail(str(exc), EXIT_OUTPUT)


def _report(console, checked: Checked) -> None:
    """Print KernelGuard's line and every finding, then exit 0 or 112."""
    console.print(escape(checked.guard_line), soft_wrap=True)
    for finding in checked.findings:
        console.print(escape(str(finding)), soft_wrap=True)
    n = len(checked.findings)
    if n:
        console.print(f"{n} finding{'s' if n > 1 else ''}: the official server, KernelGuard or the board would "
                      f"refuse or fail this file", soft_wrap=True)
    else:
        console.print("no finding: size, encoding, extension, directives, 'stream', imports, entry and GPU pass",
                      soft_wrap=True)
    sys.exit(ExitCode.CHECK_FAILED if n else 0)


def export_state(variant) -> str:
    """``fp4bench list``'s export column for ``variant``: ``ok``, ``N finding(s): rules`` or ``refused: why``
    (the server's rules and the board's GPU; KernelGuard is left to ``fp4bench check``, for speed)."""
    try:
        exported = export_variant(variant)
    except ExportError as exc:
        return f"refused: {exc}"
    findings = check(exported.text.encode("utf-8"), variant.name, "submission.py", use_guard=False).findings
    if not findings:
        return "ok"
    rules = sorted({f.rule for f in findings})
    gpu = [f for f in findings if f.rule == "gpu"]
    return f"{len(findings)} finding{'s' if len(findings) > 1 else ''} ({', '.join(rules)})" + (
        f": {gpu[0].message.split(';')[0]}" if gpu else "")


def register(group) -> None:
    """Attach ``export`` and ``check`` to the click ``group``."""
    group.add_command(export_cmd)
    group.add_command(check_cmd)
