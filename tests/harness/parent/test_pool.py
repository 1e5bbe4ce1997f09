"""Pool runs on Dask (harness.parent.pool, harness.parent.bundle): options, bundles, and on a LocalCluster of two
CPU workers, records equal to a serial run's but for times, and a worker killed mid-run losing nothing measured."""
from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import pytest
import torch
from click.testing import CliRunner
from tests.conftest import SHARED_CASES, assert_kept_incomplete, interrupt_after_first_case

from harness.cli.commands import main
from harness.parent import pool, runner
from harness.parent.bundle import BundleError, pack, unpack
from harness.parent.registry import read_variant, resolve
from harness.parent.sandbox import Sandbox
from harness.parent.settings import load_settings
from harness.results.record import Status
from harness.results.store import ResultStore
from problems.nvfp4_group_gemm.spec import load_shapes

SMOKE = load_shapes("smoke")
#: A submission that passes every case but the second (M = 128), where it hangs: before hanging it writes its
#: parent's pid (the Dask worker's) to $FP4BENCH_TEST_MARK if set, and it exits once that parent is gone.
HANGS_ON_SECOND = '''
import os, time
from pathlib import Path
exec((Path(os.environ["FP4BENCH_TEST_HONEST"])).read_text())
_honest = custom_kernel

def custom_kernel(data):
    if data[3][0][0] == 128:
        parent = os.getppid()
        if os.environ.get("FP4BENCH_TEST_MARK"):
            Path(os.environ["FP4BENCH_TEST_MARK"]).write_text(str(parent))
        deadline = time.monotonic() + 120
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.1)
        os._exit(0)
    return _honest(data)
'''


# --- options -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, count, expected", [
    ("all", 2, ["0", "1"]), ("1", 2, ["1"]), (" 1, 0 ", 4, ["1", "0"]),
])
def test_gpu_list(text, count, expected):
    assert pool.gpu_list(text, count) == expected


@pytest.mark.parametrize("text, count, message", [
    ("0", 0, "--gpus: this machine has no CUDA GPU (to spread runs over CPU workers, use --cluster local:N)"),
    ("2", 2, "--gpus 2: this machine has 2 GPU(s), indices 0 to 1, each once"),
    ("0,0", 2, "--gpus 0,0: this machine has 2 GPU(s), indices 0 to 1, each once"),
    ("a", 2, "--gpus: expected all or GPU indices separated by commas (e.g. 0,1), got 'a'"),
])
def test_bad_gpu_lists_say_why(text, count, message):
    with pytest.raises(pool.PoolError) as info:
        pool.gpu_list(text, count)
    assert str(info.value) == message


def test_cluster_forms():
    assert pool.local_workers("local:3") == 3
    assert pool.local_workers("tcp://10.0.0.1:8786") is None
    for bad in ("local:0", "local:x", "10.0.0.1:8786"):
        with pytest.raises(pool.PoolError):
            pool.local_workers(bad)


def test_a_cluster_without_gpu_workers_is_refused():
    class Client:
        def scheduler_info(self, n_workers):
            return {"workers": {"tcp://a:1": {"resources": {}}, "tcp://b:1": {}}}

    with pytest.raises(pool.PoolError, match="no worker with the resource GPU .start each worker with --nthreads 1"):
        pool.gpu_slots(Client())
    assert pool.gpu_slots(type("C", (), {"scheduler_info": lambda self, n_workers: {"workers": {
        "a": {"resources": {"GPU": 2}}, "b": {"resources": {"GPU": 1.0}}}}})()) == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpus_on_a_cpu_machine_is_one_line_and_exit_113():
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--no-store", "--gpus", "0,1"])
    assert result.exit_code == 113
    assert result.output == ("Error: --gpus: this machine has no CUDA GPU (to spread runs over CPU workers, use "
                             "--cluster local:N)\n")


# --- bundles -------------------------------------------------------------------------------------------------
def test_a_folder_travels_whole_by_content(tmp_path):
    src = tmp_path / "src" / "mine"
    (src / "__pycache__").mkdir(parents=True)
    (src / "submission.py").write_text("from helper import X\n")
    (src / "helper.py").write_text("X = 1\n")
    (src / "__pycache__" / "helper.pyc").write_bytes(b"stale")
    variant = read_variant(src / "submission.py")
    bundle = pack(variant)
    assert [p for p, _ in bundle.files] == ["helper.py", "submission.py"]
    copy = unpack(bundle, tmp_path / "bundles")
    assert (copy.name, copy.sha256) == ("mine", variant.sha256)
    assert copy.path == tmp_path / "bundles" / bundle.id / "submission.py"
    assert (copy.path.parent / "helper.py").read_text() == "X = 1\n"
    assert unpack(pack(variant), tmp_path / "bundles").path == copy.path  # same content, same folder
    (src / "helper.py").write_text("X = 2\n")
    assert pack(variant).id != bundle.id


