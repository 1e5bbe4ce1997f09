"""Proof that an exported file stands alone: a folder holding only the export as submission.py and stand-ins for
the official runner's task.py, utils.py and reference.py (tests/fixtures/official_runner, written from the
official files' contents), run in a fresh ``python -I`` whose cwd is that folder and from which fp4bench is out
of reach (run_submission.py removes its editable install's hook and asserts it); its outputs must equal the folder
variant's bit for bit. torch_reference runs on the CPU; triton_grouped and wgmma_sm90 on the H200 (gpu tests).
The exported file also passes ``fp4bench run``, and on the GPU ``compare`` of export against folder."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.parent.registry import resolve
from harness.submit.export import export_variant
from problems.nvfp4_group_gemm.inputs import generate_input
from tests.variants._load import load_module

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "official_runner"
#: Small cases: (m, n, k, g, seed).
CPU_CASES = [([96, 128], [128, 256], [256, 512], 2, 1111), ([40], [128], [256], 1, 7)]
GPU_CASES = [([80, 128, 256], [384, 256, 128], [256, 512, 256], 3, 1111),
             ([192, 320], [3072, 3072], [4096, 4096], 2, 1111),
             ([40, 76, 168, 72, 164, 148, 196, 160], [7168] * 8, [2048] * 8, 8, 1111)]

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def official_folder(tmp: Path, variant: str) -> Path:
    """``tmp/runner`` holding only the export of ``variant`` as submission.py and the runner's stand-ins."""
    folder = tmp / "runner"
    folder.mkdir()
    (folder / "submission.py").write_text(export_variant(resolve(variant)).text, encoding="utf-8")
    for name in ("task.py", "utils.py", "reference.py", "run_submission.py"):
        shutil.copy(FIXTURES / name, folder / name)
    return folder


