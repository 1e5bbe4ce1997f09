"""The fp4bench command line (click): the group ``main`` with ``list`` and ``doctor``; ``run`` and ``compare`` come
from harness.cli.run_compare, the report commands from harness.cli.reports, ``export`` and ``check`` from
harness.cli.submit.

torch is imported only where it is needed: by ``run`` and ``compare`` once their options are read, and by
``list`` on a machine that may have an NVIDIA GPU (harness.parent.hostinfo). ``--help``, the report commands and
``list`` on a CPU machine start without it (about 0.3 s instead of 2).
"""
from __future__ import annotations

import sys

import click

from harness.cli import reports as cli_reports
from harness.cli import run_compare
from harness.cli import submit as cli_submit
from harness.cli.exits import Stdout, broken_pipe, fail, interrupted_exit, stop_on_sigterm
from harness.parent import sandbox as sandbox_mod
from harness.parent.registry import RegistryError, find_variants
from harness.parent.settings import load_settings
from harness.protocol import ExitCode


class _Group(click.Group):
    """The fp4bench group: Ctrl-C exits 130 with one line (click alone prints "Aborted!" and exits 1), SIGTERM
    the same way with 143; a closed standard output exits 141 without a word (click alone exits 1); a usage
    error (an option value click rejects, an unknown option or command) exits 2 with one line naming the command's
    --help (click alone prints the usage and a hint on two more lines)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            click.echo(f"Error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if type(code) is int else 0)  # an Exit's code, or the command's return value (no status)

    def invoke(self, ctx: click.Context):
        stop_on_sigterm()
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # a pipe closed early fails here, not at interpreter exit
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            interrupted_exit()
        except BrokenPipeError:
            broken_pipe()


@click.group(cls=_Group)
def main() -> None:
    """fp4bench: correctness and leaderboard-style timings for kernel variants of the GPU MODE NVFP4 problems
    (nvfp4_group_gemm, nvfp4_gemm, nvfp4_gemv, nvfp4_dual_gemm; fp4bench list)."""


@main.command("list")
def list_cmd() -> None:
    """Every variant under submissions/: its POPCORN headers, what it needs, whether it can run here, and whether
    its export passes the official server's rules (fp4bench export; KernelGuard: fp4bench check). Exits 113 (bad
    spec) with one line when one cannot be read (a malformed header, a link in its folder)."""
    from harness.parent.hostinfo import cpu_facts, nvidia_gpu_present

    try:
        variants = find_variants()
    except RegistryError as exc:
        fail(str(exc), ExitCode.BAD_SPEC)
    if nvidia_gpu_present():
        from harness.parent.environment import device_facts
        facts = device_facts()
    else:
        facts = cpu_facts()
    Stdout().print(cli_reports.variants_table(variants, facts, [cli_submit.export_state(v) for v in variants]))


@main.command("doctor")
def doctor_cmd() -> None:
    """What this machine offers to confine a worker (bwrap, Landlock, namespaces, non-dumpable parent), which
    protections a run would get, and where the timed window's marks would be held."""
    from harness.parent.environment import device_facts
    from harness.worker import native

    ok, why = native.available()
    window = f"timed {why}" if ok else f"timed window held in Python, frame-level tampering not excluded ({why})"
    click.echo("\n".join([window] + sandbox_mod.doctor_lines(load_settings(), device_facts().cuda)))


run_compare.register(main)
cli_reports.register(main)
cli_submit.register(main)

if __name__ == "__main__":
    main()
