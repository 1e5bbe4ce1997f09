"""The fp4bench command line (click): ``run``, ``compare`` and ``list``; report commands come from
harness.cli.reports.

torch is imported only where it is needed: by ``run`` and ``compare`` once their options are read, and by
``list`` on a machine that may have an NVIDIA GPU (harness.parent.hostinfo). ``--help``, the report commands and
``list`` on a CPU machine start without it (about 0.3 s instead of 2).
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

import problems
from harness.cli import outputs
from harness.cli import reports as cli_reports
from harness.cli import submit as cli_submit
from harness.cli.exits import (EXIT_OUTPUT, Stdout, broken_pipe, fail, interrupted_exit, runs_exit,
                                stop_on_sigterm)
from harness.parent import sandbox as sandbox_mod
from harness.parent import seeds
from harness.parent.registry import RegistryError, find_variants, problem_of, resolve
from harness.parent.settings import MAX_SECONDS, MODES, SettingsError, load_settings
from harness.protocol import ExitCode
from harness.report import popcorn
from harness.report.compare import compare_rich_table, compare_table
from harness.report.console import (
    ProgressObserver,
    profile_section,
    results_table,
    side_by_side,
)
from harness.results.store import (
    ResultStore,
    StoreError,
    StoreRecorder,
    resolve_db_path,
)
from harness.problem import CaseError
from harness.shapes import DEFAULT_PROBLEM, load_shapes


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


class _Seed(click.ParamType):
    """A secret seed: a non-negative integer (torch's limit is checked with the case seeds, in ``_prepare``)."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"expected a non-negative integer, got {value!r} (not an integer)", param, ctx)
        if number < 0:
            self.fail(f"expected a non-negative integer, got {number}", param, ctx)
        return number


class _Seconds(click.ParamType):
    """A time limit in seconds: a finite number above 0 and at most settings.MAX_SECONDS."""

    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"expected a number of seconds, got {value!r}", param, ctx)
        if not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
            self.fail(f"expected a number of seconds above 0 and at most {MAX_SECONDS:g}, got {value}", param, ctx)
        return seconds


@click.group(cls=_Group)
def main() -> None:
    """fp4bench: correctness and leaderboard-style timings for nvfp4_group_gemm kernel variants."""


def _run_options(fn):
    """The options ``run`` and ``compare`` share: shapes, data, seed, settings, timeout and the store."""
    for option in reversed((
        click.option("--problem", default=None,
                     help="The problem the submissions solve (fp4bench list names them); default: their "
                          f"#!POPCORN leaderboard line, else {DEFAULT_PROBLEM}."),
        click.option("--shapes", default="auto", show_default=True,
                     help="tests | benchmarks | smoke (the problem's own sets) | a .yml or text file | an official "
                          "task.yml (task.yml#tests, task.yml#benchmarks) | one case of a set by number from 1 or "
                          "name (benchmarks#2, benchmarks#g8_n4096_k7168) | one inline case ('m: [96]; n: [128]; "
                          "k: [256]' or '{\"m\": [96], \"n\": [128], \"k\": [256]}'; g defaults to the lists' "
                          "length, seed to the official sets' seed); auto: benchmarks on a GPU, smoke on the CPU."),
        click.option("--data", type=click.Choice(problems.data_modes()), default="official", show_default=True),
        click.option("--seed", type=_Seed(), default=None,
                     help="Secret seed (a non-negative integer) combined into every case seed "
                          "(default: $POPCORN_SEED, else none)."),
        click.option("--settings", "settings_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Run settings YAML (default configs/run.yml)."),
        click.option("--timeout", type=_Seconds(), default=None,
                     help=f"Override every time limit (seconds, > 0, at most {MAX_SECONDS:g})."),
        click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Results store (default $FP4BENCH_DB, else results/fp4bench.sqlite)."),
        click.option("--no-store", is_flag=True, help="Do not record this run in the results store."),
        click.option("--sandbox", type=click.Choice(sandbox_mod.MODES), default="auto", show_default=True,
                     help="Confine each worker: auto uses what this machine has and records it; strict refuses "
                          "to run unless every protection holds; off runs it unconfined (fp4bench doctor)."),
        click.option("--gpus", default=None,
                     help="Run on these GPUs (0,1 or all), one Dask worker each: submissions side by side; both "
                          "sides of a compare on one of them."),
        click.option("--cluster", default=None,
                     help="Run on a Dask cluster as --gpus does: tcp://HOST:8786, or local:N for N local workers."),
        click.option("--worker-log", type=click.Path(path_type=Path), default=None,
                     help="Append each worker's stdout and stderr (the submission's prints) to this file when the "
                          "worker ends."),
    )):
        fn = option(fn)
    return fn


