"""submissions/wgmma_sm90: the sm_90a compile (nvcc 13; fails, never skips, without it): background build, cache,
no spills, wgmma in every entry point, the warp-specialised entry points' SASS (no GPU)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ._wgmma_sm90 import host


# --- compiling for sm_90a (no GPU needed) ---------------------------------------------------------------------

def _cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton  # noqa: PLC0415  (a dev dependency; it ships cuobjdump)

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def _fake_nvcc(monkeypatch, script: str) -> None:
    """nvcc_command replaced by ``sh -c script out``: the script sees the cubin's temporary path as $0."""
    monkeypatch.setattr(host, "nvcc_command", lambda out, verbose=False: ["sh", "-c", script, str(out)])


def test_cubin_build_runs_in_the_background_until_its_result_is_asked_for(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    _fake_nvcc(monkeypatch, f'while [ ! -e {gate} ]; do sleep 0.01; done; printf cubin > "$0"')
    finish = host.start_cubin_build(tmp_path)
    cubin = tmp_path / f"{host.KERNEL_NAME}_{host.source_digest()}.cubin"
    assert not cubin.exists()  # nvcc is still waiting for the gate: start returned without it
    gate.touch()
    assert finish() == cubin and cubin.read_text() == "cubin" and finish() == cubin
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_cached_cubin_starts_no_compiler_and_a_failed_compile_says_why(tmp_path, monkeypatch):
    _fake_nvcc(monkeypatch, 'echo "kernel.cu(1): error: boom" >&2; exit 2')
    with pytest.raises(RuntimeError, match=r"nvcc failed .*kernel.cu\(1\): error: boom"):
        host.start_cubin_build(tmp_path)()
    cached = tmp_path / f"{host.KERNEL_NAME}_{host.source_digest()}.cubin"
    cached.write_text("built before")
    assert host.build_cubin(tmp_path) == cached and cached.read_text() == "built before"


def test_kernel_compiles_for_sm90a_without_spills_and_uses_wgmma(tmp_path):
    cubin = tmp_path / "k.cubin"
    proc = subprocess.run(host.nvcc_command(cubin, verbose=True), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    spills = dict(re.findall(r"Function properties for (\w+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores",
                             proc.stderr))
    assert set(spills) == set(ENTRY_POINTS)
    # The int8 entry inlines its fp16 fallback (the raw loop); ptxas spills a few bytes there (below: never in an
    # int8 loop). As a __noinline__ call it had none but serialised every wgmma of the entry (C7510).
    assert all(int(v) == 0 for k, v in spills.items() if k != host.KERNEL_S8_NAME) and int(spills[
        host.KERNEL_S8_NAME]) <= 16
    assert "C7510" not in proc.stderr and "C7512" not in proc.stderr  # wgmma serialised: at a call; registers
    assert "warning" not in proc.stderr.lower(), proc.stderr
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", proc.stderr)]
    assert len(regs) == 7 and max(regs) <= 128  # two CTAs of 256 threads per SM; one WS CTA of 512
    sass = subprocess.run([_cuobjdump(), "--dump-sass", str(cubin)], capture_output=True, text=True).stdout
    assert {m for m in re.findall(r"HGMMA\.(64x\d+x16)\.F32", sass)} == {"64x64x16", "64x96x16", "64x128x16"}
    assert {m for m in re.findall(r"IGMMA\.(64x\d+x32)\.S8\.S8", sass)} == {"64x64x32", "64x96x32", "64x128x32"}
    for name in ENTRY_POINTS:
        assert re.search(rf"Function : {name}\n", sass), name
    ins = _functions(sass)[host.KERNEL_S8_NAME]
    at = {a: i for i, (a, _) in enumerate(ins)}
    int8_loops = 0
    for i, (addr, text) in enumerate(ins):
        back = re.match(r"(?:@!?U?P\w+\s+)?BRA\s+0x([0-9a-f]+)", text)
        if back and int(back.group(1), 16) < addr and int(back.group(1), 16) in at:
            body = [t for _, t in ins[at[int(back.group(1), 16)]:i + 1]]
            if any("IGMMA" in t for t in body) and not any("HGMMA" in t for t in body):
                int8_loops += 1
                assert not any(t.startswith(("STL", "LDL")) for t in body)
    assert int8_loops >= 10  # a main loop per (BM, paired), tail loops beside the per-step ones
    _WS_SASS["sass"] = sass


ENTRY_POINTS = (host.KERNEL_NAME, host.KERNEL_PRE_NAME, host.KERNEL_S8_NAME, host.KERNEL_WS_NAME,
                host.KERNEL_WS_PRE_NAME, host.PREPASS_NAME, host.PREPASS_S8_NAME)
_WS_SASS: dict = {}


def _functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = part.split("\n", 1)[0].strip()
        out[name] = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", part)]
    return out


@pytest.fixture(scope="module")
def ws_sass(tmp_path_factory):
    if "sass" not in _WS_SASS:
        cubin = tmp_path_factory.mktemp("ws") / "k.cubin"
        proc = subprocess.run(host.nvcc_command(cubin), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        _WS_SASS["sass"] = subprocess.run([_cuobjdump(), "--dump-sass", str(cubin)], capture_output=True,
                                          text=True).stdout
    return _functions(_WS_SASS["sass"])


@pytest.mark.parametrize("name", ["fp4_group_gemm_sm90_ws", "fp4_group_gemm_sm90_ws_pre"])
def test_ws_entry_points_split_registers_and_take_both_wgmma_operands_from_shared_memory(ws_sass, name):
    """Per BM instantiation: 12 mbarriers initialised, the consumers' setmaxnreg.inc to 200 and the producers'
    setmaxnreg.dec to 56, every register the producer code names below R56 (the code after the dec up to the next
    instantiation's barrier init), both HGMMA operands descriptors (no register A fragment), and the producers'
    proxy fence before their arrive."""
    ins = ws_sass[name]
    text = [t for _, t in ins]
    assert sum("USETMAXREG.TRY_ALLOC.CTAPOOL" in t and t.endswith("0xc8") for t in text) == 3  # 200
    assert sum("USETMAXREG.DEALLOC.CTAPOOL 0x38" in t for t in text) == 3  # 56
    assert sum(t.startswith("SYNCS.EXCH.64") for t in text) == 3 * 2 * host.WS_STAGES
    hgmma = [t for t in text if "HGMMA" in t]
    assert hgmma and all(re.search(r"HGMMA\.64x\d+x16\.F32 R\d+, gdesc\[UR\d+\], R\d+", t) for t in hgmma)
    assert {re.search(r"64x(\d+)x16", t).group(1) for t in hgmma} == {"64", "96", "128"}
    deallocs = [i for i, t in enumerate(text) if "USETMAXREG.DEALLOC" in t]
    inits = [i for i, t in enumerate(text) if t.startswith("SYNCS.EXCH.64")]
    for d in deallocs:
        end = min([i for i in inits if i > d], default=len(text))
        region = text[d:end]
        used = {int(r) for t in region for r in re.findall(r"\bR(\d+)\b", t)}
        assert max(used) < 56, (name, max(used))
        fences = [i for i, t in enumerate(region) if "FENCE.VIEW.ASYNC.S" in t]
        arrives = [i for i, t in enumerate(region) if t.startswith("SYNCS.ARRIVE")]
        assert fences and arrives and fences[0] < arrives[0]
