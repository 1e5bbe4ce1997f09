"""The command lines that start a confined worker: bubblewrap's or unshare's arguments, the environment that points
the worker at its variant's caches, and the ``Launch`` handed to Popen.

harness.parent.sandbox decides what a worker may touch (its ``Plan``) and calls these to turn that into a command;
nothing here decides a protection.
"""
from __future__ import annotations

import os
import shutil
import site
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.parent.sandbox import Plan

#: Read by a Landlock-confined worker besides its read roots (bwrap mounts its own /proc and /sys instead).
PROCESS_READ = ("/proc", "/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: The folder under the parent's build cache that holds the built C timing window ($FP4BENCH_NATIVE).
NATIVE = "native"
#: The variant's $FP4BENCH_CACHE inside the sandbox, writable throughout (any subfolder its code names: an export
#: builds into the folder its source variant names). The C window stays outside it, read-only ($FP4BENCH_NATIVE).
BUILD = "build"


def within(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or lies below it (both as given: resolve them first where links matter)."""
    return path == root or root in path.parents


@dataclass(frozen=True)
class Launch:
    """How to start one worker: ``argv``, ``env`` and ``cwd`` for Popen, its ``scratch`` folder (None when
    unconfined; removed by ``close``) and whether ``argv`` runs the worker under a wrapper that reports a
    signal death as exit code 128 + signal (bwrap)."""

    argv: list[str]
    env: dict
    cwd: Path
    scratch: Path | None = None
    wrapped: bool = False

    def exit_code(self, code: int | None) -> int | None:
        """The worker's own exit status from the wrapper's (``-N`` for a death by signal N, as Popen says)."""
        if self.wrapped and code is not None and 128 < code < 128 + 65:
            return -(code - 128)
        return code

    def close(self) -> None:
        """Remove the scratch folder (after the worker has ended)."""
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)



def cache_env(cache: Path, native: Path) -> dict:
    """The environment variables that point a worker at its variant's cache root ``cache`` (build folder, JIT
    caches, HOME) and at the built timing window ``native`` (read-only)."""
    jit = cache / "_jit"
    home = cache / "_home"
    env = {"FP4BENCH_CACHE": str(cache / BUILD), "FP4BENCH_NATIVE": str(native),
           "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "TRITON_CACHE_DIR": str(jit / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(jit / "inductor"),
           "TORCH_EXTENSIONS_DIR": str(jit / "torch_extensions"), "CUDA_CACHE_PATH": str(jit / "cuda"),
           # CuTe DSL's JIT file cache defaults to $TMPDIR/<user>/cutlass_python_cache: the scratch folder,
           # removed with each worker, so every worker would compile again.
           "CUTE_DSL_CACHE_DIR": str(jit / "cute_dsl")}
    if site.USER_BASE and os.path.isdir(site.USER_BASE):
        env["PYTHONUSERBASE"] = site.USER_BASE  # the parent's user site stays on the path, read-only
    return env


def writable_caches(cache: Path) -> list[str]:
    """The folders of the variant's cache root ``cache`` a worker may write."""
    return [str(cache / "_jit"), str(cache / "_home"), str(cache / BUILD)]


def device_files() -> list[str]:
    """The device files a worker may open read-write: /dev/null and kin, and every NVIDIA node."""
    nvidia = sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir())
    caps = sorted(str(p) for p in Path("/dev/nvidia-caps").glob("*")) if Path("/dev/nvidia-caps").is_dir() else []
    return [d for d in DEVICES if os.path.exists(d)] + nvidia + caps


def bwrap(plan: Plan, writable: list[str], scratch: Path, cwd: Path, hide: list[str], native: Path) -> list[str]:
    """bubblewrap's arguments, up to and including ``--``, for ``plan``: ``scratch`` as /tmp, the plan's read
    roots read-only, ``writable`` bound writable, the ``hide`` paths covered (an empty tmpfs for a folder,
    /dev/null for a file), the device nodes, a fresh /proc, ``native`` read-only; then ``cwd``."""
    cmd = [shutil.which("bwrap"), "--die-with-parent", "--unshare-net", "--cap-drop", "ALL",
           *(["--unshare-user"] if plan.offer.bwrap_user_ns else [])]
    if plan.isolate_pid_ipc:
        cmd += ["--unshare-pid", "--unshare-ipc"]
    cmd += ["--bind", str(scratch), "/tmp"]  # first: later binds inside /tmp (pytest's folders) go on top
    # Roots inside a hidden path (Python under $HOME, say) are bound after the hiding, on top of it.
    inner = [r for r in plan.read if any(within(Path(r), Path(h)) for h in hide)]
    cmd += _bind_read([r for r in plan.read if r not in inner])
    cmd += ["--dev", "/dev"]
    for dev in device_files():
        if dev not in DEVICES:
            cmd += ["--dev-bind", dev, dev]
    cmd += ["--tmpfs", "/dev/shm"] if plan.isolate_pid_ipc else ["--bind", "/dev/shm", "/dev/shm"]
    cmd += ["--proc", "/proc", "--ro-bind", "/sys", "/sys"]
    hidden_dirs = [h for h in hide if os.path.isdir(h)]
    for h in hide:
        cmd += ["--tmpfs", h] if h in hidden_dirs else ["--ro-bind", "/dev/null", h]
    cmd += _bind_read(inner)
    cmd += ["--ro-bind", str(plan.cache), str(plan.cache)]  # the folders below, bound writable next
    for w in writable:
        cmd += ["--bind", w, w]
    if native.is_dir():
        cmd += ["--ro-bind", str(native), str(native)]
    for h in hidden_dirs:
        cmd += ["--remount-ro", h]
    return cmd + ["--remount-ro", "/", "--chdir", str(cwd), "--"]


def _bind_read(paths: list[str]) -> list[str]:
    cmd: list[str] = []
    for path in paths:
        cmd += ["--symlink", os.readlink(path), path] if os.path.islink(path) else ["--ro-bind", path, path]
    return cmd


def unshare(plan: Plan) -> list[str]:
    """unshare's arguments, up to and including ``--`` (or a shell that reports the worker's death by signal),
    for ``plan``: a network namespace, and PID/IPC ones when the plan isolates them; [] without the network
    protection."""
    if "network" not in plan.held:
        return []
    cmd = [shutil.which("unshare"), "--net", *(["--user", "--map-root-user"] if plan.offer.unshare_user_ns
                                               else [])]
    if not plan.isolate_pid_ipc:
        return cmd + ["--"]
    # The first process of a PID namespace ignores its own fatal signals (abort() would not kill it): a shell
    # is that process and the worker its child, whose death by signal N it reports as exit code 128 + N.
    return cmd + ["--pid", "--fork", "--mount-proc", "--ipc", "--kill-child", "--", "/bin/sh", "-c",
                  '"$@"; exit $?', "fp4bench-init"]
