"""Run one submission over a shape set in one mode: the trusted parent's side of every measurement.

Data flows one way: case -> seeds -> expected outputs (computed here, never in the worker) -> worker request ->
raw times and outputs back -> judged here (harness.parent.judge) -> CaseResult. A fault (exception, crash,
timeout, CUDA error) fails only its own case; the next case gets a fresh worker. This module is the ``run``
schedule over the one case lifecycle (harness.parent.case_attempt, .case_runner, .session); ``compare`` is
the other.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from datetime import datetime, timezone

import torch

from harness import plugs
from harness.parent import judge
from harness.parent import seeds as seedlib
from harness.parent.case_attempt import CaseAttempt
from harness.parent.case_runner import CaseRunner, Observer, RunOptions
from harness.parent.environment import device_facts, environment
from harness.parent.judge import CaseFailed
from harness.parent.plain_samples import plan_of
from harness.parent.process import EXIT_WAIT_S, native_window
from harness.parent.registry import ROOT, Variant
from harness.parent.sandbox import plan_for
from harness.parent.session import Session, load_failure
from harness.parent.settings import MODES
from harness.results import ranking
from harness.results.record import CaseResult, RunRecord, Status, SubmissionInfo, new_run_id
from harness.results.stats import geomean
from harness.shapes import DEFAULT_PROBLEM
from harness.hardware import default_device
from harness.shapes import ShapeSet

#: What ``from harness.parent.runner import ...`` has always offered; the classes live in case_runner.py,
#: session.py and judge.py.
__all__ = ["CaseFailed", "CaseRunner", "Observer", "RunOptions", "Session", "close_record", "git_commit",
           "new_record", "run", "sample_layouts", "window_held"]

#: The run's first phase as progress names it (the worker's start-up and the submission's import).
LOADING = "starting the worker, loading the submission"


def git_commit(root=ROOT) -> str:
    """HEAD of the repo at ``root``, with ``-dirty`` appended when tracked files differ from it (the code that
    ran is then not that commit; the record's submission sha256 still names the submission exactly); "" when
    there is no git or no repo."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return ""
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=30)
        dirty = status.returncode != 0 or bool(status.stdout.strip())
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def run(variant: Variant, shapes: ShapeSet, opts: RunOptions, observer: Observer | None = None) -> RunRecord:
    """Run ``variant`` on every case of ``shapes`` in ``opts.mode``; returns the whole RunRecord.

    Never raises for a submission's fault: each case ends as pass/fail/error/crash/timeout/skipped.
    Raises ValueError for an unknown mode or data mode, SandboxError when ``opts.sandbox`` is strict and a
    protection is missing here.
    """
    if opts.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {opts.mode!r}")
    observer = observer or Observer()
    opts = replace(opts, secret=seedlib.secret_for(opts.secret, opts.mode, [c.seed for c in shapes.cases]))
    started = time.monotonic()
    device = default_device()
    # The parent's CPU work (drawing inputs on a thread pool, checks) must not leave spinning thread teams that
    # compete with the worker while it is being timed: one intra-op thread per pool thread.
    torch.set_num_threads(1)
    record = new_record(variant, shapes, opts)
    observer.on_start(record)
    results: list[CaseResult] = []

    def finish(result: CaseResult) -> None:
        observer.on_case(len(results), result)
        results.append(result)

    reason = variant.requires.unmet_reason(device_facts())
    if reason:
        for case in shapes.cases:
            finish(CaseResult(case, Status.SKIPPED, reason))
        return close_record(record, results, observer, started=started)

    session = Session(variant, opts.settings, device, opts.sandbox, opts.worker_log,
                      profiler=opts.mode in ("benchmark", "leaderboard"),  # the modes with a kernel-time pass
                      problem=shapes.problem)
    runner = CaseRunner(session, opts, observer, device, shapes.problem)
    wait_s = EXIT_WAIT_S
    try:
        session.start()  # the worker starts up while the buffers are reserved
        session.reserve(sample_layouts(shapes.cases, opts, shapes.problem))
        _run_cases(shapes.cases, opts, runner, observer, finish)
    except KeyboardInterrupt:
        wait_s = 0.0  # Ctrl-C: the worker may be stuck in the submission; do not make the user wait for it
        raise
    finally:
        session.release(wait_s)
    return close_record(record, results, observer, session, runner, started)


def window_held() -> str:
    """Where the workers will hold the timed window's marks: "native" (C), or "python: <why not C>"."""
    why = native_window()
    return "native" if not why else f"python: {why}"


