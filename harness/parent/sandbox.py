"""The worker's confinement: what this machine offers, what one worker may touch, and the command that starts it.

A worker (``python -m harness.worker``, the untrusted side) runs confined by a well-kept mechanism, never by code
of ours that a submission could argue with:

- ``bwrap`` (bubblewrap) where it is installed and works: a new mount namespace holding read-only binds of what
  the worker may read, read-write binds of what it may write, a minimal /dev with the GPU nodes, a fresh /proc,
  its own network namespace, every capability dropped;
- otherwise Landlock (kernel >= 5.13), applied by the worker's first code (``harness.confine``), with ``unshare``
  for the network (and PID/IPC) namespaces.

Either way ``harness.confine`` then sets resource limits, a Landlock domain (bwrap: for its process scoping:
no ptrace, ``/proc/<pid>/mem`` or signals outside the sandbox), drops capabilities and makes the worker
non-dumpable, all before the worker imports anything of the submission. The parent makes itself non-dumpable
(``protect_parent``) before it starts a confined worker.

What a worker may touch (``Plan``): read the checkout (other variants' folders under submissions/ excepted), its
submission's folder, Python's and torch's installs (``sys.prefix``, ``sys.path``), the system folders (/usr, /etc,
/opt, ...), /sys and /proc, the GPU device nodes; write only its own /proc entry, a scratch folder (``TMPDIR``,
removed when the worker ends) and its own variant's caches: a per-variant root, read-only
(``<cache>/sandbox/<variant>-<hash of its path>``), holding ``build/`` ($FP4BENCH_CACHE: any folder the variant's
code names, such as an export's, which keeps its source variant's), ``_jit/{triton,inductor,torch_extensions,cuda,
cute_dsl}`` (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TORCH_EXTENSIONS_DIR, CUDA_CACHE_PATH, CUTE_DSL_CACHE_DIR)
and ``_home`` (HOME), all writable. The parent's built timing window is read from ``$FP4BENCH_NATIVE``, read-only.
The results store, $HOME and other variants' caches are not visible. The PID and IPC namespaces (and /dev/shm) are
the worker's own unless the run uses CUDA (settings ``isolate_pid_ipc``): legacy CUDA IPC, which maps the parent's
sample buffers, needs the parent's.

The command lines themselves (bwrap's, unshare's, the cache environment) are built by
harness.parent.sandbox_command.

Modes (``--sandbox``): ``auto`` uses what the machine has and records which protections held; ``strict``
refuses to run (SandboxError naming each missing protection) unless all of them hold; ``off`` starts the worker
as before, unconfined.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import site
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness import confine
from harness.parent import proc_cleanup
from harness.parent import sandbox_command as command
from harness.parent.sandbox_offer import Offer, probe, protect_parent
from harness.parent.registry import ROOT, SUBMISSIONS_DIR, Variant
from harness.parent.sandbox_command import BUILD, NATIVE, PROCESS_READ, Launch, within
from harness.parent.settings import Settings
from harness.results.store import DEFAULT_DB

MODES = ("auto", "strict", "off")
#: Written by a Landlock-confined worker besides its scratch and caches: its own /proc entry (the process that applies
#: the rules resolves /proc/self to itself). Measured on the H200 (2026-12-01, docs/journal.md): without
#: a write right beneath /proc, cuInit fails with error 304 ("OS call failed"); with it for the whole of /proc,
#: or for the worker's own entry alone, CUDA starts.
_OWN_PROC = "/proc/self"

#: Every protection a confined worker can get, by the name the run record lists it under.
PROTECTIONS = {
    "writes": "writes only to its scratch folder, its own variant's caches and its own /proc entry",
    "reads": "no view of the results store, $HOME beyond its caches, or other variants' caches",
    "network": "no network (a network namespace of its own: loopback only)",
    "parent": "cannot read the parent process's memory or environment (/proc/<parent>/mem, environ)",
    "processes": "cannot trace, read or signal any process outside its sandbox (other workers included)",
    "capabilities": "no capabilities and no set-user-ID gains (root's powers dropped)",
    "limits": "resource limits: address space, file size, processes, CPU time (configs/run.yml sandbox:)",
    "pid-ipc": "its own PID and IPC namespaces and /dev/shm (other processes invisible)",
}
_SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
                "/run/nvidia-persistenced")
_JIT = ("triton", "inductor", "torch_extensions", "cuda", "cute_dsl")


class SandboxError(RuntimeError):
    """``--sandbox strict`` cannot be honoured here, or a mode is unknown; the message is one line and names
    each missing protection and why."""


@dataclass(frozen=True)
class Sandbox:
    """What the user asked for: ``mode`` (auto | strict | off), ``writable`` extra folders the worker may write
    (for logs a test reads back; the organiser's choice), ``hide`` extra paths it must not see (e.g. a --db
    store inside the checkout). The default store ($FP4BENCH_DB, else results/) is always hidden."""

    mode: str = "auto"
    writable: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise SandboxError(f"--sandbox must be one of {', '.join(MODES)}, got {self.mode!r}")


def cache_base() -> Path:
    """The parent's build cache: ``$FP4BENCH_CACHE``, else ``~/.cache/fp4bench``."""
    return Path(os.environ.get("FP4BENCH_CACHE") or Path.home() / ".cache" / "fp4bench").resolve()


