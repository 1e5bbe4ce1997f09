"""``fp4bench run`` and ``fp4bench compare``: time submissions over a shape set, alone or A against B, and write
what they measured (the terminal, --json files, the results store, the POPCORN_FD stream).

Options and the checks made before anything runs: harness.cli.run_setup. Ctrl-C keeps what was measured (runs
marked incomplete in the store, --json files with the cases finished) and exits 130.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from harness import plugs
from harness.cli import outputs, run_setup
from harness.cli import reports as cli_reports
from harness.cli.exits import EXIT_NOTHING_RAN, EXIT_OUTPUT, Stdout, fail, interrupted_exit, runs_exit
from harness.cli.params import nonempty
from harness.parent.settings import MODES
from harness.protocol import ExitCode
from harness.report import popcorn
from harness.report.compare import compare_rich_table, compare_table
from harness.report.console import ProgressObserver, profile_section, results_table, side_by_side
from harness.results.store import ResultStore, StoreError, StoreRecorder


def _progress_console() -> Console:
    """Where progress goes: standard error (a bar on a terminal, a line per shape and phase elsewhere), so that
    what standard output carries (a table, --format json) stays clean."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


class _Kept:
    """An observer that keeps the record begun and every case finished, forwarding each hook to ``inner``, so
    that an interrupted run can still be written out (``partial``)."""

    def __init__(self, inner) -> None:
        self.inner, self.record, self.cases = inner, None, []

    def on_start(self, record) -> None:
        self.record = record
        self.inner.on_start(record)

    def on_case(self, index: int, result) -> None:
        self.cases.append(result)
        self.inner.on_case(index, result)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def partial(self):
        """The run as far as it got: the cases finished so far, marked incomplete (None if never begun)."""
        if self.record is None:
            return None
        return dataclasses.replace(self.record, cases=tuple(self.cases), complete=False, geomean_ns=None)


