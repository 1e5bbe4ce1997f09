"""Every verdict on a case, in one trusted place: the worker reports facts (harness.protocol), this module turns
them into a status and the sentence a user reads.

What is judged: a failed load, map or call (``Failed``); a run reply (work outside the timed window as the parent's
/proc watch saw it, the outputs the parent copied at its bracket's end against the reference: ``reply``); the
worker's claimed time against the parent's bracket (``bracket``); a time below the GPU's physical floor
(``floor``); the notes a passing run carries (``notes``); and the messages of cases that a schedule did not run.
The worker's reply is a claim: a description of what came back words a failure, never passes one. A verdict's
message holds at most harness.results.record.MESSAGE_CHARS characters (``CaseFailed``).
"""
from __future__ import annotations

import math

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from harness import protocol as P
from harness.parent.bracket import Bracket, Measured
from harness.parent.samples import ArenaSample
from harness.parent.registry import shown
from harness.results.record import MESSAGE_CHARS, TRACEBACK_HEAD, WHERE_PREFIX, Status, cut_message
from harness.hardware import GpuPeaks, sol_ns_of
from harness.parent.plain_samples import PlainSample
from harness.problem import ReferenceError, validate_outputs


@dataclass(frozen=True)
class CaseVerdict:
    """Why a case ends: its ``status``, the ``message`` shown, and ``cuda``: the worker hit a CUDA error (the
    exit code is then 110, CUDA_FAILURE)."""

    status: Status
    message: str
    cuda: bool = False


class CaseFailed(Exception):
    """Ends a case early with a CaseVerdict (raised inside a case's phases only). ``message`` is cut to
    harness.results.record.MESSAGE_CHARS (its head and tail kept: ``cut_message``), so a submission's exception
    text, traceback or output of any size is carried, shown and stored bounded."""

    def __init__(self, status: Status, message: str, cuda: bool = False):
        message = cut_message(message)
        super().__init__(message)
        self.status, self.message, self.cuda = status, message, cuda

    @property
    def verdict(self) -> CaseVerdict:
        return CaseVerdict(self.status, self.message, self.cuda)


#: Terminal control sequences (CSI such as colours ``\x1b[91m``, OSC such as links, and two-byte escapes):
#: the CuTe DSL writes its diagnostics in colour, which a log, a report or the store should not keep.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
#: A frame line of a Python traceback: ``  File "/path/x.py", line 42, in custom_kernel``.
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$', re.MULTILINE)


def plain_text(text: str) -> str:
    """``text`` without terminal control sequences (colours), trailing spaces or blank lines: a DSL diagnostic
    that begins with a newline and colour codes then starts with its first words."""
    lines = (line.rstrip() for line in _ANSI.sub("", text).splitlines())
    return "\n".join(line for line in lines if line.strip())


def exception_text(reply: P.Failed) -> str:
    """The submission's exception as ``Type: message`` (``plain_text``: colours and blank lines gone): its own
    text, or what went wrong turning it into text."""
    if reply.str_raised:
        return f"{reply.type}: <str() of the exception raised {reply.str_raised}>"
    if reply.str_nonstring:
        return f"{reply.type}: <__str__ returned a non-string>"
    message = plain_text(reply.message)
    return f"{reply.type}: {message}" if message else f"{reply.type} (with no message)"


def raised_where(traceback: str, folder: Path | str) -> str | None:
    """Where in ``folder`` (the submission's) the exception was raised: the deepest frame of ``traceback`` whose
    file lies inside it, as ``<file>:<line> in <function>`` (the file as harness.parent.registry.shown names
    it); None when no frame does (say, the worker's traceback was cut)."""
    root = Path(folder).resolve()
    found = None
    for frame in _FRAME.finditer(traceback):
        try:
            inside = Path(frame["file"]).resolve().is_relative_to(root)
        except (OSError, ValueError):
            inside = False
        if inside:
            found = frame
    if found is None:
        return None
    return f"{shown(Path(found['file']))}:{found['line']} in {found['func']}"