def variant_cache(variant: Variant) -> Path:
    """The variant's own cache root (its ``$FP4BENCH_CACHE`` inside the sandbox): one per submission file."""
    digest = hashlib.sha256(str(Path(variant.path).resolve()).encode()).hexdigest()[:10]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", variant.name)
    return cache_base() / "sandbox" / f"{safe}-{digest}"


def _default_store() -> Path:
    db = os.environ.get("FP4BENCH_DB")
    return Path(db).resolve() if db else DEFAULT_DB


@dataclass(frozen=True)
class Plan:
    """One variant's confinement, resolved against this machine: ``mechanism`` (bwrap | landlock | none | off),
    ``held`` protections (keys of PROTECTIONS) and ``missing`` ones with the reason, the paths and limits.
    Build it with ``plan_for``; start workers with ``launch``."""

    mode: str
    mechanism: str
    held: tuple[str, ...]
    missing: tuple[tuple[str, str], ...]
    isolate_pid_ipc: bool = False
    limits: tuple[tuple[str, int], ...] = ()
    cache: Path | None = None
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    hide: tuple[Path, ...] = ()
    offer: Offer | None = field(default=None, compare=False)

    @property
    def summary(self) -> str:
        """One line for the run record: ``off``, or the mode, the mechanism, what held and what did not."""
        if self.mode == "off":
            return "off"
        abi = self.offer.landlock_abi if self.offer else 0
        how = self.mechanism
        if abi and self.mechanism != "none":
            how = f"landlock{abi}" if self.mechanism == "landlock" else f"bwrap+landlock{abi}"
        text = f"{self.mode} via {how}: held {', '.join(self.held) or 'nothing'}"
        if self.missing:
            text += "; not held: " + "; ".join(f"{p} ({why})" for p, why in self.missing)
        return text

    def launch(self, argv: list[str], env: dict, cwd: Path) -> Launch:
        """The confined form of starting ``argv`` (a ``python -m harness.worker`` command) with ``env`` in
        ``cwd``: a fresh scratch folder, the parent made non-dumpable, the environment pointed at the variant's
        caches and the scratch folder, and the command wrapped. Off: ``argv``, ``env``, ``cwd`` unchanged."""
        if self.mode == "off":
            return Launch(list(argv), dict(env), Path(cwd))
        protect_parent()
        writable = command.writable_caches(self.cache) + [w for w in self.write if os.path.isdir(w)]
        hide = _hidden(self.read, self.hide)  # now: the store's folder may have been made since the plan
        scratch = Path(tempfile.mkdtemp(prefix="fp4bench-worker-")).resolve()
        native = cache_base() / NATIVE
        env = {**env, **command.cache_env(self.cache, native)}
        python = [argv[0], "-m", "harness.confine"]
        orders = {"limits": dict(self.limits), "landlock": "none",
                  "drop_caps": self.mechanism != "bwrap" and self.offer.root and self.offer.cap_drop}
        if self.offer.landlock_abi and self.mechanism == "landlock":
            orders.update(landlock="full", read=[*self.read, *PROCESS_READ, str(native)],
                          write=[*writable, str(scratch), "/dev/shm", _OWN_PROC], devices=command.device_files(),
                          hide=hide)
        elif self.offer.landlock_abi:
            orders["landlock"] = "scope"
        env[confine.ENV] = json.dumps(orders)
        if self.mechanism == "bwrap":
            env["TMPDIR"] = "/tmp"
            return Launch(command.bwrap(self, writable, scratch, Path(cwd), hide, native) + python, env, Path(cwd),
                          scratch, True)
        env["TMPDIR"] = str(scratch)
        return Launch(command.unshare(self) + python, env, Path(cwd), scratch, self.isolate_pid_ipc)


