"""Report commands attached to the CLI group: ``leaderboard``, ``report`` and ``history``.

They only read the results store (harness/results/store.py); rankings and intervals come from
harness/results/ranking.py, tables and pictures from harness/report/ (render.py the entry point). Terminal tables
are harness.report.stacked.StackedTables (they stack rather than cut at any width, and show stored text verbatim);
``--format`` output is plain text written with click.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import click
from rich.console import Group
from rich.text import Text

from harness import plugs
from harness.cli.exits import Stdout, fail
from harness.cli.params import FilePath
from harness.protocol import ExitCode
from harness.parent.registry import DeviceFacts, Variant, problem_of, shown_name
from harness.report.boards import RANK_NOTE, Board, leaderboards, rank_text
from harness.report.console import SHAPE_KEY
from harness.report.figures import (
    fmt_change,
    fmt_interval_us,
    fmt_pct,
    fmt_pm,
    fmt_us,
    shape_label,
    shape_number,
    short_commit,
)
from harness.report.render import FORMATS, ReportError, leaderboard_report, report
from harness.report.history import HistoryRow, history_rows
from harness.report.stacked import Col, StackedTable
from harness.results.ranking import SpeedVerdict, best_runs, plural
from harness.results.store import ResultStore, StoreError, resolve_db_path
from harness.hardware import gpu_model
from harness.problem import CaseError
from harness.shapes import DEFAULT_PROBLEM, SHAPE_SET_ID_DIGITS, load_shapes

#: The run modes the leaderboard ranks (their runs carry timed samples of every case).
RANKED_MODES = ("leaderboard", "benchmark")
_DB = click.option("--db", type=FilePath(), default=None,
                   help="Results store (default: $FP4BENCH_DB, else results/fp4bench.sqlite).")


_SHAPES_HELP = ("Only this shape set: what run --shapes takes (tests, a .yml or text file, an inline case; matched "
                "by content), a stored shape-set id or its first 4+ digits, or a stored name.")
#: A --shapes value that may be (the start of) a stored shape-set id.
_ID_PREFIX = re.compile(rf"[0-9a-f]{{4,{SHAPE_SET_ID_DIGITS}}}")


def _open(db: Path | None) -> ResultStore:
    try:
        return ResultStore(resolve_db_path(db), create=False)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def shapes_filter(store: ResultStore, spec: str | None, problem: str | None = None) -> dict:
    """``--shapes`` of a report command -> keyword filters for ``ResultStore.runs``. Tried in order: what
    ``run --shapes`` takes (a name in configs/shapes, a .yml or text file, an inline case), matched by its
    content (``harness.shapes.shape_set_id``; ``problem``'s sets, default nvfp4_group_gemm), so another file that happens to share the name never matches; a stored
    shape-set id or a unique prefix of it (4+ hex digits); a name stored with runs (e.g. of a file since
    deleted). Exits 113 (BAD_SPEC, as ``run --shapes``) with one line saying what was tried when nothing or several
    ids match."""
    if spec is None:
        return {}
    try:
        return {"shape_set_id": load_shapes(spec, problem or DEFAULT_PROBLEM).id}
    except CaseError as exc:
        problem = str(exc)
    stored = store.shape_sets()
    if _ID_PREFIX.fullmatch(spec):
        ids = sorted({set_id for set_id, _ in stored if set_id.startswith(spec)})
        if len(ids) == 1:
            return {"shape_set_id": ids[0]}
        if ids:
            fail(f"--shapes {spec!r} starts {len(ids)} stored shape-set ids ({', '.join(ids)}); give more digits",
                 ExitCode.BAD_SPEC)
    if any(label == spec for _, label in stored):
        return {"shape_set": spec}
    fail(f"{problem}; nor is {spec!r} a shape-set id or name stored in {store.path}", ExitCode.BAD_SPEC)


def emit(text: str, out: Path | None) -> None:
    """Write ``text`` to ``out`` (creating its folder; says so on stderr), or to standard output. Raises
    click.ClickException (one line, exit 1) when the folder or the file cannot be written."""
    if out is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    created = not out.parent.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write --out {out}: {exc.strerror or exc}"
                                   + (f" ({exc.filename})" if exc.filename and str(exc.filename) != str(out)
                                      else "")) from None
    if created:
        click.echo(f"created folder {out.parent} for --out", err=True)
    click.echo(f"wrote {out} ({len(text.encode('utf-8'))} bytes)", err=True)


def board_rich_table(board: Board) -> Group:
    """One board in the terminal, two stacked tables: the ranking (rank, ``=2`` for a shared rank; variant;
    geomean us; 95 % CI; % SOL of the board's GPU model; who it ties with; run id; commit), then the per-shape
    mean times (us) with shapes as rows, numbered from 1, and the variants in rank order as columns."""
    ranking = StackedTable(board.title, Col("rank"), [Col("variant", "left", style="bold"), Col("geomean us"),
                                                       Col("95% CI us")]
                           + ([Col(f"% SOL {board.peaks.model}")] if board.peaks else [])
                           + [Col("tied with", "left", wrap=True), Col("run", "left", style="dim"),
                              Col("commit", "left", style="dim")], RANK_NOTE)
    for e in board.entries:
        ranking.add_row(rank_text(e, board), e.variant, fmt_us(e.interval.estimate), fmt_interval_us(e.interval),
                        *([fmt_pct(e.pct_sol)] if board.peaks else []),
                        ", ".join(e.tied_with) or "-", e.run.run_id, short_commit(e.run.git_commit))
    shapes = StackedTable("", SHAPE_KEY, [Col("shape", "left")] + [Col(f"{e.variant}\nus") for e in board.entries],
                          "per-shape mean time per call, us; variants in rank order")
    plug = plugs.get(board.problem)
    for i, case in enumerate(board.cases):
        shapes.add_row(shape_number(i), shape_label(case, plug), *(fmt_us(e.run.cases[i].stats.mean_ns)
                                                                    for e in board.entries))
    return Group(ranking, shapes)


@click.command("leaderboard")
@_DB
@click.option("--shapes", default=None, help=_SHAPES_HELP)
@click.option("--gpu", default=None, help="Only this GPU model (e.g. H200, B200), case-insensitive.")
@click.option("--mode", type=click.Choice(RANKED_MODES), default="leaderboard", show_default=True,
              help="Which runs to rank.")
@click.option("--data", type=click.Choice(plugs.data_modes()), default=None,
              help="Only this data mode; default: all, ranked apart.")
@click.option("--problem", default=None, help="Only this problem's runs; default: every problem, ranked apart.")
@click.option("--format", "fmt", type=click.Choice(("table",) + FORMATS), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the --format output to this file.")
def leaderboard_cmd(db, shapes, gpu, mode, data, problem, fmt, out) -> None:
    """Variants ranked by the geomean of their best passing run (the fastest of their comparable runs: same
    GPU model, shape set, data and mode; its run id is shown), per GPU model and shape set, with 95%
    confidence intervals; variants whose intervals overlap are shown as ties."""
    if problem is not None:
        try:
            plugs.get(problem)
        except CaseError as exc:
            fail(str(exc), ExitCode.BAD_SPEC)
    with _open(db) as store:
        where = shapes_filter(store, shapes, problem)
        if problem is not None:
            where["problem"] = problem
        passing = store.runs(mode=mode, gpu=gpu, data=data, passed=True, with_samples=False, **where)
        runs, considered = best_runs(passing), len(passing)
        everything = len(store.runs(mode=mode, gpu=gpu, data=data, with_samples=False, **where))
        elsewhere = {m: n for m in RANKED_MODES if m != mode
                     and (n := len(store.runs(mode=m, gpu=gpu, data=data, passed=True, with_samples=False, **where)))}
        path = store.path
    boards = leaderboards(runs)
    if fmt != "table":
        emit(leaderboard_report(boards, fmt), out)
        return
    console = Stdout()
    if not boards:
        console.print(Text(f"no passing {mode} runs in {path}"
                           + (f" for shapes {shapes}" if shapes else "") + (f" on {gpu}" if gpu else "")
                           + f" ({plural(everything, 'run')} considered)"))
        for other, n in elsewhere.items():
            console.print(Text(f"{plural(n, f'passing {other} run')} there: fp4bench leaderboard --mode {other}"))
        if not elsewhere:
            console.print(Text("only timed runs are ranked: fp4bench run --mode leaderboard (or benchmark); a test "
                               "run times nothing", style="dim"))
        return
    for board in boards:
        console.print(board_rich_table(board))
    skipped = everything - considered
    if skipped:
        console.print(Text(f"{plural(skipped, 'run')} not ranked: incomplete or not every case passed", style="dim"))
    if considered > len(runs):
        console.print(Text(f"{plural(considered - len(runs), 'slower passing run')} of the same variants not shown: "
                           f"each variant is ranked by its fastest comparable run", style="dim"))


@click.command("report")
@click.argument("runs", nargs=-1)
@_DB
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="md", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report here (default: standard output).")
@click.option("--leaderboard", "board", is_flag=True,
              help="Report on the runs the leaderboard ranks (best passing run of each variant) instead.")
@click.option("--shapes", default=None, help="With --leaderboard: " + _SHAPES_HELP[0].lower() + _SHAPES_HELP[1:])
@click.option("--gpu", default=None, help="With --leaderboard: only this GPU model.")
@click.option("--mode", type=click.Choice(RANKED_MODES), default="leaderboard", show_default=True,
              help="With --leaderboard: which runs.")
@click.option("--problem", default=None, help="With --leaderboard: only this problem's runs.")
def report_cmd(runs, db, fmt, out, board, shapes, gpu, mode, problem) -> None:
    """Report on stored runs: RUNS are run ids, unique prefixes, or 'latest' (the default). html is one
    self-contained file with pictures embedded; csv has one row per case; json reads back as RunRecords."""
    if board and runs:
        raise click.UsageError("give run ids or --leaderboard, not both")
    if not board and (shapes or gpu or problem):
        raise click.UsageError("--shapes, --gpu and --problem select runs only with --leaderboard")
    if problem is not None:
        try:
            plugs.get(problem)
        except CaseError as exc:
            fail(str(exc), ExitCode.BAD_SPEC)
    with _open(db) as store:
        try:
            if board:
                where = shapes_filter(store, shapes, problem)
                if problem is not None:
                    where["problem"] = problem
                boards = leaderboards(best_runs(store.runs(mode=mode, gpu=gpu, passed=True, **where)))
                records = [e.run for b in boards for e in b.entries]
                if not records:
                    raise click.ClickException(f"no passing {mode} runs to report in {store.path}")
            else:
                ids = [store.resolve(r) for r in (runs or ("latest",))]
                records = [store.load(i) for i in ids]
            text = report(records, fmt)
        except (StoreError, ReportError) as exc:
            raise click.ClickException(str(exc)) from None
    emit(text, out)


@click.command("history")
@click.argument("variant")
@_DB
@click.option("--mode", default=None, help="Only runs of this mode (default: all).")
@click.option("--shapes", default=None, help=_SHAPES_HELP)
@click.option("--gpu", default=None, help="Only this GPU model.")
@click.option("--limit", type=int, default=None, help="Only the newest LIMIT runs.")
@click.option("--problem", default=None, help="Only this problem's runs (VARIANT as <problem>/<name> says it too).")
def history_cmd(variant, db, mode, shapes, gpu, limit, problem) -> None:
    """A variant's runs over time and commits: result, geomean us with 95% CI, and the change against its
    previous comparable passing run (same problem, GPU model, shapes, data and mode) with a verdict. VARIANT is a
    name, or <problem>/<name> as fp4bench list shows a problem's variant."""
    head, _, tail = variant.rpartition("/")
    if head in plugs.names():
        if problem is not None and problem != head:
            fail(f"{variant} is a variant of {head}, not --problem {problem}", ExitCode.BAD_SPEC)
        problem, variant = head, tail
    if problem is not None:
        try:
            plugs.get(problem)
        except CaseError as exc:
            fail(str(exc), ExitCode.BAD_SPEC)
    with _open(db) as store:
        where = shapes_filter(store, shapes, problem)
        if problem is not None:
            where["problem"] = problem
        runs = store.runs(variant=variant, mode=mode, gpu=gpu, limit=limit, with_samples=False, **where)
        path = store.path
    console = Stdout()
    if not runs:
        console.print(Text(f"no runs of {variant!r} in {path}" + (f" (mode {mode})" if mode else "")
                           + (f" for {problem}" if problem else "")))
        return
    console.print(history_table(variant, history_rows(runs)))


def history_table(variant: str, rows: Sequence[HistoryRow]) -> StackedTable:
    """A variant's runs (report.HistoryRow, oldest first), keyed by run id: when it started, its commit, the
    mode / shapes / GPU where these differ between runs (else in the title), its result, geomean us with the
    95 % half-width, and the change against the previous comparable passing run with its verdict."""
    context = {"problem": lambda r: r.problem, "mode": lambda r: r.mode,
               "shapes": lambda r: f"{r.shape_set} {r.shape_set_id[:8]}".strip(),
               "GPU": lambda r: gpu_model(r.environment.device)}
    shared = {k: f(rows[0].run) for k, f in context.items() if len({f(r.run) for r in rows}) == 1}
    varying = [k for k in context if k not in shared]
    title = f"history of {variant}" + (f" ({', '.join(shared.values())})" if shared else "")
    columns = ([Col("started (UTC)", "left"), Col("commit", "left")] + [Col(k, "left") for k in varying]
               + [Col("result", "left"), Col("geomean us"), Col("±"), Col("change"), Col("verdict", "left")])
    table = StackedTable(title, Col("run", "left"), columns,
                         "±: 95% CI half-width; change: geomean against the previous comparable passing run "
                         "(same GPU, shapes, data, mode), with its 95% CI half-width")
    for row in rows:
        run = row.run
        status = Text(row.status, style="green" if row.status == "passed" else "red")
        change, verdict = "", Text("")
        if row.change is not None:
            change = fmt_change(row.change)
            style = {SpeedVerdict.FASTER: "green", SpeedVerdict.SLOWER: "red"}.get(row.change.verdict, "")
            verdict = Text(row.change.verdict.value, style=style)
        table.add_row(run.run_id, run.started_at.replace("T", " ")[:16], short_commit(run.git_commit),
                      *(context[k](run) for k in varying), status, fmt_us(run.geomean_ns), fmt_pm(row.interval),
                      change, verdict)
    return table


def register(group) -> None:
    """Attach ``leaderboard``, ``report`` and ``history`` to the click ``group``."""
    group.add_command(leaderboard_cmd)
    group.add_command(report_cmd)
    group.add_command(history_cmd)


def variants_table(variants: Sequence[Variant], machine: DeviceFacts,
                   exports: Sequence[str] | None = None) -> StackedTable:
    """``fp4bench list``: per variant (``<problem>/<name>`` in a problem folder) its problem
    (registry.problem_of), POPCORN gpu header, its requirement, and whether it runs on ``machine``: ``yes``,
    ``no: <reason>``, or for a file that declares no requirement but is plainly built for another GPU
    ``probably not: <why>`` (Variant.looks_unmet); with ``exports`` (one per variant), the state of its export for
    the official board (``ok``, its findings, or why it cannot be exported)."""
    columns = [Col("problem", "left"), Col("gpu", "left"), Col("requires", "left"),
               Col("runs here", "left", wrap=True)]
    if exports is not None:
        columns.append(Col("export", "left", wrap=True))
    table = StackedTable(f"variants (this machine: {machine.name}"
                         f"{f', sm_{machine.cc_major}{machine.cc_minor}' if machine.cuda else ''})",
                         Col("variant", "left"), columns)
    for i, v in enumerate(variants):
        reason, guess = v.requires.unmet_reason(machine), v.looks_unmet(machine)
        if reason is not None:
            runs_here = Text.assemble(("no", "yellow"), f": {reason}")
        elif guess is not None:
            runs_here = Text.assemble(("probably not", "yellow"), f": {guess}")
        else:
            runs_here = Text("yes", style="green")
        cells = [problem_of(v), v.popcorn.get("gpu", ""), v.requires.text, runs_here]
        if exports is not None:
            cells.append(Text("ok", style="green") if exports[i] == "ok" else Text(exports[i], style="yellow"))
        table.add_row(shown_name(v), *cells)
    return table
