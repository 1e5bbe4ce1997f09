"""The sandboxed worker (harness/parent/sandbox.py, harness/confine.py): escape.py's attempts blocked under strict with
every mechanism this machine has, and succeeding under off; strict refusing to run without a protection, naming
it; what held recorded in the run; one variant unable to write another's cache; the limits in force inside."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import shutil
import socket
import sqlite3

import pytest
from click.testing import CliRunner
from tests.conftest import SHARED_CASES

from harness import confine
from harness.cli.commands import main
from harness.parent import sandbox
from harness.parent.registry import ROOT, read_variant
from harness.parent.runner import RunOptions, run
from harness.parent.sandbox import Launch, Sandbox, SandboxError, plan_for
from harness.parent.settings import Settings, SettingsError, load_settings
from harness.results.record import RunRecord, Status, run_from_dict
from harness.results.store import ResultStore, StoreRecorder
from problems.nvfp4_group_gemm.spec import Case, ShapeSet

ONE = ShapeSet("t", (Case((64, 40), (128, 256), (256, 512), 2, 7),))
FAST = Settings(import_s=60, first_call_s=60, call_s=60)
ATTEMPTS = ("write problems/", "write store", "read parent environ", "open parent mem", "connect 127.0.0.1")
#: A machine with nothing to confine a worker with: no bwrap, no Landlock, no namespaces, caps not droppable.
BARE = sandbox.Offer(root=True, bwrap="", bwrap_error="not installed", bwrap_pid_ipc=False, landlock_abi=0,
                     unshare_net=False, unshare_pid_ipc=False, unshare_error="not installed", user_namespaces=False,
                     cap_drop=False, non_dumpable=True)


def _mechanisms():
    """The file-system mechanisms this machine has, each forced in turn (landlock: as if bwrap were absent), and
    as root each also inside a user namespace (what a container without CAP_SYS_ADMIN gets)."""
    offer = sandbox.probe()
    out = []
    if offer.mechanism == "bwrap":
        out.append(pytest.param(offer, id="bwrap"))
    if offer.landlock_abi:
        out.append(pytest.param(dataclasses.replace(offer, bwrap_error="set aside by the test"), id="landlock"))
    if offer.root and offer.user_namespaces:
        out += [pytest.param(dataclasses.replace(p.values[0], bwrap_user_ns=True, unshare_user_ns=True),
                             id=f"{p.id}-userns") for p in list(out)]
    return out or [pytest.param(None, id="none", marks=pytest.mark.skip(reason="neither bwrap nor Landlock here"))]


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 (escape.py's network target); yields its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@pytest.fixture
def escape_beside_store(tmp_path, monkeypatch):
    """escape.py in a folder of its own that also holds the default results store ($FP4BENCH_DB, made), so the
    store lies inside what the worker may read and only the sandbox's hiding keeps it out of reach; the store is
    named to escape.py as its target (ESCAPE_STORE). The checkout's own results/ is never used. Yields
    (escape.py's path, the store's path)."""
    folder = tmp_path / "escaper"
    (folder / "results").mkdir(parents=True)
    for name in ("escape.py", "honest_torch.py"):
        shutil.copy(SHARED_CASES / name, folder)
    store = folder / "results" / "fp4bench.sqlite"
    ResultStore(store).close()
    monkeypatch.setenv("FP4BENCH_DB", str(store))
    monkeypatch.setenv("ESCAPE_STORE", str(store))
    return folder / "escape.py", store


def _report(path) -> dict[str, str]:
    """escape.py's report: attempt -> 'ok' or 'blocked'."""
    out = {}
    for line in path.read_text().splitlines():
        verdict, _, what = line.partition(" ")
        out[what.split(":")[0]] = verdict
    return out


def _tree(folder) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