def _interrupted(kept: list[_Kept], recorders: list[StoreRecorder], store: ResultStore | None,
                 json_targets: list[Path | None]) -> None:
    """Ctrl-C during a run: keep what was measured (runs marked incomplete in the store, --json files written
    with the cases finished), say where in one line each, exit 130."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for recorder in recorders:
        run_id = recorder.abandon()
        if run_id is not None:
            err.print(f"interrupted: run {run_id} kept as incomplete in {escape(str(store.path))}")
    for observer, target in zip(kept, json_targets):
        record = observer.partial()
        if record is not None and target is not None:
            target.write_text(record.to_json())
            err.print(f"interrupted: wrote the {len(record.cases)} finished case(s) of "
                      f"{escape(record.submission.name)} to {escape(str(target))}")
    if not recorders and not any(json_targets):
        err.print("interrupted: nothing recorded (--no-store and no --json)")
    interrupted_exit()



def _show(console: Console, record, target: Path | None, store: ResultStore | None) -> None:
    """Write ``record`` to its --json ``target`` (if any) and print its results table, run notes and profiles.
    Exits 1 with one line (saying where the run is kept) when the file cannot be written."""
    if target is not None:
        try:
            target.write_text(record.to_json())
        except OSError as exc:
            fail(f"cannot write --json file {target}: {exc.strerror or exc}{outputs.kept_in(record, store)}",
                 EXIT_OUTPUT)
    console.print(results_table(record))
    if target is not None:
        console.print(Text(f"--json written to {target}", style="dim"), soft_wrap=True)
    for note in record.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if record.sandbox:
        console.print(Text(f"sandbox: {record.sandbox}", style="dim"), soft_wrap=True)
    for i, r in enumerate(record.cases):
        if r.profile:
            console.print(profile_section(r, i, plugs.get(record.problem)))


def _pool(variants, shape_set, opts, store, devices, cluster, progress, compare: bool = False):
    """The variants as tasks on a Dask cluster (harness.parent.pool: one worker per GPU in ``devices``, else
    ``cluster``), ``progress`` told of every case; returns their records, or with ``compare`` the CompareResult,
    and the first store write that failed (the runs went on unstored) or None. Exits 113 when the cluster cannot
    be used, 130 after Ctrl-C (the runs begun kept incomplete in the store)."""
    from harness.parent import pool
    from harness.parent.bundle import BundleError

    runs = pool.PoolRun(list(variants), shape_set, opts, store, progress)
    try:
        with pool.open_client(devices, cluster) as client:
            return (runs.compare(client) if compare else runs.run(client)), runs.store_failure()
    except (pool.PoolError, BundleError) as exc:
        fail(str(exc), ExitCode.BAD_SPEC)
    except KeyboardInterrupt:
        for run_id in runs.abandon():
            Console(stderr=True, highlight=False, soft_wrap=True).print(
                f"interrupted: run {run_id} kept as incomplete in {escape(str(store.path))}")
        interrupted_exit()
    except StoreError as exc:
        fail(str(exc), EXIT_OUTPUT)


@click.command("run")
@click.option("--submission", "submissions", required=True,
              help="A folder under submissions/, a folder, or a .py file; several separated by commas.")
@click.option("--mode", type=click.Choice(MODES), default="test", show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write every figure and the environment to this file (one submission) or FILE-<name>.json.")
@run_setup.run_options
def run_cmd(submissions, problem, shapes, mode, data, seed, json_path, settings_path, timeout, db, no_store, sandbox,
            gpus, cluster, worker_log) -> None:
    """Run submissions over a shape set; exit code as the official runner (0, 110, 112, 113, 114; 3 when every
    case was skipped: nothing could run here; 130 after Ctrl-C, with the cases measured so far kept in the store
    and the --json file). With --gpus or --cluster the submissions run side by side, one per GPU
    (docs/usage.md)."""
    console = Stdout()
    specs = [x.strip() for x in submissions.split(",") if x.strip()]
    if not specs:
        fail(f"--submission: expected a variant name, a folder or a .py file (several separated by commas), "
              f"got {submissions!r}", ExitCode.BAD_SPEC)
    variants, shape_set, settings, secret = run_setup.prepare(specs, shapes, settings_path, timeout, seed, mode,
                                                              data, problem=problem)
    devices = run_setup.devices(gpus, cluster)
    outputs.popcorn_fd()
    outputs.check_json(json_path, variants)
    outputs.check_writable("--worker-log", worker_log)
    store = outputs.open_store(db, no_store)
    from harness.parent.runner import RunOptions
    from harness.parent.runner import run as run_variant

    confined = run_setup.sandbox_request(sandbox, variants, settings, db, no_store)
    opts = RunOptions(mode, data, secret, settings, confined, worker_log)
    records, unstored = [], []
    err = _progress_console()
    if gpus is not None or cluster is not None:
        progress = (ProgressObserver(err, len(shape_set.cases), f"{len(variants)} submission(s) on "
                                     f"{'GPUs ' + gpus if gpus else cluster}", sides=len(variants)))
        with progress:
            records, failure = _pool(variants, shape_set, opts, store, devices, cluster, progress)
        for variant, record in zip(variants, records):
            target = outputs.json_target(json_path, variants, variant)
            _show(console, record, target, store)
            if failure is not None:
                unstored.append((record, failure, target))
    for variant in variants[len(records):]:
        label = f"{variant.name} {mode}"
        target, recorder, kept = outputs.json_target(json_path, variants, variant), None, None
        try:
            with ProgressObserver(err, len(shape_set.cases), label) as obs:  # a bar on a terminal, else lines
                recorder = StoreRecorder(store, obs) if store else None
                kept = _Kept(recorder or obs)
                record = run_variant(variant, shape_set, opts, kept)
        except KeyboardInterrupt:
            _interrupted([kept] if kept else [], [recorder] if recorder else [], store, [target] if kept else [])
        except StoreError as exc:
            fail(str(exc), EXIT_OUTPUT)
        records.append(record)
        _show(console, record, target, store)
        if recorder is not None and recorder.failure is not None:
            unstored.append((record, recorder.failure, target))
    if len(records) > 1:
        console.print(side_by_side(records))
    for record in records:
        try:
            popcorn.write_stream(record)
        except OSError as exc:
            fail(f"cannot write the POPCORN_FD stream: {exc.strerror or exc}{outputs.kept_in(record, store)}",
                 EXIT_OUTPUT)
    if unstored:
        record, failure, target = unstored[0]
        fail(f"{failure}; {len(unstored)} run(s) not stored{_kept_where(target)}", EXIT_OUTPUT)
    sys.exit(runs_exit(records))


def _kept_where(target: Path | None) -> str:
    """Where an unstored run's results are kept: its --json (or --out) file, else the table printed above."""
    return f": the results are in {target} and the table above" if target else ": the results are in the table above"


