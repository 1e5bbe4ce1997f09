"""Report commands attached to the CLI group: ``leaderboard``, ``report`` and ``history``.

They only read the results store (harness/store.py); rankings and intervals come from harness/ranking.py,
tables and pictures from harness/report.py. Terminal output uses rich; ``--format`` output is plain text
written with click (never through rich, whose markup would eat ``[...]``).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.ranking import Verdict, best_runs
from harness.report import (FORMATS, Board, ReportError, fmt_interval_us, fmt_pm, fmt_us, history_rows,
                            leaderboard_report, leaderboards, rank_text, report, shape_label, short_commit)
from harness.store import ResultStore, StoreError, gpu_model, resolve_db_path
from task.spec import SHAPE_SET_ID_DIGITS, SpecError, load_shapes

#: Shape names longer than this are numbered in terminal tables, with a key under the table.
SHORT_LABEL = 18

_DB = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
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


def shapes_filter(store: ResultStore, spec: str | None) -> dict:
    """``--shapes`` of a report command -> keyword filters for ``ResultStore.runs``. Tried in order: what
    ``run --shapes`` takes (a name in configs/shapes, a .yml or text file, an inline case), matched by its
    content (``task.spec.shape_set_id``), so another file that happens to share the name never matches; a stored
    shape-set id or a unique prefix of it (4+ hex digits); a name stored with runs (e.g. of a file since
    deleted). Raises click.UsageError saying what was tried when nothing or several ids match."""
    if spec is None:
        return {}
    try:
        return {"shape_set_id": load_shapes(spec).id}
    except SpecError as exc:
        problem = str(exc)
    stored = store.shape_sets()
    if _ID_PREFIX.fullmatch(spec):
        ids = sorted({set_id for set_id, _ in stored if set_id.startswith(spec)})
        if len(ids) == 1:
            return {"shape_set_id": ids[0]}
        if ids:
            raise click.UsageError(f"--shapes {spec!r} starts {len(ids)} stored shape-set ids ({', '.join(ids)}); "
                                   f"give more digits")
    if any(label == spec for _, label in stored):
        return {"shape_set": spec}
    raise click.UsageError(f"{problem}; nor is {spec!r} a shape-set id or name stored in {store.path}")


def emit(text: str, out: Path | None) -> None:
    """Write ``text`` to ``out`` (creating its folder; says so on stderr), or to standard output."""
    if out is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    click.echo(f"wrote {out} ({len(text.encode('utf-8'))} bytes)", err=True)


def board_rich_table(board: Board) -> Table:
    """A rich table of one board: rank (``=2`` for a shared rank), variant, geomean us, 95 % CI, % SOL of the
    board's GPU model, per-shape means (us), who it ties with, run id and commit."""
    labels = [shape_label(c) for c in board.cases]
    numbered = any(len(label) > SHORT_LABEL for label in labels)
    caption = "rank = 1 + number of variants detectably faster; overlapping 95% intervals are ties (shown =N)"
    if numbered:
        caption += "\n" + "\n".join(f"shape {i + 1}: {label}" for i, label in enumerate(labels))
    table = Table(title=escape(board.title), caption=escape(caption), caption_justify="left")
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    table.add_column("geomean us", justify="right", no_wrap=True)
    table.add_column("95% CI us", justify="right", no_wrap=True)
    if board.peaks:
        table.add_column(f"% SOL {board.peaks.model}", justify="right", no_wrap=True)
    for i, label in enumerate(labels):
        table.add_column(f"shape {i + 1}\nus" if numbered else escape(f"{label}\nus"), justify="right",
                         no_wrap=True)
    table.add_column("tied with")
    table.add_column("run", style="dim", overflow="fold")
    table.add_column("commit", style="dim", overflow="fold")
    for e in board.entries:
        row = [rank_text(e, board), f"[bold]{escape(e.variant)}[/]", fmt_us(e.interval.estimate),
               fmt_interval_us(e.interval)]
        if board.peaks:
            row.append("" if e.pct_sol is None else f"{e.pct_sol:.1f}")
        row += [fmt_us(c.stats.mean_ns) for c in e.run.cases]
        row += [escape(", ".join(e.tied_with) or "-"), escape(e.run.run_id), escape(short_commit(e.run.git_commit))]
        table.add_row(*row)
    return table


@click.command("leaderboard")
@_DB
@click.option("--shapes", default=None, help=_SHAPES_HELP)
@click.option("--gpu", default=None, help="Only this GPU model (e.g. H200, B200), case-insensitive.")
@click.option("--mode", default="leaderboard", show_default=True,
              help="Which runs to rank (leaderboard or benchmark).")
@click.option("--data", default=None, help="Only this data mode (official or full-range); default: all, "
                                           "ranked apart.")