@pytest.mark.parametrize("offer", _mechanisms())
def test_escape_is_blocked_under_strict_and_nothing_lands(offer, tmp_path, monkeypatch, listener,
                                                          escape_beside_store):
    """Every attempt blocked and reported, the honest computation passes, the checkout and the default store
    unchanged, and the run records that every protection held."""
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv("ESCAPE_ROOT", str(ROOT))
    monkeypatch.setenv("ESCAPE_REPORT", str(logs / "report.txt"))
    monkeypatch.setenv("ESCAPE_PORT", str(listener))
    escape, default_store = escape_beside_store
    before = _tree(default_store.parent)
    store = ResultStore(tmp_path / "r.sqlite")
    rec = run(read_variant(escape), ONE,
              RunOptions("test", settings=FAST, sandbox=Sandbox("strict", writable=(logs,))), StoreRecorder(store))
    assert [c.status for c in rec.cases] == [Status.PASS]
    assert _report(logs / "report.txt") == {a: "blocked" for a in ATTEMPTS}
    assert not (ROOT / "problems" / "ESCAPED.txt").exists() and _tree(default_store.parent) == before
    abi = offer.landlock_abi
    how = f"landlock{abi}" if offer.mechanism == "landlock" else "bwrap" + (f"+landlock{abi}" if abi else "")
    assert rec.sandbox == f"strict via {how}: held {', '.join(sandbox.PROTECTIONS)}"
    assert store.load(rec.run_id).sandbox == rec.sandbox  # the store keeps it


def test_escape_succeeds_with_the_sandbox_off(tmp_path, monkeypatch, listener):
    """The control: unconfined, the same attempts work (so the strict test can fail). The target checkout is a
    copy's skeleton in tmp_path, so the real one stays clean."""
    fake = tmp_path / "checkout"
    (fake / "problems").mkdir(parents=True)
    (fake / "results").mkdir()
    monkeypatch.setenv("ESCAPE_ROOT", str(fake))
    monkeypatch.setenv("ESCAPE_REPORT", str(tmp_path / "report.txt"))
    monkeypatch.setenv("ESCAPE_PORT", str(listener))
    rec = run(read_variant(SHARED_CASES / "escape.py"), ONE, RunOptions("test", settings=FAST, sandbox=Sandbox("off")))
    assert [c.status for c in rec.cases] == [Status.PASS] and rec.sandbox == "off"
    report = _report(tmp_path / "report.txt")
    if os.geteuid() != 0:  # a non-root worker cannot read a parent made non-dumpable by an earlier sandboxed run
        report.pop("read parent environ"), report.pop("open parent mem")
    assert set(report.values()) == {"ok"}
    assert (fake / "problems" / "ESCAPED.txt").read_text() == "written by a submission\n"
    with sqlite3.connect(fake / "results" / "fp4bench.sqlite") as con:
        assert con.execute("select name from sqlite_master").fetchall() == [("escaped",)]


_IMPORTS_A_SIBLING = """
from pathlib import Path
from honest_torch import custom_kernel as honest

def custom_kernel(data):
    store = Path(__file__).with_name("r.sqlite")
    try:
        store.read_bytes()
    except OSError:
        return honest(data)
    raise RuntimeError("read the store beside me")
"""


@pytest.mark.parametrize("offer", _mechanisms())
def test_a_submission_imports_its_siblings_when_the_store_shares_its_folder(offer, tmp_path, monkeypatch):
    """The store hidden inside the submission's folder splits the folder's grant: a module beside the submission
    still imports (its folder can be listed) while the store beside it stays unreadable."""
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    shutil.copy(SHARED_CASES / "honest_torch.py", tmp_path)
    (tmp_path / "imports_a_sibling.py").write_text(_IMPORTS_A_SIBLING)
    store = ResultStore(tmp_path / "r.sqlite")
    rec = run(read_variant(tmp_path / "imports_a_sibling.py"), ONE,
              RunOptions("test", settings=FAST, sandbox=Sandbox("strict", hide=(tmp_path / "r.sqlite",))),
              StoreRecorder(store))
    assert [(c.status, c.message) for c in rec.cases] == [(Status.PASS, "")]