def new_record(variant: Variant, shapes: ShapeSet, opts: RunOptions) -> RunRecord:
    """A fresh RunRecord for ``variant`` on ``shapes`` in ``opts.mode``: no cases yet, not complete; a new run id,
    the start time (UTC), this machine's environment, the repository's commit and the sandbox's summary.
    Raises SandboxError when ``opts.sandbox`` is strict and a protection is missing here."""
    plan = plan_for(variant, opts.sandbox, opts.settings, default_device().type == "cuda")
    return RunRecord(
        run_id=new_run_id(), started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        mode=opts.mode, data=opts.data, shape_set=shapes.name, secret_seed=opts.secret,
        submission=SubmissionInfo(variant.name, str(variant.path), variant.sha256, dict(variant.popcorn)),
        environment=environment(), cases=(), complete=False, git_commit=git_commit(), shape_set_id=shapes.id,
        sandbox=plan.summary, window=window_held(), problem=shapes.problem)


def close_record(record: RunRecord, results: list[CaseResult], observer: Observer,
                 session: Session | None = None, runner: CaseRunner | None = None,
                 started: float | None = None) -> RunRecord:
    """The finished record: ``results`` as its cases, the ``runner``'s notes and the ``session``'s stray
    channel bytes as the run's ``notes`` (case messages stay as measured), complete, and the geomean (ns) of
    per-case means when every case passed with timings; ``started``: time.monotonic() at the start, for the
    run's wall time. Tells the observer ``on_finish``."""
    notes = list(runner.notes) if runner is not None else []
    if session is not None and session.stray_bytes:
        notes.append(judge.stray_note(session.stray_bytes))
    wall = time.monotonic() - started if started is not None else 0.0
    means = [r.stats.mean_ns for r in results if r.passed and r.stats]
    timed_all = means and len(means) == len(results)
    margin = session.bracket.margin if session is not None else None
    final = replace(record, cases=tuple(results), complete=True, geomean_ns=geomean(means) if timed_all else None,
                    wall_s=round(wall, 3), notes=tuple(notes), bracket=margin.describe() if margin else "")
    observer.on_finish(final)
    return final


def _run_cases(cases, opts: RunOptions, runner: CaseRunner, observer: Observer, finish) -> None:
    """The ``run`` schedule: every case in order through its phases for ``opts.mode``; leaderboard warms every
    shape up first and stops at the first shape that fails."""
    timed = opts.mode in ("benchmark", "leaderboard")
    observer.on_phase(None, LOADING)
    while_workers_start(cases, opts, runner.device, runner.problem)  # run() has started the worker
    failed = load_failure(runner.session)
    if failed:  # import error or no entry point: fail before generating any data; the message once, on shape 1
        for i, case in enumerate(cases):
            finish(CaseResult(case, failed.status, failed.message if i == 0 else judge.not_loaded(failed),
                              cuda_failure=failed.cuda))
        return
    attempts = [CaseAttempt(runner, i, case, seedlib.case_seed(case.seed, opts.secret))
                for i, case in enumerate(cases)]
    if opts.mode == "leaderboard":  # official: warm up every shape first, then time
        for attempt in attempts:
            if not attempt.prepare():
                break
    stop_reason = ""
    for attempt in attempts:
        if stop_reason:
            finish(CaseResult(attempt.case, Status.SKIPPED, stop_reason))
            continue
        observer.on_case_start(attempt.index, attempt.case)
        if timed:
            if attempt.prepare():
                attempt.timed(opts.mode)
        elif attempt.check() and opts.mode == "profile":
            attempt.profiled()
        result = attempt.result()  # first: a process left behind fails the case here
        if attempt.failure and opts.mode == "leaderboard":
            stop_reason = judge.earlier_failed(attempt.failure.status)
        finish(result)


def while_workers_start(cases, opts: RunOptions, device: torch.device, problem: str = DEFAULT_PROBLEM) -> None:
    """The parent's start-up work that needs no submission, done while its workers start (torch, CUDA, the
    profiler, the import): for a problem with sample buffers of its own (nvfp4_group_gemm) the exact reference's
    compiles for every sample size a run of ``cases`` in ``opts.mode`` checks (its ``warm_up``; seconds on a fresh
    machine), and in timed modes scipy.stats for the report's intervals (0.6-1.1 s to import)."""
    kit = plugs.get(problem).sample_buffers
    if kit is not None:
        counts = {layout.calls for layout in sample_layouts(cases, opts, problem)} | {1}
        kit.warm_up(cases, sorted(counts), device)
    if opts.mode in ("benchmark", "leaderboard", "compare"):
        ranking.t_quantile(0.975, 2.0)


def sample_layouts(cases, opts: RunOptions, problem: str = DEFAULT_PROBLEM) -> list:
    """The buffer layouts a run of ``cases`` of ``problem`` in ``opts.mode`` uses (one call per correctness check,
    and ``calls_per_sample`` per warm-up or timed sample): the layout of the problem's own sample buffers
    (nvfp4_group_gemm), else a harness.plan.Plan."""
    calls = 1 if opts.mode in ("test", "profile") else opts.settings.calls_per_sample
    plug = plugs.get(problem)
    if plug.sample_buffers is not None:
        return [plug.sample_buffers.layout.of(c, calls) for c in cases]
    device = default_device()
    return [plan_of(plug, c, calls, opts.data, device) for c in cases]