def run_alone(folder: Path, inputs: list) -> dict:
    """Save ``inputs``, run run_submission.py in a fresh isolated interpreter in ``folder``, return what it
    saved (outputs, checks, what it saw)."""
    torch.save(inputs, folder / "inputs.pt")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    proc = subprocess.run([sys.executable, "-I", "run_submission.py"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(folder / "outputs.pt", weights_only=False)


def assert_alone_and_equal(saved: dict, folder: Path, expected: list[list[torch.Tensor]]) -> None:
    assert saved["seen"] == {"harness": False, "task": str(folder / "task.py"), "formats": False,
                             "submission": str(folder / "submission.py")}
    assert saved["checks"] == [(True, "")] * len(expected)
    for got, want in zip(saved["outputs"], expected):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype == torch.float16 and g.shape == w.shape
            assert torch.equal(g.view(torch.int16), w.cpu().view(torch.int16))  # bit for bit


def test_torch_reference_export_runs_alone_and_matches_the_folder_variant_bit_for_bit(tmp_path):
    folder = official_folder(tmp_path, "torch_reference")
    inputs = [generate_input(*case, device="cpu") for case in CPU_CASES]
    variant = load_module("torch_reference")
    expected = [[c.clone() for c in variant.custom_kernel(generate_input(*case, device="cpu"))] for case in CPU_CASES]
    assert_alone_and_equal(run_alone(folder, inputs), folder, expected)


def test_torch_reference_export_passes_fp4bench_run(tmp_path):
    folder = tmp_path / "exported"
    folder.mkdir()
    (folder / "submission.py").write_text(export_variant(resolve("torch_reference")).text, encoding="utf-8")
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--submission", str(folder / "submission.py"),
                           "--shapes", "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111",
                           "--no-store", "--json", str(out), "--timeout", "300"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert [c["status"] for c in record["cases"]] == ["pass"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("variant", ["triton_grouped", "wgmma_sm90"])
def test_gpu_export_runs_alone_and_matches_the_folder_variant_bit_for_bit(tmp_path, variant):
    folder = official_folder(tmp_path, variant)
    module = load_module(variant)
    expected = []
    for case in GPU_CASES:
        out = module.custom_kernel(generate_input(*case))
        torch.cuda.synchronize()
        expected.append([c.clone().cpu() for c in out])
    inputs = [generate_input(*case) for case in GPU_CASES]  # torch.save keeps devices, views and strides
    assert_alone_and_equal(run_alone(folder, inputs), folder, expected)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("variant", ["triton_grouped", "wgmma_sm90"])
def test_gpu_compare_export_against_folder_finds_no_difference(tmp_path, variant):
    folder = tmp_path / "exported"
    folder.mkdir()
    (folder / f"{variant}_export.py").write_text(export_variant(resolve(variant)).text, encoding="utf-8")
    out = tmp_path / "cmp.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "compare", str(folder / f"{variant}_export.py"), variant,
                           "--shapes", "benchmarks", "--no-store", "--format", "json", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    why = out.read_text() if out.exists() else ""  # each side's status and message per shape
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + why[-4000:]
    rows = json.loads(out.read_text())["rows"]
    # 4 shapes and the geomean; the same kernels, so no detectable difference, or one whose whole 95 % interval
    # lies within 1 % (the export's inlined Python is its own code: a few ns per call can be detected)
    assert len(rows) == 5 and all(r["verdict"] == "no detectable difference" or 0.99 <= r["ci_low"] <= r["ci_high"]
                                  <= 1.01 for r in rows), rows


def test_wgmma_export_writes_its_kernel_sources_once_where_its_host_code_reads_them(tmp_path):
    """Import only (no GPU): the embedded kernel.cu and fast_call.cpp land under $HOME/.cache/fp4bench-export/<digest>
    byte for byte, the inlined host code's paths point at them, and a second import leaves them as they are (their
    time keys torch's and nvcc's build caches)."""
    folder = official_folder(tmp_path, "wgmma_sm90")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {"HOME": str(home)}
    probe = ("import os, sys; sys.path.insert(0, os.getcwd()); import submission as s; "
             "print(s.KERNEL_SOURCE); print(s.FAST_CALL_SOURCE); print(os.stat(s.KERNEL_SOURCE).st_mtime_ns)")
    runs = [subprocess.run([sys.executable, "-I", "-c", probe], cwd=folder, env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-3000:]
    (kernel, fast_call, mtime), second = runs[0].stdout.split(), runs[1].stdout.split()
    assert Path(kernel).parent.parent == home / ".cache" / "fp4bench-export"
    assert Path(fast_call).parent == Path(kernel).parent
    source = ROOT / "submissions" / "wgmma_sm90"
    assert Path(kernel).read_bytes() == (source / "kernel.cu").read_bytes()
    assert Path(fast_call).read_bytes() == (source / "fast_call.cpp").read_bytes()
    assert second == [kernel, fast_call, mtime]


@pytest.mark.slow
def test_cute_wgmma_sm90_export_compiles_its_kernel_for_sm90a_alone(tmp_path):
    """No GPU: the export, alone in the runner's folder, imports CuTe DSL and compiles its kernel for sm_90a from
    the one file (the inlined host code's names resolve there), and its compile key hashes that file."""
    pytest.importorskip("cutlass", reason="needs CuTe DSL (nvidia-cutlass-dsl)")
    folder = official_folder(tmp_path, "cute_wgmma_sm90")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    probe = ("import hashlib, os, sys; sys.path.insert(0, os.getcwd()); import submission as s; "
             "c = s.compile_for_sm90(2, dump_dir='ptx'); "
             "print(c.source, '.target sm_90a' in c.ptx, 'wgmma.mma_async' in c.ptx, s._FILES == (s.HOST_SOURCE,), "
             "c.key.source_sha == s.host.source_digest(s._FILES) if hasattr(s, 'host') else "
             "c.key.source_sha == s.source_digest(s._FILES))")
    proc = subprocess.run([sys.executable, "-I", "-c", probe], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-5:] == ["compiled", "True", "True", "True", "True"], proc.stdout[-2000:]