def _prepare(specs, shapes, settings_path, timeout, seed, mode, data, workers=1, problem=None):
    """Variants, their problem (``problem``: the --problem option, else ``pick_problem``), its shape set,
    settings and secret seed from the options; exits 113 (bad spec) on a bad one, on a case the data mode cannot
    draw (the plug's ``check_drawable``), and on a case that cannot fit in memory (harness.parent.memory), all
    before anything is drawn or run. ``workers``: worker processes the run will start side by side."""
    from harness.parent.environment import device_facts
    from harness.parent.memory import check_fits

    try:
        variants = [resolve(s) for s in specs]
        _distinct_names(variants, same_file_ok=mode == "compare")
        name = pick_problem(problem, variants)
        plug = problems.get(name)
        cuda = device_facts().cuda
        if shapes == "auto":
            shapes = "benchmarks" if cuda else "smoke"
        shape_set = load_shapes(shapes, name, aliases=("auto",))
        settings = load_settings(settings_path)
        if name != DEFAULT_PROBLEM:  # configs/run.yml's loop is nvfp4_group_gemm's; the others run their own
            settings = settings.with_timing(plug.timing, mode)
        secret = seed if seed is not None else seeds.secret_from_env()
        for case in shape_set.cases:  # a combined seed torch cannot take fails here, not mid-run
            seeds.case_seed(case.seed, secret)
            try:
                plug.check_drawable(case, data)
            except CaseError as exc:
                raise CaseError(f"--data {data}: {exc} (case {plug.case_text(case)})") from None
        inputs = 1 if mode in ("test", "profile") else settings.calls_per_sample
        check_fits(shape_set.cases, inputs, workers, cuda, name)
    except (RegistryError, SettingsError, ValueError, MemoryError) as exc:
        fail(str(exc), ExitCode.BAD_SPEC)
    _say_built_for(variants, device_facts())
    return variants, shape_set, settings if timeout is None else settings.with_timeout(timeout), secret