_NAMES_ITS_THREADS = """
import os, threading
from honest_torch import custom_kernel as honest

def custom_kernel(data):
    done = threading.Event()
    worker = threading.Thread(target=done.wait)
    worker.start()
    try:
        with open("/proc/self/comm", "w") as f:
            f.write("fp4-main")
        with open(f"/proc/self/task/{worker.native_id}/comm", "w") as f:
            f.write("fp4-helper")
        with open(f"/proc/self/task/{worker.native_id}/comm") as f:
            name = f.read().strip()
    finally:
        done.set()
        worker.join()
    if name != "fp4-helper":
        raise RuntimeError(f"thread name {name!r}")
    return honest(data)
"""


@pytest.mark.parametrize("offer", _mechanisms())
def test_a_worker_may_write_its_own_proc_entry(offer, tmp_path, monkeypatch):
    """CUDA's cuInit writes beneath the process's own /proc entry (error 304 without it: H200, 2026-12-01,
    docs/journal.md); the CPU stand-in names the worker's threads there, as the driver does."""
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    shutil.copy(SHARED_CASES / "honest_torch.py", tmp_path)
    (tmp_path / "names_its_threads.py").write_text(_NAMES_ITS_THREADS)
    rec = run(read_variant(tmp_path / "names_its_threads.py"), ONE,
              RunOptions("test", settings=FAST, sandbox=Sandbox("strict")))
    assert [(c.status, c.message) for c in rec.cases] == [(Status.PASS, "")]
    assert rec.sandbox.startswith("strict via ")


def test_strict_refuses_naming_each_missing_protection(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: BARE)
    variant = read_variant(SHARED_CASES / "honest_torch.py")
    with pytest.raises(SandboxError) as refused:
        plan_for(variant, Sandbox("strict"), Settings(), cuda=False)
    message = str(refused.value)
    assert message.startswith("--sandbox strict: this machine cannot give the worker writes (no file-system "
                              "confinement: bwrap not installed and no Landlock in this kernel); reads (")
    for name in ("network (no network namespace: unshare not installed)", "capabilities (this process lacks "
                 "CAP_SETPCAP", "processes (needs Landlock ABI 6", "pid-ipc (namespaces unavailable",
                 "parent (no Landlock, no PID namespace, and the worker keeps CAP_SYS_PTRACE"):
        assert name in message
    assert "\n" not in message and "limits" not in message
    result = CliRunner().invoke(main, ["run", "--submission", str(SHARED_CASES / "honest_torch.py"),
                                       "--sandbox", "strict", "--no-store", "--shapes", "smoke"])
    assert result.exit_code == 113
    assert "Error: --sandbox strict: this machine cannot give the worker writes" in result.output


def test_auto_runs_with_what_there_is_and_records_what_did_not_hold(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: BARE)
    rec = run(read_variant(SHARED_CASES / "honest_torch.py"), ONE, RunOptions("test", settings=FAST))
    assert [c.status for c in rec.cases] == [Status.PASS]
    assert rec.sandbox.startswith("auto via none: held limits; not held: writes (no file-system "
                                  "confinement: bwrap not installed and no Landlock in this kernel); reads (")
    assert run_from_dict(json.loads(rec.to_json())).sandbox == rec.sandbox


def test_runs_default_to_auto_and_old_records_load_without_the_field():
    assert RunOptions("test").sandbox == Sandbox("auto")
    rec = run(read_variant(SHARED_CASES / "honest_torch.py"), ONE, RunOptions("test", settings=FAST))
    d = rec.to_dict()
    assert d["sandbox"].startswith("auto via ")
    del d["sandbox"]
    assert run_from_dict(d).sandbox == "" and RunRecord.__dataclass_fields__["sandbox"].default == ""