def _make_cache(cache: Path) -> None:
    """Make a variant's cache folders. Raises SandboxError."""
    try:
        for f in [cache / "_jit" / j for j in _JIT] + [cache / "_home" / ".cache", cache / BUILD]:
            f.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SandboxError(f"cannot make the variant's cache folder {exc.filename}: {exc.strerror} "
                           f"(set $FP4BENCH_CACHE to a writable folder)") from None


def _read_roots(variant: Variant) -> list[str]:
    """What a worker may read: existing absolute paths (symbolic links as links), shortest first; never "/" nor
    the temporary folder or an ancestor of it (a script's folder on sys.path can be /tmp: the worker's /tmp is its
    scratch). What they hold but the worker must not see is hidden at launch (``_hidden``)."""
    candidates = [Path(p) for p in _SYSTEM_READ]
    candidates += [Path(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}]
    candidates += [Path(sys.executable).resolve().parent, ROOT, Path(variant.path).resolve().parent]
    # Not the parent's own sys.path entries under submissions/ (an in-process caller that imported a variant has
    # one): a read root inside a hidden variant folder is bound again on top of the hiding.
    candidates += [Path(p) for p in sys.path if p and os.path.isabs(p)
                   and not within(Path(p).resolve(), SUBMISSIONS_DIR.resolve())]
    if site.USER_SITE:
        candidates.append(Path(site.USER_SITE))
    tmp = Path(tempfile.gettempdir()).resolve()
    roots = {str(c) if c.is_symlink() else str(c.resolve()) for c in candidates if c.exists()}
    return sorted((r for r in roots if not within(tmp, Path(r))), key=lambda r: (len(r), r))


def _hidden(read: tuple[str, ...], extra: tuple[Path, ...]) -> list[str]:
    """Existing paths inside the read roots that the worker must not see: the store (its folder when that is a
    ``results`` folder of its own), $HOME, the build cache, and ``extra`` (the plan's: other variants' folders
    under submissions/, the request's own)."""
    store = _default_store()
    folder = store.parent if store.parent != ROOT and store.parent.name == "results" else None
    wanted = [folder] if folder else [store, Path(f"{store}-wal"), Path(f"{store}-shm"), Path(f"{store}-journal")]
    wanted += [Path.home().resolve(), cache_base(), *extra]
    inside = [str(w) for w in wanted if w.exists() and any(within(w, Path(r)) for r in read)]
    return sorted(set(inside))


def _limits(settings: Settings, cuda: bool) -> tuple[tuple[str, int], ...]:
    mib = 1 << 20
    limits = [("RLIMIT_FSIZE", settings.limit_file_size_mb * mib), ("RLIMIT_NPROC", settings.limit_processes),
              ("RLIMIT_CPU", int(settings.limit_cpu_s)), ("RLIMIT_CORE", 0)]
    if not cuda:  # the CUDA driver reserves address ranges far beyond any memory it will use
        limits.insert(0, ("RLIMIT_AS", settings.limit_address_space_mb * mib))
    return tuple(limits)