@click.option("--format", "fmt", type=click.Choice(("table",) + FORMATS), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the --format output to this file.")
def leaderboard_cmd(db, shapes, gpu, mode, data, fmt, out) -> None:
    """Variants ranked by the geomean of their best passing run (the fastest of their comparable runs: same
    GPU model, shape set, data and mode; its run id is shown), per GPU model and shape set, with 95%
    confidence intervals; variants whose intervals overlap are shown as ties."""
    with _open(db) as store:
        where = shapes_filter(store, shapes)
        passing = store.runs(mode=mode, gpu=gpu, data=data, passed=True, with_samples=False, **where)
        runs, considered = best_runs(passing), len(passing)
        everything = len(store.runs(mode=mode, gpu=gpu, data=data, with_samples=False, **where))
        path = store.path
    boards = leaderboards(runs)
    if fmt != "table":
        emit(leaderboard_report(boards, fmt), out)
        return
    console = Console()
    if not boards:
        console.print(f"no passing {mode} runs in {path}"
                      + (f" for shapes {shapes}" if shapes else "") + (f" on {gpu}" if gpu else "")
                      + f" ({everything} runs considered)")
        return
    for board in boards:
        console.print(board_rich_table(board))
    skipped = everything - considered
    if skipped:
        console.print(f"[dim]{skipped} run(s) not ranked: incomplete or not every case passed[/]")
    if considered > len(runs):
        console.print(f"[dim]{considered - len(runs)} slower passing run(s) of the same variants not shown: each "
                      f"variant is ranked by its fastest comparable run[/]")


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
@click.option("--mode", default="leaderboard", show_default=True, help="With --leaderboard: which runs.")
def report_cmd(runs, db, fmt, out, board, shapes, gpu, mode) -> None:
    """Report on stored runs: RUNS are run ids, unique prefixes, or 'latest' (the default). html is one
    self-contained file with pictures embedded; csv has one row per case; json reads back as RunRecords."""
    if board and runs:
        raise click.UsageError("give run ids or --leaderboard, not both")
    if not board and (shapes or gpu):
        raise click.UsageError("--shapes and --gpu select runs only with --leaderboard")
    with _open(db) as store:
        try:
            if board:
                where = shapes_filter(store, shapes)
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
def history_cmd(variant, db, mode, shapes, gpu, limit) -> None:
    """A variant's runs over time and commits: result, geomean us with 95% CI, and the change against its
    previous comparable passing run (same GPU model, shapes, data and mode) with a verdict."""
    with _open(db) as store:
        where = shapes_filter(store, shapes)
        runs = store.runs(variant=variant, mode=mode, gpu=gpu, limit=limit, with_samples=False, **where)
        path = store.path
    console = Console()
    if not runs:
        console.print(f"no runs of {variant!r} in {path}" + (f" (mode {mode})" if mode else ""))
        return
    rows = history_rows(runs)
    context = {"mode": lambda r: r.mode, "shapes": lambda r: f"{r.shape_set} {r.shape_set_id[:8]}".strip(),
               "GPU": lambda r: gpu_model(r.environment.device)}
    shared = {k: f(rows[0].run) for k, f in context.items() if len({f(r.run) for r in rows}) == 1}
    varying = [k for k in context if k not in shared]
    title = f"history of {variant}" + (f" ({', '.join(shared.values())})" if shared else "")
    table = Table(title=escape(title),
                  caption="±: 95% CI half-width; change: geomean against the previous comparable passing run "
                          "(same GPU, shapes, data, mode), with its 95% CI")
    columns = ["started (UTC)", "run", "commit", *varying, "result", "geomean us", "±", "change", "verdict"]
    numeric = {"geomean us", "±", "change"}
    for col in columns:
        table.add_column(col, justify="right" if col in numeric else "left", overflow="fold",
                         no_wrap=col in numeric or col in ("run", "started (UTC)", "verdict"))
    for row in rows:
        run = row.run
        status = f"[green]{row.status}[/]" if row.status == "passed" else f"[red]{escape(row.status)}[/]"
        change, verdict = "", ""
        if row.change is not None:
            c = row.change
            change = f"{100 * (c.ratio - 1):+.1f} %"
            if math.isfinite(c.high):
                change += f" ±{100 * max(c.high - c.ratio, c.ratio - c.low):.1f}"
            verdict = {Verdict.FASTER: "[green]faster[/]", Verdict.SLOWER: "[red]slower[/]"}.get(
                c.verdict, "no detectable difference")
        cells = [run.started_at.replace("T", " ")[:16], run.run_id, short_commit(run.git_commit),
                 *(context[k](run) for k in varying)]
        table.add_row(*map(escape, cells), status, fmt_us(run.geomean_ns), fmt_pm(row.interval), change, verdict)
    console.print(table)


def register(group) -> None:
    """Attach ``leaderboard``, ``report`` and ``history`` to the click ``group``."""
    group.add_command(leaderboard_cmd)
    group.add_command(report_cmd)
    group.add_command(history_cmd)