@click.command("compare")
@click.argument("a", callback=nonempty)
@click.argument("b", callback=nonempty)
@run_setup.run_options
@click.option("--format", "fmt", type=click.Choice(("text", "md", "csv", "json")), default="text",
              show_default=True, help="How to write the comparison table (text: a table in the terminal).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the comparison table to this file instead of standard output.")
def compare_cmd(a, b, problem, shapes, data, seed, settings_path, timeout, db, no_store, sandbox, gpus, cluster,
                worker_log, fmt, out) -> None:
    """Time submission A against B interleaved (A, B, A, B ... on identical inputs, every output checked) on
    each shape: ratio A/B of per-call times with a 95% CI and a verdict, plus the geomean. A and B as for
    run --submission. Exit code as run's: nonzero when either side failed a shape, 3 when nothing was compared
    (a side cannot run here; the other is still timed alone and kept)."""
    (va, vb), shape_set, settings, secret = run_setup.prepare([a, b], shapes, settings_path, timeout, seed, "compare",
                                                              data, workers=2, problem=problem)
    devices = run_setup.devices(gpus, cluster)
    outputs.check_writable("--worker-log", worker_log)
    store = outputs.open_store(db, no_store)
    from harness.parent import compare as compare_mod
    from harness.parent.runner import RunOptions

    confined = run_setup.sandbox_request(sandbox, (va, vb), settings, db, no_store)
    opts = RunOptions(compare_mod.MODE, data, secret, settings, confined, worker_log)
    err = _progress_console()
    progress = ProgressObserver(err, len(shape_set.cases), f"{va.name} vs {vb.name}", sides=2)
    observers = (progress.side(f"A ({va.name})"), progress.side(f"B ({vb.name})"))
    recorders = [StoreRecorder(store, o) for o in observers] if store else []
    if recorders:
        observers = tuple(recorders)
    try:
        with progress:
            if gpus is not None or cluster is not None:
                result, pooled_failure = _pool((va, vb), shape_set, opts, store, devices, cluster, progress,
                                               compare=True)
            else:
                result, pooled_failure = compare_mod.compare(va, vb, shape_set, opts, observers), None
    except KeyboardInterrupt:
        _interrupted([], recorders, store, [])
    except StoreError as exc:
        fail(str(exc), EXIT_OUTPUT)
    finally:
        if store:
            store.close()
    unstored = next((r.failure for r in recorders if r.failure is not None), pooled_failure)
    if result.unmet:
        err.print(Text.assemble(("cannot compare here: ", "yellow"), result.unmet,
                                (f"; {result.timed_alone} timed alone" if result.timed_alone else "")))
    code = runs_exit([result.a, result.b])
    if result.unmet and code == 0:
        code = EXIT_NOTHING_RAN  # nothing was compared: a side cannot run here (the other's times are kept)
    if fmt == "text" and out is None:
        Stdout().print(compare_rich_table(va.name, vb.name, result.rows, result.overall,
                                           overall_label=result.overall_label, plug=plugs.get(shape_set.problem)))
    else:
        extra = {"a_run_id": result.a.run_id, "b_run_id": result.b.run_id, "shape_set": shape_set.name,
                 "shape_set_id": shape_set.id,
                 "data": data, "exit_code": code, "unmet": result.unmet,
                 "timed_alone": result.timed_alone}
        cli_reports.emit(compare_table(va.name, vb.name, result.rows, result.overall, fmt, result.overall_label,
                                       extra, plugs.get(shape_set.problem)), out)
    for letter, record in (("A", result.a), ("B", result.b)):
        for note in record.notes:
            err.print(Text(f"note: {letter} ({record.submission.name}): {note}", style="dim"))
    if unstored is not None:
        fail(f"{unstored}; the comparison was not stored{_kept_where(out)}", EXIT_OUTPUT)
    if store:
        err.print(Text(f"recorded: A {result.a.run_id}, B {result.b.run_id} in {store.path} "
                       f"(fp4bench report {result.a.run_id} {result.b.run_id})", style="dim"))
    sys.exit(code)


def register(group) -> None:
    """Attach ``run`` and ``compare`` to the click ``group``."""
    group.add_command(run_cmd)
    group.add_command(compare_cmd)
