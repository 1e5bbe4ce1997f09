"""What ``run`` and ``compare`` share before anything runs: their options, and the variants, problem, shape set,
settings, secret seed, sandbox request and GPU list made from them, each checked up front (exit 113 with one line
for a bad one).

torch is imported only once the options are read (harness.parent.environment, inside the functions).
"""
from __future__ import annotations

import math
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from harness import plugs
from harness.cli.exits import fail
from harness.cli.params import FilePath, nonempty
from harness.parent import sandbox as sandbox_mod
from harness.parent import seeds
from harness.parent.registry import RegistryError, problem_of, resolve, shown_name
from harness.parent.settings import MAX_SECONDS, SettingsError, load_settings
from harness.problem import CaseError
from harness.protocol import ExitCode
from harness.results.store import resolve_db_path
from harness.shapes import DEFAULT_PROBLEM, load_shapes


class _Seed(click.ParamType):
    """A secret seed: a non-negative integer (torch's limit is checked with the case seeds, in ``prepare``)."""

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


def run_options(fn):
    """The options ``run`` and ``compare`` share: shapes, data, seed, settings, timeout and the store."""
    for option in reversed((
        click.option("--problem", default=None,
                     help="The problem the submissions solve (fp4bench list names them); default: their "
                          f"#!POPCORN leaderboard line, else {DEFAULT_PROBLEM}."),
        click.option("--shapes", default="auto", show_default=True, callback=nonempty,
                     help="tests | benchmarks | smoke (the problem's own sets) | a .yml or text file | an official "
                          "task.yml (task.yml#tests, task.yml#benchmarks) | one case of a set by number from 1 or "
                          "name (benchmarks#2, benchmarks#g8_n4096_k7168) | one inline case ('m: [96]; n: [128]; "
                          "k: [256]' or '{\"m\": [96], \"n\": [128], \"k\": [256]}'; g defaults to the lists' "
                          "length, seed to the official sets' seed); auto: benchmarks on a GPU, smoke on the CPU."),
        click.option("--data", type=click.Choice(plugs.data_modes()), default="official", show_default=True),
        click.option("--seed", type=_Seed(), default=None,
                     help="Secret seed (a non-negative integer) combined into every case seed "
                          "(default: $POPCORN_SEED, else none)."),
        click.option("--settings", "settings_path", type=FilePath(),
                     default=None, help="Run settings YAML (default configs/run.yml)."),
        click.option("--timeout", type=_Seconds(), default=None,
                     help=f"Override every time limit (seconds, > 0, at most {MAX_SECONDS:g})."),
        click.option("--db", type=FilePath(), default=None,
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


def prepare(specs, shapes, settings_path, timeout, seed, mode, data, workers=1, problem=None):
    """Variants, their problem (``problem``: the --problem option, else ``pick_problem``), its shape set,
    settings and secret seed from the options; exits 113 (bad spec) on a bad one, on a case the data mode cannot
    draw (the plug's ``check_drawable``), and on a case that cannot fit in memory (harness.parent.memory), all
    before anything is drawn or run. ``workers``: worker processes the run will start side by side."""
    from harness.parent.environment import device_facts
    from harness.parent.memory import check_fits

    try:
        variants = [resolve(s) for s in specs]
        name = pick_problem(problem, variants)  # two problems' variants: that is the error, not their names
        distinct_names(variants, same_file_ok=mode == "compare")
        plug = plugs.get(name)
        cuda = device_facts().cuda
        if shapes == "auto":
            shapes = "benchmarks" if cuda else "smoke"
        shape_set = load_shapes(shapes, name, aliases=("auto",))
        settings = load_settings(settings_path)
        if name != DEFAULT_PROBLEM:  # configs/run.yml's loop is nvfp4_group_gemm's; the others run their own
            settings = settings.with_timing(plug.timing, mode)
        secret = seeds.secret_for(seed if seed is not None else seeds.secret_from_env(), mode,
                                  [case.seed for case in shape_set.cases])  # one for all the run's submissions
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



def pick_problem(option: str | None, variants) -> str:
    """The problem a run of ``variants`` solves: ``option`` (--problem) when given, else the one they declare
    (registry.problem_of: their ``#!POPCORN leaderboard`` line or problem folder, else nvfp4_group_gemm).
    Raises CaseError for an unknown problem (naming the known ones), RegistryError when a variant declares
    another problem than --problem or two variants declare different ones."""
    if option is not None:
        plugs.get(option)
        for v in variants:
            if v.problem and v.problem != option:
                raise RegistryError(f"submission {v.name!r} declares problem {v.problem} ({v.path}), not "
                                    f"--problem {option}")
        return option
    declared = {problem_of(v) for v in variants}
    if len(declared) > 1:
        which = ", ".join(f"{shown_name(v)}: {problem_of(v)}" for v in variants)
        raise RegistryError(f"the submissions solve different problems ({which}); a run times one problem")
    name = declared.pop()
    try:
        plugs.get(name)
    except CaseError as exc:
        raise CaseError(f"submission {variants[0].name!r} (#!POPCORN leaderboard {name}): {exc}") from None
    return name


def distinct_names(variants, same_file_ok: bool = False) -> None:
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


def sandbox_request(mode, variants, settings, db, no_store) -> sandbox_mod.Sandbox:
    """--sandbox as a request that hides the store, checked for every variant; exits 113 when strict cannot hold."""
    from harness.parent.environment import device_facts

    try:
        return sandbox_mod.checked(mode, variants, settings, device_facts().cuda,
                                   None if no_store else resolve_db_path(db))
    except sandbox_mod.SandboxError as exc:
        fail(str(exc), ExitCode.BAD_SPEC)


def devices(gpus: str | None, cluster: str | None) -> list[str] | None:
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

