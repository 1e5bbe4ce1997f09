"""The fp4bench command line (click): ``run`` and ``list``; report commands come from harness.cli_reports."""
from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from harness import cli_reports, popcorn, seeds
from harness.console import ProgressObserver, results_table, side_by_side
from harness.environment import device_facts
from harness.registry import RegistryError, find_variants, resolve
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


@main.command("run")
@click.option("--submission", "submissions", required=True,
              help="A folder under submissions/, a folder, or a .py file; several separated by commas.")
@click.option("--shapes", default="auto", show_default=True,
              help="tests | benchmarks | smoke | a .yml or text file | one inline case; auto: benchmarks on a "
                   "GPU, smoke on the CPU.")
@click.option("--mode", type=click.Choice(MODES), default="test", show_default=True)
@click.option("--data", type=click.Choice(DATA_MODES), default="official", show_default=True)
@click.option("--seed", type=int, default=None, help="Secret seed combined into every case seed "
                                                      "(default: $POPCORN_SEED, else none).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every figure and the environment to this file (one submission) or FILE-<name>.json.")
@click.option("--settings", "settings_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Run settings YAML (default configs/run.yml).")
@click.option("--timeout", type=float, default=None, help="Override every time limit (seconds).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results store (default $FP4BENCH_DB, else results/fp4bench.sqlite).")
@click.option("--no-store", is_flag=True, help="Do not record this run in the results store.")
def run_cmd(submissions, shapes, mode, data, seed, json_path, settings_path, timeout, db, no_store) -> None:
    """Run submissions over a shape set; exit code as the official runner (0, 110, 112, 113, 114)."""
    console = Console()
    try:
        variants = [resolve(s.strip()) for s in submissions.split(",") if s.strip()]
        if shapes == "auto":
            shapes = "benchmarks" if device_facts().cuda else "smoke"
        shape_set = load_shapes(shapes)
        settings = load_settings(settings_path)
        secret = seed if seed is not None else seeds.secret_from_env()
    except (RegistryError, SpecError, SettingsError, ValueError) as exc:
        _fail(str(exc), popcorn.ExitCode.BAD_SPEC)
    if timeout is not None:
        settings = settings.with_timeout(timeout)
    opts = RunOptions(mode, data, secret, settings)
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


cli_reports.register(main)

if __name__ == "__main__":
    main()
