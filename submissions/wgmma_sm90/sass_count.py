"""Count the SASS instructions of kernel.cu's main K loop per run_tile<BM, PAIRED, PRE> instantiation (no GPU).

Compiles kernel.cu with the variant's nvcc flags (wgmma_sm90_host.NVCC_FLAGS, plus --define / -D extras), disassembles
the cubin with cuobjdump and finds each main loop: a backward branch whose range [target, branch] holds HGMMA (IGMMA)
instructions. A pass of a loop covers ``steps`` K steps (four HGMMA k16 or two IGMMA k32 a step: two for the loops
unrolled by two, ``for s += 2`` with fa/fb swapped; four for the int8 pair loop, s8_pair_loop), and the figures are
per step:

- ``static``: every instruction from the loop head to its back-branch, inclusive, including the blocks only the last
  steps run (the early exit, the skipped load) and NOPs; / steps.
- ``path``: the instructions one steady-state pass issues: walk from the head, every predicated forward branch not
  taken (so the load is issued and the loop goes on; at BM = 96 the thread decodes A), unconditional branches
  followed, NOPs left out; / steps.
- ``nop``: NOPs in the static range.

The warp-specialised entry points (fp4_group_gemm_sm90_ws, _ws_pre; ws_run_tile<BM, PRE>) have two loops per BM:
the consumers' (``ws-cons``: HGMMA, no copies; its steps per pass are its HGMMAs / 4) and the producers' (``ws-prod``:
no HGMMA, mbarrier arrivals; its steps per pass are its arrivals). Their BM is the HGMMA shape of the instantiation
they sit in (the code between two barrier initialisations). The producers' ``path`` follows the fall-through side of
each branch (which role's decode that is depends on the compiler's layout), so for them ``static`` is the figure to
quote: it holds both roles' code (B's decode, and A's decode or A's copies). ``--ws-roles`` also compiles with
-DWS_COUNT_ROLE=0 and =1 (the role a compile-time constant: that role's loop alone; counting builds only, their
output is wrong) and prints each role's producer loop.

The instantiation is told by the entry point (fp4_group_gemm_sm90: A decoded in the loop; fp4_group_gemm_sm90_pre,
PRE: A copied from the pre-pass's scratch), the HGMMA shape (64xBMx16) and, for PAIRED, by the named barriers
(BAR.SYNC 0x1 / 0x2) in the loop. When an instantiation has more than one such loop (a steady-state main loop without
the per-step tests, then a loop over the last steps), the main loop is the one that queues copies (LDGSTS), with the
fewest branches; the others are listed as ``tail`` rows (they run at most a few steps per tile). Usage::

    python sass_count.py                       # the table
    python sass_count.py -DWG_SKIP_DECODE      # with extra nvcc arguments
    python sass_count.py --dump 128p           # also print that main loop's SASS (128, 128p, pre128, ..., 128-tail;
                                               # ws128-cons, ws128-prod, wspre128-cons, ...)
    python sass_count.py --cubin file.cubin    # count an existing cubin
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC = re.compile(r"^\s*Function : (\S+)")
#: Entry point -> the path of its main loops: raw (run_tile<BM, PAIRED, false>), pre (PRE = true) or s8 (run_tile_s8's
#: int8 loop, IGMMA; that entry's HGMMA loops are its fallback, the raw loop again, and are not listed).
KERNELS = {"fp4_group_gemm_sm90": "raw", "fp4_group_gemm_sm90_pre": "pre", "fp4_group_gemm_sm90_s8": "s8"}
#: Warp-specialised entry points -> PRE.
WS_KERNELS = {"fp4_group_gemm_sm90_ws": False, "fp4_group_gemm_sm90_ws_pre": True}
BRA = re.compile(r"^(@!?U?P[T0-9]+\s+)?BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def find_tool(name: str) -> str:
    """cuobjdump on PATH, under $CUDA_HOME, or the copy that ships with triton."""
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / name).is_file():
            return str(Path(root) / "bin" / name)
    try:
        import triton  # noqa: PLC0415

        cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if cand.is_file():
            return str(cand)
    except ImportError:
        pass
    raise SystemExit(f"sass_count: {name} not found (PATH, $CUDA_HOME, triton's bin)")


def compile_cubin(out: Path, extra: list[str], source: Path) -> None:
    sys.path.insert(0, str(HERE))
    flags = ("-cubin", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo")
    try:
        import wgmma_sm90_host  # noqa: PLC0415  (needs torch and the repository root on sys.path)

        flags = wgmma_sm90_host.NVCC_FLAGS
    except Exception:  # noqa: BLE001  (flags as of writing; torch-free use)
        pass
    cmd = ["nvcc", *flags, *extra, "-o", str(out), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"nvcc failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def parse(sass: str) -> dict[str, list[tuple[int, str]]]:
    """Instructions (address, text) per function (each function's addresses start at 0)."""
    out: dict[str, list[tuple[int, str]]] = {}
    cur = out.setdefault("", [])
    for line in sass.splitlines():
        f = FUNC.match(line)
        if f:
            cur = out.setdefault(f.group(1), [])
            continue
        m = LINE.match(line)
        if m:
            cur.append((int(m.group(1), 16), m.group(2)))
    return out


def _backward_branches(ins: list[tuple[int, str]], idx: dict[int, int]):
    """Every branch back to an earlier address of ``ins``: (its index, its address, the target address, the
    instructions from the target to the branch)."""
    for i, (addr, text) in enumerate(ins):
        m = BRA.match(text)
        if not m or m.group(2) is None:
            continue
        target = int(m.group(2), 16)
        if target < addr and target in idx:
            yield i, addr, target, ins[idx[target]:i + 1]


def loops(ins: list[tuple[int, str]]) -> list[dict]:
    idx = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, addr, target, body in _backward_branches(ins, idx):
        shapes = {re.search(r"[HI]GMMA\.64x(\d+)x(?:16|32)", t).group(1) for _, t in body if "GMMA" in t}
        if len(shapes) != 1:
            continue  # no GMMA, or a branch back over several instantiations (not a K loop)
        int8 = any("IGMMA" in t for _, t in body)
        paired = any(re.search(r"BAR\.SYNC\.DEFER_BLOCKING 0x[12],", t) for _, t in body)
        path = _path(ins, idx, target, i)
        # K steps per pass: four HGMMA (k16) or two IGMMA (k32) a step; the int8 pair loop's pass holds four steps
        steps = sum("GMMA" in t for _, t in body) / (2 if int8 else 4)
        found.append({"bm": int(shapes.pop()), "paired": paired, "int8": int8, "head": target, "end": addr,
                      "steps": steps, "static": len(body), "nop": sum(t.startswith("NOP") for _, t in body),
                      "path": path,
                      "body": body})
    return found


def _path(ins, idx, head: int, end_i: int) -> int:
    """Instructions on the steady-state path from address ``head`` to index ``end_i``: forward predicated branches
    not taken, unconditional ones followed, NOPs not counted."""
    path, j, seen = 0, idx[head], set()
    while j <= end_i and j not in seen:
        seen.add(j)
        t = ins[j][1]
        bm = BRA.match(t)
        if not t.startswith("NOP"):
            path += 1
        if j == end_i:
            break
        if bm and bm.group(1) is None and bm.group(2):
            j = idx[int(bm.group(2), 16)]
            continue
        j += 1
    return path


def ws_loops(ins: list[tuple[int, str]]) -> list[dict]:
    """The consumer and producer loops of a warp-specialised entry point, with per-step figures."""
    idx = {a: i for i, (a, _) in enumerate(ins)}
    inits = [i for i, (_, t) in enumerate(ins) if t.startswith("SYNCS.EXCH.64")]
    starts = [i for k, i in enumerate(inits) if k == 0 or inits[k - 1] != i - 1]
    found = []
    for i, addr, target, body in _backward_branches(ins, idx):
        if any(t.startswith(("EXIT", "SYNCS.EXCH")) or t.endswith("EXIT") for _, t in body):
            continue  # a branch back from an out-of-line mbarrier retry block, not a loop
        hgmma = sum("HGMMA" in t for _, t in body)
        arrives = sum(t.startswith("SYNCS.ARRIVE") for _, t in body)
        if hgmma:
            role, steps = "ws-cons", hgmma / 4
        elif arrives and any(t.startswith(("STS", "LDGSTS")) for _, t in body):
            role, steps = "ws-prod", arrives
        else:
            continue  # an mbarrier retry loop
        seg_start = max(s for s in starts if s <= idx[target])
        seg_end = min([s for s in starts if s > idx[target]], default=len(ins))
        shapes = {re.search(r"HGMMA\.64x(\d+)x16", t).group(1) for _, t in ins[seg_start:seg_end] if "HGMMA" in t}
        assert len(shapes) == 1, shapes
        found.append({"bm": int(shapes.pop()), "role": role, "head": target, "end": addr, "steps": steps,
                      "static": len(body), "nop": sum(t.startswith("NOP") for _, t in body),
                      "path": _path(ins, idx, target, i), "body": body})
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("defines", nargs="*", help="extra nvcc arguments, e.g. -DWG_STAGES=3")
    ap.add_argument("--source", type=Path, default=HERE / "kernel.cu", help="the .cu file (default: kernel.cu)")
    ap.add_argument("--cubin", type=Path, help="count this cubin instead of compiling")
    ap.add_argument("--dump", action="append", default=[], help="print the loop's SASS: 128, 128p, 96, ...")
    ap.add_argument("--ws-roles", action="store_true", help="also count each WS producer role's loop alone")
    args, unknown = ap.parse_known_args(argv)
    args.defines += unknown
    with tempfile.TemporaryDirectory() as tmp:
        cubin = args.cubin
        if cubin is None:
            cubin = Path(tmp) / "k.cubin"
            compile_cubin(cubin, args.defines, args.source)
        sass = subprocess.run([find_tool("cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    found = []
    ws_found = []
    for name, ins in parse(sass).items():
        if name in KERNELS:
            for lp in loops(ins):
                if (KERNELS[name] == "s8") != lp["int8"]:
                    continue
                lp["pre"] = KERNELS[name]
                found.append(lp)
        if name in WS_KERNELS:
            for lp in ws_loops(ins):
                lp["pre"] = WS_KERNELS[name]
                ws_found.append(lp)
    for lp in found:
        lp["branches"] = sum(bool(BRA.match(t)) for _, t in lp["body"])
        lp["copies"] = any("LDGSTS" in t for _, t in lp["body"])
    found.sort(key=lambda l: (l["pre"], -l["bm"], l["paired"], not l["copies"], l["branches"], l["head"]))
    print(f"{'run_tile (path)':<24} {'loop':<5} {'steps':>5} {'static/step':>11} {'path/step':>9} {'nop':>4}  "
          "addresses")
    seen = set()
    for lp in found:
        key = (lp["bm"], lp["paired"], lp["pre"])
        lp["role"] = "tail" if key in seen else "main"
        seen.add(key)
        name = f"<{lp['bm']}, {'true' if lp['paired'] else 'false'}, {lp['pre']}>"
        per = lp["steps"] or 2
        print(f"{name:<24} {lp['role']:<5} {lp['steps']:>5g} {lp['static'] / per:>11g} {lp['path'] / per:>9g} "
              f"{lp['nop']:>4}  "
              f"{lp['head']:#x}..{lp['end']:#x}")
    ws_found.sort(key=lambda l: (l["pre"], -l["bm"], l["role"], l["head"]))
    print(f"\n{'ws_run_tile':<24} {'loop':<8} {'steps':>5} {'static/step':>11} {'path/step':>9} {'nop':>4}  addresses")
    for lp in ws_found:
        name = f"<{lp['bm']}, {'true' if lp['pre'] else 'false'}>"
        print(f"{name:<24} {lp['role']:<8} {lp['steps']:>5g} {lp['static'] / lp['steps']:>11.1f} "
              f"{lp['path'] / lp['steps']:>9.1f} {lp['nop']:>4}  {lp['head']:#x}..{lp['end']:#x}")
    if args.ws_roles and args.cubin is None:
        for role in (0, 1):
            with tempfile.TemporaryDirectory() as tmp:
                cubin = Path(tmp) / "k.cubin"
                compile_cubin(cubin, [*args.defines, f"-DWS_COUNT_ROLE={role}"], args.source)
                rsass = subprocess.run([find_tool("cuobjdump"), "-sass", str(cubin)], capture_output=True,
                                       text=True, check=True).stdout
            rows = []
            for name, ins in parse(rsass).items():
                if name in WS_KERNELS:
                    rows += [dict(lp, pre=WS_KERNELS[name]) for lp in ws_loops(ins) if lp["role"] == "ws-prod"]
            rows.sort(key=lambda l: (l["pre"], -l["bm"], l["head"]))
            what = "B rows" if role == 0 else "A rows (PRE: A's copies)"
            print(f"\nproducer role {role} alone ({what}; -DWS_COUNT_ROLE={role})")
            for lp in rows:
                name = f"<{lp['bm']}, {'true' if lp['pre'] else 'false'}>"
                print(f"{name:<24} {'ws-prod':<8} {lp['steps']:>5g} {lp['static'] / lp['steps']:>11.1f} "
                      f"{lp['path'] / lp['steps']:>9.1f} {lp['nop']:>4}  {lp['head']:#x}..{lp['end']:#x}")
    for key in args.dump:
        for lp in ws_found:
            tag = f"ws{'pre' if lp['pre'] else ''}{lp['bm']}-{lp['role'][3:]}"
            if tag == key:
                print(f"\n# ws_run_tile<{lp['bm']}, {lp['pre']}> {lp['role']} loop")
                for a, t in lp["body"]:
                    print(f"  {a:#07x}  {t}")
        for lp in found:
            tag = f"{'' if lp['pre'] == 'raw' else lp['pre']}{lp['bm']}{'p' if lp['paired'] else ''}"
            if tag + ("" if lp["role"] == "main" else "-tail") == key:
                print(f"\n# run_tile<{lp['bm']}, {lp['paired']}, {lp['pre']}> loop")
                for a, t in lp["body"]:
                    print(f"  {a:#07x}  {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