def _with_traceback(text: str, traceback: str, where: str | None = None) -> str:
    """``text``, the line ``at <where>`` and the worker's ``traceback`` (colours taken out) on the lines below,
    within MESSAGE_CHARS: when they do not fit, text and traceback are each cut (``cut_message``) to what the
    other leaves, half the cap at least, so a huge exception text cannot push the traceback's first lines (where
    it raised) and last ones (what) out."""
    if where:
        text = f"{text}\n{WHERE_PREFIX}{where}"
    traceback = _ANSI.sub("", traceback)
    whole = f"{text}\n{traceback}".strip()
    if len(whole) <= MESSAGE_CHARS:
        return whole
    text = cut_message(text, max(MESSAGE_CHARS // 2, MESSAGE_CHARS - 1 - len(traceback)))
    return f"{text}\n{cut_message(traceback, MESSAGE_CHARS - 1 - len(text))}".strip()


@contextmanager
def timeout_named(what: str):
    """A TIMEOUT CaseFailed raised inside says ``what`` timed out (the channel's own words name no phase)."""
    try:
        yield
    except CaseFailed as exc:
        if exc.status is not Status.TIMEOUT:
            raise
        raise CaseFailed(Status.TIMEOUT, f"timeout: {what}") from None


def load_failed(reply: P.Failed, path: str) -> CaseFailed:
    """The import raised (``kind`` import) or the module has no callable ``custom_kernel`` (``kind`` entry)."""
    if reply.kind == "entry":
        found = ", ".join(reply.callables) or "none"
        return CaseFailed(Status.ERROR, f"no entry point: MissingEntryPoint: {path} defines no callable "
                                        f"custom_kernel(data) (callables found: {found})")
    return CaseFailed(Status.ERROR, _with_traceback(f"import failed: {exception_text(reply)}", reply.traceback,
                                                    raised_where(reply.traceback, Path(path).parent)))


def map_failed(reply: P.Failed) -> CaseFailed:
    return CaseFailed(Status.ERROR, f"harness error: the worker could not map the sample buffers: "
                                    f"{reply.type}: {reply.message}")


def call_failed(reply: P.Failed, folder: Path | str | None = None) -> CaseFailed:
    """The submission raised during a run request; ``kind`` cuda: the CUDA context is gone (the worker exits);
    ``kind`` protocol: the worker refused the request itself (a harness error, not the submission's). With the
    submission's ``folder``, the message names the deepest frame inside it (``raised_where``)."""
    if reply.kind == "protocol":
        return CaseFailed(Status.ERROR, f"harness error: the worker refused the request: {reply.message}")
    cuda = reply.kind == "cuda"
    word = "CUDA error" if cuda else "raised"
    where = raised_where(reply.traceback, folder) if folder is not None else None
    return CaseFailed(Status.ERROR, _with_traceback(f"{word}: {exception_text(reply)}", reply.traceback, where),
                      cuda)


def protocol_broken(exc: P.ProtocolError) -> CaseFailed:
    return CaseFailed(Status.FAIL, f"the worker answered out of protocol: {exc} (its reply channel is the "
                                   f"submission's to write: fake or stray replies fail the case)")


def outside_window(reply: P.RunReply) -> str | None:
    """The verdict on what the worker says it saw around the window, or None: hooks and modes that run submission
    code inside ours, work left on other streams."""
    active = list(reply.hooks) + list(reply.modes)
    if active:
        return ("the submission left code that runs outside its calls: " + ", ".join(active)
                + "; fp4bench removed it, and the case fails because it could act outside the timed window")
    if reply.late_streams:
        return (f"{reply.late_streams} other CUDA stream(s) still had work queued when the timed window closed; "
                f"the call must be complete when its end event fires (join side streams to the current one)")
    return None


def container_label(c: P.Container) -> str:
    """How a returned container is named in a verdict: its type, or for a subclass of list, tuple or Tensor
    (whatever it calls itself) ``a subclass of list named <its name>``."""
    return c.name if c.exact or not c.base else f"a subclass of {c.base} named {c.name}"


def outputs(sample: ArenaSample, reply: P.RunReply) -> str | None:
    """None if every call returned the expected outputs; else what is wrong, for the first call that is.
    Raises ReferenceError if the reference itself is not finite."""
    if isinstance(sample, PlainSample):
        return plain_outputs(sample, reply)
    L, case, kit, check = sample.layout, sample.case, sample.kit, sample.kit.check
    calls = len(reply.containers)
    prefix = (lambda j: f"call {j + 1} of {calls}: ") if calls > 1 else (lambda j: "")
    if calls != L.calls:
        return f"expected {L.calls} calls, the worker reported {calls}"
    for j, (container, metas) in enumerate(zip(reply.containers, reply.metas)):
        problem = kit.validate_outputs(container_label(container), list(metas), case, str(sample.device))
        if problem:
            return prefix(j) + problem
        if not all(reply.copied[j]):
            return prefix(j) + "outputs were not copied back (the worker saw them change type or shape)"
    got, expected = sample.got(), sample.expected()
    # Official data's sums are exact, so a right kernel's outputs are usually bit for bit the reference's:
    # one integer comparison settles them; anything else goes through the tolerance check.
    if torch.equal(got.view(torch.int16), expected.view(torch.int16)):
        if not check.all_finite_fp16(expected):
            raise ReferenceError("the reference output holds NaN or inf")
        return None
    if check.compare(got, expected).ok:
        return None
    views_got, views_exp = sample.views()
    for j in range(L.calls):
        mismatch = check.check_outputs(views_got.outputs(j), views_exp.outputs(j))
        if mismatch:
            return prefix(j) + mismatch
    return "outputs differ from the reference"  # only reachable if the flat and per-group checks disagree


def plain_outputs(sample: PlainSample, reply: P.RunReply) -> str | None:
    """``outputs`` for a problem without an arena: what came back against the plug's OutputSpec
    (harness.problem.validate_outputs), then the values through the plug's ``check``."""
    spec = sample.plug.output_spec(sample.case)
    calls, want = len(reply.containers), sample.plan.calls
    prefix = (lambda j: f"call {j + 1} of {calls}: ") if calls > 1 else (lambda j: "")
    if calls != want:
        return f"expected {want} calls, the worker reported {calls}"
    for j, (container, metas) in enumerate(zip(reply.containers, reply.metas)):
        problem = validate_outputs(spec, container_label(container), list(metas), str(sample.device))
        if problem:
            return prefix(j) + problem
        if not all(reply.copied[j]):
            return prefix(j) + "outputs were not copied back (the worker saw them change type or shape)"
    same = torch.equal(sample.got(), sample.expected())
    for j in range(want):
        got, expected = sample.call_views(j)
        for e in ([expected] if spec.container == "tensor" else expected):
            if not bool(torch.isfinite(e).all()):
                raise ReferenceError("the reference output holds NaN or inf")
        if same:
            continue
        evidence = sample.plug.check(got, expected)
        if not evidence.ok:
            return prefix(j) + evidence.describe()
    return None


def reply(sample: ArenaSample, run: P.RunReply, outside: str | None = None) -> None:
    """Judge one run reply on ``sample``: work outside the window (``outside``: the parent's watch, then what the
    worker reports), then the outputs. Raises CaseFailed (FAIL for the submission's doing, ERROR for a reference
    that is not finite)."""
    complaint = outside or outside_window(run)
    if complaint:
        raise CaseFailed(Status.FAIL, complaint)
    asked = requested_calls(sample)
    if run.calls != asked:  # the parent divides its window by the calls it asked for, never by this claim
        raise CaseFailed(Status.FAIL, f"the reply claims {run.calls} calls; the request was for {asked} (the reply "
                                      f"path was tampered with)")
    try:
        mismatch = outputs(sample, run)
    except ReferenceError as exc:
        raise CaseFailed(Status.ERROR, f"harness error: {exc}") from None
    if mismatch:
        raise CaseFailed(Status.FAIL, mismatch)


def requested_calls(sample) -> int:
    """How many calls the parent asked for on ``sample`` (an ArenaSample or a PlainSample)."""
    return sample.plan.calls if isinstance(sample, PlainSample) else sample.layout.calls


def bracket(br: Bracket, case, run: P.RunReply, measured: Measured, sample: ArenaSample) -> float:
    """Judge a timed sample against the parent's bracket: outputs written after its end, then the worker's
    claimed window against the bracket (harness.parent.bracket). Returns the sample's time to keep (ns, all its
    calls: Bracket.charged_ns). Raises CaseFailed(FAIL)."""
    if not (math.isfinite(run.elapsed_ns) and run.elapsed_ns > 0):  # a forged claim: nothing runs in no time
        raise CaseFailed(Status.FAIL, f"the worker reported a window of {run.elapsed_ns:g} ns: a timed sample takes "
                                      f"a positive, finite time")
    if sample.changed():
        raise CaseFailed(Status.FAIL, "outputs changed after the timed window closed (work on another stream, or "
                                      "finished after the end the worker signalled); the call must be complete "
                                      "when its end event fires")
    fail, sentence = br.judge(case, run.elapsed_ns, measured)
    if fail:
        raise CaseFailed(Status.FAIL, sentence)
    return br.charged_ns(run.elapsed_ns, measured)


def bracket_verdict(br: Bracket, case) -> None:
    """Once ``case``'s timed samples are done: its bracket's strikes over the whole case (Bracket.verdict).
    Raises CaseFailed(FAIL)."""
    fail, sentence = br.verdict(case)
    if fail:
        raise CaseFailed(Status.FAIL, sentence)


def floor_ns(case, peaks: GpuPeaks | None, plug) -> float | None:
    """This GPU's physical floor for ``case`` (ns per call): ``plug``'s FLOPs and bytes at the fastest MMA and HBM
    bandwidth of ``peaks``; None without peaks (e.g. a CPU)."""
    return sol_ns_of(plug.flops(case), plug.bytes_moved(case), peaks, floor=True) if peaks else None


def floor(case, per_call_ns: float, peaks: GpuPeaks | None, plug) -> None:
    """Raises CaseFailed(FAIL) when ``per_call_ns`` is below this GPU's physical floor (``floor_ns``)."""
    low = floor_ns(case, peaks, plug)
    if low is not None and per_call_ns < low:
        raise CaseFailed(Status.FAIL, f"impossible time: {per_call_ns:.0f} ns per call is below this GPU's "
                                      f"physical floor of {low:.0f} ns ({peaks.model}: FLOPs at "
                                      f"{peaks.floor_tflops:g} TFLOP/s, bytes at {peaks.hbm_tbps:g} TB/s)")


def notes(run: P.RunReply) -> list[str]:
    """What a passing reply is noted for: timing attributes it replaced, hooks the guard refused to install."""
    return ([f"the submission replaced {name}; fp4bench measures with its own captured copy" for name in run.guard]
            + [f"{h} refused (it never ran)" for h in run.refused])


def stray_note(stray_bytes: int) -> str:
    return f"ignored {stray_bytes} stray bytes the submission wrote to the result channel"


def not_loaded(first: CaseFailed) -> str:
    """The message of every shape after the first when the submission could not be loaded (``run``)."""
    return (f"not run: the submission could not be loaded ({first.message.splitlines()[0]}; "
            f"the whole message is on shape 1)")


def earlier_failed(status: Status) -> str:
    """The message of a shape a leaderboard run skips after a failure."""
    return f"not run: an earlier shape did not pass ({status.value})"


def partner_not_loaded(names: list[str]) -> str:
    """The message of the side that loaded when its partner in ``compare`` could not."""
    return "not run: " + ", ".join(f"{n} could not be loaded" for n in names)


def partner_failed(samples: int, partner: str, status: Status) -> str:
    """The note of the side that passed a shape its partner in ``compare`` failed."""
    return f"timing stopped after {samples} sample(s): {partner} {status.value} on this shape"