def test_a_loose_file_travels_with_the_modules_beside_it_and_a_bad_blob_is_refused(tmp_path):
    variant = read_variant(SHARED_CASES / "honest_torch.py")
    bundle = pack(variant)
    assert [p for p, _ in bundle.files] == sorted(p.name for p in SHARED_CASES.glob("*.py"))
    assert bundle.entry == "honest_torch.py"
    forged = dataclasses.replace(bundle, blobs={h: b"x = 1\n" for h in bundle.blobs})
    with pytest.raises(BundleError, match="does not match its sha256"):
        unpack(forged, tmp_path)
    assert not (tmp_path / bundle.id).exists()


FOLDER_RULE = "a variant's folder may hold only regular files and folders"


def _mine(tmp_path):
    src = tmp_path / "src" / "mine"
    (src / "lib").mkdir(parents=True)
    (src / "submission.py").write_text("from lib.helper import X\n")
    (src / "lib" / "helper.py").write_text("X = 1\n")
    return src, read_variant(src / "submission.py")  # read while it holds only regular files


def test_pack_refuses_a_link_to_a_file_outside_instead_of_carrying_its_bytes(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    src, variant = _mine(tmp_path)
    (src / "lib" / "data.bin").symlink_to(secret)
    with pytest.raises(BundleError) as info:
        pack(variant)
    assert str(info.value) == f"{src}/lib/data.bin is a symbolic link (to {secret}); {FOLDER_RULE}"
    (src / "lib" / "data.bin").unlink()
    (src / "lib" / "outside").symlink_to(tmp_path)  # a link to a folder is refused too, never walked into
    with pytest.raises(BundleError) as info:
        pack(variant)
    assert str(info.value) == f"{src}/lib/outside is a symbolic link (to {tmp_path}); {FOLDER_RULE}"


def test_pack_refuses_a_fifo_without_blocking_on_it(tmp_path):
    src, variant = _mine(tmp_path)
    os.mkfifo(src / "lib" / "pipe")
    with pytest.raises(BundleError) as info:
        pack(variant)
    assert str(info.value) == f"{src}/lib/pipe is a named pipe (FIFO); {FOLDER_RULE}"


def test_a_file_that_turns_into_a_link_after_the_walk_is_still_not_followed(tmp_path):
    from harness.parent.bundle import _read

    src, variant = _mine(tmp_path)
    (src / "late.bin").symlink_to("/etc/passwd")  # as if swapped in between the listing and the read
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(BundleError) as info:
            _read(fd, "late.bin", src / "late.bin", variant, FOLDER_RULE)
    finally:
        os.close(fd)
    assert str(info.value) == f"{src}/late.bin is a symbolic link (to /etc/passwd); {FOLDER_RULE}"


def test_pack_leaves_dot_files_and_pycache_behind_links_or_not(tmp_path):
    src, variant = _mine(tmp_path)
    (src / ".secret").symlink_to("/etc/passwd")
    (src / "lib" / "__pycache__").symlink_to("/etc")
    os.mkfifo(src / ".pipe")
    assert [p for p, _ in pack(variant).files] == ["lib/helper.py", "submission.py"]


def test_pack_of_a_loose_file_refuses_a_linked_module_beside_it(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "k.py").write_text("from helper import X\n")
    (folder / "real.py").write_text("X = 1\n")
    (folder / "notes.txt").symlink_to("/etc/passwd")  # not a .py file: never carried, so not refused
    (folder / "pkg.py").mkdir()                         # a folder: subfolders stay behind
    variant = read_variant(folder / "k.py")
    assert [p for p, _ in pack(variant).files] == ["k.py", "real.py"]
    (folder / "helper.py").symlink_to(tmp_path / "elsewhere.py")
    with pytest.raises(BundleError) as info:
        pack(variant)
    assert str(info.value) == (f"{folder}/helper.py is a symbolic link (to {tmp_path}/elsewhere.py); a .py file "
                               f"beside a submission travels with it and must be a regular file")


# --- on a LocalCluster ---------------------------------------------------------------------------------------
def _without_times(record) -> dict:
    """The record with its times (and what times decide: how many warm-up calls were checked, the bracket's
    calibrated margin) left out."""
    d = record.to_dict()
    for key in ("run_id", "started_at", "wall_s", "geomean_ns", "bracket"):
        d.pop(key)
    timed = record.mode != "test"
    for case in d["cases"]:
        for key in ("wall_s", "overhead_ms_per_sample") + (("calls_checked",) if timed else ()):
            case.pop(key)
        case["samples_ns"] = len(case["samples_ns"])
        case["stats"] = case["stats"] and case["stats"]["runs"]
    return d


@pytest.mark.slow
def test_a_pool_stores_what_a_serial_run_stores_but_times(tmp_path):
    variants = [resolve("torch_reference"), resolve(str(SHARED_CASES / "honest_torch.py")),
                resolve(str(SHARED_CASES / "wrong_outputs.py"))]
    opts = runner.RunOptions("test", secret=7)
    with ResultStore(tmp_path / "serial.sqlite") as store:
        from harness.results.store import StoreRecorder
        serial = [runner.run(v, SMOKE, opts, StoreRecorder(store)) for v in variants]
        serial = [store.load(r.run_id) for r in serial]
    with ResultStore(tmp_path / "pool.sqlite") as store, pool.open_client(cluster="local:2") as client:
        pooled = pool.PoolRun(variants, SMOKE, opts, store).run(client)
        stored = [store.load(r.run_id) for r in pooled]
        assert len(store.runs()) == 3
    assert [r.cases[0].status for r in stored] == [Status.PASS, Status.PASS, Status.FAIL]
    assert [_without_times(r) for r in stored] == [_without_times(r) for r in serial]
    assert [_without_times(r) for r in pooled] == [_without_times(r) for r in serial]


@pytest.mark.slow
def test_a_worker_killed_mid_run_keeps_what_was_measured_then_the_task_is_an_error(tmp_path, monkeypatch):
    hang = tmp_path / "hangs_on_second.py"
    hang.write_text(HANGS_ON_SECOND)
    mark = tmp_path / "mark"
    monkeypatch.setenv("FP4BENCH_TEST_MARK", str(mark))
    monkeypatch.setenv("FP4BENCH_TEST_HONEST", str(SHARED_CASES / "honest_torch.py"))
    variants = [resolve(str(hang)), resolve("torch_reference"), resolve(str(SHARED_CASES / "honest_torch.py"))]
    opts = runner.RunOptions("test", settings=load_settings().with_timeout(300), sandbox=Sandbox("off"))
    killed = []

    def killer():  # each attempt of the hanging task: kill the Dask worker running it
        deadline = time.monotonic() + 240
        while len(killed) < pool.ALLOWED_FAILURES + 1 and time.monotonic() < deadline:
            if mark.exists() and mark.read_text():
                pid = int(mark.read_text())
                mark.unlink()
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)

    thread = threading.Thread(target=killer)
    with ResultStore(tmp_path / "r.sqlite") as store, pool.open_client(cluster="local:2") as client:
        thread.start()
        records = pool.PoolRun(variants, SMOKE, opts, store).run(client)
        thread.join()
        runs = {r.run_id: store.load(r.run_id) for r in store.runs()}
    assert len(killed) == 2 and killed[0] != killed[1]
    assert [c.status for r in records[1:] for c in r.cases] == [Status.PASS] * 6
    hung = [r for r in runs.values() if r.submission.name == "hangs_on_second"]
    first, last = sorted(hung, key=lambda r: r.complete)
    assert (first.complete, [c.status for c in first.cases]) == (False, [Status.PASS])
    assert last.run_id == records[0].run_id and last.complete
    assert [c.status for c in last.cases] == [Status.PASS, Status.ERROR, Status.ERROR]
    assert last.cases[1].message.startswith("not measured: the machine running it died 2 times")
    assert last.submission.path == str(hang.resolve())