_CACHE_PROBE = '''
import os, json, pathlib, resource
from honest_torch import custom_kernel  # noqa: F401

def _try(path, read=False):
    try:
        pathlib.Path(path).read_text() if read else pathlib.Path(path).write_text("x")
        return "ok"
    except OSError as exc:
        return type(exc).__name__

cache = os.environ["FP4BENCH_CACHE"]
big = pathlib.Path(os.environ["TMPDIR"]) / "big"
try:
    big.write_bytes(bytes(2 << 20))
    fsize = "ok"
except OSError as exc:
    fsize = exc.strerror
os.makedirs(f"{cache}/{os.environ['VARIANT']}", exist_ok=True)
out = {"own": _try(f"{cache}/{os.environ['VARIANT']}/built.cubin"),
       "triton": _try(os.environ["TRITON_CACHE_DIR"] + "/k"),
       "home": _try(os.environ["HOME"] + "/.nv"), "tmp": _try(os.environ["TMPDIR"] + "/t"),
       "native": _try(f"{os.environ['FP4BENCH_NATIVE']}/guard.so"), "any folder": _try(f"{cache}/x"),
       "cache root": _try(f"{cache}/../x"),
       "other": _try(os.environ["OTHER"]), "fsize": fsize, "read README": _try("README.md", read=True),
       "read other source": _try("submissions/torch_reference/submission.py", read=True),
       "limits": {n: resource.getrlimit(getattr(resource, n))[0] for n in ("RLIMIT_AS", "RLIMIT_FSIZE",
                                                                            "RLIMIT_NPROC", "RLIMIT_CPU")},
       "env": {k: os.environ[k] for k in ("FP4BENCH_CACHE", "HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                            "TORCH_EXTENSIONS_DIR", "CUTE_DSL_CACHE_DIR")}}
pathlib.Path(os.environ["LOG"]).write_text(json.dumps(out))
'''


@pytest.mark.parametrize("offer", _mechanisms())
def test_a_variant_writes_its_own_cache_only_within_its_limits(offer, tmp_path, monkeypatch):
    """Its build folder (any name in it), JIT caches, HOME and TMPDIR are writable; the cache root, the native build and
    another variant's cache are not, nor are other variants' sources readable (the checkout is); the file-size
    limit bites; the limits are those of the settings."""
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    monkeypatch.setenv("FP4BENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "native").mkdir(parents=True)
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "submission.py").write_text(_CACHE_PROBE)
        (tmp_path / name / "honest_torch.py").write_text((SHARED_CASES / "honest_torch.py").read_text())
    alpha, beta = (read_variant(tmp_path / n / "submission.py") for n in ("alpha", "beta"))
    settings = dataclasses.replace(FAST, limit_file_size_mb=1, limit_address_space_mb=40000, limit_cpu_s=5000)
    beta_cache = plan_for(beta, Sandbox(), settings, cuda=False).cache
    (beta_cache / "build" / "beta").mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv("LOG", str(logs / "alpha.json"))
    monkeypatch.setenv("VARIANT", "alpha")
    monkeypatch.setenv("OTHER", str(beta_cache / "build" / "beta" / "poisoned.cubin"))
    rec = run(alpha, ONE, RunOptions("test", settings=settings, sandbox=Sandbox(writable=(logs,))))
    assert [c.status for c in rec.cases] == [Status.PASS], rec.cases[0].message
    seen = json.loads((logs / "alpha.json").read_text())
    denied = "OSError" if offer.mechanism == "bwrap" else "PermissionError"  # read-only mount / Landlock
    assert {k: seen[k] for k in ("own", "any folder", "triton", "home", "tmp", "native", "cache root", "other")} == {
        "own": "ok", "any folder": "ok", "triton": "ok", "home": "ok", "tmp": "ok", "native": denied,
        "cache root": denied,
        "other": "FileNotFoundError" if offer.mechanism == "bwrap" else denied}
    assert (seen["read README"], seen["read other source"]) == ("ok", "FileNotFoundError" if offer.mechanism ==
                                                                "bwrap" else "PermissionError")
    assert seen["fsize"] == "File too large"
    assert seen["limits"] == {"RLIMIT_AS": 40000 << 20, "RLIMIT_FSIZE": 1 << 20, "RLIMIT_NPROC": 4096,
                              "RLIMIT_CPU": 5000}
    alpha_cache = sandbox.variant_cache(alpha)
    assert seen["env"] == {"FP4BENCH_CACHE": str(alpha_cache / "build"), "HOME": str(alpha_cache / "_home"),
                           "TRITON_CACHE_DIR": str(alpha_cache / "_jit" / "triton"),
                           "TORCHINDUCTOR_CACHE_DIR": str(alpha_cache / "_jit" / "inductor"),
                           "TORCH_EXTENSIONS_DIR": str(alpha_cache / "_jit" / "torch_extensions"),
                           "CUTE_DSL_CACHE_DIR": str(alpha_cache / "_jit" / "cute_dsl")}
    assert (alpha_cache / "build" / "alpha" / "built.cubin").read_text() == "x"
    assert not (beta_cache / "build" / "beta" / "poisoned.cubin").exists()
    assert sorted(p.name for p in (tmp_path / "cache" / "native").iterdir()) == []


