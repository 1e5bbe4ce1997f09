"""The messages between the trusted parent and the untrusted worker, as frozen records, validated on decode.

Parent -> worker: one JSON line per request on the worker's stdin (``encode``/``decode``). Worker -> parent: the
same JSON as the header of a frame (harness.channel). Everything the worker sends is a claim: the submission can
rewrite any of it. The parent decides every verdict from what it measures itself (harness.parent.bracket: the
time bracket and the outputs read at its end; harness.parent.watch: CPU used outside the window) and uses the
worker's claims only where it checks them (the window's time) or where a lie gains nothing (a description of what
came back, for the message of a case that fails anyway).

A worker's flow: ``Calibrate`` a few times before any submission code runs (the bracket's honest gap is measured
then), ``Load`` once, ``Map`` whenever the parent (re)allocates the sample buffers, then ``Run`` per sample: the
inputs are in the buffers when it arrives, with a few secret bytes wrong until the parent fixes them inside its
bracket (harness.parent.bracket), and the worker answers ``Closed`` once the window has closed and its outputs are
in the output buffer (the parent's end mark on the CPU), then ``RunReply``.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from enum import IntEnum

import msgspec

from harness.problem import DEFAULT_PROBLEM, OutputMeta


@dataclass(frozen=True)
class BufferRef:
    """How the worker finds a buffer: ``kind`` ``cuda`` (``handle``: the 64-byte IPC handle, hex) or ``memfd``
    (the descriptor arrives on the fd socket, in the order of the refs of one map request); ``nbytes``."""

    kind: str
    nbytes: int
    device: int = -1
    handle: str = ""


class ExitCode(IntEnum):
    """Process exit codes, as the official runner uses them (docs/problem.md); the worker exits
    with CUDA_FAILURE when a CUDA error left its context unusable."""

    OK = 0
    CUDA_FAILURE = 110
    NO_PIPE = 111
    CHECK_FAILED = 112
    BAD_SPEC = 113
    TIMEOUT = 114


class ProtocolError(ValueError):
    """A message that is not one of ours, or whose fields have the wrong names or types."""


#: What a run request asks for: ``check`` one untimed pass (correctness, warm-up), ``time`` one timed sample,
#: ``kernels`` one pass under the CUDA profiler (per-call kernel time), ``profile`` the profiler's table.
RUN_KINDS = ("check", "time", "kernels", "profile")


NO_BUFFER = BufferRef("none", 0)


@dataclass(frozen=True)
class Calibrate:
    """Before ``Load``: one empty window through the whole bracket protocol (``seq`` as in ``Run``), so the parent
    measures the gap an honest worker leaves between its window and the parent's bracket (``seq`` 0: no bracket, the
    first request, answered once the worker is up). ``flags``: the parent's
    flag words (CUDA; mapped on the first request and kept); ``profiler``: start the CUDA profiler (CUPTI) up
    first, so its threads are born before any submission code runs (its start-up, 5-8 s on an H200 host, is not
    paid in the first kernel-time pass); ``idle``: the window holds one call that returns once the GPU has reached
    the start mark, so the end mark and the end flag are queued on an idle GPU, as a host-bound submission's are."""

    seq: int
    flags: BufferRef = NO_BUFFER
    profiler: bool = False
    idle: bool = False


@dataclass(frozen=True)
class Load:
    """Import the submission at ``path``, a submission of problem ``problem`` (a name harness.plugs knows):
    ``task`` is that problem's package for it (harness.worker.task_alias)."""

    path: str
    problem: str = DEFAULT_PROBLEM


@dataclass(frozen=True)
class Map:
    """The sample buffers. ``device``: kind ``alloc`` on CUDA (the worker allocates ``nbytes`` of its own device
    memory, which its kernels read at full speed, and answers its IPC handle in ``Mapped``), else the parent's."""

    device: BufferRef
    host: BufferRef
    output: BufferRef


@dataclass(frozen=True)
class Run:
    """``sizes``: what the problem's sample buffers lay a sample out from (harness.problem.SampleBuffers
    ``sizes_of`` / ``layout_of_sizes``; nvfp4_group_gemm: (M, N, K) per group), opaque to the harness;
    ``watch``: report
    hooks left outside the window (timed samples); ``host_offset``: where this sample's host scales start in the
    host buffer (bytes; the parent fills two slots in turn); ``seq``: this request's number in the flag words
    (CUDA: the worker writes it to ``ready`` before its window, waits until ``go`` holds it, and writes it to
    ``end_calls`` after its end mark and to ``end_copy`` once its outputs are in the output buffer); ``ahead``:
    kept for compatibility, every timed run is answered ``Closed`` first. ``plan``: for a problem without an arena
    (every one but nvfp4_group_gemm), a harness.plan.Plan as JSON, and ``sizes`` empty."""

    sizes: tuple[tuple[int, ...], ...]
    calls: int
    kind: str
    watch: bool = True
    host_offset: int = 0
    ahead: bool = False
    seq: int = 0
    plan: str = ""


@dataclass(frozen=True)
class Exit:
    pass


@dataclass(frozen=True)
class Loaded:
    device: str
    window: str        # "native": the window's marks are held in C; "python": the fallback (no compiler)