@pytest.mark.slow
def test_both_sides_of_a_compare_run_on_one_worker_as_a_serial_compare_does(tmp_path):
    from harness.parent import compare

    (tmp_path / "run.yml").write_text("timing: {min_runs: 2, max_runs: 2}\n")
    opts = runner.RunOptions(compare.MODE, secret=7, settings=load_settings(tmp_path / "run.yml"))
    a, b = resolve("torch_reference"), resolve(str(SHARED_CASES / "honest_torch.py"))
    serial = compare.compare(a, b, SMOKE, opts)
    with ResultStore(tmp_path / "r.sqlite") as store, pool.open_client(cluster="local:1") as client:
        pooled = pool.PoolRun([a, b], SMOKE, opts, store).compare(client)
        stored = [store.load(pooled.a.run_id), store.load(pooled.b.run_id)]
    assert [_without_times(r) for r in stored] == [_without_times(serial.a), _without_times(serial.b)]
    assert [r.cases[0].samples_ns for r in stored] == [pooled.a.cases[0].samples_ns, pooled.b.cases[0].samples_ns]
    assert len(pooled.rows) == 3 and all(s.comparison is not None for s in pooled.shapes)
    assert pooled.a.environment.hostname == stored[1].environment.hostname  # one worker ran both sides


@pytest.mark.slow
def test_ctrl_c_on_a_pool_run_exits_130_and_keeps_the_runs_begun_incomplete(tmp_path):
    hang = tmp_path / "hangs_on_second.py"
    hang.write_text(HANGS_ON_SECOND)
    db = tmp_path / "r.sqlite"
    code, _, stderr = interrupt_after_first_case(
        ["run", "--submission", str(hang), "--shapes", "smoke", "--db", str(db), "--cluster", "local:1",
         "--sandbox", "off"], db, extra_env=dict(FP4BENCH_TEST_HONEST=str(SHARED_CASES / "honest_torch.py"),
                                                 FP4BENCH_TEST_MARK=""))
    assert_kept_incomplete(db, code, stderr)


def _visible_devices() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


@pytest.mark.slow
def test_gpus_start_one_worker_per_gpu_pinned_to_it():
    with pool.open_client(gpus=["0", "1"]) as client:
        assert sorted(client.run(_visible_devices).values()) == ["0", "1"]
        assert pool.gpu_slots(client) == 2