def _limit_text(name: str, value: int, root: bool) -> str:
    text = {"RLIMIT_AS": f"address space {value >> 20} MiB", "RLIMIT_FSIZE": f"file size {value >> 20} MiB",
            "RLIMIT_NPROC": f"processes {value}", "RLIMIT_CPU": f"CPU time {value} s",
            "RLIMIT_CORE": "no core files"}[name]
    return text + (" (not enforced: the kernel exempts root)" if name == "RLIMIT_NPROC" and root else "")


def _isolate(settings: Settings, cuda: bool) -> bool:
    """Whether the worker gets its own PID and IPC namespaces: settings.isolate_pid_ipc, ``auto`` = not on CUDA
    (the worker maps the parent's sample buffers with legacy CUDA IPC, which needs the parent's)."""
    return {"always": True, "never": False}.get(settings.isolate_pid_ipc, not cuda)


def _protections(offer: Offer, isolate: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """(held, missing with reasons), in PROTECTIONS order, for a worker confined with what ``offer`` has and the
    PID/IPC namespaces isolated or not (``isolate``; when not, ``pid-ipc`` is neither held nor missing)."""
    mech = offer.mechanism
    fs_why = f"no file-system confinement: bwrap {offer.bwrap_error} and no Landlock in this kernel"
    caps = mech == "bwrap" or offer.cap_drop
    pid_ns = isolate and (offer.bwrap_pid_ipc if mech == "bwrap" else offer.unshare_pid_ipc)
    landlock = f"Landlock ABI {offer.landlock_abi}" if offer.landlock_abi else "no Landlock"
    verdicts = {
        "writes": (mech != "none", fs_why),
        "reads": (mech != "none", fs_why),
        "network": (mech == "bwrap" or offer.unshare_net,
                    f"no network namespace: unshare {offer.unshare_error or 'failed'}"),
        "parent": (offer.landlock_abi > 0 or pid_ns or (caps and offer.non_dumpable),
                   "no Landlock, no PID namespace, and the worker keeps CAP_SYS_PTRACE or prctl is unavailable"),
        "processes": (offer.landlock_abi >= 6 or pid_ns,
                      f"needs Landlock ABI 6 (signal scoping) or a PID namespace; here: {landlock}"
                      + ("" if isolate else ", PID namespace shared (isolate_pid_ipc)")),
        "capabilities": (caps, "this process lacks CAP_SETPCAP, so the worker cannot drop its capabilities"),
        "limits": (True, ""),
        "pid-ipc": (pid_ns, "namespaces unavailable: " + (offer.bwrap_error or offer.unshare_error or "?")),
    }
    if not isolate:
        del verdicts["pid-ipc"]
    held = [name for name, (ok, _) in verdicts.items() if ok]
    return held, [(name, why) for name, (ok, why) in verdicts.items() if not ok]


def _check_folder(variant: Variant) -> None:
    """Raises SandboxError when ``variant``'s folder, which a confined worker reads whole, is the temporary folder
    (the worker's own /tmp is its scratch, so it would not find the file), $HOME (hidden from the worker) or an
    ancestor of either."""
    folder = Path(variant.path).resolve().parent
    for place, why in ((Path(tempfile.gettempdir()).resolve(), "its own /tmp is an empty scratch folder"),
                       (Path.home().resolve(), "it never sees your home folder")):
        if within(place, folder):
            raise SandboxError(
                f"expected a submission in a folder of its own, got {variant.path} directly in {folder}: a confined "
                f"worker reads its submission's whole folder and {why}; move it into a folder such as "
                f"{place / 'mykernel'} (or pass --sandbox off)")


def plan_for(variant: Variant, request: Sandbox, settings: Settings, cuda: bool) -> Plan:
    """The confinement ``variant``'s workers get under ``request`` on this machine (``cuda``: the run uses a
    GPU; then the PID/IPC namespaces are shared unless settings.isolate_pid_ipc is ``always``, and no address-
    space limit is set). Makes the variant's cache folders. Raises SandboxError for ``strict`` when any
    protection is missing (naming each), when the cache folders cannot be made, or, where the file system is
    confined, for a submission directly in the temporary folder or $HOME (``_check_folder``)."""
    if request.mode == "off":
        return Plan("off", "off", (), ())
    offer = probe()
    isolate = _isolate(settings, cuda)
    held, missing = _protections(offer, isolate)
    if request.mode == "strict" and missing:
        raise SandboxError("--sandbox strict: this machine cannot give the worker " + "; ".join(
            f"{name} ({why})" for name, why in missing) + " (see `fp4bench doctor`)")
    if offer.mechanism != "none":
        _check_folder(variant)
    cache = variant_cache(variant)
    read = _read_roots(variant)
    _make_cache(cache)
    folder = Path(variant.path).resolve().parent
    others = [d for d in SUBMISSIONS_DIR.iterdir() if d.is_dir() and d != folder] if SUBMISSIONS_DIR.is_dir() else []
    return Plan(request.mode, offer.mechanism, tuple(held), tuple(missing), isolate and "pid-ipc" in held,
                _limits(settings, cuda), cache, tuple(read),
                tuple(str(Path(w).resolve()) for w in request.writable),
                tuple(Path(h).resolve() for h in [*request.hide, *others]), offer)


def checked(mode: str, variants, settings: Settings, cuda: bool, store: Path | None = None) -> Sandbox:
    """The request for ``--sandbox mode`` with ``store`` (the results store a run writes) hidden, after making
    every variant's plan once, so a strict run that cannot hold fails before any work. Raises SandboxError."""
    request = Sandbox(mode, hide=(Path(store).resolve(),) if store else ())
    for variant in variants:
        plan_for(variant, request, settings, cuda)
    return request


def doctor_lines(settings: Settings, cuda: bool) -> list[str]:
    """What ``fp4bench doctor`` prints: the machine's offer, then what a run (auto) would get here."""
    offer = probe()
    reaper = proc_cleanup.become_subreaper()  # what every run does before its first worker
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    lines = [
        f"running as root: {yes(offer.root)}",
        f"bubblewrap: {offer.bwrap or 'not installed'}" + (f"; unusable: {offer.bwrap_error}"
                                                          if offer.bwrap and offer.bwrap_error else ""),
        f"  with PID/IPC namespaces: {yes(offer.bwrap_pid_ipc)}; needs a user namespace: {yes(offer.bwrap_user_ns)}",
        "Landlock: " + (f"ABI {offer.landlock_abi}" if offer.landlock_abi else "not available"),
        f"unshare: network namespace {yes(offer.unshare_net)}, PID/IPC namespaces {yes(offer.unshare_pid_ipc)}"
        + (f" ({offer.unshare_error})" if offer.unshare_error else "")
        + ("; needs a user namespace" if offer.unshare_user_ns else ""),
        f"unprivileged user namespaces: {yes(offer.user_namespaces)}",
        f"capabilities can be dropped: {yes(offer.cap_drop)}",
        f"non-dumpable parent (prctl): {yes(offer.non_dumpable)}",
        f"orphans of a worker come to fp4bench (child subreaper): {yes(not reaper)}"
        + (f" ({reaper})" if reaper else ""),
        f"GPU run: {yes(cuda)}",
    ]
    isolate = _isolate(settings, cuda)
    held, missing = _protections(offer, isolate)
    lines.append(f"a run (--sandbox auto) would use {offer.mechanism}:")
    lines += [f"  held      {name:<13} {PROTECTIONS[name]}" for name in held]
    lines += [f"  NOT held  {name:<13} {why}" for name, why in missing]
    limits = _limits(settings, cuda)
    lines.append("  limits: " + ", ".join(_limit_text(name, value, offer.root) for name, value in limits))
    if not isolate:
        lines.append("  shared    pid-ipc       PID and IPC namespaces shared with the parent (isolate_pid_ipc: "
                     f"{settings.isolate_pid_ipc}; legacy CUDA IPC needs them): the parent's command line stays "
                     "readable, so give a secret seed by $POPCORN_SEED, never --seed")
    lines.append("--sandbox strict would " + ("run" if not missing else
                                              "refuse: " + ", ".join(n for n, _ in missing)))
    return lines