@dataclass(frozen=True)
class Failed:
    """``kind``: import | entry | exception | cuda | map | protocol. ``type``, ``message``, ``traceback``: the
    exception's (``message`` empty when ``str()`` of it failed: ``str_raised`` names what that raised,
    ``str_nonstring`` says it returned something else); ``callables``: for ``entry`` (no callable
    ``custom_kernel``), the public callables the module does define."""

    kind: str
    type: str
    message: str
    traceback: str = ""
    str_raised: str = ""
    str_nonstring: bool = False
    callables: tuple[str, ...] = ()


@dataclass(frozen=True)
class Closed:
    """The window of a timed ``Run`` (or a ``Calibrate``) has closed, its outputs are in the output buffer and the
    device is idle; the ``RunReply`` follows a ``Run``. ``elapsed_ns``: the window the worker claims (start mark to
    end mark, all calls)."""

    elapsed_ns: float = 0.0


@dataclass(frozen=True)
class Mapped:
    """``device``: the worker's own device buffer (Map.device of kind ``alloc``), else NO_BUFFER."""

    device: BufferRef = NO_BUFFER


@dataclass(frozen=True)
class Oversized:
    """Made by the parent's reader (harness.channel), never sent: a frame whose header was ``bytes`` long, over the
    channel's limit, was skipped."""

    bytes: int


@dataclass(frozen=True)
class Container:
    """What one call returned, by type: ``name`` (module.qualname, as the type calls itself), ``exact``: the type
    is list, tuple or torch.Tensor itself (identity, not name); ``base``: which of list, tuple, torch.Tensor a
    type that is not exact derives from ("" none)."""

    name: str
    exact: bool
    base: str = ""


@dataclass(frozen=True)
class RunReply:
    """Claims about one run request. ``elapsed_ns``: the window, all calls (0 for untimed kinds); ``containers``:
    each call's returned container (its type, ``Container``); ``metas`` per call per
    item; ``copied`` per call per group: whether that output was copied to the output buffer (a plain fp16
    tensor of the expected shape on the expected device); ``late_streams``: torch pool streams whose queued work
    finished after the end event; ``hooks``: trace/profile/monitoring hooks and
    signal handlers found and removed after the calls; ``refused``: hooks the guard refused to install (they
    never ran, e.g. ``sys.addaudithook``); ``modes``: torch function/dispatch modes left active;
    ``guard``: timing attributes the submission replaced (the worker measures with captured ones);
    ``kernel_ns``: the GPU's busy time per call, overlapping kernels counted once (``kernels``);
    ``profile``: the profiler's table (``profile``)."""

    elapsed_ns: float
    calls: int
    containers: tuple[Container, ...]
    metas: tuple[tuple[OutputMeta, ...], ...]
    copied: tuple[tuple[bool, ...], ...]
    late_streams: int = 0
    hooks: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    guard: tuple[str, ...] = ()
    kernel_ns: float | None = None
    profile: str = ""


MESSAGES = {cls.__name__: cls for cls in (Calibrate, Load, Map, Run, Exit, Loaded, Failed, Mapped, Closed, RunReply,
                                          Oversized)}


def to_dict(msg) -> dict:
    """``msg`` as a JSON-able dict (built-in types only) with its class name under ``"msg"``."""
    return {"msg": type(msg).__name__, **msgspec.to_builtins(msg)}


def encode(msg) -> str:
    return msgspec.json.encode(to_dict(msg)).decode()


def _readable(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's ``Expected `int`, got `str` - at `$.m[0]``` as (``.m[0]``, ``expected int, got str``)."""
    text, _, where = str(exc).partition(" - at ")
    text = text.replace("`", "")
    return where.strip("`").removeprefix("$"), text[:1].lower() + text[1:]


def from_dict(d, expect: tuple = ()):
    """The message in ``d`` (a decoded JSON object), checked field by field against its class's type hints by
    msgspec (strict: no bool for a number, no str for an int); ``expect``: the classes allowed here. Raises
    ProtocolError naming what was expected and what came, and where (``Run.sizes[0][0]: expected int, got float``)."""
    if not isinstance(d, dict) or not isinstance(d.get("msg"), str):
        raise ProtocolError(f"expected a message object with a 'msg' name, got {str(d)[:80]!r}")
    body = dict(d)
    name = body.pop("msg")
    cls = MESSAGES.get(name)
    if cls is None or (expect and cls not in expect):
        want = ", ".join(c.__name__ for c in expect) if expect else ", ".join(MESSAGES)
        raise ProtocolError(f"expected one of {want}, got {name!r}")
    unknown = set(body) - _names(cls)
    if unknown:
        raise ProtocolError(f"{name}: unknown field(s) {sorted(unknown)}")
    try:
        return msgspec.convert(body, cls)
    except msgspec.ValidationError as exc:
        where, text = _readable(exc)
        raise ProtocolError(f"{name}{where}: {text}") from None


@functools.cache
def _names(cls) -> frozenset:
    return frozenset(f.name for f in dataclasses.fields(cls))


def decode(line: str | bytes, expect: tuple = ()):
    """``from_dict`` of one JSON line. Raises ProtocolError for malformed JSON too."""
    try:
        d = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"expected a JSON message, got {str(line)[:80]!r} ({exc})") from None
    return from_dict(d, expect)
