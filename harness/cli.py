"""The fp4bench command line (click): ``run``, ``compare`` and ``list``; report commands come from
harness.cli_reports."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness import cli_reports, popcorn, sandbox as sandbox_mod, seeds
from harness import compare as compare_mod
from harness.console import ProgressObserver, results_table, side_by_side
from harness.environment import device_facts
from harness.registry import RegistryError, find_variants, resolve
from harness.report import compare_rich_table, compare_table
from harness.runner import MODES, Observer, RunOptions, run as run_variant
from harness.settings import SettingsError, load_settings
from harness.store import ResultStore, StoreRecorder, resolve_db_path
from task.inputs import DATA_MODES
from task.spec import SpecError, load_shapes


def _fail(message: str, code: int) -> None:
    Console(stderr=True).print(f"[red]error:[/] {message}")
    sys.exit(code)


@click.group()
def main() -> None:
    """fp4bench: correctness and leaderboard-style timings for nvfp4_group_gemm kernel variants."""


def _run_options(fn):
    """The options ``run`` and ``compare`` share: shapes, data, seed, settings, timeout and the store."""
    for option in reversed((
        click.option("--shapes", default="auto", show_default=True,
                     help="tests | benchmarks | smoke | a .yml or text file | one inline case; auto: benchmarks "
                          "on a GPU, smoke on the CPU."),
        click.option("--data", type=click.Choice(DATA_MODES), default="official", show_default=True),
        click.option("--seed", type=click.IntRange(min=0), default=None,
                     help="Secret seed (a non-negative integer) combined into every case seed "
                          "(default: $POPCORN_SEED, else none)."),
        click.option("--settings", "settings_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, help="Run settings YAML (default configs/run.yml)."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Override every time limit (seconds, > 0)."),
        click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Results store (default $FP4BENCH_DB, else results/fp4bench.sqlite)."),
        click.option("--no-store", is_flag=True, help="Do not record this run in the results store."),
        click.option("--sandbox", type=click.Choice(sandbox_mod.MODES), default="auto", show_default=True,
                     help="Confine each worker: auto uses what this machine has and records it; strict refuses "
                          "to run unless every protection holds; off runs it unconfined (fp4bench doctor)."),
    )):
        fn = option(fn)
    return fn


def _prepare(specs, shapes, settings_path, timeout, seed):
    """Variants, shape set, settings and secret seed from the options; exits 113 (bad spec) on a bad one."""
    try:
        variants = [resolve(s) for s in specs]
        if shapes == "auto":
            shapes = "benchmarks" if device_facts().cuda else "smoke"
        shape_set = load_shapes(shapes)
        settings = load_settings(settings_path)
        secret = seed if seed is not None else seeds.secret_from_env()
        for case in shape_set.cases:  # a combined seed torch cannot take fails here, not mid-run
            seeds.case_seed(case.seed, secret)
    except (RegistryError, SpecError, SettingsError, ValueError) as exc:
        _fail(str(exc), popcorn.ExitCode.BAD_SPEC)
    return variants, shape_set, settings if timeout is None else settings.with_timeout(timeout), secret


def _sandbox(mode, variants, settings, db, no_store) -> sandbox_mod.Sandbox:
    """--sandbox as a request that hides the store, checked for every variant; exits 113 when strict cannot hold."""
    try:
        return sandbox_mod.checked(mode, variants, settings, device_facts().cuda,
                                   None if no_store else resolve_db_path(db))
    except sandbox_mod.SandboxError as exc:
        _fail(str(exc), popcorn.ExitCode.BAD_SPEC)


@main.command("run")
@click.option("--submission", "submissions", required=True,
              help="A folder under submissions/, a folder, or a .py file; several separated by commas.")
@click.option("--mode", type=click.Choice(MODES), default="test", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every figure and the environment to this file (one submission) or FILE-<name>.json.")
@_run_options
def run_cmd(submissions, shapes, mode, data, seed, json_path, settings_path, timeout, db, no_store, sandbox) -> None:
    """Run submissions over a shape set; exit code as the official runner (0, 110, 112, 113, 114)."""
    console = Console()
    variants, shape_set, settings, secret = _prepare([x.strip() for x in submissions.split(",") if x.strip()],
                                                     shapes, settings_path, timeout, seed)
    opts = RunOptions(mode, data, secret, settings, _sandbox(sandbox, variants, settings, db, no_store))
    store = None if no_store else ResultStore(resolve_db_path(db))
    records = []
    for variant in variants:
        label = f"{variant.name} {mode}"
        if mode in ("benchmark", "leaderboard") and console.is_terminal:
            with ProgressObserver(console, len(shape_set.cases), label) as obs:
                record = run_variant(variant, shape_set, opts, StoreRecorder(store, obs) if store else obs)
        else:
            record = run_variant(variant, shape_set, opts, StoreRecorder(store, Observer()) if store else Observer())
        records.append(record)
        console.print(results_table(record))
        for r in record.cases:
            if r.profile:
                console.rule(f"profile: {r.case.name or r.case.text()}")
                console.print(r.profile, markup=False, highlight=False)
        if json_path:
            target = json_path if len(variants) == 1 else json_path.with_name(f"{json_path.stem}-{variant.name}.json")
            target.write_text(record.to_json())
    if len(records) > 1:
        console.print(side_by_side(records))
    for record in records:
        popcorn.write_stream(record)
    sys.exit(max(popcorn.exit_code(r) for r in records))


@main.command("compare")
@click.argument("a")
@click.argument("b")
@_run_options
@click.option("--format", "fmt", type=click.Choice(("text", "md", "csv", "json")), default="text",
              show_default=True, help="How to write the comparison table (text: a table in the terminal).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the comparison table to this file instead of standard output.")
def compare_cmd(a, b, shapes, data, seed, settings_path, timeout, db, no_store, sandbox, fmt, out) -> None:
    """Time submission A against B interleaved (A, B, A, B ... on identical inputs, every output checked) on
    each shape: ratio A/B of per-call times with a 95% CI and a verdict, plus the geomean. A and B as for
    run --submission. Exit code as run's: nonzero when either side failed a shape."""
    (va, vb), shape_set, settings, secret = _prepare([a, b], shapes, settings_path, timeout, seed)
    opts = RunOptions(compare_mod.MODE, data, secret, settings, _sandbox(sandbox, (va, vb), settings, db, no_store))
    err = Console(stderr=True)
    store = None if no_store else ResultStore(resolve_db_path(db))
    progress = ProgressObserver(err, len(shape_set.cases), f"{va.name} vs {vb.name}") if err.is_terminal else None
    observers = (progress or Observer(), Observer())
    if store:
        observers = tuple(StoreRecorder(store, o) for o in observers)
    try:
        with progress or contextlib.nullcontext():
            result = compare_mod.compare(va, vb, shape_set, opts, observers)
    finally:
        if store:
            store.close()
    if result.unmet:
        err.print(f"[yellow]cannot compare here:[/] {escape(result.unmet)}")
    if fmt == "text" and out is None:
        Console().print(compare_rich_table(va.name, vb.name, result.rows, result.overall,
                                           overall_label=result.overall_label))
    else:
        extra = {"a_run_id": result.a.run_id, "b_run_id": result.b.run_id, "shape_set": shape_set.name,
                 "data": data, "exit_code": int(result.exit_code), "unmet": result.unmet}
        cli_reports.emit(compare_table(va.name, vb.name, result.rows, result.overall, fmt, result.overall_label,
                                       extra), out)
    if store:
        err.print(f"[dim]recorded: A {result.a.run_id}, B {result.b.run_id} in {store.path} "
                  f"(fp4bench report {result.a.run_id} {result.b.run_id})[/]")
    sys.exit(result.exit_code)


@main.command("list")
def list_cmd() -> None:
    """Every variant under submissions/: its POPCORN headers, what it needs, whether it can run here."""
    facts = device_facts()
    table = Table(title=f"variants (this machine: {facts.name}"
                        f"{f', sm_{facts.cc_major}{facts.cc_minor}' if facts.cuda else ''})")
    for col in ("variant", "leaderboard", "gpu", "requires", "runs here"):
        table.add_column(col)
    for v in find_variants():
        reason = v.requires.unmet_reason(facts)
        table.add_row(v.name, v.popcorn.get("leaderboard", ""), v.popcorn.get("gpu", ""), v.requires.text,
                      "[green]yes[/]" if reason is None else f"[yellow]no[/]: {reason}")
    Console().print(table)


@main.command("doctor")
def doctor_cmd() -> None:
    """What this machine offers to confine a worker (bwrap, Landlock, namespaces, non-dumpable parent) and
    which protections a run would get."""
    click.echo("\n".join(sandbox_mod.doctor_lines(load_settings(), device_facts().cuda)))


cli_reports.register(main)

if __name__ == "__main__":
    main()