_DSL_PROBE = '''
import os, json, pathlib
from honest_torch import custom_kernel  # noqa: F401
import cutlass, cutlass.cute as cute

cache = pathlib.Path(os.environ["CUTE_DSL_CACHE_DIR"])
before = sorted(p.name for p in cache.iterdir())

@cute.jit
def probe(x: cutlass.Int32):  # host code only: compiled, cached to disk and run without a GPU
    y = x + 1

probe(cutlass.Int32(3))
log = pathlib.Path(os.environ["LOG"])
runs = json.loads(log.read_text()) if log.exists() else []
log.write_text(json.dumps(runs + [{"dir": str(cache), "before": before,
                                   "after": sorted(p.name for p in cache.iterdir())}]))
'''


@pytest.mark.slow
@pytest.mark.parametrize("offer", _mechanisms())
def test_cute_dsl_compile_cache_outlives_the_worker(offer, tmp_path, monkeypatch):
    """CuTe DSL caches its JIT compiles under $TMPDIR by default, the worker's scratch folder, removed with it; the
    sandbox points CUTE_DSL_CACHE_DIR into the variant's own caches, so the next worker loads what the last one
    compiled."""
    pytest.importorskip("cutlass")
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    monkeypatch.setenv("FP4BENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "dsl").mkdir()
    (tmp_path / "dsl" / "submission.py").write_text(_DSL_PROBE)
    (tmp_path / "dsl" / "honest_torch.py").write_text((SHARED_CASES / "honest_torch.py").read_text())
    variant = read_variant(tmp_path / "dsl" / "submission.py")
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv("LOG", str(logs / "dsl.json"))
    for _ in range(2):
        rec = run(variant, ONE, RunOptions("test", settings=FAST, sandbox=Sandbox(writable=(logs,))))
        assert [c.status for c in rec.cases] == [Status.PASS], rec.cases[0].message
    first, second = json.loads((logs / "dsl.json").read_text())
    assert first["dir"] == second["dir"] == str(sandbox.variant_cache(variant) / "_jit" / "cute_dsl")
    assert first["before"] == [] and len(first["after"]) == 1 and first["after"][0].startswith("cute_dsl_")
    assert second["before"] == second["after"] == first["after"]  # found, not compiled again


def test_wrapper_exit_status_reads_back_as_the_workers():
    wrapped, plain = Launch(["x"], {}, ROOT, wrapped=True), Launch(["x"], {}, ROOT)
    assert (wrapped.exit_code(134), wrapped.exit_code(137), wrapped.exit_code(110), wrapped.exit_code(-9)) == \
        (-6, -9, 110, -9)
    assert plain.exit_code(134) == 134


def test_the_worker_refuses_to_start_less_confined_than_ordered():
    """harness.confine fails closed: a step it cannot take ends the process (exit 111) with one line naming it,
    before the worker (or any submission) is imported."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), confine.ENV: json.dumps({"limits": {"RLIMIT_BOGUS": 1}})}
    done = subprocess.run([sys.executable, "-m", "harness.confine"], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (confine.EXIT_REFUSED, "fp4bench sandbox: refused to run the worker: "
                                              "setrlimit: no resource limit named 'RLIMIT_BOGUS' here\n")
    del env[confine.ENV]
    done = subprocess.run([sys.executable, "-m", "harness.confine"], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (confine.EXIT_REFUSED, "fp4bench sandbox: expected the parent's "
                                              "orders (a JSON object) in FP4BENCH_CONFINE, got nothing\n")


def test_hidden_paths_split_a_landlock_grant(tmp_path):
    """A hidden folder inside a read root: the grant covers its siblings (files with file rights only) instead."""
    for d in ("a", "b", "results"):
        (tmp_path / d).mkdir()
    (tmp_path / "f.txt").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "results")
    rules = sorted(confine._rules_beneath(str(tmp_path), confine.READ, [str(tmp_path / "results")]))
    assert rules == [(str(tmp_path), confine.FS_READ_DIR),  # listed (imports look), nothing in it read
                     (str(tmp_path / "a"), confine.READ), (str(tmp_path / "b"), confine.READ),
                     (str(tmp_path / "f.txt"), confine.FS_EXECUTE | confine.FS_READ_FILE)]
    assert list(confine._rules_beneath(str(tmp_path / "a"), confine.READ, [str(tmp_path / "results")])) == \
        [(str(tmp_path / "a"), confine.READ)]


def test_sandbox_settings_section(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text("sandbox:\n  limit_file_size_mb: 64\n  isolate_pid_ipc: always\n")
    assert load_settings(path) == Settings(limit_file_size_mb=64, isolate_pid_ipc="always")
    path.write_text("sandbox:\n  isolate_pid_ipc: off\n")  # YAML reads off as false
    with pytest.raises(SettingsError, match="isolate_pid_ipc must be one of auto, always, never, got False"):
        load_settings(path)
    with pytest.raises(SandboxError, match="--sandbox must be one of auto, strict, off, got 'loose'"):
        Sandbox("loose")


def test_doctor_reports_what_this_machine_offers():
    offer = sandbox.probe()
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert (f"Landlock: ABI {offer.landlock_abi}" if offer.landlock_abi else "Landlock: not available") in lines
    assert f"running as root: {'yes' if os.geteuid() == 0 else 'no'}" in lines
    assert f"a run (--sandbox auto) would use {offer.mechanism}:" in lines
    assert lines[-1] == "--sandbox strict would run" or lines[-1].startswith("--sandbox strict would refuse: ")


# --- on the H200 (the device tool): CUDA inside the sandbox ------------------------------------------------------
#: Which protection stops each of escape.py's attempts.
STOPPED_BY = {"write problems/": "writes", "write store": "reads", "read parent environ": "parent",
              "open parent mem": "parent", "connect 127.0.0.1": "network"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["torch_reference", "triton_grouped", "wgmma_sm90"])
def test_gpu_variants_pass_inside_the_sandbox(name):
    """CUDA, CUDA IPC of the sample buffers, and the JIT caches (Triton, nvcc output, torch extensions) work
    inside: every official test shape passes, and the record says what held."""
    from harness.parent.registry import resolve
    from problems.nvfp4_group_gemm.spec import load_shapes

    rec = run(resolve(name), load_shapes("tests"), RunOptions("test"))
    assert [c.status for c in rec.cases] == [Status.PASS] * len(rec.cases), [c.message for c in rec.cases]
    assert rec.sandbox == plan_for(resolve(name), Sandbox(), load_settings(), cuda=True).summary, rec.sandbox
    assert rec.sandbox.startswith("auto via ") and ": held writes, reads, network" in rec.sandbox, rec.sandbox


@pytest.mark.gpu
def test_gpu_escape_is_blocked_where_the_protection_holds(tmp_path, monkeypatch, listener, escape_beside_store):
    """escape.py on the GPU under auto: each attempt blocked exactly where the run says its protection held."""
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv("ESCAPE_ROOT", str(ROOT))
    monkeypatch.setenv("ESCAPE_REPORT", str(logs / "report.txt"))
    monkeypatch.setenv("ESCAPE_PORT", str(listener))
    rec = run(read_variant(escape_beside_store[0]), ONE, RunOptions("test", sandbox=Sandbox(writable=(logs,))))
    assert [c.status for c in rec.cases] == [Status.PASS]
    held = rec.sandbox.split(": held ")[1].split(";")[0].split(", ") if ": held " in rec.sandbox else []
    escaped = ROOT / "problems" / "ESCAPED.txt"
    landed = escaped.exists()
    escaped.unlink(missing_ok=True)
    assert _report(logs / "report.txt") == {a: "blocked" if p in held else "ok" for a, p in STOPPED_BY.items()}
    assert landed == ("writes" not in held)


@pytest.mark.parametrize("offer", _mechanisms())
def test_a_submission_directly_in_tmp_or_home_is_refused_up_front(offer, tmp_path, monkeypatch):
    """A confined worker reads its submission's whole folder; a file directly in the temporary folder (the
    worker's /tmp is its scratch) or in $HOME (hidden from it) would fail to import, so the plan refuses it with
    one line, and `run` exits 113. In a folder of its own below either it is planned; with nothing to confine
    reads (a bare machine) it is not refused."""
    monkeypatch.setattr(sandbox, "probe", lambda: offer)
    tmp = tmp_path / "tmp"
    home = tmp_path / "home"
    for d in (tmp / "mine", home / "mine"):
        d.mkdir(parents=True)
        shutil.copy(SHARED_CASES / "honest_torch.py", d / "k.py")
        shutil.copy(SHARED_CASES / "honest_torch.py", d.parent / "k.py")
    monkeypatch.setattr(sandbox.tempfile, "gettempdir", lambda: str(tmp))
    monkeypatch.setenv("HOME", str(home))
    for place, why in ((tmp, "its own /tmp is an empty scratch folder"), (home, "it never sees your home folder")):
        loose = place / "k.py"
        with pytest.raises(SandboxError) as refused:
            plan_for(read_variant(loose), Sandbox(), Settings(), cuda=False)
        assert str(refused.value) == (
            f"expected a submission in a folder of its own, got {loose} directly in {place}: a confined worker "
            f"reads its submission's whole folder and {why}; move it into a folder such as {place / 'mykernel'} "
            f"(or pass --sandbox off)")
        assert plan_for(read_variant(place / "mine" / "k.py"), Sandbox(), Settings(), cuda=False).mode == "auto"
    result = CliRunner().invoke(main, ["run", "--submission", str(tmp / "k.py"), "--no-store", "--shapes", "smoke"])
    assert result.exit_code == 113
    assert result.output.startswith(f"Error: expected a submission in a folder of its own, got {tmp / 'k.py'}")
    assert plan_for(read_variant(tmp / "k.py"), Sandbox("off"), Settings(), cuda=False).mode == "off"
    monkeypatch.setattr(sandbox, "probe", lambda: BARE)
    assert plan_for(read_variant(tmp / "k.py"), Sandbox(), Settings(), cuda=False).mechanism == "none"


def test_read_roots_leave_out_other_variants_on_the_parents_sys_path(monkeypatch):
    """An in-process caller that imported a variant (a test, a notebook) has its folder on sys.path; the worker
    of another variant must not get it as a read root, which would be bound again over the hiding of other
    variants' folders (seen with bubblewrap: another variant's submission.py read back "ok")."""
    other = (ROOT / "submissions" / "triton_grouped").resolve()
    monkeypatch.setattr(sys, "path", [str(other), *sys.path])
    variant = read_variant(ROOT / "submissions" / "torch_reference" / "submission.py")
    roots = sandbox._read_roots(variant)
    assert str(other) not in roots
    assert str((ROOT / "submissions" / "torch_reference").resolve()) in roots
