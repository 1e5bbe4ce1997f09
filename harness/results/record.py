"""Results as frozen records: what a run measured, one place, units in every name.

The worker sends raw per-call durations; the parent builds these records. ``RunRecord.to_json()`` is the
``--json`` file and what the results store keeps. A case's message holds at most ``MESSAGE_CHARS`` characters
(``cut_message``: a longer one, say a submission's exception with a 15 MB text, keeps its head and its tail, where a
traceback ends, around a line saying how much was cut).
"""
from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from enum import Enum

from harness import plugs
from harness.protocol import ExitCode
from harness.shapes import DEFAULT_PROBLEM


#: The most characters a case's message keeps (CaseResult; harness.parent.judge cuts its verdicts to it too).
MESSAGE_CHARS = 64 << 10


#: The line a case's message has before a submission's traceback (harness.parent.judge puts it there).
TRACEBACK_HEAD = "Traceback (most recent call last):"
#: How the line before the traceback starts when it names where in the submission's folder the exception was
#: raised (``at submissions/x/submission.py:42 in custom_kernel``).
WHERE_PREFIX = "at "


def message_head(message: str, lines: int = 4) -> list[str]:
    """What a terminal shows of a case's message: its lines before the traceback (``TRACEBACK_HEAD``), at most
    ``lines`` of them, then ``[... N more lines]`` for those left out, and the last line kept when it says where
    the exception was raised (``WHERE_PREFIX``)."""
    head = message.split(f"\n{TRACEBACK_HEAD}", 1)[0].splitlines() or [""]
    where = head.pop() if len(head) > 1 and head[-1].startswith(WHERE_PREFIX) else None
    shown = head[:lines] + ([f"[... {len(head) - lines} more lines]"] if len(head) > lines else [])
    return shown + ([where] if where else [])


def cut_message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters; else its head and its tail around a marker line
    ``[... N characters cut ...]`` (N: how many were left out), ``limit`` characters at most in all. Each cut falls
    at a line end when one is near (in the half of the head or tail next to the cut), so whole lines are kept."""
    if len(text) <= limit:
        return text
    keep = limit - len(f"\n[... {len(text)} characters cut ...]\n")  # N < len(text): the marker is no longer
    head = keep // 2
    tail_start = len(text) - (keep - head)
    line_end = text.rfind("\n", head // 2, head)
    if line_end != -1:
        head = line_end  # the marker's own newline ends the last line kept
    line_start = text.find("\n", tail_start, tail_start + (len(text) - tail_start) // 2)
    if line_start != -1:
        tail_start = line_start + 1
    return f"{text[:head]}\n[... {tail_start - head} characters cut ...]\n{text[tail_start:]}"


class Status(str, Enum):
    """How a case ended. Only PASS counts; SKIPPED means it was never run (the message says why)."""

    PASS = "pass"
    FAIL = "fail"          # wrong outputs, bad container, integrity violation
    ERROR = "error"        # the submission raised, or could not be imported
    CRASH = "crash"        # the worker died (signal or exit) mid-case
    TIMEOUT = "timeout"    # the case exceeded its time limit
    SKIPPED = "skipped"    # not run: unmet requirement, or an earlier failure stopped the run


@dataclass(frozen=True)
class Stats:
    """Per-shape timing summary over ``runs`` samples, each the mean of one sample's calls (ns)."""

    runs: int
    mean_ns: float
    std_ns: float
    err_ns: float     # standard error of the mean
    best_ns: float
    worst_ns: float


@dataclass(frozen=True)
class CaseResult:
    """One case of one run. ``samples_ns``: per-call time of each timed sample (sample duration / calls);
    ``message`` is cut to MESSAGE_CHARS (``cut_message``)."""

    case: object                  # the problem's case record (its plug's parse_case)
    status: Status
    message: str = ""
    samples_ns: tuple[float, ...] = ()
    stats: Stats | None = None
    calls_checked: int = 0        # how many outputs were checked against the reference
    wall_s: float = 0.0           # wall time spent on this case, generation and checks included
    profile: str = ""             # profile mode: the torch profiler's kernel table
    kernel_ns: float | None = None       # GPU busy time per call, kernels' union (CUPTI pass after the samples)
    overhead_ms_per_sample: float | None = None  # timed phase's wall time outside the windows, per sample
    cuda_failure: bool = False    # the worker hit a CUDA error (reported one, or exited with code 110)

    def __post_init__(self) -> None:
        if len(self.message) > MESSAGE_CHARS:  # what the store, --json and every report get (cut_message)
            object.__setattr__(self, "message", cut_message(self.message))

    @property
    def host_share(self) -> float | None:
        """(event time - kernel time) / event time: the part of a call's time that no kernel ran."""
        if self.kernel_ns is None or not self.stats or self.stats.mean_ns <= 0:
            return None
        return (self.stats.mean_ns - self.kernel_ns) / self.stats.mean_ns

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict:
        """Plain types only (the status as its value), as in ``RunRecord.to_dict()["cases"]``."""
        return _plain(dataclasses.asdict(self))