def _say_built_for(variants, facts) -> None:
    """Before anything runs: one line on stderr for each file that declares no requirement but is plainly built
    for a GPU this is not (Variant.looks_unmet); it runs all the same."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for v in variants:
        reason = v.looks_unmet(facts)
        if reason:
            err.print(Text(f"note: {v.name} {reason}: running it anyway; a '#!FP4BENCH requires "
                           f"{v.built_for[0].text}' line at its top would skip it here", style="yellow"))


def _progress_console() -> Console:
    """Where progress goes: standard error (a bar on a terminal, a line per shape and phase elsewhere), so that
    what standard output carries (a table, --format json) stays clean."""
    return Console(stderr=True, highlight=False, soft_wrap=True)
def pick_problem(option: str | None, variants) -> str:
    """The problem a run of ``variants`` solves: ``option`` (--problem) when given, else the one they declare
    (registry.problem_of: their ``#!POPCORN leaderboard`` line or problem folder, else nvfp4_group_gemm).
    Raises CaseError for an unknown problem (naming the known ones), RegistryError when a variant declares
    another problem than --problem or two variants declare different ones."""
    if option is not None:
        problems.get(option)
        for v in variants:
            if v.problem and v.problem != option:
                raise RegistryError(f"submission {v.name!r} declares problem {v.problem} ({v.path}), not "
                                    f"--problem {option}")
        return option
    declared = {problem_of(v) for v in variants}
    if len(declared) > 1:
        which = ", ".join(f"{v.name}: {problem_of(v)}" for v in variants)
        raise RegistryError(f"the submissions solve different problems ({which}); a run times one problem")
    name = declared.pop()
    try:
        problems.get(name)
    except CaseError as exc:
        raise CaseError(f"submission {variants[0].name!r} (#!POPCORN leaderboard {name}): {exc}") from None
    return name


def _distinct_names(variants, same_file_ok: bool = False) -> None:
    """Raise RegistryError when two submissions share a name: the table's columns, the --json files and the store
    tell variants apart by name, so the second would overwrite or mix with the first. ``same_file_ok``: one file
    given twice is allowed (``compare X X``, an A/A run that shows the noise)."""
    seen: dict = {}
    for v in variants:
        first = seen.setdefault(v.name, v)
        if first is v:
            continue
        if first.path == v.path and not same_file_ok:
            raise RegistryError(f"submission {v.name!r} is given twice ({v.path}); a run times each variant once")
        if first.path != v.path:
            raise RegistryError(f"two submissions are both named {v.name!r} ({first.path} and {v.path}): results, "
                                f"--json files and the store tell variants apart by name, so rename one")


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


def _sandbox(mode, variants, settings, db, no_store) -> sandbox_mod.Sandbox:
    """--sandbox as a request that hides the store, checked for every variant; exits 113 when strict cannot hold."""
    from harness.parent.environment import device_facts

    try:
        return sandbox_mod.checked(mode, variants, settings, device_facts().cuda,
                                   None if no_store else resolve_db_path(db))
    except sandbox_mod.SandboxError as exc:
        fail(str(exc), ExitCode.BAD_SPEC)


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
    for i, r in enumerate(record.cases):
        if r.profile:
            console.print(profile_section(r, i, problems.get(record.problem)))


def _devices(gpus: str | None, cluster: str | None) -> list[str] | None:
    """--gpus as CUDA device indices (None without it), checked with --cluster before anything is opened or
    run; exits 113 for a bad value or both given."""
    if gpus is None and cluster is None:
        return None
    from harness.parent import pool

    try:
        if gpus is not None and cluster is not None:
            raise pool.PoolError("--gpus and --cluster cannot be used together")
        if cluster is not None:
            pool.local_workers(cluster)
        return pool.gpu_list(gpus) if gpus is not None else None
    except pool.PoolError as exc:
        fail(str(exc), ExitCode.BAD_SPEC)


def _pool(variants, shape_set, opts, store, devices, cluster, progress, compare: bool = False):
    """The variants as tasks on a Dask cluster (harness.parent.pool: one worker per GPU in ``devices``, else
    ``cluster``), ``progress`` told of every case; returns their records, or with ``compare`` the CompareResult.
    Exits 113 when the cluster cannot be used, 130 after Ctrl-C (the runs begun kept incomplete in the store)."""
    from harness.parent import pool
    from harness.parent.bundle import BundleError

    runs = pool.PoolRun(list(variants), shape_set, opts, store, progress)
    try:
        with pool.open_client(devices, cluster) as client:
            return runs.compare(client) if compare else runs.run(client)
    except (pool.PoolError, BundleError) as exc:
        fail(str(exc), ExitCode.BAD_SPEC)
    except KeyboardInterrupt:
        for run_id in runs.abandon():
            Console(stderr=True, highlight=False, soft_wrap=True).print(
                f"interrupted: run {run_id} kept as incomplete in {escape(str(store.path))}")
        interrupted_exit()
    except StoreError as exc:
        fail(str(exc), EXIT_OUTPUT)


@main.command("run")
@click.option("--submission", "submissions", required=True,
              help="A folder under submissions/, a folder, or a .py file; several separated by commas.")
@click.option("--mode", type=click.Choice(MODES), default="test", show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write every figure and the environment to this file (one submission) or FILE-<name>.json.")
@_run_options
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
    variants, shape_set, settings, secret = _prepare(specs, shapes, settings_path, timeout, seed, mode, data,
                                                     problem=problem)
    devices = _devices(gpus, cluster)
    outputs.popcorn_fd()
    outputs.check_json(json_path, variants)
    outputs.check_writable("--worker-log", worker_log)
    store = outputs.open_store(db, no_store)
    from harness.parent.runner import RunOptions
    from harness.parent.runner import run as run_variant

    opts = RunOptions(mode, data, secret, settings, _sandbox(sandbox, variants, settings, db, no_store), worker_log)
    records = []
    err = _progress_console()
    if gpus is not None or cluster is not None:
        progress = (ProgressObserver(err, len(shape_set.cases), f"{len(variants)} submission(s) on "
                                     f"{'GPUs ' + gpus if gpus else cluster}", sides=len(variants)))
        with progress:
            records = _pool(variants, shape_set, opts, store, devices, cluster, progress)
        for variant, record in zip(variants, records):
            _show(console, record, outputs.json_target(json_path, variants, variant), store)
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
    if len(records) > 1:
        console.print(side_by_side(records))
    for record in records:
        try:
            popcorn.write_stream(record)
        except OSError as exc:
            fail(f"cannot write the POPCORN_FD stream: {exc.strerror or exc}{outputs.kept_in(record, store)}",
                 EXIT_OUTPUT)
    sys.exit(runs_exit(records))


@main.command("compare")
@click.argument("a")
@click.argument("b")
@_run_options
@click.option("--format", "fmt", type=click.Choice(("text", "md", "csv", "json")), default="text",
              show_default=True, help="How to write the comparison table (text: a table in the terminal).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the comparison table to this file instead of standard output.")
def compare_cmd(a, b, problem, shapes, data, seed, settings_path, timeout, db, no_store, sandbox, gpus, cluster,
                worker_log, fmt, out) -> None:
    """Time submission A against B interleaved (A, B, A, B ... on identical inputs, every output checked) on
    each shape: ratio A/B of per-call times with a 95% CI and a verdict, plus the geomean. A and B as for
    run --submission. Exit code as run's: nonzero when either side failed a shape, 3 when both were skipped."""
    (va, vb), shape_set, settings, secret = _prepare([a, b], shapes, settings_path, timeout, seed, "compare", data,
                                                     workers=2, problem=problem)
    devices = _devices(gpus, cluster)
    outputs.check_writable("--worker-log", worker_log)
    store = outputs.open_store(db, no_store)
    from harness.parent import compare as compare_mod
    from harness.parent.runner import RunOptions

    opts = RunOptions(compare_mod.MODE, data, secret, settings, _sandbox(sandbox, (va, vb), settings, db, no_store),
                      worker_log)
    err = _progress_console()
    progress = ProgressObserver(err, len(shape_set.cases), f"{va.name} vs {vb.name}", sides=2)
    observers = (progress.side(f"A ({va.name})"), progress.side(f"B ({vb.name})"))
    recorders = [StoreRecorder(store, o) for o in observers] if store else []
    if recorders:
        observers = tuple(recorders)
    try:
        with progress:
            if gpus is not None or cluster is not None:
                result = _pool((va, vb), shape_set, opts, store, devices, cluster, progress, compare=True)
            else:
                result = compare_mod.compare(va, vb, shape_set, opts, observers)
    except KeyboardInterrupt:
        _interrupted([], recorders, store, [])
    except StoreError as exc:
        fail(str(exc), EXIT_OUTPUT)
    finally:
        if store:
            store.close()
    if result.unmet:
        err.print(Text.assemble(("cannot compare here: ", "yellow"), result.unmet,
                                (f"; {result.timed_alone} timed alone" if result.timed_alone else "")))
    code = runs_exit([result.a, result.b])
    if fmt == "text" and out is None:
        Stdout().print(compare_rich_table(va.name, vb.name, result.rows, result.overall,
                                           overall_label=result.overall_label, plug=problems.get(shape_set.problem)))
    else:
        extra = {"a_run_id": result.a.run_id, "b_run_id": result.b.run_id, "shape_set": shape_set.name,
                 "shape_set_id": shape_set.id,
                 "data": data, "exit_code": code, "unmet": result.unmet,
                 "timed_alone": result.timed_alone}
        cli_reports.emit(compare_table(va.name, vb.name, result.rows, result.overall, fmt, result.overall_label,
                                       extra, problems.get(shape_set.problem)), out)
    for letter, record in (("A", result.a), ("B", result.b)):
        for note in record.notes:
            err.print(Text(f"note: {letter} ({record.submission.name}): {note}", style="dim"))
    if store:
        err.print(Text(f"recorded: A {result.a.run_id}, B {result.b.run_id} in {store.path} "
                       f"(fp4bench report {result.a.run_id} {result.b.run_id})", style="dim"))
    sys.exit(code)


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


cli_reports.register(main)
cli_submit.register(main)

if __name__ == "__main__":
    main()