@dataclass(frozen=True)
class Environment:
    """Where a run happened. ``timer`` is ``cuda-events`` or ``cpu-monotonic``."""

    device: str
    compute_capability: str
    driver: str
    torch: str
    triton: str
    cutlass_dsl: str
    python: str
    hostname: str
    timer: str


@dataclass(frozen=True)
class SubmissionInfo:
    name: str
    path: str
    sha256: str
    popcorn: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunRecord:
    """A whole run. ``complete`` is False when it was cut short (the cases present are still valid)."""

    run_id: str
    started_at: str               # ISO 8601, UTC
    mode: str                     # test | benchmark | leaderboard | profile
    data: str                     # official | full-range
    shape_set: str                # the shape set's label (file stem or "inline"); shape_set_id identifies it
    secret_seed: int | None
    submission: SubmissionInfo
    environment: Environment
    cases: tuple[CaseResult, ...]
    complete: bool
    git_commit: str = ""
    geomean_ns: float | None = None   # leaderboard/benchmark: geometric mean of per-case mean_ns, all passed
    wall_s: float = 0.0               # the whole run's wall time
    window: str = ""                  # where the timed window's marks were held: native | python
    shape_set_id: str = ""            # harness.shapes.shape_set_id of the cases run ("" in records from before it)
    sandbox: str = ""                 # how workers were confined: "off", or what held (harness.parent.sandbox)
    notes: tuple[str, ...] = ()       # run-wide notes: timers the submission replaced, hooks refused, stray bytes
    bracket: str = ""                 # the margin the parent held every window to (harness.parent.bracket)
    problem: str = DEFAULT_PROBLEM    # the problem run (plugs.get); records from before it: nvfp4_group_gemm

    @property
    def passed(self) -> bool:
        return self.complete and all(c.passed for c in self.cases)

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _plain(obj):
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def new_run_id() -> str:
    """A fresh run id: 12 random hex digits (48 bits of a uuid4), e.g. ``3fa9c1d2e4b7``. Ids carry no time
    (``started_at`` does); the store resolves a unique prefix of one."""
    return uuid.uuid4().hex[:12]


def case_from_dict(d: dict, problem: str = DEFAULT_PROBLEM):
    """A case of ``problem`` from its dict (``dataclasses.asdict``) through its plug's ``parse_case`` (its
    ``case_fields`` and ``name``). Raises ValueError (CaseError) for a dict its plug refuses."""
    plug = plugs.get(problem)
    return plug.parse_case({**{k: d[k] for k in plug.case_fields}, "name": d.get("name", "")})


def _cuda_failure(c: dict, status: Status) -> bool:
    """The case's CUDA-failure fact; records from before it was kept show it only in their message."""
    if "cuda_failure" in c:
        return bool(c["cuda_failure"])
    return status in (Status.ERROR, Status.CRASH) and "CUDA error" in c["message"]


def case_result_from_dict(c: dict, problem: str = DEFAULT_PROBLEM) -> CaseResult:
    """Inverse of ``CaseResult.to_dict`` for a case of ``problem``."""
    status = Status(c["status"])
    return CaseResult(case_from_dict(c["case"], problem), status, c["message"], tuple(c["samples_ns"]),
                      Stats(**c["stats"]) if c["stats"] else None, c["calls_checked"], c["wall_s"],
                      c.get("profile", ""), c.get("kernel_ns"), c.get("overhead_ms_per_sample"),
                      _cuda_failure(c, status))


def run_from_dict(d: dict) -> RunRecord:
    """Inverse of ``RunRecord.to_dict`` (for the results store and report tools); fields added later take their
    defaults in older records."""
    problem = d.get("problem", DEFAULT_PROBLEM)
    return RunRecord(d["run_id"], d["started_at"], d["mode"], d["data"], d["shape_set"], d["secret_seed"],
                     SubmissionInfo(**d["submission"]), Environment(**d["environment"]),
                     tuple(case_result_from_dict(c, problem) for c in d["cases"]), d["complete"],
                     d.get("git_commit", ""), d.get("geomean_ns"), d.get("wall_s", 0.0), d.get("window", ""),
                     d.get("shape_set_id", ""), d.get("sandbox", ""), tuple(d.get("notes", ())),
                     d.get("bracket", ""), problem)


def exit_code(record: RunRecord) -> ExitCode:
    """Timeout wins over a CUDA failure, which wins over any other failed check; skipped cases do not fail."""
    statuses = {c.status for c in record.cases}
    if Status.TIMEOUT in statuses:
        return ExitCode.TIMEOUT
    if any(c.cuda_failure for c in record.cases):
        return ExitCode.CUDA_FAILURE
    if statuses & {Status.FAIL, Status.ERROR, Status.CRASH}:
        return ExitCode.CHECK_FAILED
    return ExitCode.OK
